"""M2's measure: does a model's answer for a year follow that year's gold answer?

On the (subject, relation) pairs of the TempLAMA test split whose gold answer changes inside
2010-18, each query (pair, year) is scored by the model's normalized prediction p_y against
the pair's normalized gold answer sets G_y (`tlm.data.metrics.normalize_answer`):

- hit:  p_y is one of the pair's 2010-18 gold answers (in the union of its G_y);
- own:  p_y is that year's gold answer (in G_y).

The *right-year rate* is sum(own) / sum(hit) over all queries of the changing pairs: of the
answers that are some year's gold answer of the pair, the share that are the asked year's.
A model that knows a pair's answers but not which year each belongs to picks among them
without regard to the year; its rate is the *chance rate*:

  chance = sum over pairs of E[own under a uniformly random permutation of the pair's
           predictions over its years] / sum(hit)
         = sum over pairs of (1/n) * sum_{y, y'} [p_{y'} in G_y]  /  sum(hit),

n being the pair's number of 2010-18 queries. It is computed exactly (no simulation) from the
model's own predictions, so it keeps the model's mix of answers per pair and removes only
their alignment with the years; sum(hit) is the same under every permutation, so this is the
exact expected rate of the shuffled model. A model that gives one answer per pair (as
Uniform, whose input has no year, does) has rate == chance exactly; one whose answers change
at random over the years has rate == chance in expectation.

Per pair the numbers (own, hit, chance) are kept apart, so the claims resample pairs
(`tlm.miniature.stats`) and the rates are ratios of the resampled sums.
"""

from collections.abc import Mapping, Sequence

import numpy as np

from tlm.configs.years import TRAIN_YEARS
from tlm.data.metrics import normalize_answer
from tlm.miniature import measurements


def _gold_sets(cols: Mapping) -> list[frozenset]:
  if "answers" not in cols:
    raise measurements.MissingInput(
      "per_query.json has no 'answers' column (written before M2 needed every gold answer)"
    )
  return [frozenset(normalize_answer(str(a)) for a in answers) for answers in cols["answers"]]


def changing_pairs(meas: Mapping, model: str) -> list[list[int]]:
  """The query indices (in `measurements.templama(meas, model, TRAIN_YEARS)` order) of each pair
  whose gold answer set is not the same in all of its 2010-18 queries."""
  cols = measurements.templama(meas, model, TRAIN_YEARS)
  gold = _gold_sets(cols)
  pairs: dict = {}
  for i, key in enumerate(zip(cols["subject"].tolist(), cols["relation"].tolist())):
    pairs.setdefault(key, []).append(i)
  return [ix for ix in pairs.values() if len({gold[i] for i in ix}) > 1]


def right_year_counts(meas: Mapping, models: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
  """{model: {"own", "hit", "chance": one number per changing pair}} (module docstring).

  The pairs are those of the first model's gold answers; every model must have been scored
  on the same queries.
  """
  base = measurements.templama(meas, models[0], TRAIN_YEARS)
  gold = _gold_sets(base)
  changing = changing_pairs(meas, models[0])
  out = {}
  for m in models:
    cols = measurements.templama(meas, m, TRAIN_YEARS)
    if tuple(cols["id"]) != tuple(base["id"]):
      raise ValueError(f"M2: {m} was evaluated on other TempLAMA queries than {models[0]}")
    preds = [normalize_answer(str(p)) for p in cols["prediction"]]
    own, hit, chance = [], [], []
    for ix in changing:
      union = frozenset().union(*(gold[i] for i in ix))
      own.append(sum(preds[i] in gold[i] for i in ix))
      hit.append(sum(preds[i] in union for i in ix))
      chance.append(sum(preds[j] in gold[i] for i in ix for j in ix) / len(ix))
    out[m] = {
      k: np.asarray(v, dtype=float) for k, v in (("own", own), ("hit", hit), ("chance", chance))
    }
  return out


def rate(counts: Mapping[str, np.ndarray], idx=None, key: str = "own") -> float:
  """sum(counts[key]) / sum(hit) over the pairs `idx` (all if None); nan if nothing hit."""
  sel = (lambda a: a) if idx is None else (lambda a: a[idx])
  hits = float(np.sum(sel(counts["hit"])))
  return float(np.sum(sel(counts[key]))) / hits if hits else float("nan")


def changing_pair_shares(meas: Mapping, models: Sequence[str]) -> dict[str, np.ndarray]:
  """For each pair whose first answer changes over 2010-18, whether each model's normalized
  prediction changes too: {model: bool per pair}. (The earlier M2, kept as a description:
  it cannot fail against Uniform, whose input has no year.)"""
  gold = measurements.templama(meas, models[0], TRAIN_YEARS)
  pairs: dict = {}
  for i, key in enumerate(zip(gold["subject"].tolist(), gold["relation"].tolist())):
    pairs.setdefault(key, []).append(i)
  changing = [ix for ix in pairs.values() if len({gold["first_answer"][i] for i in ix}) > 1]
  out = {}
  for m in models:
    preds = [normalize_answer(p) for p in measurements.templama(meas, m, TRAIN_YEARS)["prediction"]]
    out[m] = np.array([len({preds[i] for i in ix}) > 1 for ix in changing], dtype=bool)
  return out
