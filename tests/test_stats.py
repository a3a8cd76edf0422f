"""The bootstrap intervals of `tlm.miniature.stats` on constructed cases with known answers."""

import numpy as np
import pytest

from tlm.miniature import stats


def _mean_diff(a, b):
  return lambda idx: float(np.mean(stats.take(a, idx["q"]) - stats.take(b, idx["q"])))


def test_paired_bootstrap_cancels_the_shared_query_variation():
  # Model A is exactly 0.01 better than B on every query, and queries differ wildly in
  # difficulty: the paired interval is the point 0.01; an unpaired one would span zero.
  rng = np.random.default_rng(0)
  b = rng.uniform(0, 1, size=500)
  a = b + 0.01
  lo, hi = stats.hierarchical_bootstrap([_mean_diff(a, b)], [{"q": 500}])
  np.testing.assert_allclose([lo, hi], [0.01, 0.01], atol=1e-12)


def test_paired_bootstrap_matches_the_normal_interval_of_a_mean():
  # Differences with sd 1 over n = 400 queries: the 95% interval of their mean is about
  # mean +- 1.96 / sqrt(400) = mean +- 0.098.
  rng = np.random.default_rng(1)
  d = rng.normal(0.3, 1.0, size=400)
  zeros = np.zeros_like(d)
  lo, hi = stats.hierarchical_bootstrap([_mean_diff(d, zeros)], [{"q": 400}], resamples=4000)
  half = 1.96 * d.std() / np.sqrt(len(d))
  assert lo == pytest.approx(d.mean() - half, abs=0.015)
  assert hi == pytest.approx(d.mean() + half, abs=0.015)
  assert lo < d.mean() < hi


def test_across_seeds_the_outer_level_resamples_seeds():
  # No within-seed variation, seed margins 1, 2, 3: the mean of three seeds drawn with
  # replacement is 1 with probability 1/27 > 2.5% and 3 likewise, so the interval is [1, 3].
  statistics = [(lambda idx, m=m: float(m)) for m in (1.0, 2.0, 3.0)]
  lo, hi = stats.hierarchical_bootstrap(statistics, [{"q": 10}] * 3)
  assert (lo, hi) == (1.0, 3.0)
  # A single seed: the within-seed bootstrap only (a constant statistic gives a point).
  assert stats.hierarchical_bootstrap(statistics[:1], [{}]) == (1.0, 1.0)


def test_interval_is_a_function_of_the_numbers():
  d = np.random.default_rng(2).normal(size=50)
  z = np.zeros(50)
  first = stats.hierarchical_bootstrap([_mean_diff(d, z)], [{"q": 50}])
  assert stats.hierarchical_bootstrap([_mean_diff(d, z)], [{"q": 50}]) == first
  assert stats.hierarchical_bootstrap([_mean_diff(d, z)], [{"q": 50}], seed=3) != first


def test_non_finite_replicates_are_dropped_and_sizes_must_match():
  lo, hi = stats.hierarchical_bootstrap([lambda idx: float("nan")], [{"q": 3}], resamples=5)
  assert np.isnan(lo) and np.isnan(hi)
  with pytest.raises(ValueError):
    stats.hierarchical_bootstrap([lambda idx: 0.0], [])


# ---- clusters ---------------------------------------------------------------------------------


def _clustered_world(clusters: int, size: int):
  """Per-query differences in clusters of `size` perfectly correlated queries (all of a
  cluster's queries have its value): cluster values with mean 0.25 and sd 1, exactly."""
  z = np.random.default_rng(7).normal(size=clusters)
  values = (z - z.mean()) / z.std() + 0.25
  d = np.repeat(values, size)
  labels = np.repeat([f"S{c}_P54" for c in range(clusters)], size)
  stat = lambda idx: float(np.mean(stats.take(d, idx["q"])))  # noqa: E731
  return stat, labels


def test_per_query_resampling_is_too_narrow_on_clustered_queries_and_the_cluster_one_is_not():
  # 30 clusters of 10 identical queries: in truth 30 independent values with sd 1, so the 95%
  # interval of their mean is about 0.25 +- 1.96 / sqrt(30) = [-0.11, +0.61], which covers 0.
  # Resampling the 300 queries as if independent gives +- 1.96 / sqrt(300): [0.14, 0.36].
  stat, labels = _clustered_world(30, 10)
  per_query = stats.hierarchical_bootstrap([stat], [{"q": len(labels)}], resamples=2000)
  cluster = stats.hierarchical_bootstrap(
    [stat], [{"q": stats.Pool.of(labels, "pair")}], resamples=2000
  )
  assert 0 < per_query[0] < 0.25 < per_query[1]
  assert cluster[0] < 0 < 0.25 < cluster[1]
  half = 1.96 / np.sqrt(30)
  np.testing.assert_allclose(cluster, [0.25 - half, 0.25 + half], atol=0.05)


@pytest.mark.parametrize("size", [4, 9, 16])
def test_cluster_interval_widens_as_the_root_of_the_cluster_size(size):
  # Perfectly correlated clusters of m queries: the per-query interval is sqrt(m) too narrow.
  stat, labels = _clustered_world(40, size)
  width = lambda ci: ci[1] - ci[0]  # noqa: E731
  per_query = stats.hierarchical_bootstrap([stat], [{"q": len(labels)}], resamples=2000)
  cluster = stats.hierarchical_bootstrap(
    [stat], [{"q": stats.Pool.of(labels, "pair")}], resamples=2000
  )
  assert width(cluster) / width(per_query) == pytest.approx(np.sqrt(size), rel=0.15)


def test_clusters_of_one_are_the_per_item_bootstrap():
  d = np.random.default_rng(3).normal(size=60)
  stat = lambda idx: float(np.mean(stats.take(d, idx["q"])))  # noqa: E731
  items = stats.hierarchical_bootstrap([stat], [{"q": 60}])
  ones = stats.hierarchical_bootstrap([stat], [{"q": stats.Pool.of(range(60), "item")}])
  assert items == ones  # the same draws: a plain count is a pool of 60 clusters of one


def test_a_drawn_cluster_brings_all_of_its_items():
  labels = ["a", "b", "a", "c", "b", "a"]  # a: items 0, 2, 5; b: 1, 4; c: 3
  pool = stats.Pool.of(labels, "pair")
  assert (len(pool), pool.n_clusters) == (6, 3)
  np.testing.assert_array_equal(pool.clusters, [0, 1, 0, 2, 1, 0])
  members = {0: [0, 2, 5], 1: [1, 4], 2: [3]}
  rng = np.random.default_rng(0)
  for _ in range(20):
    idx = pool.draw(rng)
    picked = [labels[i] for i in idx]
    # Each drawn cluster appears with all of its items, and the draw has 3 clusters' worth.
    counts = {c: picked.count(c) for c in set(picked)}
    for c, n in counts.items():
      size = len(members["abc".index(c)])
      assert n % size == 0
    assert sum(n // len(members["abc".index(c)]) for c, n in counts.items()) == 3
  assert stats.Pool.of([], "pair").draw(rng) is None
  assert pool.same_as(stats.Pool.of(labels, "pair"))
  assert not pool.same_as(stats.Pool.of(labels, "item"))
  assert not pool.same_as(stats.Pool.of(["a", "a", "a", "c", "b", "a"], "pair"))
  with pytest.raises(ValueError, match="one index per item"):
    stats.Pool(np.array([0, 2]), "pair")  # cluster 1 unused


def test_replicates_keep_each_seed_and_each_output_apart():
  statistics = [(lambda idx, m=m: np.array([m, -m])) for m in (1.0, 2.0)]
  reps = stats.replicates(statistics, [{}, {}], resamples=50)
  assert reps.shape == (50, 2, 2)
  np.testing.assert_array_equal(reps[:, :, 1], -reps[:, :, 0])
  assert set(np.unique(reps[:, :, 0])) == {1.0, 2.0}
  se = stats.standard_error(
    lambda idx: float(np.mean(stats.take(np.arange(100.0), idx["q"]))), {"q": 100}
  )
  assert se == pytest.approx(np.arange(100.0).std() / 10, rel=0.1)


def test_t_quantile_and_interval():
  assert stats.t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-4)
  assert stats.t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-3)
  assert stats.t_quantile(0.025, 4) == pytest.approx(-2.7764, abs=1e-4)
  lo, hi = stats.t_interval([1.0, 2.0, 3.0])
  assert (lo + hi) / 2 == pytest.approx(2.0) and hi - 2.0 == pytest.approx(4.3027 / 3**0.5, 1e-4)
  assert stats.t_interval([1.0]) is None and stats.t_interval([1.0, None]) is None


@pytest.mark.parametrize("tau", [0.0, 4.0])
def test_reported_coverage_of_both_intervals_on_clustered_data(tau):
  # Simulated seeds with a known between-seed sd (tau within-seed standard errors), fewer and
  # smaller than in COVERAGE_K3's run (20 clusters of 5 items, 300 simulations of 200
  # resamples) to stay fast. The tolerance is about three binomial standard errors of 300
  # simulations (0.013 at 0.95, 0.024 at 0.77) plus the smaller design's own difference.
  got = stats.coverage_simulation(
    tau, clusters=20, per_cluster=5, simulations=300, resamples=200, seed=7
  )
  boot, t = stats.COVERAGE_K3[tau]
  assert got["bootstrap"] == pytest.approx(boot, abs=0.06)
  assert got["t"] == pytest.approx(t, abs=0.04) and t == pytest.approx(0.95, abs=0.02)
  # What the docstring says: the bootstrap over-covers with no seed variance and falls well
  # below 0.95 with a large one; the t-interval keeps 0.95.
  assert (boot > 0.95) if tau == 0 else (boot < 0.85)
