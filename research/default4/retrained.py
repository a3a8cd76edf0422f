"""R2: C13's "Temporal reaches the retrained model" against a second retrained Temporal.

  python -m research.default4.retrained --runs=runs/default4 --seeds=7,8,9,10,11,12 \
      [--out=research/default4]

Registered in research/default4/PREREGISTRATION.md ("R2"), before any model. Per seed S of a
`--mode=reproduce` workdir RUNS (RUNS/seed=S): the Temporal config the reproduction retrains on
2010-19 (`tlm.eval.adaptation.retrained_config` of the seed's `tiny_temporal`, from the seed's
start RUNS/seed=S/t5, 2000 steps), with `data.seed` and `train.seed` S + 1000 (another sampling
of the same world), trained into RUNS/seed=S/temporal/retrained_r2 in a pinned worker as the
reproduction trains, and evaluated as the reproduction evaluates its retrained model
(`tlm.eval.adaptation.slices`). R2 holds on a seed iff at a step of the seed's alpha-0.5 curve
(adapt.json) below the retrained steps, the adapted Temporal is above both retrained models on
TempLAMA 2019-20 and 2010-18. Writes OUT/result_r2.json and OUT/result_r2.md; a rerun resumes
the trainings and reads back the kept evaluations.
"""

import argparse
import json
import os

from tlm import configs, storage
from tlm.files import write_json

OFFSET = 1000  # the second model's data.seed and train.seed: S + OFFSET
PARTS = ("2019-20", "2010-18")


def second_config(seed: int, runs: str):
  """The second retrained Temporal's config and directory for seed `seed` of `runs`."""
  from tlm.eval import adaptation
  from tlm.miniature import reproduce, starts

  work = os.path.join(os.path.abspath(runs), f"seed={seed}")
  overrides = reproduce.seed_overrides(seed)
  config = reproduce.reproduction_configs(overrides)["temporal"]
  config = starts.from_start(config, starts.start_dirs(work)["t5"])
  config = adaptation.retrained_config(config)
  config = configs.replace_many(config, {"data.seed": seed + OFFSET, "train.seed": seed + OFFSET})
  return config, os.path.join(work, "temporal", "retrained_r2")


def train_and_evaluate(seed: int, runs: str, log=print) -> dict:
  """Trains (or resumes) the second model and returns its `adaptation.slices` (kept in
  DIR/results/r2_slices.json, read back on a rerun)."""
  from tlm.eval import adaptation, experiments
  from tlm.infer.trained_models import load_model
  from tlm.miniature import parallel, reproduce

  config, path = second_config(seed, runs)
  kept = os.path.join(path, "results", "r2_slices.json")
  if os.path.isfile(kept):
    with open(kept) as f:
      return json.load(f)
  cache = reproduce.compilation_cache_dir(config)
  parallel.enable_compilation_cache(cache)
  job = parallel.Job(f"{config.name} retrained (R2, seed {seed + OFFSET})", "train",
                     ((config, path),), cache)  # fmt: skip
  parallel.run_jobs([job], 1, log, config.reproduce.pin_workers)
  data = experiments.eval_data(config)
  model = load_model(config, path)
  out = adaptation.slices(experiments.evaluate_model(model, data, log, "R2 retrained"), 2019)
  write_json(kept, out)
  return out


def judge(adapt: dict, second: dict) -> dict:
  """R2 of one seed from its Temporal adapt.json entry and the second model's slices."""
  first = adapt["retrained"]
  steps = adapt["retrained_steps"]
  reached = [
    int(step)
    for step, point in sorted(adapt["curve"].items(), key=lambda kv: int(kv[0]))
    if int(step) < steps and all(point[p] > first[p] and point[p] > second[p] for p in PARTS)
  ]
  return {
    "holds": bool(reached),
    "first_step": reached[0] if reached else None,
    "retrained": {p: first[p] for p in PARTS},
    "retrained_r2": {p: second[p] for p in PARTS},
    "r2_minus_retrained": {p: second[p] - first[p] for p in PARTS},
    "curve": {str(k): {p: v[p] for p in PARTS} for k, v in adapt["curve"].items()},
  }


def markdown(out: dict) -> str:
  lines = [
    "# R2: C13's 'reaches the retrained model' against two retrained Temporal models",
    "",
    "| seed | R2 holds | first step | retrained 2019-20 / 2010-18 | second (S+1000) | "
    "second - first |",
    "|---|---|---|---|---|---|",
  ]
  for seed, r in out["seeds"].items():
    a, b, d = r["retrained"], r["retrained_r2"], r["r2_minus_retrained"]
    lines.append(
      f"| {seed} | {'yes' if r['holds'] else 'no'} | {r['first_step'] or '-'} | "
      f"{a['2019-20']:.2f} / {a['2010-18']:.2f} | {b['2019-20']:.2f} / {b['2010-18']:.2f} | "
      f"{d['2019-20']:+.2f} / {d['2010-18']:+.2f} |"
    )
  lines += ["", f"R2 holds on {sum(r['holds'] for r in out['seeds'].values())} of "
            f"{len(out['seeds'])} seeds."]  # fmt: skip
  return "\n".join(lines) + "\n"


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--runs", required=True)
  ap.add_argument("--seeds", required=True)
  ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
  args = ap.parse_args()
  out = {"seeds": {}}
  for seed in (int(s) for s in args.seeds.split(",")):
    second = train_and_evaluate(seed, args.runs)
    results = storage.join(os.path.abspath(args.runs), f"seed={seed}", "results")
    with open(os.path.join(results, "adapt.json")) as f:
      adapt = next(v for k, v in json.load(f).items() if "temporal" in k)
    out["seeds"][str(seed)] = judge(adapt, second)
  write_json(os.path.join(args.out, "result_r2.json"), out)
  with open(os.path.join(args.out, "result_r2.md"), "w") as f:
    f.write(markdown(out))
  print(markdown(out))


if __name__ == "__main__":
  main()
