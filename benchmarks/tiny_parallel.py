"""Two miniature trainings at once, one per core, against one training on both cores.

  python benchmarks/tiny_parallel.py                       # tiny_temporal, 400 steps per arm
  python benchmarks/tiny_parallel.py --steps 200 --rounds 2 --set=train.batch_size=32

The reproduction trains ~13 independent tiny models per seed (Uniform, Temporal, nine Yearly
experts, two retrained models). On matrices this small XLA's intra-op threading may leave the
second core idle, so training two models at once, each in its own process on its own core,
could beat training them one after the other on both cores. Each arm trains real
`tiny_temporal` models (`--config`, `--set` overrides) with the real trainer
(`tlm.train.loop.Trainer`: the synthetic world's batches, logging, checkpointing) for
`--steps` steps from random weights, in fresh workdirs:

- `one_default`: one process, XLA's default threading (what `--mode=reproduce` does now);
- `one_pinned`: one process on core 0 (`taskset`), XLA's Eigen threading off;
- `two_pinned`: two processes at once, one per core, XLA's Eigen threading off;
- `two_default`: two processes at once, unpinned, default threading.

Every worker builds its trainer (imports, data, compilation) first and waits at a barrier,
so the timed part is `Trainer.fit` alone and the two processes of an arm run it together.
Throughput is models x steps / the fit's seconds, summed over an arm's processes; the ratio is
each arm's against `one_default` measured in the same round (the machine may be shared and
noisy: the arms of a round run back to back, in a rotated order per round). Prints ONE JSON
line with each round's throughputs and ratios and the 1-minute load average before each round.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SINGLE_THREAD = "--xla_cpu_multi_thread_eigen=false"
# name: [(cpu list for taskset or None, XLA_FLAGS or None), one entry per process]
ARMS = {
  "one_default": [(None, None)],
  "one_pinned": [("0", SINGLE_THREAD)],
  "two_pinned": [("0", SINGLE_THREAD), ("1", SINGLE_THREAD)],
  "two_default": [(None, None), (None, None)],
}


def worker(args) -> None:
  """One training: build the trainer, wait for `args.go`, time `fit`, write the result."""
  sys.path.insert(0, ROOT)
  from tlm import configs
  from tlm.train.loop import Trainer

  config = configs.override(configs.get(args.config), [f"train.steps={args.steps}", *args.set])
  trainer = Trainer(config, args.workdir, log=lambda _: None)
  with open(args.ready, "w") as f:
    f.write("ready")
  while not os.path.exists(args.go):
    time.sleep(0.01)
  start = time.perf_counter()
  trainer.fit()
  seconds = time.perf_counter() - start
  with open(args.result, "w") as f:
    json.dump({"seconds": seconds, "steps": args.steps}, f)


def run_arm(name: str, args, tmp: str) -> float:
  """Steps per second of the arm's processes together."""
  procs, results = [], []
  os.makedirs(tmp, exist_ok=True)
  go = os.path.join(tmp, f"{name}.go")
  for i, (cpus, flags) in enumerate(ARMS[name]):
    base = os.path.join(tmp, f"{name}-{i}")
    env = dict(os.environ)
    if flags:
      env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flags).strip()
    cmd = [
      sys.executable,
      os.path.abspath(__file__),
      "--worker",
      "--config",
      args.config,
      "--steps",
      str(args.steps),
      "--workdir",
      base + ".work",
      "--ready",
      base + ".ready",
      "--go",
      go,
      "--result",
      base + ".json",
    ]
    cmd += [f"--set={s}" for s in args.set]
    if cpus is not None:
      cmd = ["taskset", "-c", cpus] + cmd
    procs.append((subprocess.Popen(cmd, env=env), base))
  while not all(os.path.exists(b + ".ready") for _, b in procs):
    if any(p.poll() not in (None, 0) for p, _ in procs):
      raise SystemExit(f"{name}: a worker failed")
    time.sleep(0.05)
  open(go, "w").close()
  for p, base in procs:
    if p.wait() != 0:
      raise SystemExit(f"{name}: a worker exited with {p.returncode}")
    with open(base + ".json") as f:
      results.append(json.load(f))
  return sum(r["steps"] / r["seconds"] for r in results)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--config", default="tiny_temporal")
  p.add_argument("--steps", type=int, default=400)
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--arms", default=",".join(ARMS))
  p.add_argument("--set", action="append", default=[], help="config overrides, key=value")
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  for name in ("--workdir", "--ready", "--go", "--result"):
    p.add_argument(name, help=argparse.SUPPRESS)
  args = p.parse_args()
  if args.worker:
    return worker(args)
  arms = args.arms.split(",")
  unknown = sorted(set(arms) - set(ARMS) - {""})
  if unknown or "one_default" not in arms:
    p.error(f"--arms: unknown {unknown} or no one_default; choose from {list(ARMS)}")
  rounds = []
  with tempfile.TemporaryDirectory() as tmp:
    for r in range(args.rounds):
      order = arms[r % len(arms) :] + arms[: r % len(arms)]
      load = os.getloadavg()[0]
      rate = {}
      for name in order:
        rate[name] = run_arm(name, args, os.path.join(tmp, f"round{r}"))
      base = rate["one_default"]
      rounds.append(
        {
          "load_1min_before": round(load, 2),
          "order": order,
          "steps_per_second": {k: round(v, 2) for k, v in rate.items()},
          "ratio_to_one_default": {k: round(v / base, 3) for k, v in rate.items()},
        }
      )
  ratios = {k: [r["ratio_to_one_default"][k] for r in rounds] for k in arms}
  print(
    json.dumps(
      {
        "benchmark": "tiny_parallel",
        "config": args.config,
        "overrides": args.set,
        "steps": args.steps,
        "cpu_count": os.cpu_count(),
        "rounds": rounds,
        "ratio_to_one_default": ratios,
      }
    )
  )


if __name__ == "__main__":
  main()
