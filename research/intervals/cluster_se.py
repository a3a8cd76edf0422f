"""How much wider the claims' intervals are with the cluster bootstrap than with single items.

  python -m research.intervals.cluster_se --seed_dir=runs/reproduce/seed=0 \\
      [--ssm_dir=~/.cache/tlm/world-v2-s0-x1/ssm] [--resamples=1000]

Reads one seed's `results/per_query.json` (and `results/eval.json` for the gold answers that
M2 needs when per_query.json predates its `answers` column) and prints, per claim component,
the bootstrap standard error of its margin with each pool resampled by its unit
(`tlm.miniature.claims`: TempLAMA by (subject, relation) pair) and with every item resampled
on its own (the claims' bootstrap before the cluster one), and their ratio. With `--ssm_dir`
(the world's SSM directory), the news pools are also measured with the examples clustered by
their article's date: per_query.json records no article, so the evaluated examples are matched
back to the SSM test files by the evaluation's own rule (`heldout.spread`) and checked
against the recorded target lengths; a date's examples are a union of whole articles, so the
date is a valid (slightly coarse) cluster.
"""

import argparse
import json
import os

import numpy as np

from research.committed import read_json
from tlm.configs.years import FUTURE_YEARS, TRAIN_SLICE, TRAIN_YEARS
from tlm.miniature import (
  claim_parts,
  claims,
  stats,
)
from tlm.miniature.claim_summary import pool_sizes


def _add_answers(meas: dict, eval_json: str) -> None:
  """Fills the `answers` column from eval.json's records where per_query.json lacks it."""
  evals = read_json(eval_json)
  for model, block in meas["models"].items():
    cols = block["templama"]
    if "answers" in cols:
      continue
    result = (
      evals[model]
      if model in evals
      else next((v for k, v in evals.items() if k.endswith(model)), None)
    )
    if result is None:
      raise SystemExit(f"{eval_json}: no evaluation of {model}")
    answers = {r["id"]: r["answers"] for r in result["templama"]["records"]}
    cols["answers"] = [answers[i] for i in cols["id"]]


def _news_dates(meas: dict, ssm_dir: str) -> list[str]:
  """The date of each evaluated news example, matched back to the SSM test files."""
  from tlm.data.vocab import Vocabulary
  from tlm.eval.heldout import spread

  news = next(iter(meas["models"].values()))["news"]
  years = news["year"]
  vocab = Vocabulary(os.path.join(os.path.dirname(ssm_dir.rstrip("/")), "world", "spiece.model"))
  dates, lengths = [], []
  for y in sorted(set(years)):
    with open(os.path.join(ssm_dir, "test", f"{y}.jsonl")) as f:
      rows = [json.loads(line) for line in f]
    picked = spread(rows, years.count(y))
    dates += [r["date"] for r in picked]
    lengths += [len(vocab.encode(r["targets"])) for r in picked]
  offset = set(np.asarray(news["tokens"]) - np.asarray(lengths))
  if len(dates) != len(years) or len(offset) != 1:
    raise SystemExit("the news examples do not match the SSM test files (lengths differ)")
  return dates


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--seed_dir", required=True)
  ap.add_argument("--ssm_dir", default="")
  ap.add_argument("--resamples", type=int, default=1000)
  args = ap.parse_args()
  results = os.path.join(args.seed_dir, "results")
  meas = read_json(os.path.join(results, "per_query.json"))
  _add_answers(meas, os.path.join(results, "eval.json"))
  dates = _news_dates(meas, os.path.expanduser(args.ssm_dir)) if args.ssm_dir else None
  print(
    f"seed {meas['seed']}, {args.resamples} resamples: SE with each pool's unit / SE with "
    f"single items (the ratio); pools: items / clusters"
  )
  for claim in claims.CLAIMS + claims.MECHANISM:
    comps, missing = claim.components(meas)
    if not comps or not any(c.pools for c in comps):
      print(f"{claim.id}: no resampled pool ({'; '.join(missing) or 'aggregate numbers'})")
      continue
    pools = pool_sizes(comps)
    items = {name: stats.Pool.items(len(p)) for name, p in pools.items()}
    by_date = {
      name: stats.Pool.of([dates[i] for i in _news_index(meas, name)], "date")
      if dates and p.unit == claim_parts.NEWS_UNIT
      else p
      for name, p in pools.items()
    }
    shape = ", ".join(f"{n}: {len(p)} / {p.n_clusters}" for n, p in pools.items())
    print(f"{claim.id} ({shape})")
    for c in comps:
      if not c.pools:
        continue
      se = {
        k: stats.standard_error(c.margin, {n: v[n] for n in c.pools}, resamples=args.resamples)
        for k, v in (("unit", pools), ("item", items), ("date", by_date))
      }
      line = f"  {c.name}: {se['unit']:.4g} / {se['item']:.4g} = {se['unit'] / se['item']:.2f}"
      if dates and any(pools[n].unit == claim_parts.NEWS_UNIT for n in c.pools):
        line += f"; news by article date: {se['date'] / se['item']:.2f}"
      print(line)


def _news_index(meas: dict, pool: str) -> list[int]:
  """The indices, among all evaluated news examples, of the examples of a news pool."""
  years = next(iter(meas["models"].values()))["news"]["year"]
  want = TRAIN_YEARS if TRAIN_SLICE in pool else FUTURE_YEARS
  return [i for i, y in enumerate(years) if y in want]


if __name__ == "__main__":
  main()
