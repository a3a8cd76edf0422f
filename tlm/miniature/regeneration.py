"""`--mode=reproduce --check=DIR`: does a rerun give a committed seed's numbers, model by model?

A seed of the reproduction is a pure function of its code, its settings and the machine's
arithmetic (`tlm.miniature.environment`). The check retrains the seed as configured and reads
its per_query.json against the committed one in DIR (a seed's results folder, e.g.
docs/results/budget30/seed=0), model by model:

  T5-CBQA, T5-CBQA-ft, Uniform, Temporal, Yearly (routed): each TempLAMA prediction and each
    held-out news example's F1 and log-likelihood; for the probed models (T5-CBQA-ft, Uniform,
    Temporal) each future probe's entropy and log-likelihood change;
  each Yearly expert: its F1 on every TempLAMA query;
  Uniform / Temporal retrained on 2010-19, and adapted to 2019 (each alpha, the curve of the
    alpha it is matched at): their F1 on each slice.

Values are compared exactly (a rerun on the same arithmetic gives the same bits; the largest
numeric difference is reported beside the count). `compare` returns the report, `write`
writes it as check.json and check.md, with the environment recorded in DIR's
seed_summary.json beside this run's and the fields in which they differ.
"""

import math
from collections.abc import Iterator, Mapping, Sequence

from tlm import storage
from tlm.configs.schema import ABSENT_MEANS
from tlm.errors import DataError, UserError
from tlm.files import atomic_output_file, write_json
from tlm.miniature import measurements, over_seeds

LABELS = {
  "cbqa": "T5-CBQA",
  "cbqa_ft": "T5-CBQA-ft",
  "uniform": "Uniform",
  "temporal": "Temporal",
  "yearly": "Yearly (routed)",
}
TEMPLAMA_PARTS = ("prediction",)
NEWS_PARTS = ("f1", "loglik")
NOT_RECORDED = "not recorded"


def committed(directory: str, seed: int) -> dict:
  """DIR's per_query.json (checked to be the layout `reproduce` writes, of seed `seed`) and
  the environment its seed_summary.json records (None when it records none).

  Raises:
    DataError: naming the file that is missing, unreadable or of another seed.
  """
  meas = over_seeds.read_seed_file(directory, "per_query.json")
  if (why := measurements.problem(meas)) is not None:
    raise DataError(f"not a per_query.json written by reproduce ({why})", directory)
  if meas["seed"] != seed:
    raise DataError(f"holds seed {meas['seed']}, not seed {seed}", directory)
  return {
    "per_query": meas,
    "environment": _environment(directory),
    "world_version": _world_version(directory),
  }


def _world_version(directory: str) -> int | None:
  """The synthetic world version DIR's seed ran on: its Temporal config's `data.world_version`,
  3 where the config predates the key (`tlm.configs.schema.ABSENT_MEANS`), None where DIR records
  no config."""
  try:
    summary = over_seeds.read_seed_file(directory, "seed_summary.json")
    data = summary["configs"]["temporal"]["data"]
  except (DataError, KeyError, TypeError):
    return None
  if not isinstance(data, dict):
    return None
  version = data.get("world_version", ABSENT_MEANS["data.world_version"])
  return version if isinstance(version, int) else None


def check_world_versions(refs: Mapping[int, tuple[str, Mapping]], version: int) -> None:
  """Refuses, before any training, a check of a run on world `version` against a committed seed
  of another world version, naming the setting that rebuilds it.

  Raises:
    UserError: naming the seed, DIR's version and the --set that matches it.
  """
  for seed, (folder, ref) in refs.items():
    theirs = ref.get("world_version")
    if theirs is not None and theirs != version:
      raise UserError(
        f"{folder}: seed {seed} ran on synthetic world v{theirs}, this run would build world "
        f"v{version}; add --set=data.world_version={theirs}"
      )


def committed_seeds(directory: str, seeds: Sequence[int]) -> dict[int, tuple[str, dict]]:
  """{seed: (its folder, `committed`)}: DIR/seed=S for each seed where DIR holds such
  folders, else DIR itself for the one seed of a one-seed run.

  Raises:
    DataError: DIR holds no folder of a seed of several, or a file is missing or wrong.
  """
  out = {}
  for seed in seeds:
    folder = storage.join(directory, f"seed={seed}")
    if not storage.isdir(folder):
      if len(seeds) > 1:
        raise DataError(f"no seed={seed}/ folder for seed {seed} of {list(seeds)}", directory)
      folder = directory
    out[seed] = (folder, committed(folder, seed))
  return out


def check(refs: Mapping[int, tuple[str, Mapping]], workdir: str, log=print) -> list[dict]:
  """Each seed's run in `workdir` against its committed folder (`committed_seeds`); logs the
  models' table and both environments, writes WORKDIR/check.json and check.md; returns the
  seeds' reports."""
  from tlm.miniature.reproduce import seed_dir

  reports = []
  for seed, (folder, ref) in refs.items():
    run_dir = seed_dir(workdir, seed)
    run_meas = over_seeds.read_seed_file(run_dir, "per_query.json")
    reports.append(report(seed, folder, run_dir, ref, run_meas, _environment(run_dir)))
  json_path, md_path = write(reports, workdir)
  log("\n" + markdown(reports))
  log(f"check: {json_path}, {md_path}")
  return reports


def _environment(directory: str) -> dict | None:
  try:
    summary = over_seeds.read_seed_file(directory, "seed_summary.json")
  except DataError:
    return None
  env = summary.get("environment") if isinstance(summary, dict) else None
  return env if isinstance(env, dict) else None


class _Missing:
  """A value on one side only: never equal to a value of the other side."""


def _part(part: str, ours: Sequence | None, theirs: Sequence | None) -> dict:
  """One part of a model: its items, how many differ (exactly), the largest numeric
  difference; a side that lacks the part (None) or has fewer items differs on every item."""
  if ours is None or theirs is None:
    n = len(ours if ours is not None else theirs or [])
    where = "this run" if ours is None else "DIR"
    return {"part": part, "items": n, "differ": n, "max_abs_diff": None, "note": f"not in {where}"}
  width = max(len(ours), len(theirs))
  a = list(ours) + [_Missing] * (width - len(ours))
  b = list(theirs) + [_Missing] * (width - len(theirs))
  differ, biggest, numeric = 0, 0.0, False
  for x, y in zip(a, b):
    both = _number(x) and _number(y)
    numeric = numeric or both
    if not _same(x, y):
      differ += 1
      if both:
        biggest = max(biggest, abs(x - y)) if math.isfinite(x - y) else math.inf
  out = {
    "part": part,
    "items": width,
    "differ": differ,
    "max_abs_diff": biggest if numeric else None,
  }
  if len(ours) != len(theirs):
    out["note"] = f"{len(ours)} items here, {len(theirs)} in DIR"
  return out


def _number(x) -> bool:
  return isinstance(x, (int, float)) and not isinstance(x, bool)


def _same(x, y) -> bool:
  """Equal, with NaN equal to NaN (a rerun that gives NaN where the committed run did has
  regenerated it)."""
  return x == y or (isinstance(x, float) and isinstance(y, float) and x != x and y != y)


def _get(tree, *keys):
  """tree[k0][k1]..., or None where a key is missing."""
  for k in keys:
    if not isinstance(tree, Mapping) or k not in tree:
      return None
    tree = tree[k]
  return tree


def _leaves(tree, prefix: str = "") -> Iterator[tuple[str, object]]:
  """(path "a/b/c", value) of every value under `tree` that is not an object."""
  if isinstance(tree, Mapping):
    for k in sorted(tree, key=str):
      yield from _leaves(tree[k], f"{prefix}/{k}" if prefix else str(k))
  else:
    yield prefix, tree


def _flat(tree) -> dict[str, list]:
  """{leaf path: its values as a list} of a tree of lists and numbers."""
  return {k: v if isinstance(v, list) else [v] for k, v in _leaves(tree)}


def _tree_part(part: str, ours, theirs) -> dict:
  """Every leaf of two trees (e.g. entropies by year, F1 by alpha and slice) as one part,
  leaf by leaf; a leaf on one side only differs on each of its items."""
  if ours is None or theirs is None:
    side = ours if ours is not None else theirs
    return _part(
      part,
      None if ours is None else sum(_flat(side).values(), []),
      None if theirs is None else sum(_flat(side).values(), []),
    )
  a, b = _flat(ours), _flat(theirs)
  xs, ys = [], []
  for path in sorted(set(a) | set(b)):
    x, y = a.get(path, []), b.get(path, [])
    width = max(len(x), len(y))
    xs += x + [_Missing] * (width - len(x))
    ys += y + [_Missing] * (width - len(y))
  return _part(part, xs, ys)


def _by_id(cols: Mapping | None, column: str, order: Sequence[str]) -> list | None:
  """`cols[column]` in the order of the query ids `order` (`_Missing` where an id is absent)."""
  if cols is None or column not in cols:
    return None
  index = {i: k for k, i in enumerate(cols["id"])}
  return [cols[column][index[i]] if i in index else _Missing for i in order]


def _ids(*cols) -> list[str]:
  return sorted({i for c in cols if c is not None for i in c.get("id", [])})


def _row(model: str, parts: list[dict]) -> dict:
  return {"model": model, "equal": all(p["differ"] == 0 for p in parts), "parts": parts}


def _model_rows(run: Mapping, ref: Mapping) -> list[dict]:
  """The models of per_query.json's "models", with their future probes ("entropy",
  "loglik_change")."""
  rows = []
  for v in dict.fromkeys([*LABELS, *run["models"], *ref["models"]]):
    r, d = _get(run, "models", v), _get(ref, "models", v)
    if r is None and d is None:
      continue
    rt, dt = _get(r, "templama"), _get(d, "templama")
    order = _ids(rt, dt)
    parts = [
      _part(f"TempLAMA {c}s", _by_id(rt, c, order), _by_id(dt, c, order)) for c in TEMPLAMA_PARTS
    ]
    parts += [_part(f"news {c}", _get(r, "news", c), _get(d, "news", c)) for c in NEWS_PARTS]
    re_, de = _get(run, "entropy", v), _get(ref, "entropy", v)
    if re_ is not None or de is not None:
      order = _ids(re_, de)
      years = sorted(set(_get(re_, "entropy") or {}) | set(_get(de, "entropy") or {}), key=str)
      ours = (
        {
          y: _by_id({"id": re_["id"], "e": re_["entropy"][y]}, "e", order)
          for y in years
          if y in (_get(re_, "entropy") or {})
        }
        if re_
        else None
      )
      theirs = (
        {
          y: _by_id({"id": de["id"], "e": de["entropy"][y]}, "e", order)
          for y in years
          if y in (_get(de, "entropy") or {})
        }
        if de
        else None
      )
      parts.append(_tree_part("future entropies", ours, theirs))
    rl, dl = _get(run, "loglik_change", v), _get(ref, "loglik_change", v)
    if rl or dl:
      parts.append(_tree_part("future log-lik changes", rl, dl))
    rows.append(_row(LABELS.get(v, v), parts))
  return rows


def _expert_rows(run: Mapping, ref: Mapping) -> list[dict]:
  """Each Yearly expert: its F1 on every TempLAMA query."""
  r, d = run.get("experts"), ref.get("experts")
  order = _ids(r, d)
  rows = []
  for y in sorted(set(_get(r, "f1") or {}) | set(_get(d, "f1") or {}), key=str):
    ours = _by_id({"id": r["id"], "f1": r["f1"][y]}, "f1", order) if _get(r, "f1", y) else None
    theirs = _by_id({"id": d["id"], "f1": d["f1"][y]}, "f1", order) if _get(d, "f1", y) else None
    rows.append(_row(f"Yearly expert {y}", [_part("TempLAMA F1s", ours, theirs)]))
  return rows


def _adaptation_rows(run: Mapping, ref: Mapping) -> list[dict]:
  """Per adapted model: the model retrained on 2010-19, each alpha's adapted model (the
  matched alpha's with its curve), and the adaptation's settings."""
  r, d = run.get("adaptation") or {}, ref.get("adaptation") or {}
  rows = []
  for v in sorted(set(r) | set(d)):
    a, b = r.get(v) or {}, d.get(v) or {}
    label = LABELS.get(v, v)
    retrained = {"f1": a.get("retrained"), "steps": a.get("retrain_steps")}
    retrained_ref = {"f1": b.get("retrained"), "steps": b.get("retrain_steps")}
    rows.append(
      _row(
        f"{label} retrained 2010-19", [_tree_part("F1 by slice, steps", retrained, retrained_ref)]
      )
    )
    matched = {str(a.get("match_alpha")), str(b.get("match_alpha"))}
    for alpha in sorted(set(a.get("alphas") or {}) | set(b.get("alphas") or {})):
      parts = [_tree_part("F1 by slice", _get(a, "alphas", alpha), _get(b, "alphas", alpha))]
      if alpha in matched:
        parts.append(_tree_part("F1 along the adaptation", a.get("curve"), b.get("curve")))
      rows.append(_row(f"{label} adapted, alpha {alpha}", parts))
    keys = ("before", "match_alpha", "steps")
    rows.append(
      _row(
        f"{label} adaptation settings",
        [
          _tree_part(
            "before / alpha / steps", {k: a.get(k) for k in keys}, {k: b.get(k) for k in keys}
          )
        ],
      )
    )
  return rows


def compare(run_meas: Mapping, ref_meas: Mapping) -> list[dict]:
  """Model by model, this run's per_query.json against DIR's (the module docstring)."""
  return (
    _model_rows(run_meas, ref_meas)
    + _expert_rows(run_meas, ref_meas)
    + _adaptation_rows(run_meas, ref_meas)
  )


# ---- the environments ----------------------------------------------------------------------


def environment_differences(run_env: Mapping | None, dir_env: Mapping | None) -> list[str]:
  """The fields ("cpu/model_name", "packages/jax", ...) whose values differ, or
  [NOT_RECORDED] when DIR records no environment. The git commit is left out (a check runs
  a later commit by design); it is shown beside the others."""
  if dir_env is None or run_env is None:
    return [NOT_RECORDED]
  a, b = dict(_leaves(run_env)), dict(_leaves(dir_env))
  return [k for k in sorted(set(a) | set(b)) if k != "git_commit" and a.get(k) != b.get(k)]


def _env_cells(env: Mapping | None) -> dict[str, str]:
  if env is None:
    return {}
  out = {}
  for path, value in _leaves(env):
    if path == "cpu/flags" and isinstance(value, list):
      value = f"{len(value)} flags"
    out[path] = "" if value is None else str(value)
  return out


def environment_table(run_env: Mapping | None, dir_env: Mapping | None) -> str:
  """Markdown: each recorded field, DIR's value beside this run's, differences marked."""
  a, b = _env_cells(run_env), _env_cells(dir_env)
  lines = ["| field | committed (DIR) | this run | |", "|---|---|---|---|"]
  for k in sorted(set(a) | set(b)):
    mark = "" if a.get(k) == b.get(k) or dir_env is None or k == "git_commit" else "differs"
    lines.append(f"| {k} | {b.get(k, NOT_RECORDED)} | {a.get(k, NOT_RECORDED)} | {mark} |")
  if run_env and dir_env:
    fa, fb = set(run_env["cpu"].get("flags") or []), set(dir_env["cpu"].get("flags") or [])
    if fa != fb:
      lines.append("")
      lines.append(f"CPU flags only in DIR: {' '.join(sorted(fb - fa)) or '-'}")
      lines.append(f"CPU flags only in this run: {' '.join(sorted(fa - fb)) or '-'}")
  return "\n".join(lines) + "\n"


# ---- the report ----------------------------------------------------------------------------


def report(
  seed: int, directory: str, run_dir: str, dir_data: Mapping, run_meas: Mapping, run_env
) -> dict:
  """One seed's check: every model's comparison and both environments."""
  models = compare(run_meas, dir_data["per_query"])
  dir_env = dir_data["environment"]
  return {
    "seed": seed,
    "committed": directory,
    "run": run_dir,
    "equal": all(m["equal"] for m in models),
    "models_differing": [m["model"] for m in models if not m["equal"]],
    "models": models,
    "environment": {"committed": dir_env, "run": run_env},
    "environment_differences": environment_differences(run_env, dir_env),
  }


def markdown(reports: Sequence[Mapping]) -> str:
  """check.md: per seed, a table of the models (equal or the differing count of each part)
  and the environments side by side."""
  out = []
  for r in reports:
    verdict = "every model equal" if r["equal"] else f"{len(r['models_differing'])} models differ"
    out.append(f"# Regeneration check, seed {r['seed']}: {verdict}\n")
    out.append(f"Committed: `{r['committed']}`; this run: `{r['run']}`.\n")
    out.append("| model | equal | compared (items differing / items) |")
    out.append("|---|---|---|")
    for m in r["models"]:
      cells = "; ".join(f"{p['part']} {p['differ']}/{p['items']}" for p in m["parts"])
      out.append(f"| {m['model']} | {'yes' if m['equal'] else '**no**'} | {cells} |")
    env = r["environment"]
    if env["committed"] is None:
      head = "DIR records no environment (a seed committed before the record existed)"
    else:
      head = f"fields that differ: {', '.join(r['environment_differences']) or 'none'}"
    out.append(f"\n## Environment ({head})\n")
    out.append(environment_table(env["run"], env["committed"]))
  return "\n".join(out)


def write(reports: Sequence[Mapping], out_dir: str) -> tuple[str, str]:
  """Writes out_dir/check.json and out_dir/check.md; returns their paths."""
  json_path, md_path = storage.join(out_dir, "check.json"), storage.join(out_dir, "check.md")
  write_json(json_path, {"equal": all(r["equal"] for r in reports), "seeds": list(reports)})
  with atomic_output_file(md_path) as f:
    f.write(markdown(reports))
  return json_path, md_path
