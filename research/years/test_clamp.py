"""The clamp check of C5, C6 and C8 (research/years/clamp.py)."""

import pytest

from research.years.clamp import Clamped, margins
from tlm.infer.conditioned import TimeConditioned


class _Echo:
  """A predictor that answers with the text it reads."""

  def predict(self, inputs):
    return list(inputs)


def test_clamped_model_reads_2018_for_every_later_year_and_its_margins():
  # The prepared check of C5, C6 and C8 (research/years/clamp.py): the clamped model sees
  # "2018" for 2019 and 2020 and the other years unchanged; the margins pair queries by id.
  seen = []

  class Recorder:
    def predict(self, queries, years):
      seen.extend(years)
      return ["x"] * len(queries)

  Clamped(Recorder()).predict(["a", "b", "c"], [2017, 2019, 2020])
  assert seen == [2017, 2018, 2018]
  temporal = TimeConditioned(_Echo(), "temporal")
  assert Clamped(temporal).predict(["q"], [2020]) == ["year: 2018 q"]

  def run(f1s):
    return {
      f"S{i}_P54_{y}": {"f1": f, "subject": f"S{i}", "relation": "P54"}
      for i, f in enumerate(f1s)
      for y in (2019, 2020)
    }

  out = margins(run([0.0, 0.5, 0.0]), run([1.0, 1.0, 0.5]), run([0.5, 0.5, 0.5]), resamples=50)
  assert out["queries"] == 6 and out["pairs"] == 3
  assert out["clamped - asked"]["margin"] == pytest.approx(100 * (2.5 - 0.5) / 3)
  assert out["clamped - uniform"]["margin"] == pytest.approx(100 * (2.5 - 1.5) / 3)
  with pytest.raises(ValueError, match="different queries"):
    margins(run([0.0]), run([1.0, 1.0]), run([0.5]))
