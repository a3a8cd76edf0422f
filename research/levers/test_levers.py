"""The lever experiment (`research.levers.levers`, research/levers/miniature_levers.py): C1, C5
and M1 over seeds on hand-made numbers, the goal's criterion, and a few steps on a tiny world: a
setting continued from a shorter one's checkpoint is the model trained for all its steps."""

import json
import math
import os
import re

import pytest

from research.levers import levers, miniature_levers
from tlm.errors import ConfigError, DataError
from tlm.miniature import measurements

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
YEARS = range(2010, 2021)
SUBJECTS = 8


def _evaluation(f1) -> dict:
  """An `experiments.evaluate` result whose query (s, y) scores f1(s, y); a subject's answer
  changes in 2015, so its 2015-18 queries are not the most frequent answer."""
  records = []
  for s in range(SUBJECTS):
    for y in YEARS:
      records.append(
        {
          "id": f"S{s}_P54_{y}",
          "year": y,
          "subject": f"S{s}",
          "relation": "P54",
          "duration": 5,
          "f1": f1(s, y),
          "prediction": "A",
          "answers": ["A" if y < 2015 else "B"],
          "most_frequent_is_correct": y < 2015,
        }
      )
  return {"templama": {"records": records}}


def _seed(seed: int, temporal_gain: float) -> dict:
  """Uniform scores 0.4 or 0.6 (by subject); Temporal `temporal_gain` more everywhere."""
  uniform = lambda s, y: 0.4 + 0.2 * (s % 2)  # noqa: E731
  temporal = lambda s, y: uniform(s, y) + temporal_gain  # noqa: E731
  return measurements.collect(
    seed, {"uniform": _evaluation(uniform), "temporal": _evaluation(temporal)}
  )


def _summary(gains, planned=(0, 1, 2)):
  setting = levers.Setting("s", "hand-made", 10)
  results = {"s": {seed: {10: _seed(seed, g)} for seed, g in zip(planned, gains)}}
  return levers.summarize([setting], results, planned, resamples=50)


def test_claims_margins_per_seed_and_the_goal():
  summary = _summary([0.10, 0.05, 0.02])
  (row,) = summary["rows"]
  assert set(row["claims"]) == {"C1", "C5", "M1"} and row["complete"]
  margins = [p["margin"] for p in row["claims"]["C1"]["per_seed"]]
  assert margins == pytest.approx([10.0, 5.0, 2.0])  # F1 points
  for c in row["claims"].values():
    assert c["holds"] and c["margin_ci95"][0] > 0
  assert row["gets_there"] is True
  assert row["f1"]["uniform"]["2010-18"] == pytest.approx([50.0] * 3)
  assert row["f1"]["temporal"]["M1 subset"] == pytest.approx([60.0, 55.0, 52.0])
  md = levers.markdown(summary)
  # each seed's margin with its own interval, then the mean with the interval over the seeds
  assert re.search(r"\+10\.00 \[\+[\d.]+, \+[\d.]+\] / \+5\.00 \[.+\] / \+2\.00 \[.+\]; mean", md)
  assert "| yes |" in md


def test_one_seed_below_zero_misses_the_goal():
  row = _summary([0.10, -0.01, 0.05])["rows"][0]
  assert row["claims"]["C1"]["holds"] is False and row["gets_there"] is False


def test_the_goal_needs_every_seed_and_an_interval_above_zero():
  ok = {"holds": True, "margin_ci95": [0.1, 2.0]}
  assert levers.gets_there({"C1": ok, "C5": ok, "M1": ok}) is True
  assert levers.gets_there({"C1": ok, "C5": ok, "M1": {**ok, "margin_ci95": [-0.1, 2.0]}}) is False
  assert levers.gets_there({"C1": ok, "C5": {**ok, "holds": False}}) is False
  assert levers.gets_there({"C1": ok, "C5": {**ok, "holds": None}}) is None


def test_an_unfinished_seed_has_no_verdict():
  row = _summary([0.10, 0.05], planned=(0, 1, 2))["rows"][0]
  assert row["seeds"] == [0, 1] and not row["complete"] and row["gets_there"] is None
  assert "incomplete" in levers.markdown(_summary([0.10, 0.05], planned=(0, 1, 2)))


def test_the_baseline_is_read_from_a_reproduction(tmp_path):
  seed_dir = tmp_path / "seed=1"
  (seed_dir / "results").mkdir(parents=True)
  meas = _seed(1, 0.05)
  meas["models"]["yearly"] = meas["models"]["uniform"]
  (seed_dir / "results" / "per_query.json").write_text(json.dumps(meas))
  setting = levers.Setting("base", "reused", 800, reuse=str(tmp_path / "seed={seed}"))
  got = levers.seed_measurements(setting, 1, str(tmp_path / "levers"))
  assert list(got) == [800] and set(got[800]["models"]) == {"uniform", "temporal"}
  with pytest.raises(DataError, match="cannot read"):
    levers.seed_measurements(setting, 2, str(tmp_path / "levers"))
  (tmp_path / "seed=2" / "results").mkdir(parents=True)  # seed 1's numbers filed as seed 2's
  (tmp_path / "seed=2" / "results" / "per_query.json").write_text(json.dumps(meas))
  with pytest.raises(DataError, match="expected seed 2"):
    levers.seed_measurements(setting, 2, str(tmp_path / "levers"))


def test_the_pre_registered_settings():
  s = {x.name: x for x in miniature_levers.settings("/r/seed={seed}", "/L")}
  assert list(s) == ["tiny-800", "tiny-3200", "wide-800", "wide-3200", "years-800", "years-3200"]
  assert s["tiny-800"].reuse == "/r/seed={seed}" and s["tiny-800"].steps == 800
  assert s["tiny-3200"].start == "/r/seed={seed}/t5" and s["tiny-3200"].continue_from
  assert s["tiny-3200"].points() == [1600, 2400, 3200]
  assert s["wide-800"].start == "" and "model.emb_dim=128" in s["wide-800"].overrides
  assert s["wide-3200"].continue_from == "/L/wide-800/seed={seed}"
  assert s["years-800"].start == "" and s["years-800"].start_corpus == "generic_years"
  assert s["years-3200"].continue_from == "/L/years-800/seed={seed}"
  assert s["years-3200"].start == "/L/years-800/seed={seed}/t5"
  with open(os.path.join(ROOT, "research", "levers", "README.md"), encoding="utf-8") as f:
    record = f.read()  # the pre-registrations, verbatim, beside the study
  assert "PRE-REGISTRATION" in record and "Criterion" in record
  assert "SECOND PRE-REGISTRATION" in record and "README.md" in miniature_levers.__doc__
  assert {name for name, _ in miniature_levers.SCHEDULE} == set(s)  # every setting is scheduled
  for name, up_to in miniature_levers.SCHEDULE:
    assert up_to in s[name].points()


SMALL = [
  "data.world_scale=0.2",
  "data.train_years=2017,2018",
  "eval.years=2017,2018,2019",
  "train.log_every=1",
  "train.eval_every=0",
  "train.checkpoint_every=1",
  "eval.max_decode_length=4",
]


def _losses(workdir) -> dict[int, float]:
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return {r["step"]: r["loss"] for r in map(json.loads, f) if "loss" in r}


def test_continuing_a_shorter_setting_is_training_for_all_its_steps(tmp_path):
  """short: 2 steps from its own start; continued: short's checkpoint + 2 steps; whole: 4
  steps from short's start. continued resumes at step 2 and ends where whole ends."""
  overrides = SMALL + [f"data.cache_dir={tmp_path / 'cache'}", "train.steps=2"]
  root, lines = str(tmp_path / "levers"), []
  short = levers.Setting("short", "", 2)
  start = os.path.join(root, "short", "seed={seed}", "t5")
  continued = levers.Setting(
    "continued", "", 4, start=start, continue_from=os.path.join(root, "short", "seed={seed}")
  )
  whole = levers.Setting("whole", "", 4, start=start, eval_steps=(2,))
  summary = levers.run([short, continued, whole], [0], root, overrides, lines.append, resamples=20)
  work = {s.name: os.path.join(root, s.name, "seed=0") for s in (short, continued, whole)}
  assert any("resumed from step 2" in line for line in lines)
  for v in levers.VARIANTS:
    got, want = _losses(os.path.join(work["continued"], v)), _losses(os.path.join(work["whole"], v))
    assert set(got) == set(want) == {1, 2, 3, 4}
    assert got[4] == want[4] and got[3] == want[3]
  assert [(r["setting"], r["steps"]) for r in summary["rows"]] == [
    ("short", 2),
    ("continued", 4),
    ("whole", 2),
    ("whole", 4),
  ]
  rows = {(r["setting"], r["steps"]): r for r in summary["rows"]}
  assert rows[("short", 2)]["f1"] == rows[("whole", 2)]["f1"]  # same start, same steps
  assert rows[("continued", 4)]["f1"] == rows[("whole", 4)]["f1"]
  assert rows[("whole", 4)]["training"]["temporal"][0]["parameters"] > 100_000
  assert os.path.isfile(os.path.join(root, "levers.md"))


def test_persistence_compares_2019_20_answers_with_the_2018_ones():
  """Temporal repeats its 2018 answer ("B") in 2019 and changes it in 2020 (to "C"); Uniform
  answers "A" throughout. Gold: "B" from 2015 on."""

  def evaluation(prediction):
    records = [
      {
        "id": f"S0_P54_{y}",
        "year": y,
        "subject": "S0",
        "relation": "P54",
        "duration": 5,
        "f1": 0.0,
        "prediction": prediction(y),
        "answers": ["A" if y < 2015 else "B"],
        "most_frequent_is_correct": y < 2015,
      }
      for y in YEARS
    ]
    return {"templama": {"records": records}}

  meas = measurements.collect(
    0,
    {
      "uniform": evaluation(lambda y: "A"),
      "temporal": evaluation(lambda y: "C" if y == 2020 else ("B" if y >= 2015 else "A")),
    },
  )
  t, u = levers.persistence(meas, "temporal"), levers.persistence(meas, "uniform")
  assert t == {
    "same": 50.0,
    "f1_first": 50.0,
    "f1_2018_first": 100.0,
    "varying_same": 50.0,
    "varying_none": 50.0,
  }
  assert {k: u[k] for k in ("same", "f1_first", "f1_2018_first")} == {
    "same": 100.0,
    "f1_first": 0.0,
    "f1_2018_first": 0.0,
  }
  assert math.isnan(u["varying_same"]) and math.isnan(u["varying_none"])  # never varies


def test_a_start_pretrained_on_another_corpus(tmp_path, monkeypatch):
  """start_corpus: the start's corpus is written beside it and read instead of the world's."""
  seen = {}
  monkeypatch.setitem(levers.START_CORPORA, "mine", lambda config: ["A b c d e f g h."] * 4)
  from tlm.train import loop

  def fake_run(config, workdir, *, make_evaluators=None, log=print):
    seen["corpus"], seen["workdir"] = config.data.pretrain_corpus, workdir

  monkeypatch.setattr(loop, "run", fake_run)
  setting = levers.Setting("y", "", 4, start_corpus="mine")
  path = levers._pretrained_start(setting, [], str(tmp_path), print)
  assert path == seen["workdir"] == str(tmp_path / "t5")
  with open(seen["corpus"], encoding="utf-8") as f:
    assert [json.loads(line)["text"] for line in f] == ["A b c d e f g h."] * 4
  with pytest.raises(ConfigError, match="unknown start_corpus 'nope'"):
    levers.Setting("z", "", 4, start_corpus="nope")  # refused before any work starts


def test_the_schedule_orders_the_passes(tmp_path):
  for seed in (0, 1):
    (tmp_path / f"seed={seed}" / "results").mkdir(parents=True)
    (tmp_path / f"seed={seed}" / "results" / "per_query.json").write_text(
      json.dumps(_seed(seed, 0.05))
    )
  reuse = str(tmp_path / "seed={seed}")
  a, b = levers.Setting("a", "", 800, reuse=reuse), levers.Setting("b", "", 800, reuse=reuse)
  lines = []
  summary = levers.run(
    [a, b],
    [0, 1],
    str(tmp_path / "out"),
    log=lines.append,
    schedule=[("b", 800), ("gone", 800), ("a", 800)],
    resamples=20,
  )
  passes = [line.split(":")[0].strip("\n# ") for line in lines if line.startswith("\n#####")]
  assert passes == [
    "b to step 800, seed 0",
    "b to step 800, seed 1",
    "a to step 800, seed 0",
    "a to step 800, seed 1",
  ]
  assert [r["setting"] for r in summary["rows"]] == [
    "a",
    "b",
  ]  # the report keeps the settings' order
