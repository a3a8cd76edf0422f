"""Seed 4's T5-CBQA chain under one machine setting, against the committed seed-4 predictions.

  nice -n 5 python -m research.seed4.chain --setting=as_run [--root=runs/seed4] [--ft]

The cheapest models of seed 4 that differ from the committed run (docs/results/fresh/seed=4,
2800-step protocol, unpinned workers, commit 7ea968b): T5-CBQA (tiny_t5 400 steps, then
tiny_cbqa 300 steps), and with `--ft` T5-CBQA-ft (300 more). The 2800-step overrides change
neither (they set the news-trained models' steps, the adaptation's and the worker pinning);
as in the committed run, every training here is unpinned and uses the affinity and the thread
settings the chosen setting gives this process.

A setting (`SETTINGS`) is a CPU set for the process (`taskset`'s role) and environment
variables read by XLA when its CPU client starts (XLA_FLAGS; PJRT_NPROC, the size of the CPU
client's thread pool, which otherwise is the number of cores in the affinity). They are
applied here before jax is imported. No persistent compilation cache is used, so each setting
compiles its own programs (a cached program's key names neither the cores nor the ISA).

Writes ROOT/<setting>/seed=4/{t5,cbqa[,cbqa_ft]} (a rerun resumes) and
ROOT/<setting>/result.json: per model, the TempLAMA predictions and the news log-likelihoods
that differ from the committed ones, the final training losses, the setting, the recorded
environment and the wall time.
"""

import argparse
import json
import os
import sys
import time

SEED = 4
COMMITTED = os.path.join("docs", "results", "fresh", f"seed={SEED}")
ALL_CORES = None  # the process's own affinity, unchanged
# name: (CPU set or ALL_CORES, {environment variable: value}). The machine: 2 cores, AVX-512.
SETTINGS = {
  "as_run": (ALL_CORES, {}),
  "one_core": ({0}, {}),
  "nproc_1": (ALL_CORES, {"PJRT_NPROC": "1"}),
  "nproc_3": (ALL_CORES, {"PJRT_NPROC": "3"}),
  "nproc_4": (ALL_CORES, {"PJRT_NPROC": "4"}),
  "nproc_8": (ALL_CORES, {"PJRT_NPROC": "8"}),
  "nproc_16": (ALL_CORES, {"PJRT_NPROC": "16"}),
  "eigen_single": (ALL_CORES, {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}),
  "isa_avx2": (ALL_CORES, {"XLA_FLAGS": "--xla_cpu_max_isa=AVX2"}),
  "isa_avx": (ALL_CORES, {"XLA_FLAGS": "--xla_cpu_max_isa=AVX"}),
  "isa_sse4_2": (ALL_CORES, {"XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2"}),
  "isa_avx512": (ALL_CORES, {"XLA_FLAGS": "--xla_cpu_max_isa=AVX512"}),
  "devices_8": (ALL_CORES, {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}),
  "opt_level_0": (ALL_CORES, {"XLA_FLAGS": "--xla_backend_optimization_level=0"}),
}


def apply(setting: str) -> None:
  """Puts this process in `setting` (before jax is imported: XLA reads both at start)."""
  if "jax" in sys.modules:
    raise RuntimeError("a setting must be applied before jax is imported")
  cores, env = SETTINGS[setting]
  if cores is not ALL_CORES:
    os.sched_setaffinity(0, cores)
  os.environ.update(env)


def compare(evals: dict, committed: dict, out_dir: str) -> dict:
  """The evaluated models against the committed per_query.json, by the regeneration check's
  own comparison (`tlm.miniature.regeneration.compare`): {model: its row}. The models'
  columns are written to OUT_DIR/per_query.json first and read back, as the check reads a run."""
  from tlm.files import write_json
  from tlm.miniature import measurements, over_seeds, regeneration

  def only(models: dict) -> dict:
    return {"seed": SEED, "models": models, "loglik_change": {}, "entropy": {}}

  ours = {
    name: {"templama": measurements.templama_columns(r), "news": measurements.news_columns(r)}
    for name, r in evals.items()
  }
  write_json(os.path.join(out_dir, "per_query.json"), only(ours))
  ours = over_seeds.read_seed_file(out_dir, "per_query.json")
  rows = regeneration.compare(ours, only({n: committed["models"][n] for n in evals}))
  return {name: row for name, row in zip(evals, rows)}


def losses(workdir: str) -> list[float]:
  """The training losses a model logged (its metrics.jsonl, every 50 steps), in order."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return [row["loss"] for row in rows if "loss" in row]


def run(setting: str, root: str, ft: bool, log=print) -> dict:
  from research.c12.wording import plan
  from tlm.eval import during_training, experiments
  from tlm.files import write_json
  from tlm.miniature import environment, over_seeds
  from tlm.train.loop import run as train

  start = time.time()
  out_dir = os.path.join(root, setting)
  _, models = plan(SEED, out_dir)
  committed = over_seeds.read_seed_file(COMMITTED, "per_query.json")
  names = ("t5", "cbqa", "cbqa_ft") if ft else ("t5", "cbqa")
  for name in names:
    config, workdir = models[name]
    train(config, workdir, make_evaluators=during_training.evaluators, log=log)
  data = experiments.eval_data(models["cbqa"][0])
  evals = {name: experiments.evaluate(*models[name], log, data) for name in names[1:]}
  report = {
    "setting": setting,
    "cores_and_env": _describe(setting),
    "models": compare(evals, committed, out_dir),
    "losses": {name: losses(models[name][1]) for name in names},
  }
  report["environment"] = environment.record()
  report["wall_minutes"] = round((time.time() - start) / 60, 2)
  write_json(os.path.join(out_dir, "result.json"), report)
  log(json.dumps({k: report[k] for k in ("setting", "models", "wall_minutes")}))
  return report


def _describe(setting: str) -> dict:
  cores, env = SETTINGS[setting]
  return {"cores": None if cores is ALL_CORES else sorted(cores), "env": env}


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--setting", required=True, choices=sorted(SETTINGS))
  p.add_argument("--root", default=os.path.join("runs", "seed4"))
  p.add_argument("--ft", action="store_true", help="T5-CBQA-ft too (300 more steps)")
  args = p.parse_args()
  apply(args.setting)
  run(args.setting, args.root, args.ft)


if __name__ == "__main__":
  main()
