"""tlm.miniature.regeneration on hand-made per_query.json files (the check end to end, on the
tiny reproduction, is in tests/test_experiments.py)."""

import copy
import json

import pytest

from tlm.errors import DataError
from tlm.miniature import regeneration

IDS = ["Q1_P6_2017", "Q1_P6_2018", "Q2_P6_2017"]


def _model(predictions, loglik):
  n = len(predictions)
  return {
    "templama": {
      "id": IDS,
      "year": [2017, 2018, 2017],
      "subject": ["Q1", "Q1", "Q2"],
      "relation": ["P6"] * n,
      "duration": [2, 2, 1],
      "f1": [1.0, 0.0, 1.0],
      "prediction": list(predictions),
      "first_answer": ["a", "b", "c"],
      "most_frequent_is_correct": [True, False, True],
      "answers": [["a"], ["b"], ["c"]],
    },
    "news": {"year": [2017, 2018], "f1": [0.5, 0.0], "loglik": list(loglik), "tokens": [3, 4]},
  }


def per_query(seed=0):
  entropy = {"id": ["f0", "f1"], "set": ["frequent", "never"], "entropy": {"2018": [1.0, 2.0]}}
  return {
    "seed": seed,
    "models": {
      "cbqa": _model(["a", "x", "c"], [-1.5, -2.25]),
      "uniform": _model(["a", "b", "c"], [-1.0, -2.0]),
      "temporal": _model(["a", "b", "y"], [-0.5, -2.5]),
    },
    "loglik_change": {"temporal": {"single": {"2019": [0.25, -0.5]}}},
    "entropy": {"temporal": entropy},
    "experts": {"id": IDS, "year": [2017, 2018, 2017], "f1": {"2017": [1.0, 0.0, 1.0]}},
    "adaptation": {
      "uniform": {
        "before": {"2019": 0.25},
        "alphas": {"0.5": {"2019": 0.5}},
        "retrained": {"2019": 0.75},
        "curve": {"2": {"2019": 0.5}},
        "match_alpha": 0.5,
        "steps": 2,
        "retrain_steps": 4,
      }
    },
  }


def _rows(run, ref):
  return {row["model"]: row for row in regeneration.compare(run, ref)}


def test_a_run_equal_to_itself_has_every_model_equal():
  rows = _rows(per_query(), per_query())
  assert all(row["equal"] for row in rows.values())
  assert set(rows) == {
    "T5-CBQA",
    "Uniform",
    "Temporal",
    "Yearly expert 2017",
    "Uniform retrained 2010-19",
    "Uniform adapted, alpha 0.5",
    "Uniform adaptation settings",
  }
  parts = {p["part"]: p for p in rows["Temporal"]["parts"]}
  assert parts["TempLAMA predictions"]["items"] == 3
  assert parts["news loglik"]["items"] == 2
  assert parts["future entropies"]["items"] == 2
  assert parts["future log-lik changes"]["items"] == 2


def test_one_altered_prediction_is_counted_in_its_model_only():
  ref = per_query()
  ref["models"]["temporal"]["templama"]["prediction"][1] = "changed"
  rows = _rows(per_query(), ref)
  assert [m for m, row in rows.items() if not row["equal"]] == ["Temporal"]
  parts = {p["part"]: p for p in rows["Temporal"]["parts"]}
  assert parts["TempLAMA predictions"]["differ"] == 1
  assert parts["news loglik"]["differ"] == 0


def test_predictions_are_matched_by_query_id_not_position():
  ref = per_query()
  cols = ref["models"]["uniform"]["templama"]
  for c in cols:
    cols[c] = list(reversed(cols[c]))
  assert _rows(per_query(), ref)["Uniform"]["equal"]


def test_numbers_are_compared_exactly_with_the_largest_difference():
  ref = per_query()
  ref["models"]["uniform"]["news"]["loglik"][1] = -2.0 + 1e-12
  ref["entropy"]["temporal"]["entropy"]["2018"][0] = 1.25
  ref["experts"]["f1"]["2017"][2] = 0.0
  ref["adaptation"]["uniform"]["curve"]["2"]["2019"] = 0.0
  rows = _rows(per_query(), ref)
  news = {p["part"]: p for p in rows["Uniform"]["parts"]}["news loglik"]
  assert news["differ"] == 1
  assert news["max_abs_diff"] == pytest.approx(1e-12, rel=1e-3)
  entropies = {p["part"]: p for p in rows["Temporal"]["parts"]}["future entropies"]
  assert (entropies["differ"], entropies["max_abs_diff"]) == (1, 0.25)
  assert not rows["Yearly expert 2017"]["equal"]
  assert not rows["Uniform adapted, alpha 0.5"]["equal"]
  assert rows["Uniform retrained 2010-19"]["equal"]


def test_a_model_missing_on_one_side_differs_on_every_item():
  run = per_query()
  del run["models"]["cbqa"]
  row = _rows(run, per_query())["T5-CBQA"]
  assert not row["equal"]
  assert {p["part"]: p["differ"] for p in row["parts"]}["TempLAMA predictions"] == 3
  assert all(p.get("note") == "not in this run" for p in row["parts"])


def _write(folder, meas, environment=None):
  folder.mkdir(parents=True, exist_ok=True)
  (folder / "per_query.json").write_text(json.dumps(meas))
  summary = {"configs": {}}
  if environment is not None:
    summary["environment"] = environment
  (folder / "seed_summary.json").write_text(json.dumps(summary))


ENV = {
  "cpu": {"model_name": "AMD EPYC", "flags": ["avx2", "avx512f"]},
  "xla_cpu_threads": 2,
  "packages": {"jax": "0.10.2"},
  "git_commit": "abc",
}


def test_committed_seeds_reads_a_seed_folder_or_its_seed_subfolders(tmp_path):
  _write(tmp_path / "one", per_query(0), ENV)
  got = regeneration.committed_seeds(str(tmp_path / "one"), [0])
  assert got[0][0] == str(tmp_path / "one")
  assert got[0][1]["environment"] == ENV
  for s in (0, 1):
    _write(tmp_path / "many" / f"seed={s}", per_query(s))
  got = regeneration.committed_seeds(str(tmp_path / "many"), [0, 1])
  assert {s: folder.endswith(f"seed={s}") for s, (folder, _) in got.items()} == {0: True, 1: True}
  assert got[1][1]["environment"] is None


def test_committed_seeds_refuses_another_seed_or_a_missing_folder(tmp_path):
  _write(tmp_path / "s0", per_query(0))
  with pytest.raises(DataError, match="holds seed 0, not seed 3"):
    regeneration.committed_seeds(str(tmp_path / "s0"), [3])
  with pytest.raises(DataError, match="no seed=0/ folder for seed 0 of \\[0, 1\\]"):
    regeneration.committed_seeds(str(tmp_path / "s0"), [0, 1])
  with pytest.raises(DataError, match="per_query.json"):
    regeneration.committed_seeds(str(tmp_path / "empty"), [0])
  bad = per_query(0)
  del bad["models"]
  _write(tmp_path / "bad", bad)
  with pytest.raises(DataError, match="not a per_query.json"):
    regeneration.committed_seeds(str(tmp_path / "bad"), [0])


def test_check_writes_the_report_with_both_environments(tmp_path):
  _write(tmp_path / "committed", per_query(0), ENV)
  run_env = copy.deepcopy(ENV) | {"xla_cpu_threads": 1, "git_commit": "def"}
  run_env["cpu"]["flags"] = ["avx2"]
  altered = per_query(0)
  altered["models"]["cbqa"]["templama"]["prediction"][0] = "z"
  _write(tmp_path / "run" / "seed=0" / "results", altered, run_env)
  refs = regeneration.committed_seeds(str(tmp_path / "committed"), [0])
  lines = []
  (report,) = regeneration.check(refs, str(tmp_path / "run"), lines.append)
  assert not report["equal"]
  assert report["models_differing"] == ["T5-CBQA"]
  # the commit is shown, not counted as a difference
  assert report["environment_differences"] == ["cpu/flags", "xla_cpu_threads"]
  saved = json.loads((tmp_path / "run" / "check.json").read_text())
  assert saved["equal"] is False and saved["seeds"][0]["models_differing"] == ["T5-CBQA"]
  md = (tmp_path / "run" / "check.md").read_text()
  assert "| T5-CBQA | **no** | TempLAMA predictions 1/3;" in md
  assert "CPU flags only in DIR: avx512f" in md
  assert "| xla_cpu_threads | 2 | 1 | differs |" in md
  assert "1 models differ" in lines[0]


def test_an_unrecorded_environment_is_said_so():
  assert regeneration.environment_differences(ENV, None) == [regeneration.NOT_RECORDED]
  assert "| packages/jax | not recorded | 0.10.2 |  |" in regeneration.environment_table(ENV, None)


def test_a_report_against_an_unrecorded_folder_says_so():
  meas = per_query()
  ref = {"per_query": meas, "environment": None}
  report = regeneration.report(0, "DIR", "RUN", ref, meas, ENV)
  assert report["equal"] and report["environment_differences"] == [regeneration.NOT_RECORDED]
  text = regeneration.markdown([report])
  assert "every model equal" in text
  assert "DIR records no environment" in text


def test_nan_equals_nan_and_nothing_else():
  run, ref = per_query(), per_query()
  run["models"]["uniform"]["news"]["loglik"][0] = float("nan")
  ref["models"]["uniform"]["news"]["loglik"][0] = float("nan")
  assert _rows(run, ref)["Uniform"]["equal"]
  ref["models"]["uniform"]["news"]["loglik"][0] = -1.0
  news = {p["part"]: p for p in _rows(run, ref)["Uniform"]["parts"]}["news loglik"]
  assert news["differ"] == 1


def test_a_check_across_world_versions_is_refused_before_training(tmp_path):
  """A committed seed records its world in its configs (none: world v3, before the key); a run
  of another world version is refused in one line naming the setting, before it trains."""
  from tlm import configs
  from tlm.errors import UserError

  _write(tmp_path / "old", per_query(0), ENV)
  summary = json.loads((tmp_path / "old" / "seed_summary.json").read_text())
  data = configs.to_dict(configs.get("tiny_temporal"))["data"]
  del data["world_version"]
  summary["configs"] = {"temporal": {"data": data}}
  (tmp_path / "old" / "seed_summary.json").write_text(json.dumps(summary))
  refs = regeneration.committed_seeds(str(tmp_path / "old"), [0])
  assert refs[0][1]["world_version"] == 3
  regeneration.check_world_versions(refs, 3)
  with pytest.raises(
    UserError, match=r"world v3, this run would build world v4; add --set=data.world_version=3$"
  ):
    regeneration.check_world_versions(refs, 4)
  _write(tmp_path / "none", per_query(0))  # no configs recorded: nothing to compare
  regeneration.check_world_versions(regeneration.committed_seeds(str(tmp_path / "none"), [0]), 4)
