"""C12, T5-CBQA-ft's entropy level against the finetuning's learning rate.

  nice -n 10 python -m research.c12.finetune_lr --root=runs/c12 --seeds=3,4 --out=research/c12

Settings, check, prediction and criterion: research/c12/PREREGISTRATION_lr.md (committed before
this code and any model). Per seed S, from the T5-CBQA the wording run trained
(ROOT/seed=S/cbqa): `tiny_cbqa_ft` at 3e-3 (the lever) and 1e-3 (described), 300 steps, in
ROOT/seed=S/cbqa_ft_lr=L; the control is the wording run's T5-CBQA-ft (3e-2). Each is probed on
the future-relations queries in their own wording and scored on TempLAMA 2010-18; C12's part
"cbqa_ft low" is recomputed by the claim's code on the committed per_query.json with only
T5-CBQA-ft's entropies replaced (`research.c12.wording`).

Writes ROOT/seed=S/finetune_lr.json per seed (a rerun reads it back) and OUT/result_lr.json,
OUT/result_lr.md.
"""

import argparse
import dataclasses
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence

from research.c12 import wording
from tlm import configs
from tlm.files import write_json

Log = Callable[[str], None]
CONTROL_LR, LEVER_LR, PAPER_LR = 3e-2, 3e-3, 1e-3
FALL = 1.0  # P1, nats
TOLERANCE = 1e-9


def arm_dir(work: str, lr: float) -> str:
  return (
    os.path.join(work, "cbqa_ft") if lr == CONTROL_LR else os.path.join(work, f"cbqa_ft_lr={lr:g}")
  )


def arm_config(seed: int, root: str, lr: float):
  _, models = wording.plan(seed, root)
  config, _ = models["cbqa_ft"]
  return config if lr == CONTROL_LR else configs.replace(config, "train.learning_rate", float(lr))


def train(seeds: Sequence[int], root: str, workers: int, log: Log) -> None:
  from tlm.miniature import parallel, reproduce

  jobs = []
  for s in seeds:
    work, models = wording.plan(s, root)
    cache = reproduce.compilation_cache_dir(models["t5"][0])
    for lr in (LEVER_LR, PAPER_LR):
      step = ((arm_config(s, root, lr), arm_dir(work, lr)),)
      jobs.append(parallel.Job(f"seed {s} tiny_cbqa_ft lr={lr:g}", "train", step, cache))
  parallel.run_jobs(jobs, workers, log)


def probe(seed: int, root: str, log: Log) -> dict:
  """{lr: {"entropy": future_entropy's result, "templama_2010_18": F1}} of each arm."""
  from tlm.configs.years import TRAIN_SLICE
  from tlm.data.future_relations import load_future_relations
  from tlm.eval import experiments
  from tlm.eval import future as future_probes
  from tlm.eval.results import templama_f1
  from tlm.infer.trained_models import load_model

  work, _ = wording.plan(seed, root)
  base = arm_config(seed, root, CONTROL_LR)
  data = experiments.eval_data(base)
  fr = load_future_relations(data.future_relations_dir)
  tl = dataclasses.replace(data, news={})
  out = {}
  for lr in (CONTROL_LR, LEVER_LR, PAPER_LR):
    config, path = arm_config(seed, root, lr), arm_dir(work, lr)
    log(f"seed {seed}: T5-CBQA-ft at lr {lr:g}")
    entropy = future_probes.future_entropy(load_model(config, path, future_probe=True), fr)
    scored = experiments.score(load_model(config, path), tl)
    out[f"{lr:g}"] = {"entropy": entropy, "templama_2010_18": templama_f1(scored, TRAIN_SLICE)}
  return out


def measure_seed(seed: int, probed: Mapping, wording_run: Mapping, meas: Mapping) -> dict:
  ids = list(meas["entropy"]["cbqa_ft"]["id"])
  control = probed[f"{CONTROL_LR:g}"]["entropy"]
  v1 = wording.same_entropies(control, wording_run["cbqa_ft"]["probe"], ids)
  arms = {}
  for lr, got in probed.items():
    arms[lr] = {**wording.arm(meas, got["entropy"]), "templama_2010_18": got["templama_2010_18"]}
  level = {lr: a["levels"]["all"]["2019-29"] for lr, a in arms.items()}
  fall = level[f"{CONTROL_LR:g}"] - level[f"{LEVER_LR:g}"]
  margin = arms[f"{LEVER_LR:g}"]["low"]["margin"]
  return {
    "seed": seed,
    "V1": v1,
    "P1_fall": fall,
    "P1": fall >= FALL,
    "P2_margin": margin,
    "P2": margin > 0,
    "arms": arms,
  }


def judge(seeds: Sequence[Mapping]) -> dict:
  return wording.judge_p1_p2(
    seeds,
    all(s["V1"] for s in seeds),
    both="fails for a measured reason: the finetuning's learning rate",
    p1_only="the finetuning's rate accounts for part of the level; the part stays not explained",
  )


def markdown(result: Mapping) -> str:
  j = result["judgement"]
  lines = [
    "# C12, T5-CBQA-ft's entropy level against the finetuning's learning rate: measured",
    "",
    f"Pre-registration: `{result['preregistration']}`. Code at `{result['commit']}`.",
    "",
    "| seed | V1 | P1: fall 3e-2 -> 3e-3 (nats) | P2: part at 3e-3 |",
    "|---|---|---|---|",
  ]
  for s in result["seeds"]:
    lines.append(
      f"| {s['seed']} | {s['V1']} | {s['P1_fall']:+.3f} ({s['P1']})"
      f" | {s['P2_margin']:+.3f} ({s['P2']}) |"
    )
  lines += ["", f"P1: {j['P1']}. P2: {j['P2']}. **Outcome: {j['outcome']}.**", ""]
  lines += [
    "| seed | lr | frequent | rare | never | all (2019-29) | part low [95%] | flat | TempLAMA F1 |",
    "|---|---|---|---|---|---|---|---|---|",
  ]
  for s in result["seeds"]:
    for lr, a in s["arms"].items():
      cells = [str(s["seed"]), lr, *wording.arm_cells(a), f"{100 * a['templama_2010_18']:.2f}"]
      lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def run(seeds: Sequence[int], root: str, out: str, *, workers: int = 2, log: Log = print) -> dict:
  from research.lever_verdict import head_commit, write_result

  commit = head_commit()  # at the start: the code this run imports
  start = time.time()
  train(seeds, root, workers, log)
  measured = []
  for s in seeds:
    work, _ = wording.plan(s, root)
    path = os.path.join(work, "finetune_lr.json")
    if not os.path.isfile(path):
      write_json(path, probe(s, root, log))
    with open(path, encoding="utf-8") as f:
      probed = json.load(f)
    with open(os.path.join(work, "wording.json"), encoding="utf-8") as f:
      wording_run = json.load(f)
    meas, _ = wording.committed(s)
    measured.append(measure_seed(s, probed, wording_run, meas))
  result = {
    "preregistration": "research/c12/PREREGISTRATION_lr.md",
    "commit": commit,
    "seeds": measured,
    "judgement": judge(measured),
    "wall_minutes": (time.time() - start) / 60,
    "load_average": list(os.getloadavg()),
  }
  write_result(out, result, markdown(result), log, name="result_lr")
  return result


def main() -> None:
  from tlm import host_memory

  host_memory.restart_with_hugepages()  # before jax starts: see tlm/host_memory.py
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--root", default=os.path.join("runs", "c12"))
  ap.add_argument("--seeds", default="3,4")
  ap.add_argument("--out", default=wording.REPO + "/research/c12")
  ap.add_argument("--workers", type=int, default=2)
  args = ap.parse_args()
  run([int(s) for s in args.seeds.split(",")], args.root, args.out, workers=args.workers)


if __name__ == "__main__":
  main()
