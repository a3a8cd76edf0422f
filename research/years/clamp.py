"""Does Temporal lose 2019-20 (C5, C6, C8) because it reads year tokens it never trained?

  python -m research.years.clamp --seed_dir=runs/fresh_s3/seed=3 [--resamples=1000]

Reads a seed of `--mode=reproduce` (its trained Temporal model in SEED_DIR/temporal, the
seed's results/eval.json and seed_summary.json) and scores Temporal on the TempLAMA 2019-20 test
queries with every year after 2018 replaced by 2018, the last trained year (`Clamped`), beside
the seed's own scores of Temporal as the paper queries it ("year: 2019", "year: 2020") and of
Uniform. "2020" occurs in no training text and "2019" only as a word
(research/world/measure.md, W1), so the clamped run shows what Temporal knows of the 2019-20
facts when its year input is one it trained on. Prints and writes SEED_DIR/results/clamp.json:
the clamped run's 2019-20 F1 and the margins (paired bootstrap over (subject, relation)
pairs, `tlm.miniature.stats`):
  clamped - asked:    Temporal's F1 with "year: 2018" minus its F1 as asked;
  clamped - uniform:  Temporal's F1 with "year: 2018" minus Uniform's (eval.json), C5's margin
                      with the year input replaced.
Pre-registered (settings, prediction, criterion) in
research/fresh/PREREGISTRATION.md, before any run.
"""

import argparse
import json
import os
from collections.abc import Sequence

import numpy as np

from research.committed import read_json
from tlm.configs.years import FUTURE_YEARS, TRAIN_YEARS
from tlm.miniature import stats
from tlm.miniature.claim_parts import PAIR

LAST_TRAINED = max(TRAIN_YEARS)


class Clamped:
  """A model queried with every year after `last` replaced by `last` (the rest unchanged)."""

  def __init__(self, model, last: int = LAST_TRAINED):
    self.model, self.last = model, int(last)

  def _years(self, years: Sequence[int]) -> list[int]:
    return [min(int(y), self.last) for y in years]

  def predict(self, queries, years):
    return self.model.predict(queries, self._years(years))

  def log_likelihood(self, queries, years, targets):
    return self.model.log_likelihood(queries, self._years(years), targets)


def margins(asked: dict, clamped: dict, uniform: dict, resamples: int = stats.RESAMPLES) -> dict:
  """The two margins (F1 points) and their paired pair-bootstrap intervals.

  Args:
    asked, clamped, uniform: {query id: record with "f1", "subject", "relation"}, the same
      ids in each (the TempLAMA 2019-20 queries).
  """
  ids = sorted(asked)
  if set(ids) != set(clamped) or set(ids) != set(uniform):
    raise ValueError("the three runs were scored on different queries")
  f1 = {
    name: 100.0 * np.array([run[i]["f1"] for i in ids], dtype=float)
    for name, run in (("asked", asked), ("clamped", clamped), ("uniform", uniform))
  }
  pool = stats.Pool.of([(asked[i]["subject"], asked[i]["relation"]) for i in ids], PAIR)
  out = {"queries": len(ids), "pairs": pool.n_clusters}
  for name, other in (("clamped - asked", "asked"), ("clamped - uniform", "uniform")):
    diff = f1["clamped"] - f1[other]
    lo, hi = stats.hierarchical_bootstrap(
      [lambda d, x=diff: float(np.mean(stats.take(x, d["q"])))], [{"q": pool}], resamples=resamples
    )
    out[name] = {"margin": float(diff.mean()), "ci95": [lo, hi]}
  return out


def _records(result: dict) -> dict:
  return {r["id"]: r for r in result["templama"]["records"] if r["year"] in FUTURE_YEARS}


def clamp_seed(seed_dir: str, resamples: int = stats.RESAMPLES) -> dict:
  """The clamped run of the seed's Temporal and its two margins; writes
  SEED_DIR/results/clamp.json."""
  from tlm.eval import experiments
  from tlm.eval.templama_eval import evaluate_templama
  from tlm.infer import trained_models

  workdir = os.path.join(seed_dir, "temporal")
  config = trained_models.saved_config(workdir)
  if config is None:
    raise SystemExit(f"{workdir}: no trained Temporal model (config.json)")
  results = os.path.join(seed_dir, "results")
  evals = read_json(os.path.join(results, "eval.json"))
  with open(os.path.join(results, "seed_summary.json")) as f:  # {variant: {"name": model}}
    names = {v: c["name"] for v, c in json.load(f)["configs"].items()}
  data = experiments.eval_data(config)
  future = [ex for ex in data.templama if ex.year in FUTURE_YEARS]
  model = Clamped(trained_models.load_model(config, workdir))
  clamped = evaluate_templama(model, future, durations=data.durations)
  out = margins(
    _records(evals[names["temporal"]]),
    {r["id"]: r for r in clamped["records"]},
    _records(evals[names["uniform"]]),
    resamples,
  )
  out["clamped_f1_2019_20"] = clamped["metrics"]["all"]
  with open(os.path.join(results, "clamp.json"), "w") as f:
    json.dump(out, f, indent=1)
  return out


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--seed_dir", required=True)
  ap.add_argument("--resamples", type=int, default=stats.RESAMPLES)
  args = ap.parse_args()
  print(json.dumps(clamp_seed(args.seed_dir, args.resamples), indent=1))


if __name__ == "__main__":
  main()
