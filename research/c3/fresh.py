"""C3's exposure lever on fresh seeds, under one of two registrations (`REGISTRATIONS`).

  nice -n 10 python -m research.c3.fresh --root=runs/c3_fresh --out=research/c3
  python -m research.c3.fresh --registration=seed5 --root=runs/c3_seed5 --out=research/c3

"fresh" (research/c3/PREREGISTRATION_fresh.md) is seeds 3 and 4, registered and not run (seed 4's
committed models cannot be regenerated: REPORT_fresh.md); "seed5"
(research/c3/PREREGISTRATION_seed5.md) is seeds 3 and 5, seed 5's default numbers from its own
registered run in docs/results/fresh5/. The lever is the same under both.

Settings, checks, prediction and criterion: research/c3/PREREGISTRATION_fresh.md (committed
before this code, any model and the seeds' exposure ratios). Per seed S: W3's median exposure
ratio r_S by `research.world.measure`; the start and the nine Yearly experts at round(2800 x r_S)
steps by `research.c3.exposure` (its plan, jobs and `measure_seed`), in ROOT/seed=S; C3's new
margin against the committed fresh Temporal (the seed's per_query.json under
docs/results/), with the within-seed paired pair-bootstrap interval; check V3 trains a
copy of the 2010 expert on to 2800 steps and compares it query by query with the committed
expert. The verdict pools seeds 0-2 (from research/c3/result.json) with the registration's two.

Writes ROOT/seed=S/fresh_seed.json per seed (a rerun reads it back; trainings resume) and
OUT/result_<name>.json, OUT/result_<name>.md (`Registration.name`).
"""

import argparse
import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from research.committed import read_json
from research.protocol2800 import STEPS_2800 as STEPS  # the studies replay the 2800-step protocol
from tlm import configs
from tlm.configs.years import TRAIN_YEARS
from tlm.errors import DataError
from tlm.files import write_json

Log = Callable[[str], None]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRESH = os.path.join(REPO, "docs", "results", "fresh")
FIRST = os.path.join(REPO, "research", "c3", "result.json")
SEEDS = (3, 4)
CHECK_YEAR = 2010
TOLERANCE = 1e-9


@dataclasses.dataclass(frozen=True)
class Registration:
  """What a registration fixes: its file, its seeds, where each seed's committed default
  numbers are, and the name of the result it writes."""

  file: str
  seeds: tuple[int, ...]
  committed: Mapping[int, str]  # seed -> the directory holding seed=S/
  name: str
  title: str


REGISTRATIONS = {
  "fresh": Registration(
    "research/c3/PREREGISTRATION_fresh.md",
    SEEDS,
    {3: FRESH, 4: FRESH},
    "result_fresh",
    "C3 at equal exposure on the fresh seeds",
  ),
  "seed5": Registration(
    "research/c3/PREREGISTRATION_seed5.md",
    (3, 5),
    {3: FRESH, 5: os.path.join(REPO, "docs", "results", "fresh5")},
    "result_seed5",
    "C3 at equal exposure on seeds 3 and 5",
  ),
}


def committed_fresh(seed: int, root: str = FRESH, summary: str | None = None) -> dict:
  """The committed fresh seed: Temporal's 2010-18 records and F1, C3's margin and pool, the
  Yearly ensemble's per-query F1 and the CHECK_YEAR expert's on every query.

  ROOT/seed=S holds the seed's per_query.json; C3 is read from `summary` (a summary.json holding
  the seed; default ROOT/seed=S/summary.json)."""
  base = os.path.join(root, f"seed={seed}")
  pq = read_json(os.path.join(base, "per_query.json"))
  summary = summary or os.path.join(base, "summary.json")
  with open(summary, encoding="utf-8") as f:
    per_seed = next(c for c in json.load(f)["claims"] if c["id"] == "C3")["per_seed"]
  c3 = next((p for p in per_seed if p["seed"] == seed), None)
  if c3 is None:
    raise DataError(f"no C3 record of seed {seed}", summary)
  cols = {m: pq["models"][m]["templama"] for m in ("temporal", "yearly")}
  if cols["temporal"]["id"] != cols["yearly"]["id"]:
    raise DataError("Temporal and Yearly columns are not aligned", base)
  keep = [i for i, y in enumerate(cols["temporal"]["year"]) if y in TRAIN_YEARS]
  t = cols["temporal"]
  records = [{k: t[k][i] for k in ("id", "year", "subject", "relation", "f1")} for i in keep]
  temporal_f1 = float(100.0 * np.mean([t["f1"][i] for i in keep]))
  yearly_f1 = float(100.0 * np.mean([cols["yearly"]["f1"][i] for i in keep]))
  pool = c3["pools"]["TempLAMA 2010-18"]
  experts = pq["experts"]
  return {
    "temporal_f1": temporal_f1,
    "temporal_records": records,
    "yearly_f1": yearly_f1,
    "c3_margin": c3["margin"],
    "c3_ci95": c3["ci95"],
    "queries": pool["items"],
    "pairs": pool["clusters"],
    "check_expert": dict(zip(experts["id"], experts["f1"][str(CHECK_YEAR)])),
  }


def exposure_of(seed: int) -> dict:
  """W3 of a seed by research.world.measure's code (its world, its test split)."""
  from research.world import measure

  return measure.measure(seed)["W3_exposure"]


def check_expert(p, base: Mapping, log: Log, steps: int = STEPS, pin: bool = False) -> dict:
  """V3: the CHECK_YEAR expert trained on from p.steps to `steps` in a copy of its workdir,
  scored on every TempLAMA test query, against the committed expert's per-query F1. With `pin`
  the training runs in a pinned worker (`tlm.miniature.parallel`), as the pinned default's did."""
  from tlm.configs import expert_runs
  from tlm.eval import during_training, experiments
  from tlm.eval.results import templama_records
  from tlm.infer.trained_models import expert_dir, load_expert
  from tlm.miniature import parallel
  from tlm.train.loop import train

  check = os.path.join(p.work, "check")
  src, dst = expert_dir(p.dirs["yearly"], CHECK_YEAR), expert_dir(check, CHECK_YEAR)
  if not os.path.isdir(dst):
    shutil.copytree(src, dst + ".tmp")
    os.replace(dst + ".tmp", dst)
  full = configs.replace(p.yearly, "train.steps", steps)
  config, _ = next((c, d) for c, d in expert_runs(full, check) if c.data.year == CHECK_YEAR)
  if pin:
    job = parallel.Job(f"V3: {config.name} {CHECK_YEAR} to {steps}", "train", ((config, dst),))
    parallel.run_jobs([job], 1, log, pin=True)
  else:
    train(config, dst, evaluators=during_training.evaluators(config), log=log)
  data = dataclasses.replace(experiments.eval_data(p.temporal), news={})
  scored = experiments.score(load_expert(full, check, CHECK_YEAR), data)
  got = {r["id"]: r["f1"] for r in templama_records(scored)}
  want = base["check_expert"]
  same = set(got) == set(want) and all(abs(got[i] - want[i]) <= TOLERANCE for i in want)
  differ = sum(1 for i in want if i in got and abs(got[i] - want[i]) > TOLERANCE)
  return {"year": CHECK_YEAR, "steps": steps, "queries": len(want), "differ": differ, "ok": same}


def measure_fresh(
  p, base: Mapping, w3: Mapping, log: Log, steps: int = STEPS, pin: bool = False
) -> dict:
  """A seed's lever numbers, its experts trained: Y_new, M_new and D (`exposure.measure_seed`),
  checks V1-V3 against the committed `base` (`committed_fresh`), the within-seed interval."""
  from research.c3 import exposure

  meas = exposure.measure_seed(p, base, verify=False, log=log)
  meas["W3"] = dict(w3)
  meas["V2"] = {
    "margin_from_per_query": base["temporal_f1"] - base["yearly_f1"],
    "committed": base["c3_margin"],
    "ok": abs(base["temporal_f1"] - base["yearly_f1"] - base["c3_margin"]) <= TOLERANCE,
  }
  meas["V3"] = check_expert(p, base, log, steps, pin)
  meas["paired"] = exposure.paired_interval(base["temporal_records"], meas["records"], 1000)
  meas["committed"] = {
    k: v for k, v in base.items() if k not in ("temporal_records", "check_expert")
  }
  return meas


def verdict(first: Sequence[Mapping], fresh: Sequence[Mapping]) -> dict:
  """R and E5 over the five seeds (first: seeds 0-2 of result.json; fresh: this run's)."""
  from tlm.miniature import stats

  checks = all(s["V1"]["ok"] and s["V3"]["ok"] and s["V2"]["ok"] for s in fresh)
  d = [s["change"] for s in (*first, *fresh)]
  m = [s["new_margin"] for s in (*first, *fresh)]
  d_t95, m_t95 = stats.t_interval(d), stats.t_interval(m)
  r = all(s["change"] > 0 for s in fresh) and d_t95 is not None and d_t95[0] > 0
  e5 = all(s["new_margin"] > 0 for s in fresh) and m_t95 is not None and m_t95[0] > 0
  if not checks:
    outcome = "no verdict: a check failed; C3 stays not explained"
  elif r and e5:
    outcome = "fails for a measured reason: the experts' exposure advantage"
  elif r:
    outcome = "exposure accounts for part of the gap; C3 stays not explained"
  else:
    outcome = "the replication does not support the candidate; C3 stays not explained"
  return {
    "seeds": [s["seed"] for s in (*first, *fresh)],
    "checks_ok": checks,
    "change": d,
    "change_mean": float(np.mean(d)),
    "change_t95": d_t95,
    "new_margin": m,
    "new_margin_mean": float(np.mean(m)),
    "new_margin_t95": m_t95,
    "R": bool(r),
    "E5": bool(e5),
    "outcome": outcome,
  }


def _ci(ci) -> str:
  return "-" if ci is None else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"


def markdown(result: Mapping, title: str = REGISTRATIONS["fresh"].title) -> str:
  v = result["verdict"]
  lines = [
    f"# {title}: measured",
    "",
    f"Pre-registration: `{result['preregistration']}`. Code at `{result['commit']}`.",
    "",
    "| seed | r_S | steps | V1 | V2 | V3 | Yearly new | Temporal | M_old | M_new [95%] | D |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for s in result["fresh"]:
    lines.append(
      f"| {s['seed']} | {s['ratio']:.4f} | {s['steps']} | {s['V1']['ok']} | {s['V2']['ok']}"
      f" | {s['V3']['ok']} | {s['yearly']['f1']:.2f} | {s['committed']['temporal_f1']:.2f}"
      f" | {s['committed']['c3_margin']:+.2f} | {s['new_margin']:+.2f}"
      f" {_ci(s['paired']['ci95'])} | {s['change']:+.2f} |"
    )
  lines += [
    "",
    f"Seeds {v['seeds']}: D mean {v['change_mean']:+.2f}, t-interval {_ci(v['change_t95'])};"
    f" M_new mean {v['new_margin_mean']:+.2f}, t-interval {_ci(v['new_margin_t95'])}.",
    "",
    f"R: {v['R']}. E5: {v['E5']}. **Outcome: {v['outcome']}.**",
  ]
  return "\n".join(lines) + "\n"


def run(
  seeds: Sequence[int],
  root: str,
  out: str,
  *,
  workers: int = 2,
  log: Log = print,
  registration: Registration = REGISTRATIONS["fresh"],
) -> dict:
  from research.c3 import exposure
  from research.lever_verdict import head_commit, write_result
  from tlm.miniature import parallel

  commit = head_commit()  # at the start: the code this run imports
  start = time.time()
  w3 = {s: exposure_of(s) for s in seeds}
  plans = {s: exposure.plan(s, root, ratio=w3[s]["median_ratio"]) for s in seeds}
  todo = [s for s in seeds if not os.path.isfile(os.path.join(plans[s].work, "fresh_seed.json"))]
  if todo:
    parallel.run_jobs(exposure.start_jobs([plans[s] for s in todo]), workers, log)
    jobs = exposure.training_jobs([plans[s] for s in todo], verify=(), temporal_steps=STEPS)
    parallel.run_jobs(jobs, workers, log)
  for s in todo:
    meas = measure_fresh(plans[s], committed_fresh(s, registration.committed[s]), w3[s], log)
    write_json(os.path.join(plans[s].work, "fresh_seed.json"), meas)
  fresh = []
  for s in seeds:
    with open(os.path.join(plans[s].work, "fresh_seed.json"), encoding="utf-8") as f:
      fresh.append(json.load(f))
  with open(FIRST, encoding="utf-8") as f:
    first = json.load(f)["seeds"]
  result = {
    "preregistration": registration.file,
    "commit": commit,
    "fresh": fresh,
    "first": [{k: s[k] for k in ("seed", "change", "new_margin")} for s in first],
    "verdict": verdict(first, fresh),
    "wall_minutes": (time.time() - start) / 60,
    "load_average": list(os.getloadavg()),
  }
  write_result(out, result, markdown(result, registration.title), log, name=registration.name)
  return result


def main() -> None:
  from tlm import host_memory

  host_memory.restart_with_hugepages()  # before jax starts: see tlm/host_memory.py
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--root", default=os.path.join("runs", "c3_fresh"))
  ap.add_argument("--registration", choices=sorted(REGISTRATIONS), default="fresh")
  ap.add_argument("--seeds", default="", help="default: the registration's")
  ap.add_argument("--out", default=os.path.join(REPO, "research", "c3"))
  ap.add_argument("--workers", type=int, default=2)
  args = ap.parse_args()
  registration = REGISTRATIONS[args.registration]
  seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(registration.seeds)
  if sorted(seeds) != sorted(registration.seeds):
    ap.error(f"--seeds: {args.registration} is registered for seeds {registration.seeds}")
  run(seeds, args.root, args.out, workers=args.workers, registration=registration)


if __name__ == "__main__":
  main()
