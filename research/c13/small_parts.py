"""C13's three small failing parts against the evaluation's paired sampling interval.

  nice -n 10 python -m research.c13.small_parts --root=runs/c13_parts --seeds=1,2 --out=research/c13

Settings, checks, prediction and criterion: research/c13/PREREGISTRATION_PARTS.md (committed
before this code and any model). Per seed S, by the reproduction's code and configs: the start
(ROOT/seed=S/t5), Uniform and Temporal at 2800 steps (ROOT/seed=S/uniform, .../temporal), each
adapted to 2019 at alpha 0.3 and 0.5 as `tlm.eval.adaptation.adapt` does it
(ROOT/seed=S/<model>/adapt/alpha=A), every model evaluated before and after with its per-item
scores kept. Each C13 "gain"/"loss" part at those alphas is then a mean over paired items, with
a 95% percentile interval that resamples (subject, relation) pairs (TempLAMA) or news examples.

Writes ROOT/seed=S/scores/<model>_<alpha or before>.json per evaluation (a rerun reads them back;
trainings resume from their checkpoints) and OUT/result_parts.json, OUT/result_parts.md.
"""

import argparse
import concurrent.futures as cf
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from research.protocol2800 import OVERRIDES_2800
from tlm.configs.years import SLICES, TRAIN_SLICE
from tlm.errors import DataError
from tlm.files import write_json

Log = Callable[[str], None]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMITTED = os.path.join(REPO, "docs", "results", "preregistered")
MODELS = ("uniform", "temporal")
ALPHAS = ("0.3", "0.5")
BENCHES = ("TempLAMA", "news")
NEW_YEAR = "2019"
TOLERANCE = 1e-9
# The pre-registered cells: (seed, C13 part).
CELLS = {
  "A": (1, "news alpha 0.3: uniform loss on 2010-18"),
  "B": (2, "TempLAMA alpha 0.5: uniform loss - temporal loss"),
  "C": (2, "news alpha 0.3: uniform loss - temporal loss"),
}


# ---- the models: the reproduction's configs ----------------------------------------------------


def model_configs(seed: int, root: str, overrides: Sequence[str] = ()) -> dict:
  """{"work", "t5": (config, dir), "uniform": (config, dir), "temporal": (config, dir)}."""
  from tlm.miniature import reproduce, starts

  work = os.path.join(os.path.abspath(root), f"seed={seed}")
  ov = list(OVERRIDES_2800) + list(overrides) + reproduce.seed_overrides(seed)
  t5_dir = starts.start_dirs(work)["t5"]
  out: dict = {"work": work, "t5": (starts.starting_configs(ov, work)["t5"], t5_dir)}
  for name, config in reproduce.reproduction_configs(ov).items():
    if name in MODELS:
      out[name] = (starts.from_start(config, t5_dir), os.path.join(work, name))
  return out


def train_models(seeds: Sequence[int], root: str, workers: int, log: Log) -> None:
  """The starts, then Uniform and Temporal of every seed (`--mode=reproduce`'s jobs)."""
  from tlm.miniature import parallel, reproduce

  plans = {s: model_configs(s, root) for s in seeds}
  cache = reproduce.compilation_cache_dir(plans[seeds[0]]["temporal"][0])
  for names in (("t5",), MODELS):
    jobs = [
      parallel.Job(f"seed {s} {plans[s][n][0].name}", "train", (plans[s][n],), cache)
      for s in seeds
      for n in names
    ]
    parallel.run_jobs(jobs, workers, log)


# ---- one evaluation, in a worker ---------------------------------------------------------------


def _alpha_dir(model_dir: str, alpha: str) -> str:
  return os.path.join(model_dir, "adapt", f"alpha={alpha}")


def scores_path(work: str, model: str, alpha: str | None) -> str:
  return os.path.join(work, "scores", f"{model}_{alpha or 'before'}.json")


def evaluate_one(seed: int, root: str, model: str, alpha: str | None) -> str:
  """Adapts `model` of `seed` at `alpha` as `adaptation.adapt` does (None: no adaptation),
  evaluates it as `adapt` does and writes its slices and per-item scores; returns the path."""
  from tlm.eval import adaptation, during_training
  from tlm.miniature import parallel, reproduce
  from tlm.train.loop import train

  plan = model_configs(seed, root)
  config, model_dir = plan[model]
  out = scores_path(plan["work"], model, alpha)
  if os.path.isfile(out):
    return out
  parallel.enable_compilation_cache(reproduce.compilation_cache_dir(config))
  path = model_dir
  if alpha is not None:
    a = config.adapt
    path = _alpha_dir(model_dir, alpha)
    log = parallel.job_log(path)
    points = max(1, a.eval_points) if float(alpha) == a.match_alpha else 1
    for k in range(1, points + 1):
      steps = round(a.steps * k / points)
      adapted = adaptation.adapted_config(config, float(alpha), model_dir, steps)
      train(adapted, path, evaluators=during_training.evaluators(adapted), log=log)
  else:
    log = parallel.job_log(os.path.join(plan["work"], "scores"))
  return score_model(config, path, out, (seed, model, alpha), log)


def score_model(config, path: str, out: str, key: tuple, log: Log = print) -> str:
  """Evaluates the model in `path` as `adaptation.adapt` does and writes OUT: its slices and its
  per-item TempLAMA and news scores, under `key` = (seed, model, alpha or None)."""
  from tlm.eval import adaptation, experiments
  from tlm.infer.trained_models import load_model
  from tlm.miniature import measurements

  seed, model, alpha = key
  data = experiments.eval_data(config)
  result = experiments.evaluate_model(load_model(config, path), data, log, f"{model} {alpha}")
  write_json(
    out,
    {
      "seed": seed,
      "model": model,
      "alpha": alpha,
      "slices": adaptation.slices(result, config.adapt.new_year),
      "templama": measurements.templama_columns(result),
      "news": measurements.news_columns(result),
    },
  )
  return out


def evaluate_all(seeds: Sequence[int], root: str, workers: int, log: Log) -> None:
  tasks = [(s, m, a) for s in seeds for m in MODELS for a in (None, *ALPHAS)]
  spawn = multiprocessing.get_context("spawn")
  with cf.ProcessPoolExecutor(workers, mp_context=spawn) as pool:
    futures = {pool.submit(evaluate_one, s, root, m, a): (s, m, a) for s, m, a in tasks}
    for fut in cf.as_completed(futures):
      log(f"scored {futures[fut]}: {fut.result()}")


# ---- the measurement -----------------------------------------------------------------------


def committed(seed: int, root: str = COMMITTED) -> tuple[dict, dict]:
  """The committed adapt.json of a seed ({model: its entry}) and C13's parts {name: margin}."""
  base = os.path.join(root, f"reproduce_seed{seed}")
  with open(os.path.join(base, "adapt.json"), encoding="utf-8") as f:
    raw = json.load(f)
  adapt = {m: raw[f"tiny_{m}"] for m in MODELS}
  with open(os.path.join(base, "summary.json"), encoding="utf-8") as f:
    c13 = next(c for c in json.load(f)["claims"] if c["id"] == "C13")
  return adapt, {c["name"]: c["margin_mean"] for c in c13["components"]}


def _flat(slices: Mapping) -> dict:
  out = {k: v for k, v in slices.items() if k != "news"}
  out.update({f"news {k}": v for k, v in (slices.get("news") or {}).items()})
  return out


def slices_equal(mine: Mapping, theirs: Mapping) -> bool:
  """Every slice of `theirs` (TempLAMA and news) equals `mine` within TOLERANCE."""
  a, b = _flat(mine), _flat(theirs)
  return set(a) == set(b) and all(
    (a[k] is None and b[k] is None)
    or (a[k] is not None and b[k] is not None and abs(a[k] - b[k]) <= TOLERANCE)
    for k in b
  )


def items(scores: Mapping, bench: str, years: Sequence[int]):
  """(item keys, F1 points of each item of `years`, Pool) of one evaluation: TempLAMA queries
  (by id, pairs as clusters) or news examples (in order, one by one)."""
  from tlm.miniature import claim_parts
  from tlm.miniature.stats import Pool

  if bench == "TempLAMA":
    c = scores["templama"]
    keep = np.isin(np.asarray(c["year"]), list(years))
    keys = tuple(np.asarray(c["id"])[keep].tolist())
    pairs = zip(np.asarray(c["subject"])[keep].tolist(), np.asarray(c["relation"])[keep].tolist())
    return keys, 100.0 * np.asarray(c["f1"], dtype=float)[keep], Pool.of(pairs, claim_parts.PAIR)
  c = scores["news"]
  year = np.asarray(c["year"])
  keep = np.isin(year, list(years))
  keys = tuple(zip(np.flatnonzero(keep).tolist(), year[keep].tolist()))
  f1 = 100.0 * np.asarray(c["f1"], dtype=float)[keep]
  return keys, f1, Pool.items(int(keep.sum()), claim_parts.NEWS_UNIT)


def part_items(scores: Mapping[tuple, Mapping], alphas: Sequence[str] = ALPHAS) -> dict:
  """{C13 part name: (per-item values, Pool)} at `alphas`, from {(model, alpha|None): scores}."""
  from tlm.miniature.figure_claims import ADAPT_ALPHA_LIMIT

  out = {}
  for bench in BENCHES:
    for alpha in alphas:
      per = {}
      for years, label in (((int(NEW_YEAR),), "new"), (SLICES[TRAIN_SLICE], "old")):
        got = {m: {a: items(scores[(m, a)], bench, years) for a in (None, alpha)} for m in MODELS}
        keys = {x[0] for m in got.values() for x in m.values()}
        if len(keys) != 1:
          raise DataError(f"{bench} {label}: the evaluations scored different items")
        pool = got[MODELS[0]][None][2]
        per[label] = ({m: (got[m][None][1], got[m][alpha][1]) for m in MODELS}, pool)
      (new, new_pool), (old, old_pool) = per["new"], per["old"]
      tag = f"{bench} alpha {alpha}"
      gain = {m: new[m][1] - new[m][0] for m in MODELS}
      loss = {m: old[m][0] - old[m][1] for m in MODELS}
      out[f"{tag}: uniform gain on 2019"] = (gain["uniform"], new_pool)
      out[f"{tag}: uniform loss on 2010-18"] = (loss["uniform"], old_pool)
      out[f"{tag}: temporal gain on 2019"] = (gain["temporal"], new_pool)
      if float(alpha) <= ADAPT_ALPHA_LIMIT:
        out[f"{tag}: uniform loss - temporal loss"] = (loss["uniform"] - loss["temporal"], old_pool)
  return out


def interval(values: np.ndarray, pool) -> tuple[float, float]:
  """The 95% percentile interval of the mean of `values`, resampling `pool`'s clusters."""
  from tlm.miniature import stats

  return stats.hierarchical_bootstrap(
    [lambda d: float(np.mean(stats.take(values, d["p"])))], [{"p": pool}]
  )


def load_scores(work: str) -> dict:
  out = {}
  for m in MODELS:
    for a in (None, *ALPHAS):
      with open(scores_path(work, m, a), encoding="utf-8") as f:
        out[(m, a)] = json.load(f)
  return out


def measure_seed(seed: int, scores: Mapping, adapt: Mapping, parts: Mapping) -> dict:
  """One seed's checks V1-V3 and every part's margin and interval."""
  v1 = all(slices_equal(scores[(m, None)]["slices"], adapt[m]["before"]) for m in MODELS)
  v2 = all(
    slices_equal(scores[(m, a)]["slices"], adapt[m]["alphas"][a]) for m in MODELS for a in ALPHAS
  )
  rows, v3 = {}, True
  for name, (values, pool) in part_items(scores).items():
    margin = float(np.mean(values))
    same = abs(margin - parts[name]) <= TOLERANCE
    v3 = v3 and same
    lo, hi = interval(values, pool)
    rows[name] = {
      "margin": margin,
      "committed": parts[name],
      "ci95": [lo, hi],
      "half_width": (hi - lo) / 2,
      "items": len(values),
      "clusters": pool.n_clusters,
      "unit": pool.unit,
    }
  return {"seed": seed, "V1": v1, "V2": v2, "V3": v3, "parts": rows}


def judge(seeds: Mapping[int, Mapping]) -> dict:
  """The pre-registered criterion, cell by cell."""
  checks = all(s["V1"] and s["V2"] and s["V3"] for s in seeds.values())
  cells = {}
  for cell, (seed, name) in CELLS.items():
    row = seeds[seed]["parts"][name]
    lo, hi = row["ci95"]
    cells[cell] = {
      "seed": seed,
      "part": name,
      "margin": row["margin"],
      "ci95": row["ci95"],
      "contains_zero": lo <= 0.0 <= hi,
      "class": (
        "fails within the evaluation's sampling noise"
        if lo <= 0.0 <= hi
        else "not explained (a reversal the evaluation resolves)"
      ),
    }
  if not checks:
    outcome = "void: a check failed"
  elif all(c["contains_zero"] for c in cells.values()):
    outcome = "all three cells fail within the evaluation's sampling noise"
  else:
    outcome = "not all: see the cells"
  return {"checks_ok": checks, "cells": cells, "outcome": outcome}


def markdown(result: Mapping) -> str:
  j = result["judgement"]
  lines = [
    "# C13's small parts against the evaluation's sampling interval: measured",
    "",
    f"Pre-registration: `{result['preregistration']}`. Code at `{result['commit']}`.",
    "",
    "| seed | V1 (before = committed) | V2 (adapted = committed) | V3 (parts = committed) |",
    "|---|---|---|---|",
  ]
  for s in result["seeds"]:
    lines.append(f"| {s['seed']} | {s['V1']} | {s['V2']} | {s['V3']} |")
  lines += ["", "| cell | seed | part | margin | 95% interval | class |"]
  lines += ["|---|---|---|---|---|---|"]
  for cell, c in j["cells"].items():
    lo, hi = c["ci95"]
    lines.append(
      f"| {cell} | {c['seed']} | {c['part']} | {c['margin']:+.3f} | [{lo:+.2f}, {hi:+.2f}]"
      f" | {c['class']} |"
    )
  lines += ["", f"**Outcome: {j['outcome']}.**", ""]
  lines += ["Every part at alphas 0.3 and 0.5 (description):", ""]
  lines += ["| seed | part | margin | 95% interval | half-width | items (clusters) |"]
  lines += ["|---|---|---|---|---|---|"]
  for s in result["seeds"]:
    for name, r in s["parts"].items():
      lo, hi = r["ci95"]
      lines.append(
        f"| {s['seed']} | {name} | {r['margin']:+.3f} | [{lo:+.2f}, {hi:+.2f}]"
        f" | {r['half_width']:.2f} | {r['items']} ({r['clusters']}) |"
      )
  return "\n".join(lines) + "\n"


def run(
  seeds: Sequence[int], root: str, out: str, *, commit: str = "", minutes: float | None = None
) -> dict:
  """Measures every seed from its scores (`evaluate_all`), judges, writes OUT/result_parts.*"""
  from research.lever_verdict import head_commit, write_result

  commit = commit or head_commit()
  measured = []
  for s in seeds:
    adapt, parts = committed(s)
    work = model_configs(s, root)["work"]
    measured.append(measure_seed(s, load_scores(work), adapt, parts))
  result = {
    "preregistration": "research/c13/PREREGISTRATION_PARTS.md",
    "commit": commit,
    "seeds": measured,
    "judgement": judge({m["seed"]: m for m in measured}),
    "wall_minutes": minutes,
    "load_average": list(os.getloadavg()),
  }
  write_result(out, result, markdown(result), print, name="result_parts")
  return result


def main() -> None:
  from tlm import host_memory

  host_memory.restart_with_hugepages()  # before jax starts: see tlm/host_memory.py
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--root", default=os.path.join("runs", "c13_parts"))
  ap.add_argument("--seeds", default="1,2")
  ap.add_argument("--out", default=os.path.join(REPO, "research", "c13"))
  ap.add_argument("--workers", type=int, default=2)
  ap.add_argument("--train_only", action="store_true", help="train the models and stop")
  args = ap.parse_args()
  from research.lever_verdict import head_commit

  seeds = [int(s) for s in args.seeds.split(",")]
  commit = head_commit()  # at the start: the code this run imports
  start = time.time()
  train_models(seeds, args.root, args.workers, print)
  print(f"trained in {(time.time() - start) / 60:.1f} min")
  if args.train_only:
    return
  evaluate_all(seeds, args.root, args.workers, print)
  print(f"trained and scored in {(time.time() - start) / 60:.1f} min")
  run(seeds, args.root, args.out, commit=commit, minutes=(time.time() - start) / 60)


if __name__ == "__main__":
  main()
