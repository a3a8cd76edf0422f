"""Tests for tlm/input/sampling.py (the year-uniform mixture), tlm/data/formatting.py and
tlm/data/conditioning.py's `format_input`.

Statistical checks use a binomial tolerance of 4 standard deviations per cell,
|count - n p| <= 4 sqrt(n p (1 - p)) (two-sided tail about 6e-5 per cell); the draws are
deterministic, so a correct sampler passes every time and a biased one fails every time.
"""

import itertools
import types

import numpy as np
import pytest

from tlm.data import formatting
from tlm.data.conditioning import format_input
from tlm.data.formatting import TextExample
from tlm.errors import ConfigError, DataError
from tlm.input import sampling
from tlm.input.sampling import MixtureSampler

YEARS = tuple(range(2010, 2019))
SIGMAS = 4.0


def _sources(sizes=None, templama_size=5):
  """News slices whose sizes grow with the year (as in CustomNews), TempLAMA slices small."""
  sizes = sizes or {y: 3 + 4 * i for i, y in enumerate(YEARS + (2019,))}
  news = {
    y: [TextExample(f"news {y} #{i} <extra_id_0>.", f"span {y} {i}", y) for i in range(n)]
    for y, n in sizes.items()
  }
  templama = {
    y: [
      TextExample(f"q{i} plays for <extra_id_0>.", f"team {y} {i}", y) for i in range(templama_size)
    ]
    for y in sizes
  }
  return {"news_ssm": news, "templama": templama}


def _assert_binomial(count, n, p, what):
  sigma = np.sqrt(n * p * (1 - p))
  assert abs(count - n * p) <= SIGMAS * sigma, (
    f"{what}: {count} draws vs expected {n * p:.1f} +- {SIGMAS} * {sigma:.1f}"
  )


def _years_of(sampler, ids):
  return sampler.source_and_year(ids)[1]


# --- formatting ---------------------------------------------------------------------------


def test_format_input_strings_exact():
  text = "Lionel Messi plays for <extra_id_0>."
  assert format_input(text, 2014, "temporal") == "year: 2014 Lionel Messi plays for <extra_id_0>."
  assert format_input(text, 2014, "none") == "Lionel Messi plays for <extra_id_0>."
  assert format_input(text, 2019, "in_text") == "In 2019, Lionel Messi plays for <extra_id_0>."
  assert format_input(text, "2014-Q2", "temporal") == "year: 2014-Q2 " + text
  with pytest.raises(ConfigError, match="unknown time conditioning 'yearly'"):
    format_input(text, 2014, "yearly")


def test_templama_and_ssm_text():
  ex = types.SimpleNamespace(
    id="Q1_P54_2014",
    query="Lionel Messi plays for _X_.",
    answers=[["FC Barcelona", "Barça"], ["Argentina national football team"]],
    year=2014,
  )
  assert formatting.templama_text(ex) == TextExample(
    "Lionel Messi plays for <extra_id_0>.", "FC Barcelona", 2014
  )
  with pytest.raises(DataError, match="no _X_ blank"):
    formatting.templama_query_input("Lionel Messi plays for Barcelona.")
  with pytest.raises(DataError, match="has no answer"):
    formatting.templama_text(types.SimpleNamespace(id="x", query="_X_", answers=[], year=2014))
  record = {"inputs": "In <extra_id_0>, the club won.", "targets": "May 2014", "year": 2014}
  assert formatting.ssm_text(record, 2014) == ("In <extra_id_0>, the club won.", "May 2014", 2014)


# --- distributions ------------------------------------------------------------------------


def test_years_uniform_not_proportional_to_slice_size():
  sampler = MixtureSampler(_sources(), seed=3, years=YEARS, source_weights={"news_ssm": 1.0})
  n = 200_000
  ids = sampler.flat_ids(11, np.arange(n), 0)
  years = _years_of(sampler, ids)
  assert set(years.tolist()) == set(YEARS)  # 2019 is in the data but not in the mixture
  for y in YEARS:
    _assert_binomial(int((years == y).sum()), n, 1 / len(YEARS), f"year {y}")


def test_examples_uniform_within_a_year_slice():
  sampler = MixtureSampler(_sources(), seed=0, years=[2012], source_weights={"news_ssm": 1.0})
  n = 60_000
  ids = sampler.flat_ids(0, np.arange(n // 100)[:, None], np.arange(100)[None, :]).ravel()
  counts = np.bincount(ids - ids.min(), minlength=11)
  assert counts.size == 11  # 2012's slice has 3 + 4 * 2 = 11 examples
  for i, c in enumerate(counts):
    _assert_binomial(int(c), n, 1 / 11, f"example {i}")


@pytest.mark.parametrize(
  "weights", [{"news_ssm": 1000, "templama": 1}, {"news_ssm": 3, "templama": 1}]
)
def test_source_ratio(weights):
  sampler = MixtureSampler(_sources(), seed=1, years=YEARS, source_weights=weights)
  n = 2_000_000 if weights["news_ssm"] == 1000 else 100_000
  ids = sampler.flat_ids(5, np.arange(n // 1000)[:, None], np.arange(1000)[None, :]).ravel()
  source, years = sampler.source_and_year(ids)
  p = weights["templama"] / (weights["news_ssm"] + weights["templama"])
  assert sampler.source_names == ("news_ssm", "templama")
  _assert_binomial(int((source == 1).sum()), n, p, "templama draws")
  # Year-uniform within the rare source too.
  tl_years = years[source == 1]
  for y in YEARS:
    _assert_binomial(int((tl_years == y).sum()), tl_years.size, 1 / 9, f"templama year {y}")


@pytest.mark.parametrize("alpha", [0.1, 0.5, 0.9])
def test_adaptation_mixture_share(alpha):
  sampler = MixtureSampler(
    _sources(),
    seed=2,
    years=YEARS,
    new_years=[2019],
    new_year_prob=alpha,
    source_weights={"news_ssm": 1.0},
  )
  n = 100_000
  years = _years_of(sampler, sampler.flat_ids(0, np.arange(n), 7))
  n_new = int((years == 2019).sum())
  _assert_binomial(n_new, n, alpha, "new-year draws")
  for y in YEARS:
    _assert_binomial(int((years == y).sum()), n, (1 - alpha) / 9, f"old year {y}")


def test_adaptation_only_new_year_and_missing_old_data():
  sources = _sources()
  del sources["news_ssm"][2011]  # never drawn when alpha = 1
  sampler = MixtureSampler(
    sources,
    seed=0,
    years=YEARS,
    new_years=[2019],
    new_year_prob=1.0,
    source_weights={"news_ssm": 1.0},
  )
  assert set(_years_of(sampler, sampler.flat_ids(0, np.arange(1000), 0)).tolist()) == {2019}


def test_yearly_is_one_year_only():
  sampler = MixtureSampler(
    _sources(),
    seed=0,
    years=[2014],
    source_weights={"news_ssm": 1000, "templama": 1},
  )
  ids = sampler.flat_ids(0, np.arange(2000)[:, None], np.arange(10)[None, :]).ravel()
  assert set(_years_of(sampler, ids).tolist()) == {2014}
  sources = _sources()
  in_2014 = {(e.inputs, e.targets) for s in sources.values() for e in s[2014]}
  for i in ids[:200].tolist():
    draw = sampler.example(i)
    assert draw.year == 2014 and (draw.inputs, draw.targets) in in_2014  # as stored


def test_draws_are_independent_across_k_rows_and_steps():
  """Joint year pairs of neighbouring draws are uniform over the 81 cells (no correlation)."""
  sampler = MixtureSampler(_sources(), seed=5, years=YEARS, source_weights={"news_ssm": 1.0})
  other = MixtureSampler(_sources(), seed=6, years=YEARS, source_weights={"news_ssm": 1.0})
  y = lambda step, rows, ks: _years_of(sampler, sampler.flat_ids(step, rows, ks)) - 2010
  rows = np.arange(40_000)
  pairs = {
    "k, k+1": (y(0, rows, 0), y(0, rows, 1)),
    "row, row+1": (y(0, rows, 3), y(0, rows + 1, 3)),
    "step, step+1": (y(4, rows, 2), y(5, rows, 2)),
    "seed, seed+1": (y(4, rows, 2), _years_of(other, other.flat_ids(4, rows, 2)) - 2010),
  }
  for what, (a, b) in pairs.items():
    joint = np.bincount(a * 9 + b, minlength=81)
    for cell, c in enumerate(joint):
      _assert_binomial(int(c), rows.size, 1 / 81, f"{what} cell {divmod(cell, 9)}")


# --- determinism --------------------------------------------------------------------------


def test_pure_function_of_seed_step_row_k():
  make = lambda: MixtureSampler(
    _sources(), seed=9, years=YEARS, source_weights={"news_ssm": 10, "templama": 1}
  )
  fresh = make().flat_ids(7, np.arange(64)[:, None], np.arange(8)[None, :])
  used = make()
  for step in np.random.default_rng(0).permutation(20):
    used.flat_ids(int(step), np.arange(64)[:, None], np.arange(8)[None, :])
  np.testing.assert_array_equal(used.flat_ids(7, np.arange(64)[:, None], np.arange(8)), fresh)
  # Element by element, in reverse order, gives the same draws.
  one_by_one = [[int(used.flat_ids(7, r, k)) for k in range(8)] for r in reversed(range(64))]
  np.testing.assert_array_equal(np.array(one_by_one[::-1]), fresh)
  # The order the source mapping was built in does not matter.
  reordered = MixtureSampler(
    dict(reversed(list(_sources().items()))),
    seed=9,
    years=YEARS,
    source_weights={"templama": 1, "news_ssm": 10},
  )
  np.testing.assert_array_equal(reordered.flat_ids(7, np.arange(64)[:, None], np.arange(8)), fresh)
  # Other steps, seeds and rows differ (equal only by chance, ~1/50 per draw here).
  for other in (
    make().flat_ids(8, np.arange(64)[:, None], np.arange(8)),
    MixtureSampler(
      _sources(), seed=10, years=YEARS, source_weights={"news_ssm": 10, "templama": 1}
    ).flat_ids(7, np.arange(64)[:, None], np.arange(8)),
    make().flat_ids(7, np.arange(64, 128)[:, None], np.arange(8)),
  ):
    assert np.mean(other == fresh) < 0.1


_M64 = 2**64 - 1


def _ref_mix(x):
  x ^= x >> 30
  x = (x * 0xBF58476D1CE4E5B9) & _M64
  x ^= x >> 27
  x = (x * 0x94D049BB133111EB) & _M64
  return x ^ (x >> 31)


def _ref_unit(h, lane):
  return (_ref_mix((h + 0x9E3779B97F4A7C15 * lane) & _M64) >> 11) / 2.0**53


def test_hash_matches_pure_python_splitmix_reference():
  """The stream is pinned: a silent change would make resumed runs diverge from old ones."""
  sources = _sources()
  sampler = MixtureSampler(
    sources,
    seed=1234,
    years=YEARS,
    new_years=[2019],
    new_year_prob=0.25,
    source_weights={"news_ssm": 3, "templama": 1},
  )
  key = int(np.random.SeedSequence(1234).generate_state(1, np.uint64)[0])
  g = 0x9E3779B97F4A7C15
  table = [(s, y) for s in ("news_ssm", "templama") for y in YEARS + (2019,)]
  offsets = np.cumsum([0] + [len(sources[s][y]) for s, y in table])
  for step, row, k in itertools.product((0, 1, 123_456), (0, 5, 2047), (0, 3)):
    h = _ref_mix((key + g * (step + 1)) & _M64)
    h = _ref_mix((h + g * (row + 1)) & _M64)
    h = _ref_mix((h + g * (k + 1)) & _M64)
    source = int(_ref_unit(h, 1) >= 0.75)
    if _ref_unit(h, 2) < 0.25:
      year = 2019
    else:
      year = YEARS[int(_ref_unit(h, 3) * 9)]
    name = ("news_ssm", "templama")[source]
    index = int(_ref_unit(h, 4) * len(sources[name][year]))
    expected = offsets[table.index((name, year))] + index
    assert int(sampler.flat_ids(step, row, k)) == expected, (step, row, k)
    draw = sampler.draw(step, row, k)
    raw = sources[name][year][index]
    assert draw == (raw.inputs, raw.targets, year, name)  # as stored: the prefix is the batcher's


# --- errors -------------------------------------------------------------------------------


def test_configuration_errors():
  s = _sources()
  ok = dict(seed=0, years=YEARS, source_weights={"news_ssm": 1.0})
  with pytest.raises(ConfigError, match="source 'wiki' has weight > 0 but no data"):
    MixtureSampler(s, seed=0, years=YEARS, source_weights={"wiki": 1.0})
  with pytest.raises(ConfigError, match="no examples for year 2021"):
    MixtureSampler(s, seed=0, years=[2021], source_weights={"news_ssm": 1.0})
  with pytest.raises(ConfigError, match="all source weights are zero"):
    MixtureSampler(s, seed=0, years=YEARS, source_weights={"news_ssm": 0})
  with pytest.raises(ConfigError, match=">= 0"):
    MixtureSampler(s, seed=0, years=YEARS, source_weights={"news_ssm": -1})
  with pytest.raises(ConfigError, match="new_year_prob must be in"):
    MixtureSampler(s, **ok, new_years=[2019], new_year_prob=1.5)
  with pytest.raises(ConfigError, match="needs at least one new year"):
    MixtureSampler(s, **ok, new_year_prob=0.5)
  with pytest.raises(ConfigError, match="repeated year"):
    MixtureSampler(s, **ok, new_years=[2014], new_year_prob=0.5)
  sampler = MixtureSampler(s, **ok)
  with pytest.raises(ValueError, match="step must be non-negative"):
    sampler.flat_ids(-1, 0, 0)
  with pytest.raises(TypeError, match="rows must be integers"):
    sampler.flat_ids(0, np.array([0.5]), 0)
  assert sampling.NEWS_SSM == "news_ssm" and sampling.TEMPLAMA == "templama"
