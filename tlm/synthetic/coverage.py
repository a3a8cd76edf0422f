"""How often and on which days the news of a year states each fact (its coverage).

Two rules, by `NewsSettings.coverage`:

- "floor" (world v3): every fact valid in the year gets `min_mentions` mentions, plus a share of
  the year's budget in proportion to its subject's weight times the days it holds; the days are
  uniform over those it holds.
- "salience" (world v4): no floor. A fact's rate on a day it holds is its subject's weight times
  the news of the day, `1 + change_burst * exp(-age / burst_days)`, where `age` is the days since
  its start (for an annual event's host, the days to or from this year's edition): a change is
  news, a tenure in its tenth year is not. The year's budget is divided in proportion to each
  fact's rate summed over the year (a multinomial), and each mention falls on a day drawn in
  proportion to the rate. A long-lived fact of a little-known subject goes unstated in some
  years; a short tenure is stated more per day than a long one.

Both return, per subject, the (day, index into `valid`) requests of the year, in the order the
news writer reads them (`news.NewsWriter.year_documents`), and draw from the news stream alone.
"""

import numpy as np

from tlm.synthetic.settings import NewsSettings
from tlm.synthetic.world_records import Fact, World


def _floor(world, valid, budget, settings, rng) -> list[np.ndarray]:
  extra = max(0, int(round(budget)) - settings.min_mentions * len(valid))
  weights = np.array([world.entities[f.subject].weight * (b - a + 1) for f, (a, b) in valid])
  counts = settings.min_mentions + rng.multinomial(extra, weights / weights.sum())
  return [rng.integers(a, b + 1, size=int(n)) for (_, (a, b)), n in zip(valid, counts)]


def daily_rates(fact: Fact, first: int, last: int, settings: NewsSettings) -> np.ndarray:
  """The news-of-the-day factor of `fact` on each day of [first, last] (the days it is news)."""
  days = np.arange(first, last + 1)
  if fact.start is None or settings.change_burst == 0:
    return np.ones(len(days))
  age = days - fact.start
  if fact.relation == "P276":  # an edition is news before and after it
    age = np.abs(age)
  return 1.0 + settings.change_burst * np.exp(-np.maximum(age, 0) / settings.burst_days)


def _salience(world, valid, budget, settings, rng) -> list[np.ndarray]:
  rates = [daily_rates(f, a, b, settings) for f, (a, b) in valid]
  weights = np.array(
    [world.entities[f.subject].weight * r.sum() for (f, _), r in zip(valid, rates)]
  )
  counts = rng.multinomial(int(round(budget)), weights / weights.sum())
  out = []
  for ((_, (a, _)), r), n in zip(zip(valid, rates), counts):
    out.append(a + rng.choice(len(r), size=int(n), p=r / r.sum()) if n else np.zeros(0, int))
  return out


def mention_days(
  world: World,
  valid: list[tuple[Fact, tuple[int, int]]],
  budget: float,
  settings: NewsSettings,
  rng: np.random.Generator,
) -> list[np.ndarray]:
  """The days on which each fact of `valid` ((fact, (first, last day it is news)) of a year) is
  stated, one array per fact, from a budget of `budget` fact sentences."""
  if settings.coverage == "floor":
    return _floor(world, valid, budget, settings, rng)
  if settings.coverage == "salience":
    return _salience(world, valid, budget, settings, rng)
  raise ValueError(f"unknown coverage rule {settings.coverage!r}")
