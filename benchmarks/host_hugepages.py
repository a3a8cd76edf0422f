"""Trainings with glibc's huge-page tunable against without it, in one run (tlm/host_memory.py).

  python benchmarks/host_hugepages.py                      # tiny_temporal, 300 steps, 2 rounds
  python benchmarks/host_hugepages.py --steps 600 --processes 1 --rounds 3

Each arm runs `--processes` real trainings at once (`python run.py --mode=train`, the entry
point a user runs; 2 is what `--mode=reproduce` does with its two workers), each for `--steps`
steps from random weights in a fresh workdir:

- `default`: TLM_HUGEPAGES=0, glibc's default malloc (4 KiB pages for its fresh mappings);
- `hugepages`: what run.py does by default, GLIBC_TUNABLES=glibc.malloc.hugetlb=1.

Per arm and round: wall seconds of the arm (all its processes, start-up and compilation
included), the processes' CPU seconds in user code and in the kernel and their minor page
faults (`os.wait4`), and the median `seconds_per_step` of the trainings' own log. Ratios are
hugepages over default in the same round; the arms alternate order from round to round (the
machine may be shared and noisy). Also checks that every logged number (loss, z_loss,
accuracy, grad_norm, eval_loss at every logged step) is bit-identical between the arms: the
tunable must change speed only. Prints ONE JSON line.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tlm import host_memory  # noqa: E402

# The variables run.py's restart reads and sets (tlm/host_memory.py), not copies of them.
ARMS = {
  "default": {host_memory.OPT_OUT: "0"},
  "hugepages": {"GLIBC_TUNABLES": host_memory.TUNABLE},
}
COMPARED = ("loss", "z_loss", "accuracy", "grad_norm", "eval_loss")


def run_arm(name: str, args, tmp: str) -> dict:
  """Runs the arm's trainings at once; returns its timings, faults and logged numbers."""
  os.makedirs(tmp, exist_ok=True)
  env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", host_memory.OPT_OUT)}
  env.update(ARMS[name])
  procs = []
  start = time.perf_counter()
  for i in range(args.processes):
    workdir = os.path.join(tmp, f"{name}-{i}")
    cmd = [
      sys.executable,
      os.path.join(ROOT, "run.py"),
      "--mode=train",
      f"--config={args.config}",
      f"--set=train.steps={args.steps}",
      f"--workdir={workdir}",
      *[f"--set={s}" for s in args.set],
    ]
    log = open(workdir + ".log", "w")
    procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), workdir))
  user = system = faults = 0.0
  for p, workdir in procs:
    _, status, usage = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
      raise SystemExit(f"{name}: a training failed; its log: {workdir}.log")
    user, system, faults = user + usage.ru_utime, system + usage.ru_stime, faults + usage.ru_minflt
  wall = time.perf_counter() - start
  rows = []
  for _, workdir in procs:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      rows.append([json.loads(line) for line in f])
  logged_steps = [r["seconds_per_step"] for rs in rows for r in rs if "seconds_per_step" in r]
  per_step = logged_steps[1:] or logged_steps  # the first window includes compilation
  logged = [[{k: r.get(k) for k in COMPARED} | {"step": r.get("step")} for r in rs] for rs in rows]
  return {
    "wall_s": round(wall, 2),
    "user_s": round(user, 2),
    "kernel_s": round(system, 2),
    "minor_faults": int(faults),
    "median_seconds_per_step": round(statistics.median(per_step), 4),
    "logged": logged,
  }


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--config", default="tiny_temporal")
  p.add_argument("--steps", type=int, default=300)
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--processes", type=int, default=2)
  p.add_argument("--set", action="append", default=[], help="config overrides, key=value")
  args = p.parse_args()
  rounds, identical = [], True
  with tempfile.TemporaryDirectory() as tmp:
    for r in range(args.rounds):
      order = list(ARMS) if r % 2 == 0 else list(ARMS)[::-1]
      load = os.getloadavg()[0]
      out = {name: run_arm(name, args, os.path.join(tmp, f"round{r}")) for name in order}
      identical &= out["default"].pop("logged") == out["hugepages"].pop("logged")
      ratio = {
        k: round(out["hugepages"][k] / out["default"][k], 3)
        for k in ("wall_s", "user_s", "kernel_s", "minor_faults", "median_seconds_per_step")
      }
      rounds.append({"load_1min_before": round(load, 2), "order": order, **out, "ratio": ratio})
      print(f"round {r + 1}/{args.rounds}: hugepages/default {ratio}", file=sys.stderr)
  print(
    json.dumps(
      {
        "benchmark": "host_hugepages",
        "config": args.config,
        "steps": args.steps,
        "processes": args.processes,
        "set": args.set,
        "logged_numbers_identical": identical,
        "rounds": rounds,
      }
    )
  )


if __name__ == "__main__":
  main()
