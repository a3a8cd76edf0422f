"""The driver of C5's explanations (b) and (c) (`research.c5.explanations`, pre-registered in
research/c5/PREREGISTRATION_bc.md): its settings, the paired difference of C5's margins
between two settings on hand-made numbers, the criterion, and the baseline it copies."""

import json

import pytest

from research.c5 import explanations
from tlm.errors import DataError
from tlm.miniature import measurements

YEARS = range(2010, 2021)
SUBJECTS = 12


def _seed(seed: int, gain, subjects=SUBJECTS) -> dict:
  """Uniform scores 0.4 or 0.6 by subject; Temporal `gain(s)` more on 2019-20."""

  def evaluation(f1):
    return {
      "templama": {
        "records": [
          {
            "id": f"S{s}_P54_{y}",
            "year": y,
            "subject": f"S{s}",
            "relation": "P54",
            "duration": 5,
            "f1": f1(s, y),
            "prediction": "A",
            "answers": ["A"],
            "most_frequent_is_correct": True,
          }
          for s in range(subjects)
          for y in YEARS
        ]
      }
    }

  uniform = lambda s, y: 0.4 + 0.2 * (s % 2)  # noqa: E731
  temporal = lambda s, y: uniform(s, y) + (gain(s) if y >= 2019 else 0.0)  # noqa: E731
  return measurements.collect(
    seed, {"uniform": evaluation(uniform), "temporal": evaluation(temporal)}
  )


def test_the_settings_change_one_thing_each():
  s = {x.name: x for x in explanations.settings("/r", "/v/seed={seed}/t5")}
  assert list(s) == ["default", "forward-dated", "forward-undated", "cbqa-start"]
  assert all(x.steps == 2800 and x.points() == [2800] for x in s.values())
  assert s["default"].overrides == () and s["default"].start == "/v/seed={seed}/t5"
  assert s["forward-dated"].overrides == ("data.forward_looking=dated",)
  assert s["forward-undated"].overrides == ("data.forward_looking=undated",)
  assert s["forward-dated"].start == s["forward-undated"].start == s["default"].start
  assert s["cbqa-start"].overrides == () and s["cbqa-start"].start == "/r/starts/seed={seed}/cbqa"
  own = {x.name: x for x in explanations.settings("/r")}
  assert own["default"].start == "/r/starts/seed={seed}/t5"


def test_the_cbqa_start_is_trained_from_the_given_start(tmp_path):
  t5 = tmp_path / "v" / "seed=1" / "t5"
  with pytest.raises(Exception, match="no trained start"):
    explanations.start_configs(1, str(tmp_path / "r"), str(tmp_path / "v/seed={seed}/t5"), [])
  (t5 / "checkpoints").mkdir(parents=True)
  todo = explanations.start_configs(1, str(tmp_path / "r"), str(tmp_path / "v/seed={seed}/t5"), [])
  (config, workdir) = todo["cbqa"]
  assert list(todo) == ["cbqa"] and workdir == str(tmp_path / "r/starts/seed=1/cbqa")
  assert config.name == "tiny_cbqa" and config.model.init_checkpoint == str(t5)
  assert (config.data.world_seed, config.data.seed, config.train.seed) == (1, 1, 1)
  assert config.data.forward_looking == "off"
  assert list(explanations.start_configs(1, str(tmp_path / "r"), "", [])) == ["t5", "cbqa"]


def test_the_difference_of_c5_margins_is_paired_and_judged():
  # Seed by seed, A's Temporal gains 3-7 points more on 2019-20 than B's, varying by subject.
  a = [_seed(k, lambda s, k=k: 0.05 + 0.01 * (s % 3) + 0.01 * k) for k in range(3)]
  b = [_seed(k, lambda s: 0.0) for k in range(3)]
  d = explanations.c5_difference(a, b, resamples=200)
  assert [p["difference"] for p in d["per_seed"]] == pytest.approx([6.0, 7.0, 8.0])
  assert d["mean"] == pytest.approx(7.0) and d["ci95"][0] > 5 and d["ci95"][1] < 9
  assert d["every_seed_above_zero"] and d["pooled_above_zero"]
  for p in d["per_seed"]:
    assert p["ci95"][0] <= p["difference"] <= p["ci95"][1]
  # The other way round: below zero, not supported.
  back = explanations.c5_difference(b, a, resamples=200)
  assert back["mean"] == pytest.approx(-7.0) and not back["pooled_above_zero"]
  # Differences of +/-: the interval covers zero.
  mixed = [_seed(k, lambda s: 0.2 if s % 2 else -0.2) for k in range(3)]
  m = explanations.c5_difference(mixed, b, resamples=200)
  assert m["ci95"][0] < 0 < m["ci95"][1] and not m["every_seed_above_zero"]
  with pytest.raises(ValueError, match="other queries"):
    explanations.c5_difference([_seed(0, lambda s: 0.0, subjects=5)], [b[0]], resamples=10)
  with pytest.raises(ValueError, match="paired with seed"):
    explanations.c5_difference([a[1]], [b[0]], resamples=10)


def test_the_criterion_needs_every_seed(tmp_path):
  results = {
    name: {k: {2800: _seed(k, lambda s, g=gain: g)} for k in range(3)}
    for name, gain in (
      ("default", 0.0),
      ("forward-dated", 0.05),
      ("forward-undated", 0.0),
      ("cbqa-start", -0.03),
    )
  }
  chosen = explanations.settings(str(tmp_path))
  out = explanations.report(
    str(tmp_path), chosen, results, [0, 1, 2], {}, log=lambda s: None, resamples=50
  )
  assert out["supported"] == {"b": True, "c": False}
  assert out["c5"]["forward-dated"]["margin_mean"] == pytest.approx(5.0)
  assert out["differences"]["b': dated - default"]["mean"] == pytest.approx(5.0)
  md = (tmp_path / "c5_explanations.md").read_text()
  assert "(b) supported" in md and "(c) not supported" in md
  two = {n: {k: v for k, v in r.items() if k < 2} for n, r in results.items()}
  partial = explanations.report(
    str(tmp_path), chosen, two, [0, 1, 2], {}, log=lambda s: None, resamples=50
  )
  assert partial["supported"] == {"b": None, "c": None}


def test_the_baseline_is_the_verdicts_measurements(tmp_path):
  source = tmp_path / "verdict" / "seed=2"
  source.mkdir(parents=True)
  (source / "per_query_step=2800.json").write_text(json.dumps(_seed(2, lambda s: 0.0)))
  explanations.copy_baseline(str(tmp_path / "r"), 2, str(tmp_path / "verdict/seed={seed}"), 2800)
  copied = tmp_path / "r" / "default" / "seed=2" / "per_query_step=2800.json"
  assert copied.read_bytes() == (source / "per_query_step=2800.json").read_bytes()
  wrong = tmp_path / "verdict" / "seed=1"
  wrong.mkdir()
  (wrong / "per_query_step=2800.json").write_text(json.dumps(_seed(2, lambda s: 0.0)))
  with pytest.raises(DataError, match="expected seed 1"):
    explanations.copy_baseline(str(tmp_path / "r"), 1, str(tmp_path / "verdict/seed={seed}"), 2800)
