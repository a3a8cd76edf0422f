"""What would get the miniature to the levers' goal: more steps, a wider model, a dated start.

  python -m research.levers.miniature_levers --reproduction='runs/reproduce/seed={seed}' \\
      --root=runs/levers [--settings=tiny-3200,wide-800] [--seeds=0,1,2]

`--reproduction` is a path template of the seed directories of a finished
`--mode=reproduce` (the 800-step baseline and its pretrained `t5` start are reused from there).
Trains only Uniform and Temporal per setting and seed (`research.levers.levers`), one training at a
time, and writes ROOT/levers.json and ROOT/levers.md after every (setting, seed).

The two pre-registrations (committed before any of these runs was looked at: `becdad8` the
settings and criterion, `0ee0eef` the breadth-first order, `3244931` the second) are in
research/levers/README.md, verbatim.
"""

import argparse
import os

from research.levers.levers import Setting, run

# The order of the work: (setting, up to step), each pass over every seed (see the docstring).
SCHEDULE = (
  ("tiny-800", 800),
  ("tiny-3200", 1600),
  ("wide-800", 800),
  ("tiny-3200", 2400),
  ("tiny-3200", 3200),
  ("wide-3200", 3200),
  ("years-800", 800),
  ("years-3200", 3200),
)
WIDE = ("model.emb_dim=128", "model.num_heads=8", "model.head_dim=16", "model.mlp_dim=256")
CURVE = (1600, 2400)


def settings(reproduction: str, root: str) -> list[Setting]:
  """The pre-registered settings, in order (see the module docstring)."""
  wide_800 = os.path.join(root, "wide-800", "seed={seed}")
  years_800 = os.path.join(root, "years-800", "seed={seed}")
  return [
    Setting("tiny-800", "the faithful protocol's models, reused", 800, reuse=reproduction),
    Setting(
      "tiny-3200",
      "tiny, 4x the steps",
      3200,
      start=os.path.join(reproduction, "t5"),
      continue_from=reproduction,
      eval_steps=CURVE,
    ),
    Setting("wide-800", "2x width (d_model 128, MLP 256), own start", 800, overrides=WIDE),
    Setting(
      "wide-3200",
      "2x width, 4x the steps",
      3200,
      overrides=WIDE,
      start=os.path.join(wide_800, "t5"),
      continue_from=wide_800,
      eval_steps=CURVE,
    ),
    Setting("years-800", "tiny, a start that has read years", 800, start_corpus="generic_years"),
    Setting(
      "years-3200",
      "tiny, a start that has read years, 4x the steps",
      3200,
      start=os.path.join(years_800, "t5"),
      continue_from=years_800,
      eval_steps=CURVE,
    ),
  ]


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument(
    "--reproduction",
    default=os.path.join("runs", "reproduce", "seed={seed}"),
    help="path template ({seed}) of a finished reproduction's seed directories",
  )
  p.add_argument("--root", default=os.path.join("runs", "levers"))
  p.add_argument("--settings", default="", help="comma-separated names (default: all, in order)")
  p.add_argument("--seeds", default="0,1,2")
  p.add_argument(
    "--set",
    action="append",
    default=[],
    dest="overrides",
    help="key=value applied to every model (e.g. a small world for a test)",
  )
  p.add_argument("--resamples", type=int, default=0, help="bootstrap replicates (0: default)")
  args = p.parse_args(argv)
  if "{seed}" not in args.reproduction:
    p.error("--reproduction must contain {seed}, e.g. 'runs/reproduce/seed={seed}'")
  root = os.path.abspath(args.root)
  chosen = settings(os.path.abspath(args.reproduction), root)
  if args.settings:
    names = args.settings.split(",")
    unknown = sorted(set(names) - {s.name for s in chosen})
    if unknown:
      p.error(f"unknown settings {unknown}; choose from {[s.name for s in chosen]}")
    chosen = [s for s in chosen if s.name in names]
  seeds = [int(s) for s in args.seeds.split(",")]
  summary = run(
    chosen, seeds, root, args.overrides, schedule=SCHEDULE, resamples=args.resamples or None
  )
  print(f"{len(summary['rows'])} rows in {os.path.join(root, 'levers.md')}")


if __name__ == "__main__":
  main()
