"""The miniature's train step under XLA's CPU code-generation flags, against XLA's default.

  python benchmarks/xla_cpu_flags.py                      # every arm in ARMS, 2 rounds
  python benchmarks/xla_cpu_flags.py --rounds 3 --steps 40 --arms default,xnnpack

A seed of `--mode=reproduce` is two thirds training steps of the tiny model (docs/reproduction.md,
"Run time"), so a flag that made XLA's CPU step faster would shorten it. Each arm runs
`benchmarks/tiny_train.py --experts 1` (the tiny configs' step, compiled ahead of time, on
random full rows) in a fresh process with its flag added to XLA_FLAGS (XLA reads them once, at
start-up) and XLA's default threading. The ratio is the default arm's mean seconds per step over
the arm's, measured in the same round (the machine may be shared and noisy: a round runs its
arms back to back, in an order rotated per round). Every flag here changes how XLA compiles the
step, not what it computes, but each may change the last bits of the numbers, so adopting one
means rerunning the pre-registered seeds. Prints ONE JSON line: per round the 1-minute load
average before it, each arm's seconds per step and its ratio.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARMS = {
  "default": "",
  "xnnpack": "--xla_cpu_use_xnnpack=true",
  "onednn": "--xla_cpu_use_onednn=true",
  "vector_width_512": "--xla_cpu_prefer_vector_width=512",
  "concurrency_scheduler": "--xla_cpu_enable_concurrency_optimized_scheduler=true",
  "no_fusion_emitters": "--xla_cpu_use_fusion_emitters=false",
  "xnn_graph_greedy": "--xla_cpu_experimental_xnn_graph_fusion_mode=XNN_GRAPH_FUSION_MODE_GREEDY",
}


def run_arm(flag: str, steps: int) -> float | None:
  """Mean seconds per step of one fresh tiny_train process with `flag`, or None if it failed
  (an unknown or unsupported flag makes XLA abort at start-up)."""
  env = dict(os.environ)
  env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}".strip()
  cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "tiny_train.py"), "--experts", "1"]
  proc = subprocess.run(
    [*cmd, "--steps", str(steps)], env=env, capture_output=True, text=True, check=False
  )
  lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
  if proc.returncode != 0 or not lines:
    return None
  return json.loads(lines[-1])["one_model"]["seconds_per_step_mean"]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--steps", type=int, default=30, help="timed steps per arm")
  parser.add_argument("--arms", default=",".join(ARMS), help=f"some of {', '.join(ARMS)}")
  args = parser.parse_args()
  names = args.arms.split(",")
  unknown = [n for n in names if n not in ARMS]
  if unknown or "default" not in names:
    parser.error(f"--arms: unknown {unknown}" if unknown else "--arms: must include default")
  rounds = []
  for r in range(args.rounds):
    order = names[r % len(names) :] + names[: r % len(names)]
    load = os.getloadavg()[0]
    seconds = {n: run_arm(ARMS[n], args.steps) for n in order}
    base = seconds["default"]
    ratio = {
      n: (round(base / s, 3) if s and base else None) for n, s in seconds.items() if n != "default"
    }
    rounds.append(
      {
        "load_1min_before": round(load, 2),
        "order": order,
        "seconds_per_step": seconds,
        "speedup_over_default": ratio,
      }
    )
    print(f"round {r + 1}/{args.rounds}: {ratio}", file=sys.stderr)
  summary = {
    n: [rd["speedup_over_default"].get(n) for rd in rounds] for n in names if n != "default"
  }
  print(
    json.dumps(
      {
        "benchmark": "xla_cpu_flags",
        "cpu_count": os.cpu_count(),
        "steps": args.steps,
        "flags": {n: ARMS[n] for n in names},
        "rounds": rounds,
        "speedup_over_default": summary,
      }
    )
  )


if __name__ == "__main__":
  main()
