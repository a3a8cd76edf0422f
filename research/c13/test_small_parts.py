"""C13's small parts against the sampling interval (research/c13/small_parts.py): the committed
parts it judges, the per-item statistic against `figure_claims`' aggregate one, the checks and
the criterion on hand-made scores."""

import numpy as np
import pytest

from research.c13 import small_parts as sp
from tlm.configs.years import SLICES, TRAIN_SLICE

OLD = list(SLICES[TRAIN_SLICE])


def test_the_cells_are_the_committed_failing_parts():
  for seed, name in sp.CELLS.values():
    _, parts = sp.committed(seed)
    assert parts[name] < 0, (seed, name)
  assert [round(sp.committed(s)[1][n], 3) for s, n in sp.CELLS.values()] == [-0.287, -0.992, -0.28]


def _scores(f1_old, f1_new, news_old, news_new):
  """One evaluation's per-item scores: two (subject, relation) pairs of TempLAMA 2010-18 queries
  (two queries each) and one 2019 query; news: two 2010-18 examples and one 2019 example."""
  tl_ids = ["a_r_2010", "a_r_2011", "b_r_2010", "b_r_2011", "c_r_2019"]
  return {
    "templama": {
      "id": tl_ids,
      "year": [2010, 2011, 2010, 2011, 2019],
      "subject": ["a", "a", "b", "b", "c"],
      "relation": ["r"] * 5,
      "f1": [*f1_old, f1_new],
    },
    "news": {"year": [2012, 2015, 2019], "f1": [*news_old, news_new]},
  }


def _all(values):
  """{(model, alpha): scores}; each value: (TempLAMA old, TempLAMA new, news old, news new)."""
  return {k: _scores(*v) for k, v in values.items()}


BEFORE = ([1.0, 1.0, 0.5, 0.5], 0.0, [1.0, 0.0], 0.0)
AFTER_U = ([0.5, 1.0, 0.5, 0.0], 1.0, [0.5, 0.0], 1.0)  # loses 0.25 on TempLAMA 2010-18
AFTER_T = ([1.0, 1.0, 0.5, 0.0], 1.0, [1.0, 0.0], 0.5)  # loses 0.125


def test_part_statistics_are_paired_item_means():
  scores = _all(
    {
      **{(m, None): BEFORE for m in sp.MODELS},
      **{("uniform", a): AFTER_U for a in sp.ALPHAS},
      **{("temporal", a): AFTER_T for a in sp.ALPHAS},
    }
  )
  parts = sp.part_items(scores)
  v, pool = parts["TempLAMA alpha 0.3: uniform loss on 2010-18"]
  assert float(np.mean(v)) == pytest.approx(25.0)
  assert pool.n_clusters == 2 and len(pool) == 4  # pairs, not queries
  v, _ = parts["TempLAMA alpha 0.5: uniform loss - temporal loss"]
  assert float(np.mean(v)) == pytest.approx(12.5)
  v, pool = parts["news alpha 0.3: uniform loss on 2010-18"]
  assert float(np.mean(v)) == pytest.approx(25.0) and pool.n_clusters == 2
  v, _ = parts["news alpha 0.3: temporal gain on 2019"]
  assert float(np.mean(v)) == pytest.approx(50.0)
  assert len(parts) == 2 * 2 * 4  # benches x alphas x (two gains, a loss, loss - loss)


def test_different_items_are_refused():
  scores = _all({(m, a): BEFORE for m in sp.MODELS for a in (None, *sp.ALPHAS)})
  scores[("temporal", "0.5")]["templama"]["id"][0] = "z_r_2010"
  with pytest.raises(sp.DataError, match="different items"):
    sp.part_items(scores)


def test_the_interval_resamples_whole_clusters():
  from tlm.miniature.stats import Pool

  # Two clusters whose items are equal inside: the interval's ends are the clusters' values.
  lo, hi = sp.interval(np.array([1.0, 1.0, 3.0, 3.0]), Pool.of(["a", "a", "b", "b"], "pair"))
  assert (lo, hi) == pytest.approx((1.0, 3.0))
  assert sp.interval(np.full(50, 2.0), Pool.items(50)) == pytest.approx((2.0, 2.0))


def test_slices_equal_within_the_tolerance_and_on_the_same_keys():
  a = {"2010-18": 0.5, "2019": None, "news": {"2010-18": 0.4}}
  assert sp.slices_equal(a, {"2010-18": 0.5 + 1e-12, "2019": None, "news": {"2010-18": 0.4}})
  assert not sp.slices_equal(a, {"2010-18": 0.5 + 1e-6, "2019": None, "news": {"2010-18": 0.4}})
  assert not sp.slices_equal(a, {"2010-18": 0.5, "2019": None})


def _seed(seed, margins, ok=True):
  parts = {name: {"margin": m, "ci95": ci} for name, (m, ci) in margins.items()}
  return {"seed": seed, "V1": ok, "V2": ok, "V3": True, "parts": parts}


def test_the_criterion_cell_by_cell():
  a, b, c = (sp.CELLS[k][1] for k in "ABC")
  inside = {
    1: _seed(1, {a: (-0.3, [-1.0, 0.5])}),
    2: _seed(2, {b: (-1, [-3, 1]), c: (-0.3, [-1, 0])}),
  }
  j = sp.judge(inside)
  assert j["checks_ok"] and all(x["contains_zero"] for x in j["cells"].values())
  assert j["outcome"].startswith("all three")
  below = {**inside, 2: _seed(2, {b: (-1, [-2.0, -0.1]), c: (-0.3, [-1, 0.2])})}
  j = sp.judge(below)
  assert j["cells"]["B"]["class"].startswith("not explained") and j["outcome"].startswith("not all")
  void = {**inside, 1: _seed(1, {a: (-0.3, [-1.0, 0.5])}, ok=False)}
  assert sp.judge(void)["outcome"].startswith("void")
