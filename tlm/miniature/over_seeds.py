"""The reproduction's results over its seeds: Table 2 with the spread, figures with bands.

`reproduce` runs each seed of `reproduce.seeds` in `WORKDIR/seed=S/` (its own results beside
it) and hands each seed's results here; `write` puts the combined ones in `WORKDIR/results/`:
`summary.json` (every claim, `tlm.miniature.claim_summary`), `claims.md`, `table2.md` (the mean
over seeds, and the standard deviation over seeds when there are several), `table7.md` (the
mean) and `figure2.png` .. `figure5.png` (one line per model, the mean, with a band from the
lowest to the highest seed; Figure 5 with a TempLAMA and a news panel per slice).
`combine_saved` (`--mode=combine_seeds`) does the same from the files of seeds that ran
separately (`load_saved_seed`).
"""

from collections.abc import Mapping, Sequence

import numpy as np

from tlm import safe_read, storage
from tlm.errors import DataError
from tlm.eval import adaptation, figures, tables
from tlm.eval import results as results_lib
from tlm.eval.figures import stack
from tlm.files import atomic_output_file, write_json
from tlm.miniature import claim_summary, measurements


def _cell(values: Sequence[float | None]):
  xs = [v for v in values if v is not None]
  if not xs:
    return None
  if len(xs) == 1:
    return xs[0]
  return f"{np.mean(xs):.1f} ± {np.std(xs, ddof=1):.1f}"


def table2(per_seed: Sequence[Mapping]) -> str:
  """Table 2 over seeds: each cell the mean (± the standard deviation over seeds)."""
  rows: dict[str, list] = {}
  for seed in per_seed:
    results = {seed["names"][v]: r for v, r in seed["evals"].items()}
    seed_rows = [tables.table2_row(n, r) for n, r in results.items()]
    seed_rows += tables.answer_baseline_rows(seed["baselines"])
    for row in seed_rows:
      rows.setdefault(row[0], []).append(row[1:])
  body = [[name] + [_cell(col) for col in zip(*cols)] for name, cols in rows.items()]
  return tables.markdown_table(tables.TABLE2_HEADERS, body)


def table7(per_seed: Sequence[Mapping]) -> str:
  """Table 7 (news perplexity per year), the mean over seeds."""
  by_name = stack(
    [
      {seed["names"][v]: results_lib.news_by_year(r) for v, r in seed["evals"].items()}
      for seed in per_seed
    ]
  )
  mean = {
    name: {
      "news": {
        "by_year": {y: {"perplexity": float(np.mean(v["perplexity"]))} for y, v in by_year.items()}
      }
    }
    for name, by_year in by_name.items()
  }
  return tables.table7(mean)


# The saved files of a seed's figures: file -> the keys of `load_saved_seed`'s result it fills.
FIGURE_FILES = {
  "figure2.json": ("gap", "by_duration"),
  "future.json": ("future",),
  "adapt.json": ("adapted",),
}
# A seed's eval.json holds one record per TempLAMA query and model: tens of megabytes at the
# paper's scale (35K test queries); anything past this bound is not a file reproduce wrote.
MAX_RESULT_BYTES = 1 << 30


def _read_json(path: str):
  """A results file of a seed: a regular file of at most MAX_RESULT_BYTES, bounded JSON."""
  return safe_read.read_json(path, MAX_RESULT_BYTES, error=DataError, what="a seed's results")


def read_seed_file(seed_dir: str, name: str):
  """One results file of a seed, parsed: `seed_dir/results/<name>` as `reproduce` writes it,
  or `seed_dir/<name>` as a seed is committed under docs/results/ (the one reader of a
  committed seed's files outside `load_saved_seed`).

  Raises:
    DataError: naming the file when neither exists (nor its `.xz`) or it is not bounded JSON.
  """
  for path in (storage.join(seed_dir, "results", name), storage.join(seed_dir, name)):
    # A committed seed keeps its large dumps as NAME.xz, which `_read_json` reads in its place.
    if storage.isfile(path) or storage.isfile(path + safe_read.XZ_SUFFIX):
      return _read_json(path)
  raise DataError(f"no {name} (looked in results/ and beside it)", seed_dir)


def _eval_problem(evals) -> str | None:
  """Why an eval.json of a seed is not {model name: `evaluate` result} with the numbers Table 2
  and the answer baselines read, or None."""
  if not isinstance(evals, dict) or not all(isinstance(r, dict) for r in evals.values()):
    return "not an object of evaluation results"
  for name, result in evals.items():
    try:
      tables.table2_row(name, result)
      results_lib.answer_baselines(result)
    except (results_lib.MissingResult, KeyError, TypeError, ValueError) as e:
      return f"{name}: {str(e)[:200]}"
  return None


def _names(summary) -> dict[str, str] | None:
  """{variant: model name} of a seed_summary.json, or None if it has no such "configs"."""
  configs = summary.get("configs") if isinstance(summary, dict) else None
  if not isinstance(configs, dict):
    return None
  names = {v: c.get("name") if isinstance(c, dict) else None for v, c in configs.items()}
  if not all(isinstance(n, str) for n in names.values()) or len(set(names.values())) < len(names):
    return None
  return names


def load_figure_numbers(results: str, variant: Mapping[str, str]) -> dict:
  """The numbers of a seed's figures, from the files `reproduce` wrote in `results`
  (figure2.json, future.json, adapt.json; a missing file leaves its keys out), keyed as
  `reproduce` keeps them in memory: by variant ("uniform", ...), `variant` mapping the model
  names of future.json and adapt.json to variants."""
  out = {}
  for name in FIGURE_FILES:
    path = storage.join(results, name)
    if not storage.isfile(path):
      continue
    saved = _read_json(path)
    if not isinstance(saved, dict):
      raise DataError("expected a JSON object", path)
    if name == "figure2.json":
      if not {"by_gap", "by_duration"} <= set(saved):
        raise DataError("expected the keys by_gap and by_duration", path)
      out["gap"], out["by_duration"] = saved["by_gap"], saved["by_duration"]
      continue
    unknown = sorted(set(saved) - set(variant))
    if unknown:
      raise DataError(f"models {unknown} are not in seed_summary.json", path)
    out[FIGURE_FILES[name][0]] = {variant[n]: r for n, r in saved.items()}
  return out


def load_saved_seed(seed_dir: str) -> dict:
  """The part of one seed's results that `combine_saved` needs, read back from the files
  `reproduce` wrote in `seed_dir/results/` (`per_query.json`, `eval.json`, `seed_summary.json`
  and, where present, the figures' numbers: `load_figure_numbers`).

  Raises:
    DataError: naming a missing or unreadable file.
  """
  results = storage.join(seed_dir, "results")
  loaded = {}
  for name in ("per_query.json", "eval.json", "seed_summary.json"):
    loaded[name] = _read_json(storage.join(results, name))
  # Each file is checked where it is read: a wrong type is one line naming it.
  names = _names(loaded["seed_summary.json"])
  if names is None:
    raise DataError(
      "no 'configs' of {variant: {'name': model name}}", f"{results}/seed_summary.json"
    )
  if (why := measurements.problem(loaded["per_query.json"])) is not None:
    raise DataError(
      f"not a per_query.json written by reproduce ({why})", f"{results}/per_query.json"
    )
  if (why := _eval_problem(loaded["eval.json"])) is not None:
    raise DataError(f"not an eval.json written by reproduce ({why})", f"{results}/eval.json")
  variant = {n: v for v, n in names.items()}
  unknown = sorted(set(loaded["eval.json"]) - set(variant))
  if unknown:
    raise DataError(f"models {unknown} are not in seed_summary.json", results)
  evals = {variant[n]: r for n, r in loaded["eval.json"].items()}  # in Table 2's row order
  if "temporal" not in evals:
    raise DataError("no result of the temporal model", f"{results}/eval.json")
  seed = {
    "seed": loaded["per_query.json"]["seed"],
    "names": names,
    "evals": evals,
    "measurements": loaded["per_query.json"],
    "baselines": results_lib.answer_baselines(evals["temporal"]),
  }
  return seed | load_figure_numbers(results, variant)


def combine_saved(seed_dirs: Sequence[str], results: str, log=print) -> dict:
  """Combines seeds that were run separately (e.g. in parallel, one `reproduce.seeds=S` run
  each), from the files each wrote in its results/, into what `write` writes for the seeds of
  one run: the same summary.json, claims.md, table2.md, table7.md and figures with bands.
  Returns the summary."""
  per_seed = [load_saved_seed(d) for d in seed_dirs]
  seeds = [s["seed"] for s in per_seed]
  if len(set(seeds)) != len(seeds):
    raise DataError(f"the seed directories repeat a seed: {seeds}", ",".join(seed_dirs))
  summary = write(results, per_seed, log)
  log(f"combined seeds {seeds} into {results}")
  return summary


def write(results: str, per_seed: Sequence[Mapping], log=print) -> dict:
  """Writes the combined results of every seed to `results`; returns the summary."""
  summary = claim_summary.summarize([seed["measurements"] for seed in per_seed])
  write_json(storage.join(results, "summary.json"), summary)
  for name, text in (
    ("claims.md", claim_summary.claims_table(summary)),
    ("table2.md", table2(per_seed)),
    ("table7.md", table7(per_seed)),
  ):
    with atomic_output_file(storage.join(results, name)) as f:
      f.write(text)
  draw_figures(results, per_seed, log)
  return summary


def draw_figures(results: str, per_seed: Sequence[Mapping], log=print) -> None:
  """figure2.png .. figure5.png over the seeds: one line per model (the mean over the seeds)
  with a band from the lowest to the highest seed. A figure whose numbers a seed lacks (its
  figure2.json, future.json or adapt.json) is not drawn, and a note says so."""

  def named(key, pick=lambda r: r):
    return stack([{s["names"][v]: pick(r) for v, r in s[key].items()} for s in per_seed])

  groups = lambda r: {  # noqa: E731
    g: results_lib.future_loglik_change(r).get(g, {}) for g in ("single", "multiple")
  }
  adapted = lambda: [{s["names"][v]: r for v, r in s["adapted"].items()} for s in per_seed]  # noqa: E731
  draws = {  # file: (the keys it needs, its function and inputs)
    "figure2.png": (
      ("gap", "by_duration"),
      lambda: (figures.figure2, stack([s["gap"] for s in per_seed]), named("by_duration")),
    ),
    "figure3.png": (("future",), lambda: (figures.figure3, named("future", groups))),
    "figure4.png": (
      ("future",),
      lambda: (figures.figure4, named("future", results_lib.future_entropy_by_set)),
    ),
    "figure5.png": (("adapted",), lambda: (figures.figure5, *adaptation.figure5_inputs(adapted()))),
  }
  for name, (keys, inputs) in draws.items():
    lacking = [s["seed"] for s in per_seed if any(k not in s for k in keys)]
    if lacking:
      log(f"note: {name} not drawn: no saved numbers for it on seed(s) {lacking}")
      continue
    fn, *args = inputs()
    try:
      fn(*args, storage.join(results, name))
    except figures.FiguresUnavailable as e:
      log(f"note: {e}")
      return
