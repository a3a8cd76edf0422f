"""The summary findings are computed from numbers: each one checked where it holds and not."""

import pytest

from tlm.eval import findings
from tlm.eval.routing import route_to_expert


def test_temporal_beats_uniform_holds_and_fails():
  f1 = {"temporal": {"2010-18": 0.5, "2019-20": 0.3}, "uniform": {"2010-18": 0.4, "2019-20": 0.2}}
  out = findings.temporal_beats_uniform(f1)
  assert out["holds"] is True
  assert out["numbers"]["temporal"]["2010-18"] == 0.5
  # Better on the seen years only: does not hold.
  f1["temporal"]["2019-20"] = 0.2
  assert findings.temporal_beats_uniform(f1)["holds"] is False


def test_uniform_vs_yearly_by_duration():
  f = {"uniform": {"short": 0.2, "long": 0.6}, "yearly": {"short": 0.3, "long": 0.5}}
  assert findings.uniform_vs_yearly_by_duration(f)["holds"] is True
  f["uniform"]["short"] = 0.35  # Uniform now better on short-lived facts too.
  assert findings.uniform_vs_yearly_by_duration(f)["holds"] is False
  f["uniform"]["short"] = 0.2
  f["yearly"]["long"] = 0.6  # a tie on long-lived facts is not "better"
  assert findings.uniform_vs_yearly_by_duration(f)["holds"] is False


def _entropy(frequent, rare, never):
  years = range(2018, 2030)
  return {
    "frequent": {y: frequent(y) for y in years},
    "rare": {y: rare(y) for y in years},
    "never": {y: never(y) for y in years},
  }


def test_future_entropy_ordered_and_growing():
  e = _entropy(lambda y: 2 + 0.1 * (y - 2018), lambda y: 1 + 0.05 * (y - 2018), lambda y: 0.5)
  out = findings.future_entropy_calibration(e)
  assert out["holds"] is True
  assert out["numbers"]["ordered"] is True
  assert out["numbers"]["slope_per_year_mean_of_sets"] == pytest.approx(0.05, rel=1e-9)
  assert out["numbers"]["slope_per_year"]["never"] == pytest.approx(0.0, abs=1e-12)
  assert out["numbers"]["mean_future_entropy"]["frequent"] == pytest.approx(2.6)  # 2.1..3.1


def test_future_entropy_misordered_or_flat():
  misordered = _entropy(lambda y: 1.0 + 0.1 * (y - 2018), lambda y: 2.0, lambda y: 0.5)
  out = findings.future_entropy_calibration(misordered)
  assert out["numbers"]["ordered"] is False and out["holds"] is False
  shrinking = _entropy(lambda y: 3 - 0.1 * (y - 2018), lambda y: 2.0, lambda y: 1.0)
  out = findings.future_entropy_calibration(shrinking)
  assert out["numbers"]["ordered"] is True and out["holds"] is False


def test_adaptation_forgets_less():
  adapt = {
    "temporal": {"before": {"2010-18": 0.5, "2019": 0.1}, "after": {"2010-18": 0.48, "2019": 0.3}},
    "uniform": {"before": {"2010-18": 0.4, "2019": 0.1}, "after": {"2010-18": 0.3, "2019": 0.35}},
  }
  out = findings.adaptation_forgets_less(adapt)
  assert out["holds"] is True
  assert out["numbers"]["loss_on_2010_18"]["temporal"] == pytest.approx(0.02)
  assert out["numbers"]["gain_on_2019"]["uniform"] == pytest.approx(0.25)
  adapt["temporal"]["after"]["2019"] = 0.1  # no gain on 2019
  assert findings.adaptation_forgets_less(adapt)["holds"] is False
  adapt["temporal"]["after"]["2019"] = 0.3
  adapt["temporal"]["after"]["2010-18"] = 0.2  # forgets more than Uniform
  assert findings.adaptation_forgets_less(adapt)["holds"] is False


def test_route_to_expert():
  experts = list(range(2010, 2019))
  assert route_to_expert(2014, experts) == 2014
  assert route_to_expert(2019, experts) == 2018
  assert route_to_expert(2029, experts) == 2018
  assert route_to_expert(2004, experts) == 2010
  assert route_to_expert(2013, [2010, 2016]) == 2010  # equidistant: the earlier expert
  with pytest.raises(ValueError):
    route_to_expert(2014, [])
