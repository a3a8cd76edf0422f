"""Trainings under glibc's malloc tunables against glibc's default, in one run (tlm/host_memory.py).

  python benchmarks/host_hugepages.py                      # tiny_temporal, 300 steps, 2 rounds
  python benchmarks/host_hugepages.py --steps 600 --processes 1 --rounds 3

Each arm runs `--processes` real trainings at once (`python run.py --mode=train`, the entry
point a user runs; 2 is what `--mode=reproduce` does with its two workers), each for `--steps`
steps from random weights in a fresh workdir:

- `default`: TLM_HUGEPAGES=0, glibc's default malloc (4 KiB pages for its fresh mappings);
- `hugepages`: GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (transparent huge pages for malloc's
  memory: XLA's per-step temporary buffer is faulted in 2 MiB at a time, but still mapped afresh
  and zeroed by the kernel at every step);
- `heap`: `tlm.host_memory.HEAP_TUNABLES`, malloc never maps (`mmap_max=0`), keeps one arena
  (`arena_max=1`: the buffer cannot fit a thread arena's 64 MiB heaps) and never trims its heap,
  with huge pages: the buffer freed after a step is reused by the next, with no fault and no
  zeroing.

Per arm and round: wall seconds of the arm (all its processes, start-up and compilation
included), the processes' CPU seconds in user code and in the kernel and their minor page
faults and the largest resident set of one process (`os.wait4`), and the median
`seconds_per_step` of the trainings' own log. Ratios are each arm's over default's in the same
round; the arms' order rotates from round to round (the machine may be shared and noisy). Also
checks that every logged number (loss, z_loss, accuracy, grad_norm, eval_loss at every logged
step) is bit-identical between the arms: a tunable must change speed only (XLA must not read
memory it did not write, which reused memory would expose). Prints ONE JSON line.
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
  "heap": {"GLIBC_TUNABLES": host_memory.HEAP_TUNABLES},
}
COMPARED = ("loss", "z_loss", "accuracy", "grad_norm", "eval_loss")
RATIOS = ("wall_s", "user_s", "kernel_s", "minor_faults", "max_rss_mb", "median_seconds_per_step")


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
  user = system = faults = rss = 0.0
  for p, workdir in procs:
    _, status, usage = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
      raise SystemExit(f"{name}: a training failed; its log: {workdir}.log")
    user, system, faults = user + usage.ru_utime, system + usage.ru_stime, faults + usage.ru_minflt
    rss = max(rss, usage.ru_maxrss)  # KiB on Linux
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
    "max_rss_mb": round(rss / 1024, 1),
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
      names = list(ARMS)
      order = names[r % len(names) :] + names[: r % len(names)]
      load = os.getloadavg()[0]
      out = {name: run_arm(name, args, os.path.join(tmp, f"round{r}")) for name in order}
      logged = {name: out[name].pop("logged") for name in out}
      identical &= all(logged[name] == logged["default"] for name in logged)
      ratio = {
        arm: {k: round(out[arm][k] / out["default"][k], 3) for k in RATIOS}
        for arm in names
        if arm != "default"
      }
      rounds.append({"load_1min_before": round(load, 2), "order": order, **out, "ratio": ratio})
      print(f"round {r + 1}/{args.rounds}: over default {ratio}", file=sys.stderr)
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
