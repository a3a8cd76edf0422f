"""C3 at equal exposure: the Yearly experts trained with Temporal's reads of a fact.

  nice -n 10 python -m research.c3.exposure --root=runs/c3 --seeds=0,1,2 --out=research/c3

Settings, checks, prediction and criterion: research/c3/PREREGISTRATION.md (committed before
this code and any run). Per seed S: pretrains the start (`tiny_t5`, the reproduction's code),
trains the nine Yearly experts 2010-18 of the default protocol for round(2800 x r_S) steps
instead of 2800, r_S the W3 median exposure ratio (research/world/measure.json), evaluates them
on the seed's TempLAMA test with the reproduction's evaluation and sets their 2010-18 F1 against
the committed Temporal of the same seed (research/protocol2800/levers.json, step 2800):
C3's new margin, its change from the committed one, and the pre-registered verdict. On the
seeds of `--verify_seeds` (default 0) it also trains Temporal 800 steps from the new start and
compares it with the committed step-800 numbers (check V3). `--temporal_full` (descriptive,
after the verdict's runs) retrains Temporal to 2800 steps for within-seed paired intervals.

Writes ROOT/seed=S/c3_seed.json per seed (a rerun reads it back and trains only what is
missing) and OUT/result.json, OUT/result.md.
"""

import argparse
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from research.protocol2800 import OVERRIDES_2800
from research.protocol2800 import STEPS_2800 as STEPS  # the studies replay the 2800-step protocol
from tlm import configs
from tlm.configs.years import TRAIN_YEARS
from tlm.errors import DataError
from tlm.files import write_json

Log = Callable[[str], None]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEASURE = os.path.join(REPO, "research", "world", "measure.json")
COMMITTED = os.path.join(REPO, "docs", "results", "preregistered")
# The 2800-step protocol's registered verdict: Temporal's curve over steps (levers.json).
LEVERS = os.path.join(REPO, "research", "protocol2800", "levers.json")
WORLD_HASHES = os.path.join(REPO, "research", "c5", "default_world_sha256.json")
VERIFY_STEP = 800  # V3: Temporal at this step against the committed row of levers.json
LONG_LIVED = 5  # years: W3's long-lived facts
TOLERANCE = 1e-9


# ---- the settings -----------------------------------------------------------------------------


def exposure_ratio(seed: int, path: str = MEASURE) -> float:
  """W3's median exposure ratio (Uniform / expert, at equal steps) of a seed."""
  with open(path, encoding="utf-8") as f:
    return float(json.load(f)["seeds"][str(seed)]["W3_exposure"]["median_ratio"])


def expert_steps(ratio: float, steps: int = STEPS) -> int:
  """The expert's steps at which it has read the median long-lived fact as often as Temporal
  has at `steps`."""
  return int(round(steps * ratio))


def committed(seed: int, root: str = COMMITTED, levers: str = LEVERS) -> dict:
  """The committed numbers of a seed: Temporal's TempLAMA 2010-18 F1 at 2800 and at 800 steps
  and its loss at 800 (levers.json, the default), C3's margin, interval and pool (the
  reproduction's summary.json). Raises DataError unless levers.json's C1 margin is the
  reproduction's (the same Temporal)."""
  with open(levers, encoding="utf-8") as f:
    lev = json.load(f)
  with open(os.path.join(root, f"reproduce_seed{seed}", "summary.json"), encoding="utf-8") as f:
    summ = json.load(f)
  rows = {r["steps"]: r for r in lev["rows"] if r["setting"] == "default"}
  i = rows[STEPS]["seeds"].index(seed)
  claims = {c["id"]: c for c in summ["claims"]}
  c3 = claims["C3"]["per_seed"][0]
  if c3["seed"] != seed:
    raise DataError(f"expected seed {seed}'s summary", root)
  if claims["C1"]["per_seed"][0]["margin"] != rows[STEPS]["claims"]["C1"]["per_seed"][i]["margin"]:
    raise DataError(f"seed {seed}: levers.json's Temporal is not the reproduction's (C1)", root)
  pool = c3["pools"]["TempLAMA 2010-18"]
  t = rows[STEPS]["f1"]["temporal"]["2010-18"][i]
  j = rows[VERIFY_STEP]["seeds"].index(seed)
  return {
    "temporal_f1": t,
    "c3_margin": c3["margin"],
    "c3_ci95": c3["ci95"],
    "yearly_f1": t - c3["margin"],
    "queries": pool["items"],
    "pairs": pool["clusters"],
    "temporal_800_f1": rows[VERIFY_STEP]["f1"]["temporal"]["2010-18"][j],
    "temporal_800_loss": rows[VERIFY_STEP]["training"]["temporal"][j]["loss"],
  }


@dataclasses.dataclass(frozen=True)
class SeedPlan:
  """What one seed trains: its start, its experts (at `steps`) and the Temporal runs."""

  seed: int
  steps: int
  ratio: float
  work: str
  start: object  # Config of tiny_t5
  yearly: object  # Config of tiny_yearly from the start, at `steps`
  temporal: object  # Config of tiny_temporal from the start (train.steps set per use)

  @property
  def dirs(self) -> dict[str, str]:
    return {v: os.path.join(self.work, v) for v in ("t5", "yearly", "temporal")}


def plan(
  seed: int,
  root: str,
  overrides: Sequence[str] = (),
  ratio: float | None = None,
  base_steps: int = STEPS,
  protocol: Sequence[str] = OVERRIDES_2800,
) -> SeedPlan:
  """A seed's configs: the reproduction's (`reproduce.seed_overrides`, `starts`) under
  `protocol` (the 2800-step protocol's overrides; () for the current default), the experts'
  steps cut by the seed's exposure ratio (W3's unless `ratio` is given)."""
  from tlm.miniature import reproduce, starts

  work = os.path.join(os.path.abspath(root), f"seed={seed}")
  ov = list(protocol) + list(overrides) + reproduce.seed_overrides(seed)
  ratio = exposure_ratio(seed) if ratio is None else float(ratio)
  steps = expert_steps(ratio, base_steps)
  start = starts.starting_configs(ov, work)["t5"]
  t5 = starts.start_dirs(work)["t5"]
  yearly = starts.from_start(configs.override(configs.get("tiny_yearly"), ov), t5)
  yearly = configs.replace(yearly, "train.steps", steps)
  temporal = starts.from_start(configs.override(configs.get("tiny_temporal"), ov), t5)
  return SeedPlan(seed, steps, ratio, work, start, yearly, temporal)


# ---- training ---------------------------------------------------------------------------------


def _cache_dir(p: SeedPlan) -> str:
  from tlm.miniature import reproduce

  return reproduce.compilation_cache_dir(p.temporal)


def start_jobs(plans: Sequence[SeedPlan]) -> list:
  from tlm.miniature import parallel

  return [
    parallel.Job(
      f"seed {p.seed} {p.start.name}", "train", ((p.start, p.dirs["t5"]),), _cache_dir(p)
    )
    for p in plans
  ]


def training_jobs(plans: Sequence[SeedPlan], verify: Sequence[int], temporal_steps: int) -> list:
  """Each seed's experts, in seed order; on a seed of `verify`, Temporal to `temporal_steps`
  first."""
  from tlm.configs import expert_runs
  from tlm.miniature import parallel

  jobs = []
  for p in plans:
    if p.seed in verify:
      config = configs.replace(p.temporal, "train.steps", temporal_steps)
      name = f"seed {p.seed} {config.name} to {temporal_steps}"
      jobs.append(parallel.Job(name, "train", ((config, p.dirs["temporal"]),), _cache_dir(p)))
    for config, path in expert_runs(p.yearly, p.dirs["yearly"]):
      name = f"seed {p.seed} {config.name} {config.data.year} to {p.steps}"
      jobs.append(parallel.Job(name, "train", ((config, path),), _cache_dir(p)))
  return jobs


# ---- evaluation -------------------------------------------------------------------------------


def _train_records(result: Mapping) -> list[dict]:
  from tlm.eval.results import templama_records

  return [r for r in templama_records(result) if r["year"] in TRAIN_YEARS]


def f1_summary(records: Sequence[Mapping]) -> dict:
  """Mean F1 (x100) of 2010-18 records: all, per year, long-lived (5+ years) and shorter, with
  the numbers of queries and (subject, relation) pairs."""
  f1 = lambda rs: float(100.0 * np.mean([r["f1"] for r in rs])) if rs else None  # noqa: E731
  long = [r for r in records if (r.get("duration") or 0) >= LONG_LIVED]
  short = [r for r in records if (r.get("duration") or 0) < LONG_LIVED]
  return {
    "f1": f1(records),
    "queries": len(records),
    "pairs": len({(r["subject"], r["relation"]) for r in records}),
    "by_year": {str(y): f1([r for r in records if r["year"] == y]) for y in TRAIN_YEARS},
    "long_lived": {"f1": f1(long), "queries": len(long)},
    "shorter": {"f1": f1(short), "queries": len(short)},
  }


def world_check(p: SeedPlan, path: str = WORLD_HASHES) -> dict | None:
  """V2: sha256 of the seed's world files against the committed ones (seed 0 at scale 1 only;
  None where nothing is committed)."""
  from tlm.input.locations import synthetic_data

  with open(path, encoding="utf-8") as f:
    want = json.load(f)["files"]
  prefix = f"s{p.seed}x{p.yearly.data.world_scale:.1f}/"
  files = {k[len(prefix) :]: v["after"] for k, v in want.items() if k.startswith(prefix)}
  if not files or p.seed != 0 or p.yearly.data.world_scale != 1.0:
    return None
  world = synthetic_data(p.yearly.data).world_dir
  got = {}
  for rel in files:
    with open(os.path.join(world, rel), "rb") as f:
      got[rel] = hashlib.sha256(f.read()).hexdigest()
  return {"files": len(files), "identical": got == files}


def paired_interval(temporal: Sequence[Mapping], yearly: Sequence[Mapping], resamples: int) -> dict:
  """Temporal - Yearly over the same 2010-18 queries, with the pair bootstrap of the claims."""
  from tlm.miniature import stats
  from tlm.miniature.claim_parts import PAIR

  t = {r["id"]: r for r in temporal}
  y = {r["id"]: r for r in yearly}
  if set(t) != set(y):
    raise DataError("Temporal and Yearly were scored on different queries")
  ids = sorted(t)
  diff = 100.0 * np.array([t[i]["f1"] - y[i]["f1"] for i in ids], dtype=float)
  pool = stats.Pool.of([(t[i]["subject"], t[i]["relation"]) for i in ids], PAIR)
  lo, hi = stats.hierarchical_bootstrap(
    [lambda d: float(np.mean(stats.take(diff, d["q"])))], [{"q": pool}], resamples=resamples
  )
  return {"margin": float(diff.mean()), "ci95": [lo, hi]}


def _slim(records: Sequence[Mapping]) -> list[dict]:
  return [{k: r[k] for k in ("id", "year", "subject", "relation", "f1")} for r in records]


def _close(a, b) -> bool:
  return a is not None and b is not None and abs(float(a) - float(b)) <= TOLERANCE


def measure_seed(
  p: SeedPlan, base: Mapping, verify: bool, log: Log, verify_step: int = VERIFY_STEP
) -> dict:
  """One seed's numbers, its experts trained: Yearly's F1, C3's new margin, checks V1-V3."""
  from research.levers.levers import training_record
  from tlm.eval import experiments
  from tlm.infer.trained_models import expert_dir

  start = time.time()
  data = dataclasses.replace(experiments.eval_data(p.temporal), news={})
  yearly = _train_records(experiments.evaluate(p.yearly, p.dirs["yearly"], log, data))
  y = f1_summary(yearly)
  out: dict = {"seed": p.seed, "ratio": p.ratio, "steps": p.steps, "committed": dict(base)}
  out["yearly"] = y
  out["experts"] = {
    str(e): training_record(expert_dir(p.dirs["yearly"], e)) for e in p.yearly.data.train_years
  }
  out["new_margin"] = base["temporal_f1"] - y["f1"]
  out["change"] = out["new_margin"] - base["c3_margin"]
  out["V1"] = {
    "queries": y["queries"],
    "pairs": y["pairs"],
    "committed": [base["queries"], base["pairs"]],
    "ok": [y["queries"], y["pairs"]] == [base["queries"], base["pairs"]],
  }
  out["V2"] = world_check(p)
  out["V3"] = None
  if verify:
    config = configs.replace(p.temporal, "train.steps", verify_step)
    record = training_record(p.dirs["temporal"])
    if record.get("step") != verify_step:
      raise DataError(f"V3 needs Temporal at step {verify_step}", p.dirs["temporal"])
    t = f1_summary(_train_records(experiments.evaluate(config, p.dirs["temporal"], log, data)))
    out["V3"] = {
      "step": verify_step,
      "f1": t["f1"],
      "loss": record["loss"],
      "committed": [base["temporal_800_f1"], base["temporal_800_loss"]],
      "ok": _close(t["f1"], base["temporal_800_f1"])
      and _close(record["loss"], base["temporal_800_loss"]),
    }
  out["records"] = _slim(yearly)
  out["eval_minutes"] = (time.time() - start) / 60
  return out


def temporal_full(p: SeedPlan, meas: Mapping, log: Log, resamples: int | None = None) -> dict:
  """Descriptive: Temporal retrained to 2800 steps (its workdir), checked against the committed
  F1, and the within-seed paired interval of C3's new margin."""
  from tlm.eval import experiments
  from tlm.miniature import stats

  config = configs.replace(p.temporal, "train.steps", STEPS)
  data = dataclasses.replace(experiments.eval_data(p.temporal), news={})
  temporal = _train_records(experiments.evaluate(config, p.dirs["temporal"], log, data))
  f1 = f1_summary(temporal)["f1"]
  out = paired_interval(temporal, meas["records"], resamples or stats.RESAMPLES)
  out["temporal_f1"] = f1
  out["matches_committed"] = _close(f1, meas["committed"]["temporal_f1"])
  return out


# ---- the verdict ------------------------------------------------------------------------------


def verdict(seeds: Sequence[Mapping], planned: Sequence[int]) -> dict:
  """The pre-registered criterion (PREREGISTRATION.md) on the measured seeds
  (`research.lever_verdict.h_and_e`): the change D of C3's margin and its new margin; a failed
  check V1 or V3 gives no verdict."""
  from research.lever_verdict import h_and_e

  checks = [s["V1"]["ok"] for s in seeds] + [s["V3"]["ok"] for s in seeds if s["V3"]]
  out = h_and_e(
    [s["change"] for s in seeds],
    [s["new_margin"] for s in seeds],
    seeds=[s["seed"] for s in seeds],
    planned=planned,
    checks_ok=all(checks),
    outcomes={
      "both": "fails for a measured reason: the experts' exposure advantage",
      "h_only": "exposure accounts for part of the gap",
      "checks": "V1 or V3",
    },
  )
  old = [s["committed"]["c3_margin"] for s in seeds]
  out["old_margin_mean"] = float(np.mean(old)) if old else None
  return out


# ---- the report -------------------------------------------------------------------------------


def _s(x, digits: int = 2) -> str:
  return "-" if x is None else f"{x:+.{digits}f}"


def _ci(ci) -> str:
  return "[-]" if not ci else f"[{_s(ci[0])}, {_s(ci[1])}]"


def markdown(result: Mapping) -> str:
  from tlm.eval.tables import markdown_table

  rows, checks, years = [], [], []
  for s in result["seeds"]:
    c = s["committed"]
    full = s.get("temporal_full")
    rows.append(
      [
        s["seed"],
        f"{s['ratio']:.4f}",
        s["steps"],
        f"{c['temporal_f1']:.2f}",
        f"{c['yearly_f1']:.2f}",
        f"{s['yearly']['f1']:.2f}",
        f"{_s(c['c3_margin'])} {_ci(c['c3_ci95'])}",
        _s(s["new_margin"]) + (f" {_ci(full['ci95'])}" if full else ""),
        _s(s["change"]),
      ]
    )
    v3 = s["V3"]
    checks.append(
      [
        s["seed"],
        f"{s['V1']['queries']} / {s['V1']['pairs']} ({'ok' if s['V1']['ok'] else 'FAILED'})",
        "-" if not s["V2"] else ("identical" if s["V2"]["identical"] else "DIFFERENT"),
        "-"
        if not v3
        else f"F1 {v3['f1']:.10f}, loss {v3['loss']:.10f} ({'ok' if v3['ok'] else 'FAILED'})",
        "-"
        if not full
        else f"{full['temporal_f1']:.4f} ({'ok' if full['matches_committed'] else 'differs'})",
      ]
    )
    y = s["yearly"]
    years.append(
      [s["seed"]]
      + [
        f"{y['by_year'][str(k)]:.1f}" if y["by_year"][str(k)] is not None else "-"
        for k in TRAIN_YEARS
      ]
      + [f"{y['long_lived']['f1']:.1f}" if y["long_lived"]["f1"] is not None else "-"]
      + [f"{y['shorter']['f1']:.1f}" if y["shorter"]["f1"] is not None else "-"]
      + [f"{np.mean([e['loss'] for e in s['experts'].values() if e.get('loss') is not None]):.3f}"]
    )
  v = result["verdict"]
  table = markdown_table(
    [
      "Seed",
      "W3 ratio",
      "Expert steps",
      "Temporal F1 (committed)",
      "Yearly F1 at 2800 (committed)",
      "Yearly F1 at equal exposure",
      "C3 margin at 2800 [95%]",
      "C3 margin at equal exposure",
      "Change",
    ],
    rows,
  )
  check_table = markdown_table(
    [
      "Seed",
      "V1 2010-18 queries / pairs",
      "V2 world sha256",
      "V3 Temporal at 800",
      "Temporal at 2800",
    ],
    checks,
  )
  year_table = markdown_table(
    ["Seed"] + [str(k) for k in TRAIN_YEARS] + ["5+ years", "under 5", "experts' last loss"], years
  )
  return (
    "# C3 at equal exposure (research/c3/PREREGISTRATION.md), as computed\n\n"
    f"Seeds {v['seeds']} of {v['planned']}; code {result['commit']}.\n\n{table}\n"
    f"Change D (new - committed margin): mean {_s(v['change_mean'])}, t-interval "
    f"{_ci(v['change_t95'])}. New margin: mean {_s(v['new_margin_mean'])}, t-interval "
    f"{_ci(v['new_margin_t95'])} (committed: mean {_s(v['old_margin_mean'])}).\n\n"
    f"H: {v['H']}. E: {v['E']}. Outcome: **{v['outcome']}**.\n\n"
    f"Checks:\n\n{check_table}\nYearly F1 at equal exposure by year and by fact duration:\n\n"
    f"{year_table}"
  )


# ---- the run ----------------------------------------------------------------------------------


def _seed_file(p: SeedPlan) -> str:
  return os.path.join(p.work, "c3_seed.json")


def run(
  seeds: Sequence[int],
  root: str,
  out: str,
  overrides: Sequence[str] = (),
  *,
  verify: Sequence[int] = (0,),
  full: bool = False,
  train: bool = True,
  log: Log = print,
  ratios: Mapping[int, float] | None = None,
  base_steps: int = STEPS,
  bases: Mapping[int, Mapping] | None = None,
  verify_step: int = VERIFY_STEP,
  resamples: int | None = None,
) -> dict:
  """Trains what is missing, measures each seed, writes OUT/result.json and OUT/result.md.

  Args:
    ratios, base_steps, bases: a stand-in's exposure ratios, Temporal's steps and committed
      numbers (tests); default: W3's, 2800 and the committed files.
    train: False measures only the seeds already trained (`--report_only`).
  """
  from research.lever_verdict import head_commit, write_result
  from research.levers.levers import training_record
  from tlm.infer.trained_models import expert_dir
  from tlm.miniature import parallel

  commit = head_commit()  # at the start: the code this run imports, whatever lands meanwhile
  plans = [plan(s, root, overrides, (ratios or {}).get(s), base_steps) for s in seeds]
  bases = {s: (bases or {}).get(s) or committed(s) for s in seeds}
  minutes: dict = {}
  todo = [p for p in plans if not os.path.isfile(_seed_file(p))]
  if todo and train:
    workers = plans[0].temporal.reproduce.workers
    parallel.enable_compilation_cache(_cache_dir(plans[0]))
    t = time.time()
    parallel.run_jobs(start_jobs(todo), workers, log)
    minutes["starts"] = (time.time() - t) / 60
    t = time.time()
    parallel.run_jobs(training_jobs(todo, verify, verify_step), workers, log)
    minutes["training"] = (time.time() - t) / 60
  measured = []
  for p in plans:
    path = _seed_file(p)
    if os.path.isfile(path):
      with open(path, encoding="utf-8") as f:
        measured.append(json.load(f))
      continue
    trained = all(
      training_record(expert_dir(p.dirs["yearly"], y)).get("step") == p.steps
      for y in p.yearly.data.train_years
    )
    if not trained:
      log(f"seed {p.seed}: experts not trained; left out")
      continue
    meas = measure_seed(p, bases[p.seed], p.seed in verify, log, verify_step)
    write_json(path, meas)
    measured.append(meas)
  if full and train:
    jobs = [
      parallel.Job(
        f"seed {p.seed} tiny_temporal to {base_steps}",
        "train",
        ((configs.replace(p.temporal, "train.steps", base_steps), p.dirs["temporal"]),),
        _cache_dir(p),
      )
      for p in plans
      if any(m["seed"] == p.seed and not m.get("temporal_full") for m in measured)
    ]
    t = time.time()
    parallel.run_jobs(jobs, plans[0].temporal.reproduce.workers, log)
    minutes["temporal_full"] = (time.time() - t) / 60
    for p in plans:
      for m in measured:
        if m["seed"] == p.seed and not m.get("temporal_full"):
          m["temporal_full"] = temporal_full(p, m, log, resamples)
          write_json(_seed_file(p), m)
  result = {
    "preregistration": "research/c3/PREREGISTRATION.md",
    "commit": commit,
    "base_steps": base_steps,
    "seeds": measured,
    "verdict": verdict(measured, list(seeds)),
    "wall_minutes_this_invocation": minutes,
  }
  write_result(out, result, markdown(result), log)
  return result


def main() -> None:
  from tlm import host_memory

  host_memory.restart_with_hugepages()  # before jax starts: see tlm/host_memory.py
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--root", default=os.path.join("runs", "c3"))
  ap.add_argument("--seeds", default="0,1,2")
  ap.add_argument("--out", default=os.path.join(REPO, "research", "c3"))
  ap.add_argument("--verify_seeds", default="0")
  ap.add_argument("--temporal_full", action="store_true")
  ap.add_argument("--report_only", action="store_true")
  args = ap.parse_args()
  start = time.time()
  run(
    [int(s) for s in args.seeds.split(",")],
    args.root,
    args.out,
    verify=[int(s) for s in args.verify_seeds.split(",") if s],
    full=args.temporal_full,
    train=not args.report_only,
  )
  print(f"wall clock {(time.time() - start) / 60:.1f} min")


if __name__ == "__main__":
  main()
