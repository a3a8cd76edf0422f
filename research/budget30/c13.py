"""C13 at the 2000-step default: the learning-rate lever and the other parts' sampling intervals.

  python -m research.budget30.c13 --runs='runs/b30_s{seed}' --root=runs/b30_c13 \\
      --out=research/budget30

Settings, checks, predictions and criteria: research/budget30/PREREGISTRATION_c13.md (committed
before this code and any run of it). RUNS is each seed's `--mode=reproduce` workdir of the
2000-step default (RUNS/seed=S).

- Part L: the seed's Temporal (copied to ROOT/seed=S/temporal without its adaptations) adapted at
  alpha 0.5 at LEVER_LR by `research.c13.adapt_lr.adapt_curve` with the default's configs; the
  main part against the committed retrained model.
- Part N: the committed Uniform and Temporal, before and adapted at ALPHAS, scored again with
  per-item scores (ROOT/seed=S/scores/, read back by a rerun); each registered cell's interval
  by `research.c13.small_parts`.

Writes OUT/result_c13.json and OUT/result_c13.md.
"""

import argparse
import concurrent.futures as cf
import json
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable, Mapping

import numpy as np

from research.budget30.explanations import BUDGET30, STEPS, run_dir
from research.budget30.verdict import interval_text
from tlm import configs
from tlm.errors import DataError
from tlm.files import write_json

Log = Callable[[str], None]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGISTRATION = "research/budget30/PREREGISTRATION_c13.md"
SEEDS = (0, 1, 2, 6, 3)
LEVER_LR = 3e-3
ALPHAS = ("0.3", "0.5", "0.7")
MODELS = ("uniform", "temporal")
TOLERANCE = 1e-9
CELLS = {
  "N1": (0, "TempLAMA alpha 0.3: uniform loss - temporal loss"),
  "N2": (0, "news alpha 0.7: uniform gain on 2019"),
  "N3": (1, "TempLAMA alpha 0.5: uniform loss - temporal loss"),
  "N4": (1, "news alpha 0.5: uniform loss - temporal loss"),
  "N5": (2, "TempLAMA alpha 0.5: uniform loss - temporal loss"),
  "N6": (6, "TempLAMA alpha 0.3: uniform loss on 2010-18"),
  "N7": (6, "TempLAMA alpha 0.3: uniform loss - temporal loss"),
  "N8": (6, "TempLAMA alpha 0.5: uniform loss - temporal loss"),
  "N9": (6, "news alpha 0.3: uniform loss - temporal loss"),
  "N10": (6, "news alpha 0.5: uniform loss - temporal loss"),
  "N11": (3, "TempLAMA alpha 0.3: uniform loss - temporal loss"),
  "N12": (3, "TempLAMA alpha 0.5: uniform loss - temporal loss"),
}


def committed(seed: int, root: str = BUDGET30) -> dict:
  """A seed's committed adapt.json ({model: entry}) and C13's per-seed parts {name: margin};
  V0: the main part recomputed from adapt.json against summary.json's."""
  from research.c13.adapt_lr import COMPONENT, reaches_retrained

  with open(os.path.join(root, f"seed={seed}", "adapt.json"), encoding="utf-8") as f:
    raw = json.load(f)
  adapt = {m: raw[f"tiny_{m}"] for m in MODELS}
  with open(os.path.join(root, "summary.json"), encoding="utf-8") as f:
    c13 = next(c for c in json.load(f)["claims"] if c["id"] == "C13")
  per = next((p for p in c13["per_seed"] if p["seed"] == seed), None)
  if per is None:
    raise DataError(f"no C13 record of seed {seed}", os.path.join(root, "summary.json"))
  parts = {c["name"]: c["margin"] for c in per["components"]}
  t = adapt["temporal"]
  curve = {int(s): r for s, r in t["curve"].items()}
  main = reaches_retrained(curve, t["retrained"], t["retrained_steps"])
  return {
    "adapt": adapt,
    "parts": parts,
    "main": parts[COMPONENT],
    "V0": abs(main - parts[COMPONENT]) <= TOLERANCE,
  }


# ---- Part N: the committed models scored again, in workers -------------------------------------


def scores_path(root: str, seed: int, model: str, alpha: str | None) -> str:
  return os.path.join(root, f"seed={seed}", "scores", f"{model}_{alpha or 'before'}.json")


def score_one(seed: int, runs: str, root: str, model: str, alpha: str | None) -> str:
  """Scores a committed model (adapted at `alpha`, or before) as `adaptation.adapt` evaluates it,
  with per-item scores; returns the file written."""
  from research.c13.small_parts import score_model
  from tlm.infer.trained_models import saved_config

  out = scores_path(root, seed, model, alpha)
  if os.path.isfile(out):
    return out
  model_dir = os.path.join(run_dir(runs, seed), model)
  config = saved_config(model_dir)
  if config is None:
    raise DataError("no trained model (config.json)", model_dir)
  path = model_dir if alpha is None else os.path.join(model_dir, "adapt", f"alpha={alpha}")
  return score_model(config, path, out, (seed, model, alpha))


def measure_parts(seed: int, root: str, base: Mapping) -> dict:
  """V1-V3 and every part's margin and interval at ALPHAS (research.c13.small_parts)."""
  from research.c13 import small_parts as sp

  scores = {}
  for m in MODELS:
    for a in (None, *ALPHAS):
      with open(scores_path(root, seed, m, a), encoding="utf-8") as f:
        scores[(m, a)] = json.load(f)
  adapt = base["adapt"]
  v1 = all(sp.slices_equal(scores[(m, None)]["slices"], adapt[m]["before"]) for m in MODELS)
  v2 = all(
    sp.slices_equal(scores[(m, a)]["slices"], adapt[m]["alphas"][a]) for m in MODELS for a in ALPHAS
  )
  rows, v3 = {}, True
  for name, (values, pool) in sp.part_items(scores, ALPHAS).items():
    margin = float(np.mean(values))
    v3 = v3 and abs(margin - base["parts"][name]) <= TOLERANCE
    lo, hi = sp.interval(values, pool)
    rows[name] = {"margin": margin, "ci95": [lo, hi], "items": len(values)}
  return {"V1": v1, "V2": v2, "V3": v3, "parts": rows}


# ---- Part L: the lever ------------------------------------------------------------------------


def prepare_lever(seed: int, runs: str, root: str) -> dict:
  """The seed's Temporal copied (its adaptations left out) where adapt_curve's plan looks for it;
  V4: the plan's Temporal config is the committed one (the start's path and reproduce.seeds
  aside, as V0 of research.budget30.explanations)."""
  from research.budget30.explanations import V0_IGNORED, config_differences
  from research.c13.adapt_lr import seed_plan
  from tlm.infer.trained_models import saved_config

  p = seed_plan(seed, root, (), protocol=())
  src, dst = os.path.join(run_dir(runs, seed), "temporal"), p.dirs["temporal"]
  if not os.path.isdir(dst):
    ignore = lambda d, names: ["adapt"] if os.path.samefile(d, src) else []  # noqa: E731
    shutil.copytree(src, dst + ".tmp", ignore=ignore)
    os.replace(dst + ".tmp", dst)
  plan = configs.to_dict(configs.replace(p.temporal, "train.steps", STEPS))
  diffs = config_differences(plan, configs.to_dict(saved_config(dst)))
  return {"differences": diffs, "ok": all(k in V0_IGNORED for k in diffs)}


def lever_curve(seed: int, root: str) -> dict:
  """Part L's curve (`adapt_curve`), kept in ROOT/seed=S/lever_curve.json for a rerun."""
  from research.c13.adapt_lr import adapt_curve

  path = os.path.join(root, f"seed={seed}", "lever_curve.json")
  if not os.path.isfile(path):
    curve = adapt_curve(seed, root, [], LEVER_LR, STEPS, protocol=())
    write_json(path, {str(s): r for s, r in curve.items()})
  with open(path, encoding="utf-8") as f:
    return {int(s): r for s, r in json.load(f).items()}


# ---- the verdict ------------------------------------------------------------------------------


def judge(seeds: Mapping[int, Mapping]) -> dict:
  from tlm.miniature import stats

  ok = {s: all(m[k] for k in ("V0", "V1", "V2", "V3")) and m["V4"]["ok"] for s, m in seeds.items()}
  complete = all(ok.get(s) for s in SEEDS)
  d = [seeds[s]["change"] for s in SEEDS if s in seeds]
  r = [seeds[s]["lever_main"] for s in SEEDS if s in seeds]
  t95 = stats.t_interval(d)
  h = complete and all(x > 0 for x in d) and t95 is not None and t95[0] > 0
  e = complete and all(x > 0 for x in r)
  cells = {}
  for cell, (seed, name) in CELLS.items():
    row = seeds[seed]["parts"][name] if seed in seeds else None
    zero = row is not None and row["ci95"][0] <= 0.0 <= row["ci95"][1]
    cells[cell] = {"seed": seed, "part": name, **(row or {}), "contains_zero": zero}
  noise = complete and all(c["contains_zero"] for c in cells.values())
  if not complete:
    outcome = "no verdict: a seed is missing or failed a check"
  elif h and e and noise:
    outcome = (
      "fails for a measured reason: the learning rate (main part), sampling noise (the rest)"
    )
  else:
    left = ([] if h and e else ["the main part"]) + [
      c for c, v in cells.items() if not v["contains_zero"]
    ]
    outcome = "not explained at the default: " + ", ".join(left)
  return {
    "checks_ok": {str(s): v for s, v in ok.items()},
    "change": d,
    "change_t95": t95,
    "lever_main": r,
    "H": bool(h),
    "E": bool(e),
    "cells": cells,
    "outcome": outcome,
  }


def markdown(result: Mapping) -> str:
  j = result["judgement"]
  lines = [
    "# C13 at the 2000-step default: measured",
    "",
    f"Pre-registration: `{result['preregistration']}`. Code at `{result['commit']}`.",
    "",
    "| seed | V0 | V1 | V2 | V3 | V4 | main part committed | at 3e-3 | D |",
    "|---|---|---|---|---|---|---|---|---|",
  ]
  for s, m in result["seeds"].items():
    lines.append(
      f"| {s} | {m['V0']} | {m['V1']} | {m['V2']} | {m['V3']} | {m['V4']['ok']}"
      f" | {m['main']:+.2f} | {m['lever_main']:+.2f} | {m['change']:+.2f} |"
    )
  lines += [
    "",
    f"D: t-interval {interval_text(j['change_t95'])}. H: {j['H']}. E: {j['E']}.",
    "",
    "| cell | seed | part | margin | 95% interval | contains zero |",
    "|---|---|---|---|---|---|",
  ]
  for cell, c in j["cells"].items():
    lines.append(
      f"| {cell} | {c['seed']} | {c['part']} | {c.get('margin', float('nan')):+.2f}"
      f" | {interval_text(c.get('ci95'))} | {c['contains_zero']} |"
    )
  lines += ["", f"**Outcome: {j['outcome']}.**"]
  return "\n".join(lines) + "\n"


def run(runs: str, root: str, out: str, workers: int = 2, log: Log = print) -> dict:
  from research.c13.adapt_lr import reaches_retrained
  from research.lever_verdict import head_commit, write_result

  commit, start = head_commit(), time.time()
  v4 = {s: prepare_lever(s, runs, root) for s in SEEDS}
  spawn = multiprocessing.get_context("spawn")
  with cf.ProcessPoolExecutor(workers, mp_context=spawn) as pool:
    lever = {s: pool.submit(lever_curve, s, root) for s in SEEDS}
    jobs = [
      pool.submit(score_one, s, runs, root, m, a)
      for s in SEEDS
      for m in MODELS
      for a in (None, *ALPHAS)
    ]
    for fut in cf.as_completed(jobs):
      log(f"scored: {fut.result()}")
    curves = {s: f.result() for s, f in lever.items()}
  seeds = {}
  for s in SEEDS:
    base = committed(s)
    t = base["adapt"]["temporal"]
    m = measure_parts(s, root, base)
    m.update(V0=base["V0"], V4=v4[s], main=base["main"])
    m["lever_main"] = reaches_retrained(curves[s], t["retrained"], t["retrained_steps"])
    m["change"] = m["lever_main"] - base["main"]
    m["lever_curve"] = {str(k): v for k, v in curves[s].items()}
    seeds[s] = m
  result = {
    "preregistration": REGISTRATION,
    "commit": commit,
    "seeds": {str(s): m for s, m in seeds.items()},
    "judgement": judge(seeds),
    "wall_minutes": (time.time() - start) / 60,
  }
  write_result(out, result, markdown(result), log, name="result_c13")
  return result


def main() -> None:
  from tlm import host_memory

  host_memory.restart_with_hugepages()  # before jax starts: see tlm/host_memory.py
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--runs", default="runs/b30_s{seed}")
  ap.add_argument("--root", default=os.path.join("runs", "b30_c13"))
  ap.add_argument("--out", default=os.path.join(REPO, "research", "budget30"))
  args = ap.parse_args()
  run(args.runs, os.path.abspath(args.root), args.out)


if __name__ == "__main__":
  main()
