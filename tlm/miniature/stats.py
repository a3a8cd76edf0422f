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
replicate draws the seeds with replacement, then, inside each drawn seed, the clusters of every
pool with replacement, and takes the mean over the drawn seeds of the per-seed margin. Why this
and not a t-interval over the per-seed margins: the per-seed margin is itself noisy (about a
hundred pairs), and the two-level resampling carries both the seed-to-seed and the
cluster-to-cluster variation into one interval; with one seed it is exactly the within-seed
paired bootstrap, so a single-seed and a multi-seed interval mean the same thing. Its known
weakness: with k seeds the outer level sees few distinct draws and understates the
between-seed variance by a factor (k - 1) / k, so three seeds give a somewhat narrow interval;
the per-seed verdicts and the hold-rate are reported beside it for that reason.

The interval is the percentile interval of the replicates (1000 by default, from a fixed
bootstrap seed, so the same numbers give the same interval). numpy only.
"""

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np

RESAMPLES = 1000
BOOTSTRAP_SEED = 20220101
LEVEL = 0.95
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
