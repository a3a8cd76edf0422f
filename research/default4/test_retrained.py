"""R2's judgement on hand-made adaptation curves (research/default4/retrained.py)."""

from research.default4 import retrained


def _adapt(curve):
  return {
    "retrained": {"2019-20": 40.0, "2010-18": 50.0},
    "retrained_steps": 2000,
    "curve": {str(k): {"2019-20": a, "2010-18": b} for k, (a, b) in curve.items()},
  }


def test_r2_needs_both_retrained_models_on_both_slices_below_their_steps():
  second = {"2019-20": 42.0, "2010-18": 49.0}
  got = retrained.judge(_adapt({113: (41.0, 51.0), 227: (43.0, 51.0), 340: (44.0, 49.5)}), second)
  assert got["holds"] and got["first_step"] == 227  # 113 is below the second on 2019-20
  assert got["r2_minus_retrained"] == {"2019-20": 2.0, "2010-18": -1.0}
  assert not retrained.judge(_adapt({113: (41.0, 51.0)}), second)["holds"]
  equal = retrained.judge(_adapt({113: (42.0, 51.0)}), second)  # a tie does not reach
  assert not equal["holds"] and equal["first_step"] is None
  late = _adapt({2000: (90.0, 90.0)})  # not below the retrained model's steps
  assert not retrained.judge(late, second)["holds"]
