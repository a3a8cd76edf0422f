"""The paper's experiments end to end on a tiny world and a few training steps (the numbers
need not be good), plus the Figure 3 grouping and the Figure 4 entropy on hand-made models.

One `--mode=reproduce` run (module fixture) trains Uniform, Temporal and two Yearly experts,
evaluates, probes the future and adapts; the other modes are then run on its workdir.
"""

import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import types

import numpy as np
import pytest

from tlm.data.future_relations import FutureQuery, FutureRelations
from tlm.data.templama import TempLamaExample
from tlm.eval import future
from tlm.miniature import claims

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = [
  "data.world_scale=0.2",
  "data.train_years=2017,2018",
  "eval.years=2017,2018,2019",
  "train.steps=4",
  "train.log_every=2",
  "train.eval_every=0",
  "train.checkpoint_every=4",
  "adapt.steps=2",
  "adapt.alphas=0.5",
  "adapt.eval_points=2",
  "eval.max_examples=4",
  "eval.max_decode_length=4",
]


def _run(*args, check=True):
  cmd = [sys.executable, os.path.join(ROOT, "run.py"), *args]
  proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
  if check and proc.returncode != 0:
    raise AssertionError(f"{' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
  return proc


def _sets(cache):
  return [f"--set={s}" for s in SMALL + [f"data.cache_dir={cache}"]]


def _is_png(path):
  with open(path, "rb") as f:
    head = f.read(24)
  return head[:8] == b"\x89PNG\r\n\x1a\n" and min(struct.unpack(">II", head[16:24])) > 100


# The tests on this run are `slow` (multi-process: the reproduction trains in a pool of
# workers), so that their group is handed out first under xdist, not left for last.
@pytest.fixture(scope="module")
def reproduced(tmp_path_factory):
  root = tmp_path_factory.mktemp("reproduce")
  cache, workdir = root / "cache", root / "run"
  proc = _run("--mode=reproduce", f"--workdir={workdir}", *_sets(cache))
  return {"cache": cache, "workdir": workdir, "seed0": workdir / "seed=0", "stdout": proc.stdout}


@pytest.mark.slow
def test_reproduce_writes_every_result(reproduced):
  results = reproduced["workdir"] / "results"
  for name in ("table2.md", "table7.md", "summary.json", "claims.md"):
    assert (results / name).is_file(), name
  for name in ("eval.json", "future.json", "adapt.json", "figure2.json", "per_query.json"):
    assert (reproduced["seed0"] / "results" / name).is_file(), name
  for i in range(2, 6):
    assert _is_png(results / f"figure{i}.png")
  out = reproduced["stdout"]
  assert "=== [1/7]" in out and "=== [7/7]" in out  # progress through every stage
  assert "| tiny_temporal |" in out and "TempLAMA F1 2010-18" in out  # Table 2 printed
  table2 = (results / "table2.md").read_text()
  assert table2.splitlines()[0].startswith("| Model |") and "| tiny_yearly |" in table2
  assert "| most frequent answer (oracle) |" in table2


@pytest.mark.slow
def test_summary_claims_are_computed_from_the_reported_numbers(reproduced):
  summary = json.loads((reproduced["workdir"] / "results" / "summary.json").read_text())
  assert [c["id"] for c in summary["claims"]] == [c.id for c in claims.CLAIMS]
  assert set(summary["mechanism"]) == {"M1", "M2"} and summary["seeds"] == [0]
  for c in summary["claims"] + list(summary["mechanism"].values()):
    assert c["holds"] in (True, False, None) and len(c["per_seed"]) == 1
    assert c["holds"] is not None or c["missing"], c["id"]
  # C1's margin is Temporal's TempLAMA 2010-18 F1 minus Uniform's, as eval.json reports them.
  evals = json.loads((reproduced["seed0"] / "results" / "eval.json").read_text())
  f1 = {
    v: evals[f"tiny_{v}"]["templama"]["metrics"]["2010-18"]["overall"]["f1"]
    for v in ("temporal", "uniform")
  }
  c1 = summary["claims"][0]
  assert c1["per_seed"][0]["margin"] == pytest.approx(100 * (f1["temporal"] - f1["uniform"]))
  assert c1["holds"] == (f1["temporal"] > f1["uniform"])


@pytest.mark.slow
def test_combine_seeds_from_the_saved_files_equals_the_run(reproduced, tmp_path):
  """Seeds run separately combine, from their files, into the summary the run itself wrote."""
  out = tmp_path / "combined"
  _run("--mode=combine_seeds", f"--workdirs={reproduced['seed0']}", f"--output_dir={out}")
  want = json.loads((reproduced["workdir"] / "results" / "summary.json").read_text())
  assert json.loads((out / "summary.json").read_text()) == want
  table2 = (reproduced["workdir"] / "results" / "table2.md").read_text()
  assert (out / "table2.md").read_text() == table2
  proc = _run(
    "--mode=combine_seeds",
    f"--workdirs={reproduced['seed0']},{reproduced['seed0']}",
    f"--output_dir={tmp_path / 'twice'}",
    check=False,
  )
  assert proc.returncode == 1 and "repeat a seed" in proc.stderr


@pytest.mark.slow
def test_eval_and_eval_future_modes_on_a_trained_workdir(reproduced):
  workdir = reproduced["seed0"] / "uniform"
  sets = _sets(reproduced["cache"])
  proc = _run("--mode=eval", "--config=tiny_uniform", f"--workdir={workdir}", *sets)
  result = json.loads((workdir / "results" / "eval.json").read_text())
  metrics = result["templama"]["metrics"]
  assert {"2010-18", "2019-20", "all"} <= set(metrics)
  assert result["templama"]["records"][0].keys() >= {"id", "year", "prediction", "f1", "em"}
  assert {"most_frequent_answer", "most_recent_answer"} == set(result["answer_baselines"])
  assert "| tiny_uniform |" in (workdir / "results" / "table2_row.md").read_text()
  assert "| tiny_uniform |" in proc.stdout

  _run("--mode=eval_future", "--config=tiny_uniform", f"--workdir={workdir}", *sets)
  fut = json.loads((workdir / "results" / "future.json").read_text())
  assert set(fut["entropy"]["entropy"]) == {"frequent", "rare", "never"}
  assert sorted(map(int, fut["entropy"]["entropy"]["never"])) == list(range(2018, 2030))
  assert _is_png(workdir / "results" / "figure3.png")
  assert _is_png(workdir / "results" / "figure4.png")


@pytest.mark.slow
def test_adapt_mode_with_other_alphas(reproduced):
  workdir = reproduced["seed0"] / "temporal"
  sets = _sets(reproduced["cache"]) + ["--set=adapt.alphas=0.3,0.5", "--set=adapt.eval_points=1"]
  _run("--mode=adapt", "--config=tiny_temporal", f"--workdir={workdir}", *sets)
  out = json.loads((workdir / "results" / "adapt.json").read_text())
  assert set(out["alphas"]) == {"0.3", "0.5"}
  assert {"2010-18", "2019", "2019-20"} <= set(out["retrained"])
  assert (workdir / "adapt" / "alpha=0.3" / "checkpoints").is_dir()
  assert _is_png(workdir / "results" / "figure5.png")


@pytest.mark.slow
def test_cbqa_baselines_public_checkpoint_as_is_and_finetuned(reproduced, tmp_path):
  """T5-CBQA: a checkpoint evaluated as it is (here the tiny Uniform model exported to an HF
  directory, standing in for t5-large-ssm-nq); T5-CBQA-ft: it finetuned on TempLAMA alone."""
  sets = _sets(reproduced["cache"])
  public = tmp_path / "hf"
  _run(
    "--mode=convert",
    f"--checkpoint={reproduced['seed0'] / 'uniform'}",
    f"--output_dir={public}",
    "--format=hf",
  )
  _run("--mode=eval", "--config=tiny_cbqa_ft", f"--workdir={public}", *sets)
  as_is = json.loads((public / "results" / "eval.json").read_text())
  assert as_is["config"]["variant"] == "cbqa_ft" and "2019-20" in as_is["templama"]["metrics"]
  finetuned = tmp_path / "cbqa_ft"
  _run(
    "--mode=train",
    "--config=tiny_cbqa_ft",
    f"--workdir={finetuned}",
    f"--set=model.init_checkpoint={public}",
    *sets,
  )
  metrics = [json.loads(line) for line in (finetuned / "metrics.jsonl").read_text().splitlines()]
  assert metrics[-1]["step"] == 4
  proc = _run("--mode=eval", f"--workdir={finetuned}")  # config from the workdir
  assert "| tiny_cbqa_ft |" in proc.stdout
  assert (finetuned / "results" / "eval.json").is_file()


@pytest.mark.slow
def test_tables_mode_over_workdirs(reproduced, tmp_path):
  run = reproduced["seed0"]
  out = tmp_path / "tables"
  proc = _run(
    "--mode=tables", f"--workdirs={run / 'temporal'},{run / 'uniform'}", f"--output_dir={out}"
  )
  assert sorted(os.listdir(out)) == ["table2.md", "table3.md", "table7.md"]
  table3 = (out / "table3.md").read_text()
  assert "| tiny | tiny_temporal |" in table3 and "| tiny | tiny_uniform |" in table3
  assert table3 in proc.stdout
  missing = _run("--mode=tables", f"--workdirs={tmp_path}", f"--output_dir={out}", check=False)
  assert missing.returncode == 1 and "eval.json: no such file" in missing.stderr


def test_modes_without_a_trained_model_say_what_to_run(tmp_path):
  proc = _run(
    "--mode=eval_future",
    "--config=tiny_temporal",
    f"--workdir={tmp_path / 'none'}",
    *_sets(tmp_path / "cache"),
    check=False,
  )
  assert proc.returncode != 0
  lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
  assert len(lines) == 1 and "--mode=train --config=tiny_temporal" in lines[0]
  assert not (tmp_path / "none" / "results").exists()


def _cronquestions_release(root):
  base = root / "questions"
  base.mkdir(parents=True)
  (root / "kg").mkdir()
  rows = [
    {
      "question": f"Who coached Team {i} in {2010 + i}",
      "answers": {f"Q{i + 1}"},
      "answer_type": "entity",
      "type": "simple_entity",
      "uniq_id": i,
    }
    for i in range(6)
  ]
  for split in ("train", "valid", "test"):
    with open(base / f"{split}.pickle", "wb") as f:
      pickle.dump(rows, f)
  (root / "kg" / "wd_id2entity_text.txt").write_text(
    "".join(f"Q{i + 1}\tCoach {chr(65 + i)}\n" for i in range(6))
  )
  return root


@pytest.mark.slow
def test_cronquestions_mode(reproduced, tmp_path):
  data = _cronquestions_release(tmp_path / "cronq")
  workdir = reproduced["seed0"] / "temporal"
  sets = _sets(reproduced["cache"]) + ["--set=eval.finetune_steps=2"]
  _run(
    "--mode=cronquestions",
    "--config=tiny_temporal",
    f"--workdir={workdir}",
    f"--data={data}",
    *sets,
  )
  result = json.loads((workdir / "results" / "table4.json").read_text())
  assert result["count"] == 6 and 0.0 <= result["em"] <= result["f1"] <= 1.0
  assert "| tiny_temporal |" in (workdir / "results" / "table4.md").read_text()


# ---- Figures 3 and 4 on hand-made models -----------------------------------------------------


def _example(subject, year, answer, relation="P54"):
  return TempLamaExample(
    id=f"{subject}_{relation}_{year}",
    query=f"{subject} plays for _X_.",
    answers=[[answer]],
    answer_ids=[answer],
    date=str(year),
    year=year,
    relation=relation,
    subject=subject,
    most_frequent_answer=answer,
    most_recent_answer=answer,
  )


class _LinearDecay:
  """log p(target | query, year) = -rate * (year - 2018), rate set per subject."""

  def __init__(self, rates):
    self.rates = rates

  def log_likelihood(self, queries, years, targets):
    ll = [-self.rates[q.split()[0]] * (y - 2018) for q, y in zip(queries, years)]
    return np.asarray(ll, np.float64), np.ones(len(queries), np.int64)


def test_loglik_change_groups_single_and_multiple_answer_queries():
  examples = [
    _example("Ann", 2017, "Red"),
    _example("Ann", 2018, "Red"),  # single answer
    _example("Bob", 2016, "Red"),
    _example("Bob", 2018, "Blue"),  # multiple answers
    _example("Cat", 2018, "Green"),  # wrong in 2018: excluded
  ]
  model = _LinearDecay({"Ann": 0.1, "Bob": 0.5, "Cat": 9.0})
  preds = {"Ann_P54_2018": "red", "Bob_P54_2018": "Blue", "Cat_P54_2018": "Red"}
  out = future.loglik_change(model, examples, preds, years=(2019, 2020))
  assert out["counts"] == {"single": 1, "multiple": 1}
  np.testing.assert_allclose([out["single"][2019], out["single"][2020]], [-0.1, -0.2])
  np.testing.assert_allclose([out["multiple"][2019], out["multiple"][2020]], [-0.5, -1.0])


class _FixedScores:
  """Candidate log-scores that depend only on the query set and year."""

  def rank(self, queries, years, candidates):
    rows = []
    for q in queries:
      if q.startswith("Never"):
        rows.append([0.0] + [-1e9] * (len(candidates) - 1))  # one candidate: entropy 0
      else:
        rows.append([0.0] * len(candidates))  # uniform: entropy log C
    return np.asarray(rows)


def test_future_entropy_over_a_known_distribution():
  fr = FutureRelations(
    queries=[
      FutureQuery("a", "never", "Never moves from _X_.", "cities"),
      FutureQuery("b", "frequent", "Often moves to _X_.", "cities"),
      FutureQuery("c", "rare", "Rarely moves to _X_.", "countries"),
    ],
    candidates={"cities": ["A", "B", "C", "D"], "countries": ["X", "Y"]},
  )
  out = future.future_entropy(_FixedScores(), fr, years=(2018, 2025))
  np.testing.assert_allclose(out["entropy"]["never"][2025], 0.0, atol=1e-12)
  np.testing.assert_allclose(out["entropy"]["frequent"][2018], np.log(4), rtol=1e-12)
  np.testing.assert_allclose(out["entropy"]["rare"][2025], np.log(2), rtol=1e-12)
  assert out["max_entropy"] == pytest.approx(
    {"never": np.log(4), "frequent": np.log(4), "rare": np.log(2)}
  )


def test_experiment_modes_start_from_the_workdirs_saved_config(tmp_path):
  from types import SimpleNamespace

  from tlm import configs
  from tlm.cli.experiment_modes import config_and_workdir
  from tlm.errors import ConfigError
  from tlm.files import write_json

  trained = configs.override(configs.get("tiny_uniform"), ["data.world_scale=0.3"])
  write_json(str(tmp_path / "config.json"), configs.to_dict(trained))
  flags = SimpleNamespace(config=None, workdir=str(tmp_path), set=[])
  assert config_and_workdir(flags)[0].data.world_scale == 1.0  # not a training workdir (HF)
  write_json(str(tmp_path / "model_config.json"), {})
  flags = SimpleNamespace(config=None, workdir=str(tmp_path), set=["eval.batch_size=8"])
  config, workdir, saved_path = config_and_workdir(flags)
  assert workdir == str(tmp_path) and config.name == "tiny_uniform"
  assert saved_path == str(tmp_path / "config.json")
  assert config.data.world_scale == 0.3 and config.eval.batch_size == 8
  with pytest.raises(ConfigError, match="holds a tiny_uniform model, not tiny_temporal"):
    config_and_workdir(SimpleNamespace(config="tiny_temporal", workdir=str(tmp_path), set=[]))
  # A Yearly workdir: the experts' saved config, for every year.
  expert = configs.override(configs.get("tiny_yearly"), ["data.year=2012", "train.steps=7"])
  write_json(str(tmp_path / "y" / "year=2012" / "config.json"), configs.to_dict(expert))
  write_json(str(tmp_path / "y" / "year=2012" / "model_config.json"), {})
  flags = SimpleNamespace(config="tiny_yearly", workdir=str(tmp_path / "y"), set=[])
  config, _, saved_path = config_and_workdir(flags)
  assert config.data.year == 0 and config.train.steps == 7
  assert saved_path == str(tmp_path / "y" / "year=2012" / "config.json")


@pytest.mark.slow
def test_every_model_starts_from_the_same_pretrained_t5_and_trains_the_same_steps(reproduced):
  """The paper's protocol, read back from the workdirs: Uniform, Temporal and every Yearly
  expert are initialised from WORKDIR/t5 (span corruption on the world's generic text) and
  train the same number of steps; T5-CBQA-ft starts from T5-CBQA, which starts from t5."""
  run = reproduced["seed0"]

  def saved(path):
    config = json.loads((path / "config.json").read_text())
    steps = [json.loads(line)["step"] for line in (path / "metrics.jsonl").read_text().splitlines()]
    return config, steps[-1]

  t5, _ = saved(run / "t5")
  assert t5["variant"] == "t5" and t5["model"]["init_checkpoint"] == ""
  runs = [run / "uniform", run / "temporal"] + sorted((run / "yearly").glob("year=*"))
  assert len(runs) == 4  # the test's two train years: two experts
  trained = [saved(path) for path in runs]
  assert {c["model"]["init_checkpoint"] for c, _ in trained} == {str(run / "t5")}
  assert {step for _, step in trained} == {c["train"]["steps"] for c, _ in trained} == {4}
  assert {c["data"]["year"] for c, _ in trained[2:]} == {2017, 2018}
  cbqa, _ = saved(run / "cbqa")
  assert cbqa["variant"] == "cbqa" and cbqa["model"]["init_checkpoint"] == str(run / "t5")
  ft, _ = saved(run / "cbqa_ft")
  assert ft["model"]["init_checkpoint"] == str(run / "cbqa")
  assert ft["data"]["news_to_templama"] == 0.0  # TempLAMA-train alone, never the news
  retrained, _ = saved(run / "temporal" / "retrained")
  assert retrained["model"]["init_checkpoint"] == str(run / "t5")
  assert retrained["data"]["train_years"] == [2017, 2018, 2019]


@pytest.mark.slow
def test_cbqa_rows_and_the_retrained_comparison_are_reported(reproduced):
  results = reproduced["seed0"] / "results"
  evals = json.loads((results / "eval.json").read_text())
  assert {"tiny_cbqa", "tiny_cbqa_ft"} <= set(evals)
  assert evals["tiny_cbqa"].keys() == evals["tiny_uniform"].keys()
  assert "| tiny_cbqa |" in (results / "table2.md").read_text()
  assert "tiny_cbqa_ft" in json.loads((results / "future.json").read_text())
  adapt = json.loads((results / "adapt.json").read_text())["tiny_temporal"]
  retrained = adapt["retrained"]
  assert {"2010-18", "2019", "2019-20"} <= set(retrained)
  assert {"2010-18", "2019-20"} <= set(retrained["news"])
  assert set(adapt["matched_by_slice"]) == {
    "templama 2019-20",
    "templama 2010-18",
    "news 2019-20",
    "news 2010-18",
    "all",
  }
  assert adapt["matched_at_step"] == adapt["matched_by_slice"]["all"]


@pytest.mark.slow
def test_check_equal_against_itself_and_finds_an_altered_prediction(
  reproduced, tmp_path, monkeypatch
):
  """--check=DIR through the mode's own function, with the run's training stubbed (its
  results are the fixture's, in a copy): against a copy of its own files, as docs/results
  holds them (no results/ folder), every model is equal and both environments are the run's;
  with one Temporal prediction altered, the mode names Temporal alone and fails."""
  from tlm.cli import experiment_modes as cli
  from tlm.errors import UserError
  from tlm.miniature import reproduce

  committed = tmp_path / "committed"
  committed.mkdir()
  for name in ("per_query.json", "seed_summary.json"):
    shutil.copy(reproduced["seed0"] / "results" / name, committed / name)
  run = tmp_path / "run"
  shutil.copytree(reproduced["seed0"] / "results", run / "seed=0" / "results")
  monkeypatch.setattr(reproduce, "reproduce", lambda *args, **kwargs: None)
  flags = types.SimpleNamespace(
    config=None,
    set=[s.removeprefix("--set=") for s in _sets(reproduced["cache"])],
    workdir=str(run),
    check=str(committed),
  )
  cli.reproduce(flags)
  report = json.loads((run / "check.json").read_text())
  seed = report["seeds"][0]
  assert report["equal"] is True, seed["models_differing"]
  models = {m["model"] for m in seed["models"]}
  assert {"T5-CBQA", "T5-CBQA-ft", "Uniform", "Temporal", "Yearly (routed)"} <= models
  assert {"Yearly expert 2017", "Yearly expert 2018", "Temporal retrained 2010-19"} <= models
  assert "Temporal adapted, alpha 0.5" in models
  # the reproduction recorded this machine in its seed_summary.json
  assert seed["environment"]["run"]["affinity"] == sorted(os.sched_getaffinity(0))
  assert seed["environment"]["run"]["reproduce"]["pin_workers"] is True
  assert seed["environment_differences"] == []
  assert "every model equal" in (run / "check.md").read_text()

  meas = json.loads((committed / "per_query.json").read_text())
  meas["models"]["temporal"]["templama"]["prediction"][0] += " altered"
  (committed / "per_query.json").write_text(json.dumps(meas))
  with pytest.raises(UserError, match=r"^1 models differ from .*: Temporal \(report: "):
    cli.reproduce(flags)
  seed = json.loads((run / "check.json").read_text())["seeds"][0]
  assert seed["models_differing"] == ["Temporal"]
  (part,) = [p for m in seed["models"] if m["model"] == "Temporal" for p in m["parts"][:1]]
  assert (part["part"], part["differ"]) == ("TempLAMA predictions", 1)


def test_check_refuses_a_folder_of_another_seed_before_training(tmp_path):
  folder = tmp_path / "seed=3"
  folder.mkdir()
  (folder / "per_query.json").write_text(
    json.dumps({"seed": 3, "models": {}, "loglik_change": {}, "entropy": {}})
  )
  proc = _run("--mode=reproduce", f"--workdir={tmp_path / 'run'}", f"--check={folder}", check=False)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1].endswith("holds seed 3, not seed 0")
  assert not (tmp_path / "run" / "seed=0").exists()
