"""C5's explanations (b) and (c), as pre-registered in
research/c5/PREREGISTRATION_bc.md: Uniform and Temporal of the default (2800 steps,
tiny-v1_1, world v3) retrained with one thing changed.

  python -m research.c5.explanations --root=runs/c5bc --seeds=0,1,2 --workers=2 \\
      --t5='runs/verdict/default/seed={seed}/t5' --baseline='runs/verdict/default/seed={seed}'

The settings (`research.levers.levers.Setting`; everything not named is the default's):
- `default`: the default itself, the baseline. With `--baseline`, its measurements are those
  of the pre-registered verdict (`per_query_step=2800.json` of each seed, copied, nothing
  trained); without, it is trained here from the same start (the same models).
- `forward-dated` (b): the world's news with forward-looking sentences
  (`data.forward_looking=dated`: "X's contract with Y runs until 2021."; `tlm.synthetic
  .forward`), at the realistic share (`data.forward_share`'s default).
- `forward-undated` (b, the control): the same sentences with the year replaced by an undated
  phrase (`data.forward_looking=undated`).
- `cbqa-start` (c): Uniform and Temporal initialised from the miniature's T5-CBQA
  (`tiny_cbqa`: the start + salient span masking on the world's encyclopedia, a snapshot of the
  facts on 2019-12-31; `tlm.miniature.starts`) instead of the start.

Every setting starts from the seed's `tiny_t5` start: `--t5` (a path template, e.g. the
verdict's), or pretrained here (ROOT/starts/seed=S/t5). The forward-looking worlds have the
default world's vocabulary and pre-training corpora (`tlm.synthetic.world`), so that
start is theirs too. T5-CBQA is trained here from it (ROOT/starts/seed=S/cbqa, 300 steps).

The work: the starts, then every training, `--workers` at a time (each in its own process,
`tlm.miniature.parallel`; the numbers do not depend on it), then, one at a time, each model's
TempLAMA evaluation and the levers report (ROOT/levers.json, levers.md: C1, C5 and M1 per seed
and over seeds, the cluster bootstrap of `tlm.miniature.stats`), then ROOT/c5_explanations.json
and .md: C5 per setting and seed, the pre-registered paired differences of C5 between settings
(two-level cluster bootstrap), the forward-looking sentences' counts (how many 2019-20 test
answers they state) and the criterion's verdicts. A rerun resumes; `--report_only` trains
nothing.
"""

import argparse
import json
import os
import shutil

import numpy as np

from research.levers import levers
from research.protocol2800 import STEPS_2800 as STEPS  # the studies replay the 2800-step protocol
from tlm.configs.years import FUTURE_YEARS, TRAIN_YEARS
from tlm.errors import DataError, UserError
from tlm.files import atomic_output_file, write_json

SEEDS = (0, 1, 2)
DATED, UNDATED = "forward-dated", "forward-undated"
# name: (description, overrides of Uniform and Temporal, start: "t5" or "cbqa")
SETTINGS = {
  "default": ("the default (the baseline)", (), "t5"),
  DATED: ("(b) forward-looking sentences, dated", ("data.forward_looking=dated",), "t5"),
  UNDATED: ("(b) the same, the year removed", ("data.forward_looking=undated",), "t5"),
  "cbqa-start": ("(c) from the T5-CBQA start", (), "cbqa"),
}
# The pre-registered comparisons: (name, setting, minus setting), each on C5's margin.
DIFFERENCES = (
  ("b: dated - undated", DATED, UNDATED),
  ("b': dated - default", DATED, "default"),
  ("c: cbqa-start - default", "cbqa-start", "default"),
)
CRITERIA = {"b": "b: dated - undated", "c": "c: cbqa-start - default"}


def start_dir(root: str, seed: int, name: str, t5: str = "") -> str:
  """Where the seed's start ("t5" or "cbqa") is; `t5`: the template of a trained tiny_t5."""
  if name == "t5" and t5:
    return os.path.abspath(t5.format(seed=seed))
  return os.path.join(root, "starts", f"seed={seed}", name)


def settings(root: str, t5: str = "", steps: int = STEPS) -> list[levers.Setting]:
  out = []
  for name, (description, overrides, start) in SETTINGS.items():
    if start == "t5" and t5:
      template = os.path.abspath(t5)
    else:
      template = os.path.join(root, "starts", "seed={seed}", start)
    out.append(levers.Setting(name, description, steps, overrides=overrides, start=template))
  return out


# ---- the work ---------------------------------------------------------------------------------


def start_configs(seed: int, root: str, t5: str, overrides) -> dict:
  """{name: (config, workdir)} of the starts to train: tiny_t5 (unless `t5` is given), then
  tiny_cbqa from it, as `--mode=reproduce` trains them (`tlm.miniature.starts`)."""
  from tlm import configs
  from tlm.miniature import reproduce, starts

  base = list(overrides) + reproduce.seed_overrides(seed)
  cfgs = starts.starting_configs(base, os.path.join(root, "starts", f"seed={seed}"))
  out = {}
  if not t5:
    out["t5"] = (cfgs["t5"], start_dir(root, seed, "t5"))
  elif not os.path.isdir(os.path.join(start_dir(root, seed, "t5", t5), "checkpoints")):
    raise UserError(f"--t5: no trained start at {start_dir(root, seed, 't5', t5)}")
  cbqa = configs.replace(cfgs["cbqa"], "model.init_checkpoint", start_dir(root, seed, "t5", t5))
  out["cbqa"] = (cbqa, start_dir(root, seed, "cbqa"))
  return out


def copy_baseline(root: str, seed: int, baseline: str, steps: int) -> None:
  """The verdict's measurements of the default, as this study's `default` setting's."""
  name = f"per_query_step={steps}.json"
  dest = os.path.join(levers.seed_dir(root, levers.Setting("default", "", steps), seed), name)
  if os.path.isfile(dest):
    return
  source = os.path.join(baseline.format(seed=seed), name)
  from tlm import safe_read

  meas = safe_read.read_json_object(source, 1 << 30, error=DataError, what="the measurements")
  if meas.get("seed") != seed or set(meas.get("models", {})) != set(levers.VARIANTS):
    raise DataError(f"expected seed {seed}'s {', '.join(levers.VARIANTS)}", source)
  os.makedirs(os.path.dirname(dest), exist_ok=True)
  shutil.copyfile(source, dest)


def training_jobs(chosen, seeds, root, overrides, cache_dir) -> list:
  """One job per (setting, seed, variant) not yet measured, ordered so that two workers
  build different forward-looking worlds at once."""
  from tlm import configs
  from tlm.miniature import parallel

  jobs = []
  for variant in levers.VARIANTS:
    for seed in seeds:
      for s in chosen:
        work = levers.seed_dir(root, s, seed)
        if os.path.isfile(os.path.join(work, f"per_query_step={s.steps}.json")):
          continue
        config = levers.variant_configs(s, seed, s.start.format(seed=seed), overrides)[variant]
        config = configs.replace(config, "train.steps", s.steps)
        step = ((config, os.path.join(work, variant)),)
        jobs.append(parallel.Job(f"{s.name} seed {seed} {variant}", "train", step, cache_dir))
  return jobs


def train_all(chosen, seeds, root, t5, overrides, workers, log) -> None:
  """The starts (one chain per seed), then every training, `workers` at a time."""
  from tlm.miniature import parallel, reproduce

  todo = {seed: start_configs(seed, root, t5, overrides) for seed in seeds}
  cache_dir = reproduce.compilation_cache_dir(todo[seeds[0]]["cbqa"][0])
  parallel.enable_compilation_cache(cache_dir)
  chains = [
    parallel.Job(f"starts seed {seed}", "train", tuple(todo[seed].values()), cache_dir)
    for seed in seeds
  ]
  log(f"the starts of {len(chains)} seeds, {workers} at a time")
  parallel.run_jobs(chains, workers, log)
  jobs = training_jobs(chosen, seeds, root, overrides, cache_dir)
  log(f"{len(jobs)} trainings of {chosen[0].steps} steps, {workers} at a time")
  parallel.run_jobs(jobs, workers, log)


# ---- the report -------------------------------------------------------------------------------


def c5_difference(metas_a, metas_b, resamples: int | None = None) -> dict:
  """C5's margin in A minus in B, per seed and over the seeds, with 95% intervals: the paired
  bootstrap over (subject, relation) pairs (the same queries in both: the same resample is
  applied to both), two-level over the seeds (`tlm.miniature.stats`)."""
  from tlm.miniature import claims, stats

  c5 = next(c for c in claims.CLAIMS if c.id == "C5")
  resamples = resamples or stats.RESAMPLES
  statistics, pools = [], []
  for a, b in zip(metas_a, metas_b, strict=True):
    if a["seed"] != b["seed"]:
      raise ValueError(f"seed {a['seed']} paired with seed {b['seed']}")
    (ca,), missing_a = c5.components(a)
    (cb,), missing_b = c5.components(b)
    if missing_a or missing_b:
      raise ValueError(f"C5 is not computable: {missing_a + missing_b}")
    ((name, given),) = ca.pools.items()  # "TempLAMA 2019-20", by (subject, relation) pair
    pool = stats.as_pool(given)
    if set(cb.pools) != {name} or not pool.same_as(stats.as_pool(cb.pools[name])):
      raise ValueError(f"seed {a['seed']}: the two settings were evaluated on other queries")
    statistics.append(lambda d, ca=ca, cb=cb: ca.margin(d) - cb.margin(d))
    pools.append({name: pool})
  per_seed = []
  for a, f, p in zip(metas_a, statistics, pools):
    value = f(stats.identity_indices(p))
    reps = stats.replicates([f], [p], resamples=resamples)[:, 0]
    per_seed.append(
      {"seed": a["seed"], "difference": value, "ci95": stats.percentile_interval(reps)}
    )
  mean = float(np.mean([p["difference"] for p in per_seed]))
  pooled = stats.hierarchical_bootstrap(statistics, pools, resamples=resamples)
  return {
    "per_seed": per_seed,
    "mean": mean,
    "ci95": list(pooled),
    "every_seed_above_zero": all(p["difference"] > 0 for p in per_seed),
    "pooled_above_zero": pooled[0] > 0,
  }


def forward_counts(seeds, overrides) -> dict:
  """Per seed: the dated world's forward-looking sentences and how many of the 2019-20
  TempLAMA test answers those of the 2010-18 news state (`forward.stated_answers`)."""
  from tlm import configs
  from tlm.data.templama import load_templama
  from tlm.input.locations import synthetic_data
  from tlm.miniature import reproduce
  from tlm.synthetic import forward

  out = {}
  for seed in seeds:
    config = configs.override(
      configs.get("tiny_temporal"),
      list(overrides) + reproduce.seed_overrides(seed) + ["data.forward_looking=dated"],
    )
    paths = synthetic_data(config.data)
    told = forward.read_records(os.path.join(paths.world_dir, "forward.jsonl"))
    test = load_templama(os.path.join(paths.templama_dir, "test.json"))
    stated = forward.stated_answers(told, test, FUTURE_YEARS, TRAIN_YEARS)
    with open(os.path.join(paths.world_dir, "stats.json"), encoding="utf-8") as f:
      stated["world"] = json.load(f).get("forward")
    out[str(seed)] = stated
  return out


def summarize(summary: dict, results: dict, seeds, counts, steps=STEPS, resamples=None) -> dict:
  """c5_explanations.json: C5 per setting, the differences, the criterion (see the module
  docstring and PREREGISTRATION_bc.md)."""
  rows = {r["setting"]: r for r in summary["rows"] if r["final"]}
  c5 = {
    name: {k: r["claims"]["C5"][k] for k in ("holds", "margin_mean", "margin_ci95", "per_seed")}
    | {"seeds": r["seeds"], "f1_2019_20": {v: r["f1"][v]["2019-20"] for v in levers.VARIANTS}}
    for name, r in rows.items()
  }
  diffs = {}
  for label, a, b in DIFFERENCES:
    have = [s for s in seeds if s in results.get(a, {}) and s in results.get(b, {})]
    metas = [[results[x][s][steps] for s in have if steps in results[x][s]] for x in (a, b)]
    if have and len(metas[0]) == len(metas[1]) == len(have):
      diffs[label] = {"seeds": have} | c5_difference(*metas, resamples=resamples)
  verdicts = {}
  for key, label in CRITERIA.items():
    d = diffs.get(label)
    complete = d is not None and sorted(d["seeds"]) == sorted(SEEDS)
    verdicts[key] = (
      None if not complete else bool(d["every_seed_above_zero"] and d["pooled_above_zero"])
    )
  return {
    "pre_registration": "research/c5/PREREGISTRATION_bc.md",
    "criterion": "an explanation is supported iff its difference of C5 margins is > 0 on every "
    "seed and its two-level 95% interval lies above zero",
    "seeds": list(seeds),
    "c5": c5,
    "differences": diffs,
    "supported": verdicts,
    "forward_sentences": counts,
  }


def _signed(x) -> str:
  return "-" if x is None or not np.isfinite(x) else f"{x:+.2f}"


def markdown(out: dict) -> str:
  from tlm.eval.tables import markdown_table

  rows = []
  for name, c in out["c5"].items():
    seeds = " / ".join(
      f"{_signed(p['margin'])} [{_signed(p['ci95'][0])}, {_signed(p['ci95'][1])}]"
      if p.get("ci95")
      else _signed(p["margin"])
      for p in c["per_seed"]
    )
    ci = c["margin_ci95"] or [None, None]
    f1 = " / ".join(f"{np.mean(c['f1_2019_20'][v]):.1f}" for v in levers.VARIANTS)
    rows.append(
      [name, seeds, f"{_signed(c['margin_mean'])} [{_signed(ci[0])}, {_signed(ci[1])}]", f1]
    )
  table = markdown_table(["Setting", "C5 per seed [95%]", "mean [95%]", "2019-20 F1 (U / T)"], rows)
  drows = []
  for label, d in out["differences"].items():
    seeds = " / ".join(
      f"{_signed(p['difference'])} [{_signed(p['ci95'][0])}, {_signed(p['ci95'][1])}]"
      for p in d["per_seed"]
    )
    drows.append(
      [label, seeds, f"{_signed(d['mean'])} [{_signed(d['ci95'][0])}, {_signed(d['ci95'][1])}]"]
    )
  dtable = markdown_table(["Difference of C5", "per seed [95%]", "mean [95%]"], drows)
  crows = [
    [s, c["sentences"], c["stated"], c["queries"], c["pairs"], c["sentences_stating"]]
    for s, c in out["forward_sentences"].items()
  ]
  ctable = markdown_table(
    [
      "Seed",
      "dated sentences, 2010-18 news",
      "2019-20 test answers stated",
      "2019-20 test queries",
      "pairs stated",
      "sentences stating one",
    ],
    crows,
  )
  verdict = {True: "supported", False: "not supported", None: "incomplete"}
  lines = [f"({k}) {verdict[v]}" for k, v in out["supported"].items()]
  return (
    f"Pre-registration: `{out['pre_registration']}`. Criterion: {out['criterion']}.\n\n"
    f"{table}\n{dtable}\nForward-looking sentences (the dated world):\n\n{ctable}\n"
    + "\n".join(lines)
    + "\n"
  )


def report(root, chosen, results, seeds, counts, log=print, resamples=None) -> dict:
  summary = levers.report(root, chosen, results, seeds, log, resamples=resamples)
  out = summarize(summary, results, seeds, counts, chosen[0].steps, resamples)
  write_json(os.path.join(root, "c5_explanations.json"), out)
  with atomic_output_file(os.path.join(root, "c5_explanations.md")) as f:
    f.write(markdown(out))
  log(f"report: {os.path.join(root, 'c5_explanations.md')}")
  return out


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--root", default=os.path.join("runs", "c5bc"))
  p.add_argument("--seeds", default="0,1,2")
  p.add_argument("--t5", default="", help="path template ({seed}) of the trained tiny_t5 starts")
  p.add_argument(
    "--baseline", default="", help="path template ({seed}) of the verdict's default measurements"
  )
  p.add_argument("--settings", default="", help="comma-separated names (default: all)")
  p.add_argument("--workers", type=int, default=2)
  p.add_argument("--steps", type=int, default=STEPS, help="smoke tests only: not the default's")
  p.add_argument("--set", action="append", default=[], dest="overrides", help="smoke tests only")
  p.add_argument("--resamples", type=int, default=0, help="bootstrap replicates (0: default)")
  p.add_argument("--report_only", action="store_true", help="train nothing")
  args = p.parse_args(argv)
  for flag in ("t5", "baseline"):
    value = getattr(args, flag)
    if value and "{seed}" not in value:
      p.error(f"--{flag} must contain {{seed}}, e.g. 'runs/verdict/default/seed={{seed}}'")
  seeds = [int(s) for s in args.seeds.split(",")]
  if args.steps != STEPS and args.baseline:
    p.error("--baseline holds step-2800 measurements; it needs --steps=2800")
  root = os.path.abspath(args.root)
  chosen = settings(root, args.t5, args.steps)
  if args.settings:
    names = args.settings.split(",")
    unknown = sorted(set(names) - set(SETTINGS))
    if unknown:
      p.error(f"unknown settings {unknown}; choose from {sorted(SETTINGS)}")
    chosen = [s for s in chosen if s.name in names]
  if args.baseline and any(s.name == "default" for s in chosen):
    for seed in seeds:
      copy_baseline(root, seed, args.baseline, args.steps)
  if not args.report_only:
    train_all(chosen, seeds, root, args.t5, args.overrides, args.workers, print)
  schedule = [(s.name, 0 if args.report_only else s.steps) for s in chosen]
  results: dict = {}
  for name, up_to in schedule:
    setting = next(s for s in chosen if s.name == name)
    for seed in seeds:
      results.setdefault(name, {})[seed] = levers.seed_measurements(
        setting, seed, root, args.overrides, print, up_to
      )
  has_forward = any(s.name == DATED for s in chosen)
  counts = forward_counts(seeds, args.overrides) if has_forward else {}
  out = report(root, chosen, results, seeds, counts, resamples=args.resamples or None)
  print(json.dumps(out["supported"]))


if __name__ == "__main__":
  main()
