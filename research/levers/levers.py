"""What would make Temporal beat Uniform in the miniature: more steps, a wider model, or a start
pretrained on dated text (research/levers/README.md).

The goal is that C1, C5 and M1 (`tlm.miniature.claims`) hold on every seed with their 95%
interval above zero; the faithful protocol (`--mode=reproduce`: the 230K-parameter tiny T5, 800
steps) does not get there. This module measures what would. For a *setting* (a model size, a
number of steps and the corpus its start was pretrained on, `start_corpus`) and each seed it
trains only Uniform and Temporal, from the same pretrained start and for the same steps,
evaluates them with the reproduction's evaluation (`tlm.eval.experiments`) and judges C1, C5 and
M1 with the reproduction's claims and statistics (`tlm.miniature.claim_summary`: a paired
bootstrap over the queries of each seed, a two-level one over the seeds). Everything else is the
protocol's: the tiny configs, the world of the seed, the sampling and initialisation seeds
(`reproduce.seed_overrides`).

A `Setting`:
- `overrides`: applied to every model of the setting, its start included (model sizes, e.g.
  `model.emb_dim=128`); `steps`: Uniform's and Temporal's `train.steps`.
- `start`: a path template ("{seed}") of a pretrained start (a reproduction's `seed=S/t5`), or
  "" to pretrain one per seed with the miniature's recipe (`tiny_t5`) at the setting's size,
  in ROOT/<setting>/seed=S/t5.
- `start_corpus`: with `start` "", the corpus that start is pretrained on: "" the world's
  generic text (the protocol's), or a name in `START_CORPORA` (written to
  ROOT/<setting>/seed=S/start_corpus.jsonl from the seed's world).
- `continue_from`: optional path template of a directory holding `uniform/` and `temporal/`
  workdirs of the same setting trained for fewer steps (e.g. a reproduction's seed directory).
  Their newest checkpoint is copied and training resumes from it. The learning rate is
  constant, the batch of step s is a pure function of (seed, s) and the checkpoint holds the
  optimizer state, so this is the model that training from the start for `steps` gives (as in
  `tlm.eval.adaptation`'s chunked runs); only the steps already done are saved.
- `reuse`: a path template of a reproduction's seed directory whose `results/per_query.json`
  is read as it is (a baseline already measured: nothing is trained or evaluated).
- `eval_steps`: steps before `steps` at which the models are also evaluated (a learning curve,
  reported beside the setting's verdict).

Only TempLAMA is evaluated: C1, C5 and M1 read nothing else, and the held-out news dominates
the reproduction's evaluation time.

Layout under ROOT: <setting>/seed=S/{t5,uniform,temporal}/ (workdirs),
<setting>/seed=S/per_query_step=K.json (`measurements.collect` of Uniform and Temporal at step
K, plus their training losses and size), and `report`'s levers.json and levers.md. A rerun
reads back the measurements already written and trains only what is missing.
"""

import dataclasses
import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from tlm import configs, safe_read
from tlm.configs.years import FUTURE_YEARS, SLICES, TRAIN_YEARS
from tlm.errors import ConfigError, DataError
from tlm.files import atomic_output_file, write_json
from tlm.miniature import claim_summary, claims, measurements

Log = Callable[[str], None]
VARIANTS = ("uniform", "temporal")
CLAIM_IDS = ("C1", "C5", "M1")


@dataclasses.dataclass(frozen=True)
class Setting:
  """One lever setting (see the module docstring for each field)."""

  name: str
  description: str
  steps: int
  overrides: tuple[str, ...] = ()
  start: str = ""
  start_corpus: str = ""
  continue_from: str = ""
  reuse: str = ""
  eval_steps: tuple[int, ...] = ()

  def __post_init__(self):
    if self.start_corpus and self.start_corpus not in START_CORPORA:
      raise ConfigError(
        f"setting {self.name!r}: unknown start_corpus {self.start_corpus!r}; "
        f"expected one of {sorted(START_CORPORA)}"
      )

  def points(self) -> list[int]:
    """The steps at which the models are evaluated, the setting's own last."""
    return sorted({s for s in self.eval_steps if 0 < s < self.steps} | {self.steps})


def lever_claims() -> list[claims.Claim]:
  """C1, C5 and M1, as `tlm.miniature.claims` defines them."""
  by_id = {c.id: c for c in claims.CLAIMS + claims.MECHANISM}
  return [by_id[i] for i in CLAIM_IDS]


def gets_there(summaries: Mapping[str, Mapping]) -> bool | None:
  """The goal on these claim summaries: each holds on every seed and its 95%
  interval (over (subject, relation) pairs and seeds) lies above zero. None if a verdict is
  missing."""
  if any(s["holds"] is None for s in summaries.values()):
    return None
  return all(
    s["holds"] and s["margin_ci95"] and s["margin_ci95"][0] > 0 for s in summaries.values()
  )


# ---- one seed ---------------------------------------------------------------------------------


def seed_dir(root: str, setting: Setting, seed: int) -> str:
  return os.path.join(root, setting.name, f"seed={seed}")


def _measurement_path(work: str, step: int) -> str:
  return os.path.join(work, f"per_query_step={step}.json")


def _read_json(path: str) -> dict:
  return safe_read.read_json_object(path, 1 << 30, error=DataError, what="the measurements")


def _reused(setting: Setting, seed: int) -> dict[int, dict]:
  """A baseline's Uniform and Temporal numbers, from a reproduction's seed directory."""
  source = setting.reuse.format(seed=seed)
  meas = _read_json(os.path.join(source, "results", "per_query.json"))
  missing = [v for v in VARIANTS if v not in meas.get("models", {})]
  if missing or meas.get("seed") != seed:
    raise DataError(f"expected seed {seed}'s {', '.join(VARIANTS)}", source)
  meas["models"] = {v: meas["models"][v] for v in VARIANTS}
  meas["training"] = {v: training_record(os.path.join(source, v)) for v in VARIANTS}
  return {setting.steps: meas}


def training_record(workdir: str) -> dict:
  """The model's size and its last logged training and held-out losses (metrics.jsonl)."""
  from tlm.models.shapes import abstract_variables, param_count

  out: dict = {"parameters": None, "loss": None, "eval_loss": None}
  path = os.path.join(workdir, "model_config.json")
  if os.path.isfile(path):
    from tlm.models.t5 import T5Config

    out["parameters"] = param_count(abstract_variables(T5Config.from_dict(_read_json(path))))
  metrics = os.path.join(workdir, "metrics.jsonl")
  if os.path.isfile(metrics):
    with open(metrics, encoding="utf-8") as f:
      rows = [json.loads(line) for line in f if line.strip()]
    for key in ("loss", "eval_loss"):
      out[key] = next((r[key] for r in reversed(rows) if r.get(key) is not None), None)
    out["step"] = rows[-1]["step"] if rows else None
  return out


def _copy_newest_checkpoint(source: str, workdir: str, max_step: int, log: Log) -> None:
  """Copies `source`'s newest checkpoint at or below `max_step` (and its metrics) into an
  empty `workdir`, so training there resumes from it."""
  from tlm.train.checkpointing import checkpoints_dir

  if os.path.isdir(checkpoints_dir(workdir)) and os.listdir(checkpoints_dir(workdir)):
    return  # already continued (a rerun)
  src = checkpoints_dir(source)
  steps = sorted(int(n) for n in os.listdir(src) if n.isdigit()) if os.path.isdir(src) else []
  steps = [s for s in steps if s <= max_step]
  if not steps:
    raise DataError(f"no checkpoint at or below step {max_step} to continue from", src)
  log(f"continuing {workdir} from {src}/{steps[-1]}")
  shutil.copytree(
    os.path.join(src, str(steps[-1])), os.path.join(checkpoints_dir(workdir), str(steps[-1]))
  )
  metrics = os.path.join(source, "metrics.jsonl")
  if os.path.isfile(metrics):
    shutil.copy(metrics, os.path.join(workdir, "metrics.jsonl"))


def _dated_generic(config) -> list[str]:
  from research.levers.dated_corpus import dated_generic_texts
  from tlm.synthetic.facts import generate_world
  from tlm.synthetic.settings import WORLD

  world = generate_world(WORLD, config.data.world_seed, config.data.world_scale)
  return dated_generic_texts(world, world.seed)


# Corpora a setting's start may be pretrained on instead of the world's generic text.
START_CORPORA = {"generic_years": _dated_generic}


def _pretrained_start(setting: Setting, base: list[str], work: str, log: Log) -> str:
  """The setting's own start: `tiny_t5` (the miniature's recipe) at the setting's size, on
  the world's generic text or on the setting's `start_corpus`."""
  from tlm.eval import during_training
  from tlm.files import write_jsonl
  from tlm.train.loop import run

  config = configs.override(configs.get("tiny_t5"), base)
  if setting.start_corpus:
    corpus = os.path.join(work, "start_corpus.jsonl")
    texts = START_CORPORA[setting.start_corpus](config)
    write_jsonl(corpus, ({"text": t} for t in texts))
    config = configs.replace(config, "data.pretrain_corpus", corpus)
  path = os.path.join(work, "t5")
  log(
    f"pre-training the start (tiny_t5 recipe, corpus {setting.start_corpus or 'generic'}) in {path}"
  )
  run(config, path, make_evaluators=during_training.evaluators, log=log)
  return path


def setting_overrides(setting: Setting, seed: int, overrides: Sequence[str] = ()) -> list[str]:
  """The overrides of a setting's models on one seed: the caller's, the seed's, the setting's."""
  from tlm.miniature import reproduce

  return list(overrides) + reproduce.seed_overrides(seed) + list(setting.overrides)


def variant_configs(setting: Setting, seed: int, start: str, overrides: Sequence[str] = ()):
  """{variant: the config of the setting's Uniform or Temporal on `seed`, from `start`} (its
  `train.steps` is set per evaluated step)."""
  from tlm.miniature import starts

  base = setting_overrides(setting, seed, overrides)
  return {
    v: starts.from_start(configs.override(configs.get(f"tiny_{v}"), base), start) for v in VARIANTS
  }


def seed_measurements(
  setting: Setting,
  seed: int,
  root: str,
  overrides: Sequence[str] = (),
  log: Log = print,
  up_to: int | None = None,
) -> dict[int, dict]:
  """{step: Uniform's and Temporal's per-query numbers} of one seed (see the module docstring):
  those already measured, and the missing ones up to step `up_to` (None: all).

  Args:
    overrides: applied to every model, before the seed's and the setting's (tests: a small
      world and small shapes).
  """
  if setting.reuse:
    return _reused(setting, seed)
  from tlm.eval import during_training, experiments
  from tlm.miniature import parallel, reproduce
  from tlm.train.loop import train

  work = seed_dir(root, setting, seed)
  out = {
    k: _read_json(p) for k in setting.points() if os.path.isfile(p := _measurement_path(work, k))
  }
  todo = [k for k in setting.points() if k not in out and (up_to is None or k <= up_to)]
  if not todo:
    return out
  base = setting_overrides(setting, seed, overrides)
  start = (
    setting.start.format(seed=seed)
    if setting.start
    else _pretrained_start(setting, base, work, log)
  )
  cfgs = variant_configs(setting, seed, start, overrides)
  parallel.enable_compilation_cache(reproduce.compilation_cache_dir(cfgs["temporal"]))
  data = dataclasses.replace(experiments.eval_data(cfgs["temporal"]), news={})
  dirs = {v: os.path.join(work, v) for v in VARIANTS}
  if setting.continue_from:
    for v in VARIANTS:
      source = os.path.join(setting.continue_from.format(seed=seed), v)
      _copy_newest_checkpoint(source, dirs[v], todo[0], log)
  for step in todo:
    evals = {}
    for v in VARIANTS:
      config = configs.replace(cfgs[v], "train.steps", step)
      log(f"{setting.name} seed {seed}: {config.name} to step {step} in {dirs[v]}")
      train(config, dirs[v], evaluators=during_training.evaluators(config), log=log)
      evals[v] = experiments.evaluate(config, dirs[v], log, data)
    meas = measurements.collect(seed, evals)
    meas["training"] = {v: training_record(dirs[v]) for v in VARIANTS}
    write_json(_measurement_path(work, step), meas)
    out[step] = meas
  return out


# ---- over the seeds ---------------------------------------------------------------------------


def _f1(meas: Mapping, model: str, years, keep: str = "") -> float:
  cols = measurements.templama(meas, model, years)
  f1 = cols["f1"].astype(float)
  if keep == "not_most_frequent":
    f1 = f1[~cols["most_frequent_is_correct"].astype(bool)]
  return float(100.0 * np.mean(f1)) if len(f1) else float("nan")


def persistence(meas: Mapping, model: str) -> dict[str, float]:
  """How a model answers the 2019-20 queries relative to its own 2018 answer (a diagnostic
  of C5, added after the first levers had been measured; not a claim).

  Over the 2019-20 queries whose (subject, relation) also has a 2018 query: `same`, the % whose
  prediction equals the model's 2018 prediction for that pair; `f1_first`, the model's F1 (%)
  against the query's first gold answer; `f1_2018_first`, the F1 (%) its 2018 prediction
  would have against that answer, i.e. Temporal fed "year: 2018" instead of its own year (the
  queries of a pair differ in nothing else; Uniform's answers never depend on the year).
  Over those of the queries whose pair the model answers differently across 2010-18:
  `varying_same`, the % answered with the 2018 answer, and `varying_none`, the % answered
  with none of the 2010-18 answers (NaN if there is no such pair).
  """
  from tlm.data.metrics import token_f1

  cols = measurements.templama(meas, model, TRAIN_YEARS + FUTURE_YEARS)
  seen: dict[tuple, dict[int, str]] = {}  # (subject, relation) -> {seen year: prediction}
  for s, r, y, p in zip(cols["subject"], cols["relation"], cols["year"], cols["prediction"]):
    if y in TRAIN_YEARS:
      seen.setdefault((s, r), {})[int(y)] = str(p)
  same, now, carried, varying_same, varying_none = [], [], [], [], []
  for s, r, y, p, gold in zip(
    cols["subject"], cols["relation"], cols["year"], cols["prediction"], cols["first_answer"]
  ):
    answers = seen.get((s, r), {})
    if y not in FUTURE_YEARS or 2018 not in answers:
      continue
    same.append(str(p) == answers[2018])
    now.append(token_f1(str(p), str(gold)))
    carried.append(token_f1(answers[2018], str(gold)))
    if len(set(answers.values())) > 1:
      varying_same.append(same[-1])
      varying_none.append(str(p) not in answers.values())
  pct = lambda xs: float(100.0 * np.mean(xs)) if xs else float("nan")  # noqa: E731
  return {
    "same": pct(same),
    "f1_first": pct(now),
    "f1_2018_first": pct(carried),
    "varying_same": pct(varying_same),
    "varying_none": pct(varying_none),
  }


def _row(
  setting: Setting,
  step: int,
  seeds: Sequence[int],
  metas: Sequence[Mapping],
  planned: Sequence[int],
  resamples: int | None,
) -> dict:
  summaries = {
    c.id: claim_summary.summarize_claim(c, metas, resamples=resamples) for c in lever_claims()
  }
  f1 = {
    v: {name: [_f1(m, v, years) for m in metas] for name, years in SLICES.items()}
    | {"M1 subset": [_f1(m, v, TRAIN_YEARS, "not_most_frequent") for m in metas]}
    for v in VARIANTS
  }
  training = {v: [m.get("training", {}).get(v, {}) for m in metas] for v in VARIANTS}
  persisted = {v: [persistence(m, v) for m in metas] for v in VARIANTS}
  complete = list(seeds) == list(planned)
  return {
    "setting": setting.name,
    "description": setting.description,
    "steps": step,
    "final": step == setting.steps,
    "seeds": list(seeds),
    "complete": complete,
    "claims": {
      i: {k: s[k] for k in ("holds", "hold_rate", "margin_mean", "margin_ci95", "units")}
      | {"per_seed": [{k: p[k] for k in ("seed", "margin", "ci95")} for p in s["per_seed"]]}
      for i, s in summaries.items()
    },
    "f1": f1,
    "training": training,
    "persistence": persisted,
    "gets_there": gets_there(summaries) if complete else None,
  }


def summarize(
  settings: Sequence[Setting],
  results: Mapping[str, Mapping[int, Mapping[int, Mapping]]],
  planned: Sequence[int],
  *,
  resamples: int | None = None,
) -> dict:
  """levers.json: for each setting and evaluated step, C1, C5 and M1 over the seeds measured.

  Args:
    results: {setting name: {seed: {step: measurements}}}, seeds in `planned` order; a seed
      not yet measured is absent ("complete": false, and no verdict on the goal).
    planned: the seeds the criterion is judged on.
  """
  rows = []
  for setting in settings:
    by_seed = results.get(setting.name, {})
    seeds = [s for s in planned if s in by_seed]
    for step in setting.points():
      have = [s for s in seeds if step in by_seed[s]]
      if have:
        metas = [by_seed[s][step] for s in have]
        rows.append(_row(setting, step, have, metas, planned, resamples))
  criterion = (
    "C1, C5 and M1 each hold on every planned seed and the 95% interval of each margin "
    "(paired bootstrap over (subject, relation) pairs, two-level over seeds) lies above zero"
  )
  return {
    "criterion": criterion,
    "planned_seeds": list(planned),
    "claims": list(CLAIM_IDS),
    "rows": rows,
  }


# ---- the report -------------------------------------------------------------------------------


def _signed(x) -> str:
  return "-" if x is None or not np.isfinite(x) else f"{x:+.2f}"


def _interval(ci) -> str:
  return f"[{_signed(ci[0])}, {_signed(ci[1])}]" if ci else "[-]"


def _claim_cell(c: Mapping) -> str:
  per_seed = " / ".join(f"{_signed(p['margin'])} {_interval(p.get('ci95'))}" for p in c["per_seed"])
  ci = c["margin_ci95"]
  interval = f"[{_signed(ci[0])}, {_signed(ci[1])}]" if ci else "-"
  return f"{per_seed}; mean {_signed(c['margin_mean'])} {interval}"


def _mean(xs, digits: int = 1) -> str:
  xs = [x for x in xs if x is not None and np.isfinite(x)]
  return f"{np.mean(xs):.{digits}f}" if xs else "-"


def markdown(summary: Mapping) -> str:
  """levers.md: the claims' margins per seed with the interval, then the F1 and losses."""
  from tlm.eval.tables import markdown_table

  claims_rows, f1_rows, persist_rows = [], [], []
  for r in summary["rows"]:
    label = r["setting"] + ("" if r["final"] else f" (at step {r['steps']})")
    params = {t.get("parameters") for t in r["training"]["temporal"]} - {None}
    size = f"{min(params):,}" if params else "-"
    verdict = {True: "yes", False: "no", None: "incomplete" if not r["complete"] else "n/a"}
    seeds = ",".join(map(str, r["seeds"]))
    claims_rows.append(
      [label, r["steps"], size, seeds]
      + [_claim_cell(r["claims"][i]) for i in summary["claims"]]
      + [verdict[r["gets_there"]]]
    )
    f1, tr = r["f1"], r["training"]
    loss = lambda v, k, tr=tr: _mean([t.get(k) for t in tr[v]], 3)  # noqa: E731
    f1_rows.append(
      [label, r["steps"]]
      + [
        f"{_mean(f1['uniform'][s])} / {_mean(f1['temporal'][s])}"
        for s in ("2010-18", "2019-20", "M1 subset")
      ]
      + [f"{loss('uniform', k)} / {loss('temporal', k)}" for k in ("loss", "eval_loss")]
    )
    if "persistence" in r:
      ps = r["persistence"]
      cell = lambda v, k, ps=ps: _mean([p[k] for p in ps[v]])  # noqa: E731
      persist_rows.append(
        [label, r["steps"], cell("temporal", "same")]
        + [f"{cell('uniform', k)} / {cell('temporal', k)}" for k in ("f1_first", "f1_2018_first")]
        + [cell("temporal", "varying_same"), cell("temporal", "varying_none")]
      )
  head = ["Setting", "Steps", "Parameters", "Seeds"]
  claims_md = markdown_table(
    head + [f"{i}: margin per seed; mean [95%]" for i in summary["claims"]] + ["Gets there"],
    claims_rows,
  )
  f1_md = markdown_table(
    [
      "Setting",
      "Steps",
      "TempLAMA F1 2010-18 (U / T)",
      "TempLAMA F1 2019-20 (U / T)",
      "M1 subset F1 (U / T)",
      "train loss (U / T)",
      "held-out loss (U / T)",
    ],
    f1_rows,
  )
  persist_md = markdown_table(
    [
      "Setting",
      "Steps",
      "Temporal 2019-20 answers = its 2018 answer (%)",
      "F1 2019-20 vs first answer (U / T)",
      "the 2018 answer carried to 2019-20 (U / T)",
      "Temporal, pairs varying over 2010-18: the 2018 answer (%)",
      "... none of 2010-18's (%)",
    ],
    persist_rows,
  )
  return (
    f"Criterion: {summary['criterion']} (seeds {summary['planned_seeds']}).\n\n"
    f"{claims_md}\nF1 and losses, the mean over the seeds measured:\n\n{f1_md}\n"
    "2019-20 against each model's own 2018 answers (a diagnostic of C5, added after the "
    "first levers were measured; `levers.persistence`), the mean over the seeds:\n\n"
    f"{persist_md}"
  )


def report(root: str, settings, results, planned, log: Log = print, **kwargs) -> dict:
  """Writes ROOT/levers.json and ROOT/levers.md; returns the summary."""
  summary = summarize(settings, results, planned, **kwargs)
  write_json(os.path.join(root, "levers.json"), summary)
  with atomic_output_file(os.path.join(root, "levers.md")) as f:
    f.write(markdown(summary))
  log(f"report: {os.path.join(root, 'levers.md')}")
  return summary


def run(
  settings: Sequence[Setting],
  seeds: Sequence[int],
  root: str,
  overrides: Sequence[str] = (),
  log: Log = print,
  schedule: Sequence[tuple[str, int]] = (),
  **kwargs,
) -> dict:
  """Measures the settings on every seed, one training at a time, rewriting the report after
  each (setting, seed), so an interrupted run leaves a report of what finished.

  Args:
    schedule: the order of the work, as passes (setting name, up to step), each over every
      seed in turn: e.g. [("a", 1600), ("b", 800), ("a", 3200)] takes setting a to step 1600
      on every seed before b. Default: each setting to its last step, in order.
  """
  by_name = {s.name: s for s in settings}
  schedule = list(schedule) or [(s.name, s.steps) for s in settings]
  results: dict = {}
  summary = report(root, settings, results, seeds, log, **kwargs)
  for name, up_to in schedule:
    if name not in by_name:
      continue  # a setting left out of this run
    for seed in seeds:
      log(f"\n##### {name} to step {up_to}, seed {seed}: {by_name[name].description}")
      results.setdefault(name, {})[seed] = seed_measurements(
        by_name[name], seed, root, overrides, log, up_to
      )
      summary = report(root, settings, results, seeds, log, **kwargs)
  return summary
