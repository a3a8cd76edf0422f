"""C13 at a lower adaptation learning rate: does Temporal reach the retrained model when it
forgets less?

  nice -n 10 python -m research.c13.adapt_lr --root=runs/c3 --seeds=0,1,2 --out=research/c13

Settings, checks, prediction and criterion: research/c13/PREREGISTRATION.md (committed before
this code and any run). Per seed S: the start and Temporal of the reproduction's code
(`research.c3.exposure.plan`: ROOT/seed=S/t5 and ROOT/seed=S/temporal, so the C3 run's start and
Temporal are reused, a Temporal short of 2800 steps is trained on), then the default protocol's
alpha-0.5 adaptation to 2019 (480 steps, evaluated at five points) at the default learning rate
(the control) and at the lever's, each in ROOT/seed=S/c13/lr=L. C13's failing component, the
best over the curve of min(2019-20, 2010-18) F1 above the committed retrained model, is set
against the committed one.

Writes ROOT/seed=S/c13_seed.json per seed (a rerun reads it back; an adaptation resumes from
its checkpoint) and OUT/result.json, OUT/result.md.
"""

import argparse
import concurrent.futures as cf
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Mapping, Sequence

from research.protocol2800 import OVERRIDES_2800
from research.protocol2800 import STEPS_2800 as STEPS  # the studies replay the 2800-step protocol
from tlm import configs
from tlm.configs.years import FUTURE_SLICE, TRAIN_SLICE
from tlm.errors import DataError
from tlm.files import write_json

Log = Callable[[str], None]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMITTED = os.path.join(REPO, "docs", "results", "preregistered")
CONTROL_LR, LEVER_LR = 3e-2, 3e-3
ALPHA = 0.5
COMPONENT = "temporal alpha 0.5 reaches retrained (2019-20 and 2010-18)"
SLICES = (FUTURE_SLICE, TRAIN_SLICE)
TOLERANCE = 1e-9


def reaches_retrained(curve: Mapping, retrained: Mapping, limit: int) -> float:
  """C13's component (`tlm.miniature.figure_claims`): the best, over the curve's steps below the
  retrained model's `limit`, of min over 2019-20 and 2010-18 of F1 - retrained F1, in points."""
  return max(
    min(100.0 * (r[k] - retrained[k]) for k in SLICES) for s, r in curve.items() if int(s) < limit
  )


def committed(seed: int, root: str = COMMITTED) -> dict:
  """The committed adaptation of a seed's Temporal (adapt.json) and C13's component as
  summary.json reports it; DataError unless the component recomputed from adapt.json is it."""
  base = os.path.join(root, f"reproduce_seed{seed}")
  with open(os.path.join(base, "adapt.json"), encoding="utf-8") as f:
    t = json.load(f)["tiny_temporal"]
  with open(os.path.join(base, "summary.json"), encoding="utf-8") as f:
    c13 = next(c for c in json.load(f)["claims"] if c["id"] == "C13")
  reported = next(c["margin_mean"] for c in c13["components"] if c["name"] == COMPONENT)
  curve = {int(s): r for s, r in t["curve"].items()}
  component = reaches_retrained(curve, t["retrained"], t["retrained_steps"])
  if abs(component - reported) > TOLERANCE:
    raise DataError(f"seed {seed}: adapt.json gives {component}, summary.json {reported}", base)
  return {
    "before": t["before"],
    "curve": curve,
    "retrained": t["retrained"],
    "retrained_steps": t["retrained_steps"],
    "component": reported,
  }


def seed_plan(
  seed: int, root: str, overrides: Sequence[str], protocol: Sequence[str] = OVERRIDES_2800
):
  """A seed's configs and directories (`research.c3.exposure.plan`, its experts at full steps)
  under `protocol` (the 2800-step protocol's overrides; () for the current default)."""
  from research.c3 import exposure

  return exposure.plan(seed, root, overrides, ratio=1.0, protocol=protocol)


def _lr_dir(p, lr: float) -> str:
  return os.path.join(p.work, "c13", f"lr={lr:g}")


def _eval_data(config):
  import dataclasses

  from tlm.eval import experiments

  return dataclasses.replace(experiments.eval_data(config), news={})


def _slices(config, path: str, data, label: str, log: Log) -> dict:
  from tlm.eval import adaptation, experiments
  from tlm.infer.trained_models import load_model

  result = experiments.evaluate_model(load_model(config, path), data, log, label)
  return adaptation.slices(result, config.adapt.new_year)


def adapt_curve(
  seed: int,
  root: str,
  overrides: Sequence[str],
  lr: float,
  steps: int,
  protocol: Sequence[str] = OVERRIDES_2800,
) -> dict:
  """One seed's alpha-0.5 adaptation of Temporal (at `steps`) with learning rate `lr`, trained in
  the protocol's evaluation chunks: {step: slices}. Runs in a worker process."""
  from tlm.eval import adaptation, during_training
  from tlm.miniature import parallel, reproduce
  from tlm.train.loop import train

  p = seed_plan(seed, root, overrides, protocol)
  parallel.enable_compilation_cache(reproduce.compilation_cache_dir(p.temporal))
  base = configs.replace(p.temporal, "train.steps", steps)
  config = configs.replace(base, "train.learning_rate", float(lr))
  path, a = _lr_dir(p, lr), base.adapt
  log = parallel.job_log(path)
  data, curve = _eval_data(base), {}
  for k in range(1, a.eval_points + 1):
    at = round(a.steps * k / a.eval_points)
    adapted = adaptation.adapted_config(config, ALPHA, p.dirs["temporal"], at)
    train(adapted, path, evaluators=during_training.evaluators(adapted), log=log)
    curve[at] = _slices(adapted, path, data, f"seed {seed} lr={lr:g} step {at}", log)
  return curve


def _close(a, b) -> bool:
  return a is not None and b is not None and abs(float(a) - float(b)) <= TOLERANCE


def measure_seed(seed: int, base: Mapping, before: Mapping, curves: Mapping[float, Mapping]):
  """One seed's numbers: V1 (Temporal before adaptation), V2 (the control's curve), the
  component at each rate and its change."""
  limit = base["retrained_steps"]
  control, lever = curves[CONTROL_LR], curves[LEVER_LR]
  old = base["curve"]
  v2 = all(_close(control.get(s, {}).get(k), old[s][k]) for s in old for k in SLICES) and set(
    control
  ) == set(old)
  out = {
    "seed": seed,
    "V1": {
      "f1": before[TRAIN_SLICE],
      "committed": base["before"][TRAIN_SLICE],
      "ok": _close(before[TRAIN_SLICE], base["before"][TRAIN_SLICE]),
    },
    "V2": {"ok": v2},
    "committed_component": base["component"],
    "control_component": reaches_retrained(control, base["retrained"], limit),
    "new_margin": reaches_retrained(lever, base["retrained"], limit),
    "retrained": {k: base["retrained"][k] for k in SLICES},
    "before": {k: before[k] for k in (*SLICES, "2019") if k in before},
    "curves": {f"{lr:g}": {str(s): c[s] for s in sorted(c)} for lr, c in curves.items()},
  }
  out["change"] = out["new_margin"] - base["component"]
  return out


def verdict(seeds: Sequence[Mapping], planned: Sequence[int]) -> dict:
  """The pre-registered criterion (`research.lever_verdict.h_and_e`) on the measured seeds."""
  from research.lever_verdict import h_and_e

  return h_and_e(
    [s["change"] for s in seeds],
    [s["new_margin"] for s in seeds],
    seeds=[s["seed"] for s in seeds],
    planned=planned,
    checks_ok=all(s["V1"]["ok"] and s["V2"]["ok"] for s in seeds),
    outcomes={
      "both": "fails for a measured reason: the miniature's learning rate",
      "h_only": "the learning rate accounts for part of the shortfall",
      "checks": "V1 or V2",
    },
  )


def _ci(ci) -> str:
  return "-" if ci is None else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"


def _ok(check: Mapping) -> str:
  return "ok" if check["ok"] else "FAILED"


def markdown(result: Mapping) -> str:
  v = result["verdict"]
  lines = [
    "# C13 at a lower adaptation learning rate: measured",
    "",
    f"Pre-registration: `{result['preregistration']}`. Code at `{result['commit']}`.",
    "",
    "| seed | V1 | V2 | component committed | control (3e-2) | lever (3e-3) | change D |",
    "|---|---|---|---|---|---|---|",
  ]
  for s in result["seeds"]:
    lines.append(
      f"| {s['seed']} | {_ok(s['V1'])} | {_ok(s['V2'])}"
      f" | {s['committed_component']:+.2f} | {s['control_component']:+.2f}"
      f" | {s['new_margin']:+.2f} | {s['change']:+.2f} |"
    )
  lines += [
    "",
    f"Change D: mean {v['change_mean']:+.2f}, t-interval {_ci(v['change_t95'])}. "
    f"Component at 3e-3: mean {v['new_margin_mean']:+.2f}, t-interval {_ci(v['new_margin_t95'])}.",
    "",
    f"H: {v['H']}. E: {v['E']}. **Outcome: {v['outcome']}.**",
    "",
    "Per step (F1 points above the committed retrained model, 2019-20 / 2010-18):",
    "",
  ]
  for s in result["seeds"]:
    for lr, curve in s["curves"].items():
      cells = [
        f"{st}: {100 * (r[FUTURE_SLICE] - s['retrained'][FUTURE_SLICE]):+.2f} / "
        f"{100 * (r[TRAIN_SLICE] - s['retrained'][TRAIN_SLICE]):+.2f}"
        for st, r in curve.items()
      ]
      lines.append(f"- seed {s['seed']}, lr {lr}: " + "; ".join(cells))
  return "\n".join(lines) + "\n"


def run(
  seeds: Sequence[int],
  root: str,
  out: str,
  overrides: Sequence[str] = (),
  *,
  log: Log = print,
  bases: Mapping[int, Mapping] | None = None,
  steps: int = STEPS,
  workers: int = 2,
) -> dict:
  """Trains what is missing, measures each seed, writes OUT/result.json and OUT/result.md.

  Args:
    bases: a stand-in's committed numbers (tests); default: the committed files.
    steps: Temporal's steps (the default protocol's 2800).
  """
  from research.c3 import exposure
  from research.lever_verdict import head_commit, write_result
  from tlm.miniature import parallel, reproduce

  commit = head_commit()  # at the start: the code this run imports, whatever lands meanwhile
  plans = {s: seed_plan(s, root, overrides) for s in seeds}
  bases = {s: (bases or {}).get(s) or committed(s) for s in seeds}
  todo = [s for s in seeds if not os.path.isfile(os.path.join(plans[s].work, "c13_seed.json"))]
  minutes: dict = {}
  if todo:
    first = plans[todo[0]]
    parallel.enable_compilation_cache(reproduce.compilation_cache_dir(first.temporal))
    t = time.time()
    jobs = exposure.start_jobs([plans[s] for s in todo])
    parallel.run_jobs(jobs, workers, log)
    jobs = [
      parallel.Job(
        f"seed {s} tiny_temporal to {steps}",
        "train",
        ((configs.replace(plans[s].temporal, "train.steps", steps), plans[s].dirs["temporal"]),),
        reproduce.compilation_cache_dir(plans[s].temporal),
      )
      for s in todo
    ]
    parallel.run_jobs(jobs, workers, log)
    minutes["temporal"] = (time.time() - t) / 60
    t = time.time()
    pairs = [(s, lr) for s in todo for lr in (CONTROL_LR, LEVER_LR)]
    curves = {}
    if workers <= 1:
      for pr in pairs:
        curves[pr] = adapt_curve(pr[0], root, list(overrides), pr[1], steps)
    else:
      spawn = multiprocessing.get_context("spawn")
      with cf.ProcessPoolExecutor(workers, mp_context=spawn) as pool:
        futures = {
          pr: pool.submit(adapt_curve, pr[0], root, list(overrides), pr[1], steps) for pr in pairs
        }
        for pr, fut in futures.items():
          curves[pr] = fut.result()
          log(f"done seed {pr[0]} adaptation at lr {pr[1]:g}")
    minutes["adaptation"] = (time.time() - t) / 60
    for s in todo:
      p = plans[s]
      config = configs.replace(p.temporal, "train.steps", steps)
      before = _slices(config, p.dirs["temporal"], _eval_data(config), f"seed {s} Temporal", log)
      meas = measure_seed(
        s, bases[s], before, {lr: curves[(s, lr)] for lr in (CONTROL_LR, LEVER_LR)}
      )
      write_json(os.path.join(p.work, "c13_seed.json"), meas)
  measured = []
  for s in seeds:
    with open(os.path.join(plans[s].work, "c13_seed.json"), encoding="utf-8") as f:
      measured.append(json.load(f))
  result = {
    "preregistration": "research/c13/PREREGISTRATION.md",
    "commit": commit,
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
  ap.add_argument("--out", default=os.path.join(REPO, "research", "c13"))
  args = ap.parse_args()
  start = time.time()
  run([int(s) for s in args.seeds.split(",")], args.root, args.out)
  print(f"wall clock {(time.time() - start) / 60:.1f} min")


if __name__ == "__main__":
  main()
