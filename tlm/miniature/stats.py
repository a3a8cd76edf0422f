"""Confidence intervals for the claims' margins: a paired cluster bootstrap over items and seeds.

A claim's margin is a statistic of per-item numbers of one seed (e.g. the mean over the
TempLAMA 2010-18 queries of Temporal's F1 minus Uniform's). The numbers of one seed come in
*pools*: sets of items every model was scored on (the TempLAMA test queries, the held-out news
examples, the future-relations queries, ...). Resampling a pool draws one set of item indices
and applies it to every model's numbers, so the comparison stays paired: the item-to-item
variation that all models share cancels, as in a paired t-test.

Items are resampled in *clusters* where a pool says what its clusters are (`Pool`): a drawn
cluster brings all of its items. The bootstrap treats the resampled units as independent, so
the unit must be the one whose outcomes are independent: TempLAMA has 9-11 queries per
(subject, relation) pair whose outcomes are strongly correlated (Uniform gives one answer per
pair), so resampling single queries would understate the standard error by about
sqrt(1 + (m - 1) * rho) for clusters of m items with intra-cluster correlation rho (Kish's
design effect); resampling pairs does not. A pool given as a plain item count has independent
items (each item its own cluster). The claims say which unit each pool has and why
(`tlm.miniature.claims`), and `summary.json` states it (`bootstrap_unit`).

Across seeds (`reproduce.seeds`), the interval is a two-level (hierarchical) bootstrap: each
replicate draws the seeds with replacement, then, inside each drawn seed, the clusters of every pool
with replacement, and takes the mean over the drawn seeds of the per-seed margin. It carries both
the seed-to-seed and the cluster-to-cluster variation into one interval, and with one seed it is
exactly the within-seed paired bootstrap, so a single-seed and a multi-seed interval mean the same
thing. What it cannot do is learn the seed-to-seed variance from three seeds: the outer level sees
at most k distinct values, understates the between-seed variance by (k - 1) / k, and its percentiles
are those of a few points. Its coverage of the true mean margin, measured on simulated clustered
data with k = 3 seeds, 100 clusters of 10 items a seed and a between-seed standard deviation tau of
0, 1, 2 and 4 times the within-seed standard error of a seed's margin (`coverage_simulation`; C1 of
the miniature sits near 1), 1000 simulations each: 0.977, 0.932, 0.856 and 0.779 for the nominal
0.95 (`COVERAGE_K3`; the within-seed resampling counts the within-seed noise twice when tau = 0, and
the outer level undercovers as tau grows; percentile intervals from 500 resamples). It is therefore
reported beside the t-interval over the seed margins (`t_interval`): the per-seed margin already
carries its within-seed noise, so that interval's variance is the whole variance of a seed's margin,
and it has its nominal coverage for normal seed margins whatever tau is (0.945-0.953 in the same
simulation), at the price of t's wide quantile with k - 1 = 2 degrees of freedom (4.30 standard
errors). Neither interval can be narrower than what k seeds support; both are reported, the per-seed
verdicts and the hold-rate beside them. C1's seeds, for instance: +7.79, +10.09 and +15.45 give the
bootstrap's [+6.49, +15.94] and the t-interval's [+1.35, +20.87].

An interval over the seeds alone (a margin with no per-item numbers, such as C13's aggregate
F1) is not a 95% interval when there are few seeds: the percentile bootstrap of k seed values
is at most their range, and the range of k draws covers the median of their distribution with
probability 1 - 2^(1 - k) (0.75 for k = 3). `SEEDS_FOR_A_SEED_INTERVAL` says from how many seeds
on such an interval is reported as one; below, the seeds' range is reported and labelled so.

The interval is the percentile interval of the replicates (1000 by default, from a fixed
bootstrap seed, so the same numbers give the same interval). numpy only (the t quantile by a
series, `t_quantile`).
"""

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np

RESAMPLES = 1000
BOOTSTRAP_SEED = 20220101
LEVEL = 0.95
# A bootstrap over the seeds alone is reported as an interval from this many seeds on (below,
# as the seeds' range): with 3 seeds the range covers the median with probability 0.75.
SEEDS_FOR_A_SEED_INTERVAL = 4
# `coverage_simulation` at k = 3 seeds (research/intervals/coverage.json: 1000 simulations of 500
# resamples): {tau in within-seed standard errors: (the two-level bootstrap's coverage of the
# true mean margin, the t-interval's)}.
COVERAGE_K3 = {0.0: (0.977, 0.945), 1.0: (0.932, 0.953), 2.0: (0.856, 0.952), 4.0: (0.779, 0.950)}
ITEM = "item"  # the unit of a pool given as a plain item count

# Indices drawn per pool (None: the pool's items in their original order) -> the margin.
Statistic = Callable[[Mapping[str, np.ndarray | None]], float]


@dataclasses.dataclass(frozen=True, eq=False)
class Pool:
  """The items of a pool and the cluster each belongs to; a resample draws whole clusters.

  Attributes:
    clusters: the cluster index (0 .. number of clusters - 1) of each item, in item order.
    unit: what one cluster is, e.g. "(subject, relation) pair".
  """

  clusters: np.ndarray
  unit: str

  @classmethod
  def of(cls, labels: Sequence[Hashable], unit: str) -> "Pool":
    """A pool whose items with equal labels form one cluster (labels in item order)."""
    index: dict = {}
    codes = np.fromiter((index.setdefault(x, len(index)) for x in labels), dtype=np.int64)
    return cls(codes, unit)

  @classmethod
  def items(cls, n: int, unit: str = ITEM) -> "Pool":
    """A pool of n independent items (each its own cluster)."""
    return cls(np.arange(int(n), dtype=np.int64), unit)

  def __post_init__(self):
    codes = np.asarray(self.clusters, dtype=np.int64)
    if codes.ndim != 1 or (
      codes.size and (codes.min() < 0 or len(np.unique(codes)) != codes.max() + 1)
    ):
      raise ValueError("a pool's clusters must be one index per item, 0 .. k - 1, each used")
    order = np.argsort(codes, kind="stable")  # items grouped by cluster, in item order
    counts = np.bincount(codes) if codes.size else np.zeros(0, dtype=np.int64)
    object.__setattr__(self, "clusters", codes)
    object.__setattr__(self, "_order", order)
    object.__setattr__(self, "_counts", counts)
    object.__setattr__(
      self, "_starts", np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    )

  def __len__(self) -> int:
    return len(self.clusters)

  @property
  def n_clusters(self) -> int:
    return len(self._counts)

  def same_as(self, other: "Pool") -> bool:
    return self.unit == other.unit and np.array_equal(self.clusters, other.clusters)

  def draw(self, rng: np.random.Generator) -> np.ndarray | None:
    """Item indices of one resample: the clusters drawn with replacement, all their items."""
    k = self.n_clusters
    if k == 0:
      return None
    chosen = rng.integers(0, k, size=k)
    lens = self._counts[chosen]
    # The items of chosen cluster j sit at order[starts[j] : starts[j] + counts[j]].
    offsets = np.repeat(self._starts[chosen] - np.cumsum(lens) + lens, lens)
    return self._order[offsets + np.arange(int(lens.sum()))]


def as_pool(size: "int | Pool") -> Pool:
  """A pool as given: a Pool as is, a plain count as that many independent items."""
  return size if isinstance(size, Pool) else Pool.items(size)


def identity_indices(sizes: Mapping[str, "int | Pool"]) -> dict[str, None]:
  """The "no resampling" draw: the statistic on all items as they are."""
  return {pool: None for pool in sizes}


def take(values, indices: np.ndarray | None) -> np.ndarray:
  """`values[indices]` as an array; all of `values` when `indices` is None."""
  values = np.asarray(values)
  return values if indices is None else values[indices]


def replicates(
  statistics: Sequence[Callable],
  sizes: Sequence[Mapping[str, "int | Pool"]],
  *,
  resamples: int = RESAMPLES,
  seed: int = BOOTSTRAP_SEED,
) -> np.ndarray:
  """The two-level bootstrap's replicates: each drawn seed's statistic, kept apart.

  Args:
    statistics: one per seed; called with `{pool: item indices}` (a resample of each pool of
      that seed), returns the seed's margin, a number or a vector of numbers.
    sizes: one per seed; `{pool: Pool, or a number of independent items}`. A pool of size 0 is
      passed None (nothing to resample: e.g. a margin computed from aggregate numbers only).
    resamples: bootstrap replicates.
    seed: the bootstrap's own seed (fixed: the interval is a function of the numbers).

  Returns:
    (resamples, seeds, ...): replicate r's statistic on its s-th drawn seed; the mean over
    axis 1 is the replicate of the mean over seeds.
  """
  if len(statistics) != len(sizes) or not statistics:
    raise ValueError("need one statistic and one pool-size mapping per seed, at least one seed")
  pools = [{name: as_pool(n) for name, n in s.items()} for s in sizes]
  rng = np.random.default_rng(seed)
  k = len(statistics)
  reps = []
  for _ in range(resamples):
    chosen = rng.integers(0, k, size=k) if k > 1 else np.zeros(1, dtype=int)
    values = []
    for s in chosen:
      draw = {name: p.draw(rng) for name, p in pools[s].items()}
      values.append(np.asarray(statistics[s](draw), dtype=float))
    reps.append(values)
  return np.asarray(reps, dtype=float)


def percentile_interval(reps: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
  """The percentile interval of replicates; non-finite ones dropped, (nan, nan) if none left."""
  reps = np.asarray(reps, dtype=float)
  reps = reps[np.isfinite(reps)]
  if not len(reps):
    return float("nan"), float("nan")
  alpha = (1.0 - level) / 2
  lo, hi = np.quantile(reps, [alpha, 1.0 - alpha])
  return float(lo), float(hi)


def hierarchical_bootstrap(
  statistics: Sequence[Statistic],
  sizes: Sequence[Mapping[str, "int | Pool"]],
  *,
  resamples: int = RESAMPLES,
  seed: int = BOOTSTRAP_SEED,
  level: float = LEVEL,
) -> tuple[float, float]:
  """Percentile interval of the mean over seeds of a per-seed margin (`replicates`).

  Args:
    statistics: one per seed; called with `{pool: item indices}`, returns the seed's margin.
    sizes: one per seed; `{pool: Pool, or a number of independent items}`.
    resamples: bootstrap replicates.
    seed: the bootstrap's own seed.
    level: the coverage (0.95: the 2.5th and 97.5th percentiles).

  Returns:
    (lo, hi). Replicates whose statistic is not finite (e.g. a resample that left a group
    empty) are dropped; if none is finite, (nan, nan).
  """
  reps = replicates(statistics, sizes, resamples=resamples, seed=seed)
  return percentile_interval(reps.mean(axis=1), level)


def standard_error(
  statistic: Statistic,
  sizes: Mapping[str, "int | Pool"],
  *,
  resamples: int = RESAMPLES,
  seed: int = BOOTSTRAP_SEED,
) -> float:
  """The bootstrap standard error of one seed's statistic (finite replicates only)."""
  reps = replicates([statistic], [sizes], resamples=resamples, seed=seed)[:, 0]
  reps = reps[np.isfinite(reps)]
  return float(np.std(reps, ddof=1)) if len(reps) > 1 else float("nan")


def t_quantile(p: float, df: int) -> float:
  """The p-quantile of Student's t with `df` degrees of freedom (numpy only: the inverse of the
  distribution function by bisection on its regularized incomplete beta form, accurate to
  1e-10; df = 2 at 0.975 gives 4.3027)."""
  if df < 1 or not 0.0 < p < 1.0:
    raise ValueError(f"need df >= 1 and 0 < p < 1, got df={df}, p={p}")
  if p < 0.5:
    return -t_quantile(1.0 - p, df)
  lo, hi = 0.0, 1.0
  while _t_cdf(hi, df) < p:
    hi *= 2.0
  for _ in range(200):
    mid = 0.5 * (lo + hi)
    lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
    if hi - lo < 1e-12:
      break
  return 0.5 * (lo + hi)


def _t_cdf(t: float, df: int) -> float:
  """P(T <= t) for t >= 0 by Simpson's rule on the density (smooth: 4000 panels suffice)."""
  from math import gamma, pi, sqrt

  c = gamma((df + 1) / 2) / (sqrt(df * pi) * gamma(df / 2))
  x = np.linspace(0.0, t, 4001)
  f = c * (1.0 + x * x / df) ** (-(df + 1) / 2)
  h = t / 4000
  area = h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
  return 0.5 + float(area)


def t_interval(values: Sequence[float], level: float = LEVEL) -> list[float] | None:
  """The t-interval of the mean of per-seed margins: mean +- t(k - 1) * sd / sqrt(k).

  Exact for normal seed margins; it needs no model of the within-seed noise (each seed's margin
  carries its own). None with fewer than two finite values (no spread to estimate)."""
  xs = np.asarray([v for v in values if v is not None], dtype=float)
  xs = xs[np.isfinite(xs)]
  k = len(xs)
  if k < 2:
    return None
  half = t_quantile(0.5 + level / 2, k - 1) * float(np.std(xs, ddof=1)) / np.sqrt(k)
  return [float(xs.mean() - half), float(xs.mean() + half)]


def coverage_simulation(
  tau: float,
  *,
  seeds: int = 3,
  clusters: int = 100,
  per_cluster: int = 10,
  simulations: int = 2000,
  resamples: int = RESAMPLES,
  seed: int = 0,
) -> dict[str, float]:
  """How often each reported interval covers the true mean margin, on simulated clustered data.

  Each simulated seed s has a true margin mu + b_s, b_s ~ N(0, tau^2) (the seed-to-seed
  variation of training), and `clusters` clusters of `per_cluster` items; an item's margin is
  the seed's plus its cluster's effect ~ N(0, 1) plus its own ~ N(0, 1). The within-seed
  standard error of a seed's margin is then sqrt((1 + 1 / per_cluster) / clusters), and `tau`
  is given in units of it. Returns {"bootstrap": share of the two-level bootstrap's intervals
  (`hierarchical_bootstrap`, the claims' pools resampled by cluster) covering mu, "t": the same
  for `t_interval` over the seed margins}."""
  rng = np.random.default_rng(seed)
  se = np.sqrt((1.0 + 1.0 / per_cluster) / clusters)
  labels = np.repeat(np.arange(clusters), per_cluster)
  pool = Pool(labels, "cluster")
  hits = {"bootstrap": 0, "t": 0}
  for i in range(simulations):
    data = []
    for _ in range(seeds):
      b = rng.normal(0.0, tau * se)
      cluster = rng.normal(0.0, 1.0, clusters)[labels]
      data.append(b + cluster + rng.normal(0.0, 1.0, len(labels)))
    statistics = [lambda d, x=x: float(np.mean(take(x, d["q"]))) for x in data]
    lo, hi = hierarchical_bootstrap(
      statistics, [{"q": pool}] * seeds, resamples=resamples, seed=seed + 1 + i
    )
    hits["bootstrap"] += lo <= 0.0 <= hi
    t_lo, t_hi = t_interval([x.mean() for x in data])
    hits["t"] += t_lo <= 0.0 <= t_hi
  return {k: v / simulations for k, v in hits.items()}
