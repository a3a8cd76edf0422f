"""C12, T5-CBQA-ft's entropy level at the paper's finetuning rate, asked in its chain's wording.

  nice -n 10 python -m research.c12.combined --root=runs/c12 --seeds=3,4 --out=research/c12

Settings, check, prediction and criterion: research/c12/PREREGISTRATION_combined.md (committed
before this code and any probe). Per seed S: the T5-CBQA-ft the finetuning-rate run trained at
1e-3 (ROOT/seed=S/cbqa_ft_lr=0.001), probed on the future-relations queries in the probes'
wording (check V1 against that run) and in the encyclopedia's (`research.c12.wording`); C12's
part "cbqa_ft low" recomputed by the claim's code on the committed per_query.json with only
T5-CBQA-ft's entropies replaced.

Writes OUT/result_combined.json and OUT/result_combined.md.
"""

import argparse
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence

from research.c12 import finetune_lr, wording

Log = Callable[[str], None]
LR = finetune_lr.PAPER_LR


def probe(seed: int, root: str, log: Log) -> dict:
  """{wording: future_entropy's result} of the 1e-3 T5-CBQA-ft of one seed."""
  from tlm.data.future_relations import load_future_relations
  from tlm.eval import future as future_probes
  from tlm.eval.experiments import eval_data
  from tlm.infer.trained_models import load_model
  from tlm.input.locations import synthetic_data

  work, _ = wording.plan(seed, root)
  config, path = finetune_lr.arm_config(seed, root, LR), finetune_lr.arm_dir(work, LR)
  data = eval_data(config)
  fr = load_future_relations(data.future_relations_dir)
  enc = wording.encyclopedia_wording(
    fr,
    os.path.join(data.future_relations_dir, "queries.jsonl"),
    os.path.join(synthetic_data(config.data).world_dir, "entities.tsv"),
  )
  model = load_model(config, path, future_probe=True)
  log(f"seed {seed}: T5-CBQA-ft at {LR:g}, both wordings")
  return {
    w: future_probes.future_entropy(model, f) for w, f in (("probe", fr), ("encyclopedia", enc))
  }


def measure_seed(seed: int, probed: Mapping, lr_run: Mapping, meas: Mapping) -> dict:
  ids = list(meas["entropy"]["cbqa_ft"]["id"])
  v1 = wording.same_entropies(probed["probe"], lr_run[f"{LR:g}"]["entropy"], ids)
  arms = {w: wording.arm(meas, probed[w]) for w in wording.WORDINGS}
  margin = arms["encyclopedia"]["low"]["margin"]
  return {"seed": seed, "V1": v1, "P_margin": margin, "P": margin > 0, "arms": arms}


def judge(seeds: Sequence[Mapping]) -> dict:
  checks = all(s["V1"] for s in seeds)
  p = all(s["P"] for s in seeds)
  if not checks:
    outcome = "void: a check failed"
  elif p:
    outcome = "fails for a measured reason: two departures together"
  else:
    outcome = "not explained"
  return {"checks_ok": checks, "P": p, "outcome": outcome}


def markdown(result: Mapping) -> str:
  j = result["judgement"]
  lines = [
    "# C12, T5-CBQA-ft at 1e-3 in its chain's wording: measured",
    "",
    f"Pre-registration: `{result['preregistration']}`. Code at `{result['commit']}`.",
    "",
    "| seed | V1 | wording | frequent | rare | never | all (2019-29) | part low [95%] | flat |",
    "|---|---|---|---|---|---|---|---|---|",
  ]
  for s in result["seeds"]:
    for w, a in s["arms"].items():
      cells = [str(s["seed"]), str(s["V1"]), w, *wording.arm_cells(a)]
      lines.append("| " + " | ".join(cells) + " |")
  lines += ["", f"P: {j['P']}. **Outcome: {j['outcome']}.**"]
  return "\n".join(lines) + "\n"


def run(seeds: Sequence[int], root: str, out: str, *, log: Log = print) -> dict:
  from research.lever_verdict import head_commit, write_result

  commit = head_commit()
  start = time.time()
  measured = []
  for s in seeds:
    work, _ = wording.plan(s, root)
    with open(os.path.join(work, "finetune_lr.json"), encoding="utf-8") as f:
      lr_run = json.load(f)
    meas, _ = wording.committed(s)
    probed = json.loads(json.dumps(probe(s, root, log)))  # the JSON round trip the others read
    measured.append(measure_seed(s, probed, lr_run, meas))
  result = {
    "preregistration": "research/c12/PREREGISTRATION_combined.md",
    "commit": commit,
    "seeds": measured,
    "judgement": judge(measured),
    "wall_minutes": (time.time() - start) / 60,
  }
  write_result(out, result, markdown(result), log, name="result_combined")
  return result


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--root", default=os.path.join("runs", "c12"))
  ap.add_argument("--seeds", default="3,4")
  ap.add_argument("--out", default=os.path.join(wording.REPO, "research", "c12"))
  args = ap.parse_args()
  run([int(s) for s in args.seeds.split(",")], args.root, args.out)


if __name__ == "__main__":
  main()
