"""How often two examples drawn at one step by the block sampler are drawn at one step again in
the next pass over their year's table (`tlm.input.block_sampling`); prints one JSON line.

  python benchmarks/batch_mates.py [--rows=2048 --per_row=7 --examples=1000000]
  python benchmarks/batch_mates.py --root=DIR     # the sampler of another checkout, e.g. the
                                                  # commit before (git archive C | tar -x -C DIR)

The paper's batch (2048 rows, 7 candidate draws a row: `data.block_draws` as derived from the
synthetic world's store at 128 + 32 tokens), nine training years of `--examples` examples each,
news only. For each year: the step at which each example is drawn in pass 0 and in pass 1 of
its table (a pass: every window of the table once); the pairs of examples drawn at one step of
pass 0 (batch-mates: candidates read for the step, whether or not they fit their row), and of
those the share drawn at one step again in pass 1. Pairs of two years are batch-mates by chance
alone with both samplers (each year's windows are visited in an order of their own). Index
arithmetic only: no store is read.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

YEARS = tuple(range(2010, 2019))


def _import(root: str):
  sys.path.insert(0, root)
  from tlm.input import block_sampling
  from tlm.input.sampling import MixtureSampler

  return block_sampling, MixtureSampler


def _pass_steps(blocks, slot: int) -> int:
  if hasattr(blocks, "pass_steps"):
    return blocks.pass_steps(slot)
  return int(blocks.sizes[slot] // blocks.allot[slot])  # one window per step, before blocks


def measure(root: str, rows: int, per_row: int, examples: int) -> dict:
  block_sampling, MixtureSampler = _import(root)
  sources = {"news_ssm": {y: range(examples) for y in YEARS}}
  sampler = MixtureSampler(sources, seed=0, years=YEARS, source_weights={"news_ssm": 1.0})
  blocks = block_sampling.BlockSampler(sampler, rows, per_row)
  lengths = [_pass_steps(blocks, j) for j in range(len(YEARS))]
  t0 = time.perf_counter()
  # Per year and pass: example -> step (-1: not drawn in that pass).
  at = np.full((len(YEARS), 2, examples), -1, np.int32)
  for step in range(2 * max(lengths)):
    slot, index = blocks.draws(step)
    for j, n in enumerate(lengths):
      if step < 2 * n:
        at[j, step // n, index[slot == j]] = step
  seconds = time.perf_counter() - t0
  pairs = again = 0
  mates = []
  for j in range(len(YEARS)):
    first, second = at[j, 0], at[j, 1]
    drawn = np.flatnonzero(first >= 0)
    order = drawn[np.argsort(first[drawn], kind="stable")]
    steps, starts = np.unique(first[order], return_index=True)
    for group in np.split(order, starts[1:]):
      later = second[group]
      later = later[later >= 0]  # an example not drawn again pairs with no one
      _, counts = np.unique(later, return_counts=True)
      pairs += group.size * (group.size - 1) // 2
      again += int((counts * (counts - 1) // 2).sum())
      mates.append(group.size - 1)
  return {
    "benchmark": "batch_mates",
    "sampler": "blocks of steps" if hasattr(blocks, "pass_steps") else "a window per step",
    "root": os.path.abspath(root),
    "rows": rows,
    "per_row": per_row,
    "examples_per_year": examples,
    "block_steps": getattr(blocks, "steps", 1),
    "steps_per_pass": lengths,
    "same_year_mates_per_example": round(float(np.mean(mates)), 1),
    "pairs_pass0": pairs,
    "pairs_again_pass1": again,
    "share_again": round(again / pairs, 5),
    "draws_seconds": round(seconds, 1),
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  parser.add_argument("--rows", type=int, default=2048)
  parser.add_argument("--per_row", type=int, default=7)
  parser.add_argument("--examples", type=int, default=1_000_000)
  args = parser.parse_args()
  print(json.dumps(measure(args.root, args.rows, args.per_row, args.examples)), flush=True)


if __name__ == "__main__":
  main()
