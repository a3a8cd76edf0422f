"""Confidence intervals for the claims' margins: a paired bootstrap over queries and seeds.

A claim's margin is a statistic of per-query numbers of one seed (e.g. the mean over the
TempLAMA 2010-18 queries of Temporal's F1 minus Uniform's). The numbers of one seed come in
*pools*: sets of items every model was scored on (the TempLAMA test queries, the held-out news
examples, the future-relations queries, ...). Resampling a pool draws one set of item indices
and applies it to every model's numbers, so the comparison stays paired: the query-to-query
variation that all models share cancels, as in a paired t-test.

Across seeds (`reproduce.seeds`), the interval is a two-level (hierarchical) bootstrap: each
replicate draws the seeds with replacement, then, inside each drawn seed, the items of every
pool with replacement, and takes the mean over the drawn seeds of the per-seed margin. Why this
and not a t-interval over the per-seed margins: the per-seed margin is itself noisy (a few
hundred queries), and the two-level resampling carries both the seed-to-seed and the
query-to-query variation into one interval; with one seed it is exactly the within-seed paired
bootstrap, so a single-seed and a multi-seed interval mean the same thing. Its known weakness:
with k seeds the outer level sees few distinct draws and understates the between-seed
variance by a factor (k - 1) / k, so three seeds give a somewhat narrow interval; the per-seed
verdicts and the hold-rate are reported beside it for that reason.

The interval is the percentile interval of the replicates (1000 by default, from a fixed
bootstrap seed, so the same numbers give the same interval). numpy only.
"""

from collections.abc import Callable, Mapping, Sequence

import numpy as np

RESAMPLES = 1000
BOOTSTRAP_SEED = 20220101
LEVEL = 0.95

# Indices drawn per pool (None: the pool's items in their original order) -> the margin.
Statistic = Callable[[Mapping[str, np.ndarray | None]], float]


def identity_indices(sizes: Mapping[str, int]) -> dict[str, None]:
  """The "no resampling" draw: the statistic on all items as they are."""
  return {pool: None for pool in sizes}


def take(values, indices: np.ndarray | None) -> np.ndarray:
  """`values[indices]` as an array; all of `values` when `indices` is None."""
  values = np.asarray(values)
  return values if indices is None else values[indices]


def hierarchical_bootstrap(
  statistics: Sequence[Statistic],
  sizes: Sequence[Mapping[str, int]],
  *,
  resamples: int = RESAMPLES,
  seed: int = BOOTSTRAP_SEED,
  level: float = LEVEL,
) -> tuple[float, float]:
  """Percentile interval of the mean over seeds of a per-seed margin.

  Args:
    statistics: one per seed; called with `{pool: item indices}` (a resample of each pool of
      that seed), returns the seed's margin.
    sizes: one per seed; `{pool: number of items}`. A pool of size 0 is passed None (nothing to
      resample: e.g. a margin computed from aggregate numbers only).
    resamples: bootstrap replicates.
    seed: the bootstrap's own seed (fixed: the interval is a function of the numbers).
    level: the coverage (0.95: the 2.5th and 97.5th percentiles).

  Returns:
    (lo, hi). Replicates whose statistic is not finite (e.g. a resample that left a group
    empty) are dropped; if none is finite, (nan, nan).
  """
  if len(statistics) != len(sizes) or not statistics:
    raise ValueError("need one statistic and one pool-size mapping per seed, at least one seed")
  rng = np.random.default_rng(seed)
  k = len(statistics)
  reps = np.empty(resamples)
  for r in range(resamples):
    chosen = rng.integers(0, k, size=k) if k > 1 else np.zeros(1, dtype=int)
    values = []
    for s in chosen:
      draw = {pool: (rng.integers(0, n, size=n) if n > 0 else None) for pool, n in sizes[s].items()}
      values.append(statistics[s](draw))
    reps[r] = np.mean(values)
  reps = reps[np.isfinite(reps)]
  if not len(reps):
    return float("nan"), float("nan")
  alpha = (1.0 - level) / 2
  lo, hi = np.quantile(reps, [alpha, 1.0 - alpha])
  return float(lo), float(hi)
