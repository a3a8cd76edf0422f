"""The bootstrap intervals of `tlm.eval.stats` on constructed cases with known answers."""

import numpy as np
import pytest

from tlm.eval import stats


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
