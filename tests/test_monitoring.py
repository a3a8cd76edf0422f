"""Watching a run: TensorBoard events (read back by TensorBoard's own reader), task metrics
during training (equal to `--mode=eval` on the same checkpoint), MFU, the best checkpoint
(kept through rotation, resumable) and the profile window."""

import glob
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers import FIXTURE_DATA_SETS
from tlm import configs
from tlm.data.formatting import templama_query_input
from tlm.errors import ConfigError
from tlm.eval import during_training, experiments, results
from tlm.infer import trained_models
from tlm.line_files import read_jsonl
from tlm.sharding import cost
from tlm.train import best, loop, mfu, profiling, tensorboard_writer
from tlm.train.checkpointing import CheckpointManager

PEAK = 1e12  # a made-up device peak: the CPU has none in the table


def tiny_config(*overrides):
  return configs.override(
    configs.get("tiny_temporal"),
    [
      *FIXTURE_DATA_SETS,
      "train.batch_size=8",
      "train.learning_rate=3e-2",
      "model.dropout_rate=0.0",
      "model.num_layers=1",
      "eval.batch_size=16",
      "eval.max_decode_length=4",
      *overrides,
    ],
  )


def records(workdir):
  return read_jsonl(os.path.join(workdir, "metrics.jsonl"), required=("step",))


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
  """8 steps, logged every 2, evaluated (loss and task metrics) and saved every 4, steps 2-3
  profiled, on a device pretending to have a peak of 1 TFLOP/s."""
  workdir = str(tmp_path_factory.mktemp("watched"))
  config = tiny_config(
    "train.steps=8",
    "train.log_every=2",
    "train.eval_every=4",
    "train.eval_examples=12",
    "train.checkpoint_every=4",
    "train.keep_checkpoints=5",
    "train.profile_steps=2,4",
  )
  lines, traced = [], []
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(mfu, "peak_flops", lambda kind: PEAK)
    evaluators = during_training.evaluators(config)
    trainer = loop.Trainer(config, workdir, evaluators=evaluators, log=lines.append)
    compiled = trainer.train_step

    def step(state, batch):  # which steps run while the profiler is on
      traced.append((int(state.step), trainer.profile.active))
      return compiled(state, batch)

    trainer.train_step = step
    (evaluator,), evaluated = trainer.evaluators, {}

    def evaluate(params, *context):  # keeps each evaluation's predictions
      metrics = evaluator(params, *context)
      evaluated[int(trainer.state.step)] = evaluator.results
      return metrics

    evaluate.fields = evaluator.fields
    trainer.evaluators = (evaluate,)
    trainer.fit()
  return {
    "workdir": workdir,
    "config": config,
    "lines": lines,
    "traced": traced,
    "flops": trainer.step_flops,
    "evaluated": evaluated,
  }


def test_tensorboard_events_equal_metrics_jsonl(watched):
  history = records(watched["workdir"])
  assert [r["step"] for r in history] == [2, 4, 6, 8]
  events = EventAccumulator(os.path.join(watched["workdir"], "tensorboard"))
  events.Reload()
  tags = set(events.Tags()["scalars"])
  expected = {"train/loss", "train/z_loss", "train/learning_rate", "train/tokens_per_second"}
  expected |= {"train/mfu", "eval/loss", "eval/templama_f1", "eval/templama_em", "eval/news_f1"}
  assert expected <= tags
  for tag in tags:
    field = {"eval/loss": "eval_loss"}.get(tag, tag.split("/", 1)[1])
    want = [(r["step"], r[field]) for r in history if field in r]
    got = [(e.step, e.value) for e in events.Scalars(tag)]
    assert [s for s, _ in got] == [s for s, _ in want], tag
    np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-6, err_msg=tag)
  assert [e.step for e in events.Scalars("eval/templama_f1")] == [4, 8]


def test_task_metrics_equal_mode_eval_on_the_same_checkpoint(watched, tmp_path):
  workdir, config = watched["workdir"], watched["config"]
  subset = during_training.task_eval_data(config)
  assert len(subset.templama) == 12 and sum(map(len, subset.news.values())) == 9
  by_step = {r["step"]: r for r in records(workdir) if "templama_f1" in r}
  assert sorted(by_step) == [4, 8]
  step_results = {}
  for step, record in by_step.items():
    # A workdir holding only this step: `--mode=eval` evaluates its newest checkpoint.
    only = tmp_path / f"step{step}"
    os.makedirs(only / "checkpoints")
    for name in ("model_config.json", "spiece.model"):
      os.symlink(os.path.join(workdir, name), only / name)
    os.symlink(os.path.join(workdir, "checkpoints", str(step)), only / "checkpoints" / str(step))
    result = experiments.evaluate(config, str(only), log=lambda _: None, data=subset)
    overall = result["templama"]["metrics"]["all"]["overall"]
    news = result["news"]["by_year"]
    news_f1 = sum(v["f1"] * v["count"] for v in news.values()) / sum(
      v["count"] for v in news.values()
    )
    assert record["templama_f1"] == overall["f1"]
    assert record["templama_em"] == overall["em"]
    assert record["news_f1"] == news_f1
    during = watched["evaluated"][step]
    assert during["templama"]["records"] == result["templama"]["records"]
    assert during["news"] == result["news"]
    step_results[step] = result
  # Not vacuous: the predictions change from step 4 to step 8.
  predictions = [results.predictions_by_id(step_results[s]) for s in (4, 8)]
  assert predictions[0] != predictions[1]


class _HalfRight:
  """Answers every other TempLAMA query (by query and year) and every news span."""

  def __init__(self, data):
    self.answers = {
      (templama_query_input(q.query), q.year): q.answers[0][0] for q in data.templama[::2]
    }
    self.answers.update({(r.inputs, y): r.targets for y, rows in data.news.items() for r in rows})

  def predict(self, queries, years):
    return [self.answers.get((q, y), "nothing") for q, y in zip(queries, years)]

  def log_likelihood(self, queries, years, targets):
    return np.zeros(len(queries)), np.ones(len(queries))


def test_task_metrics_of_a_model_half_right(watched):
  subset = during_training.task_eval_data(watched["config"])
  metrics = during_training.task_metrics(during_training.task_results(_HalfRight(subset), subset))
  assert metrics == {"templama_f1": 0.5, "templama_em": 0.5, "news_f1": 1.0}


def test_mfu_and_task_metrics_in_the_progress_line(watched):
  history = records(watched["workdir"])
  assert watched["flops"] > 0
  for r in history:
    np.testing.assert_allclose(r["mfu"], watched["flops"] / r["seconds_per_step"] / PEAK)
  line = [x for x in watched["lines"] if x.startswith("step 8/8 ")][0]
  assert f"MFU {100 * history[-1]['mfu']:.1f}%" in line
  assert f"templama_f1 {100 * history[-1]['templama_f1']:.1f}" in line


def test_profile_window_traces_only_its_steps(watched):
  assert [s for s, active in watched["traced"] if active] == [2, 3]
  assert [s for s, _ in watched["traced"]] == list(range(8))
  pattern = os.path.join(watched["workdir"], "profile", "**", "*.xplane.pb")
  traces = glob.glob(pattern, recursive=True)
  assert traces and all(os.path.getsize(t) > 0 for t in traces)


@pytest.mark.parametrize("window", ["3", "2,2", "5,1", "-1,2"])
def test_bad_profile_windows_are_refused(window, tmp_path):
  with pytest.raises(ConfigError, match="train.profile_steps"):
    loop.Trainer(tiny_config(f"train.profile_steps={window}"), str(tmp_path))


def test_a_profile_window_after_the_last_step_is_refused(tmp_path):
  loop.Trainer(tiny_config("train.steps=8", "train.profile_steps=7,9"), str(tmp_path))  # opens
  with pytest.raises(ConfigError, match=r"train.profile_steps=8,9 starts after the last step of"):
    loop.Trainer(tiny_config("train.steps=8", "train.profile_steps=8,9"), str(tmp_path))


def test_keep_best_names_a_logged_metric(tmp_path):
  with pytest.raises(ConfigError, match="train.keep_best='templama_f1'.*eval_loss"):
    loop.Trainer(tiny_config("train.keep_best=templama_f1"), str(tmp_path))
  assert best.mode_of("eval_loss") == "min" and best.mode_of("templama_f1") == "max"


def test_task_metrics_without_evaluators_are_refused(tmp_path):
  # A programmatic caller that asks for task metrics but hands the trainer no evaluators
  # would otherwise drop the key silently.
  config = tiny_config("train.eval_every=4", "train.eval_examples=4")
  with pytest.raises(ConfigError, match=r"train.eval_examples=4 needs evaluators"):
    loop.Trainer(config, str(tmp_path))
  assert [e.fields for e in during_training.evaluators(config)] == [during_training.FIELDS]
  assert during_training.evaluators(configs.replace(config, "train.eval_examples", 0)) == ()


@pytest.fixture(scope="module")
def best_run(tmp_path_factory):
  """rsqrt schedule: the learning rate is highest (first) at step 2; checkpoints keep only 1."""
  workdir = str(tmp_path_factory.mktemp("best"))
  config = tiny_config(
    "train.steps=8",
    "train.log_every=2",
    "train.eval_every=0",
    "train.checkpoint_every=2",
    "train.keep_checkpoints=1",
    "train.schedule=rsqrt",
    "train.warmup_steps=2",
    "train.keep_best=learning_rate",
  )
  loop.train(config, workdir, log=lambda _: None)
  return {"workdir": workdir, "config": config}


def test_best_checkpoint_survives_rotation(best_run):
  workdir = best_run["workdir"]
  manager = CheckpointManager(workdir)
  assert manager.all_steps() == [8]
  manager.close()
  with open(os.path.join(workdir, "best", "best.json")) as f:
    saved = json.load(f)
  history = records(workdir)
  assert saved == {
    "metric": "learning_rate",
    "mode": "max",
    "value": history[0]["learning_rate"],
    "step": 2,
  }
  assert [r.get("best_step") for r in history] == [2, None, None, None]
  assert sorted(os.listdir(os.path.join(workdir, "best", "checkpoints"))) == ["2"]
  assert trained_models.trained(os.path.join(workdir, "best"))


def test_best_checkpoint_resumes_like_any_other(best_run, tmp_path):
  workdir, config = best_run["workdir"], best_run["config"]
  copy = str(tmp_path / "from_best")
  shutil.copytree(os.path.join(workdir, "best"), copy)
  lines = []
  config = configs.replace_many(config, {"train.keep_best": "", "train.steps": 4})
  result = loop.train(config, copy, log=lines.append)
  assert "resumed from step 2" in lines[0] and result["step"] == 4
  # Steps 3-4 from the best checkpoint are the main run's steps 3-4.
  resumed, main = records(copy), records(workdir)
  assert [r["step"] for r in resumed] == [4] and main[1]["step"] == 4
  assert resumed[0]["loss"] == main[1]["loss"]


def test_resumed_run_keeps_its_best(best_run, tmp_path):
  workdir = str(tmp_path / "run")
  shutil.copytree(best_run["workdir"], workdir)
  keeper = best.BestKeeper(workdir, "learning_rate", main=True)
  assert (keeper.step, keeper.value) == (2, records(workdir)[0]["learning_rate"])
  keeper.close()
  loop.train(configs.replace(best_run["config"], "train.steps", 10), workdir, log=lambda _: None)
  with open(os.path.join(workdir, "best", "best.json")) as f:
    assert json.load(f)["step"] == 2
  assert sorted(os.listdir(os.path.join(workdir, "best", "checkpoints"))) == ["2"]
  # best.json ahead of its checkpoint (a crash during the save): the value is not trusted.
  with open(os.path.join(workdir, "best", "best.json"), "w") as f:
    json.dump({"metric": "learning_rate", "mode": "max", "value": 1.0, "step": 6}, f)
  keeper = best.BestKeeper(workdir, "learning_rate", main=True)
  assert keeper.value is None and keeper.improves(0.0)
  keeper.close()


def test_writer_without_tensorboardx(tmp_path, monkeypatch):
  monkeypatch.setitem(__import__("sys").modules, "tensorboardX", None)
  lines = []
  writer = tensorboard_writer.ScalarWriter(str(tmp_path), 0, lines.append)
  writer.write({"step": 1, "loss": 1.0})
  writer.close()
  assert not writer.enabled and len(lines) == 1 and "tensorboardX is not installed" in lines[0]
  assert not os.path.exists(tmp_path / "tensorboard")


def test_resumed_writer_purges_the_interrupted_steps(tmp_path):
  first = tensorboard_writer.ScalarWriter(str(tmp_path), 0, print)
  for step in (1, 2, 3):
    first.write({"step": step, "loss": float(step)})
  first.close()
  second = tensorboard_writer.ScalarWriter(str(tmp_path), 2, print)
  for step in (3, 4):
    second.write({"step": step, "loss": 10.0 * step})
  second.close()
  events = EventAccumulator(str(tmp_path / "tensorboard"))
  events.Reload()
  got = [(e.step, e.value) for e in events.Scalars("train/loss")]
  assert got == [(1, 1.0), (3, 30.0), (4, 40.0)]


def test_peak_table_and_compiled_flops():
  assert mfu.peak_flops("NVIDIA H100 80GB HBM3") == 989e12
  assert mfu.peak_flops("NVIDIA H100 PCIe") == 756e12
  assert mfu.peak_flops("NVIDIA H200") == 989e12
  assert mfu.peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
  assert mfu.peak_flops("TPU v4") == 275e12
  assert mfu.peak_flops("TPU v5 lite") == 197e12
  assert mfu.peak_flops("TPU v5p") == 459e12
  assert mfu.peak_flops("TPU v3") == 61.5e12
  assert mfu.peak_flops("cpu") is None and mfu.peak_flops("Tesla T4") is None
  x = jax.ShapeDtypeStruct((64, 32), jnp.float32)
  y = jax.ShapeDtypeStruct((32, 16), jnp.float32)
  compiled = jax.jit(jnp.matmul).lower(x, y).compile()
  assert cost.compiled_flops(compiled) == 2 * 64 * 32 * 16
  assert mfu.utilisation(2e12, 0.5, 8e12) == 0.5
  assert mfu.utilisation(None, 0.5, 8e12) is None and mfu.utilisation(1.0, 0.5, None) is None


def test_profile_window_without_steps_traces_nothing(tmp_path):
  window = profiling.ProfileWindow(None, str(tmp_path))
  with window.step(0):
    pass
  window.after(0, jnp.zeros(()))
  assert not window.active and not os.path.exists(tmp_path / "profile")


def test_mfu_counts_every_microbatch(tmp_path):
  flops = {}
  for m in (1, 2):
    config = tiny_config("train.steps=1", "train.eval_every=0", f"train.microbatches={m}")
    trainer = loop.Trainer(config, str(tmp_path / str(m)), log=lambda _: None)
    trainer.manager.close()
    flops[m] = trainer.step_flops
  # The compiled microbatch loop alone would count half the step.
  assert flops[2] == pytest.approx(flops[1], rel=0.02)


def test_yearly_run_writes_one_tensorboard_run_per_expert(tmp_path):
  config = configs.override(
    configs.get("tiny_yearly"),
    [
      *FIXTURE_DATA_SETS,
      "data.train_years=2010,2011",
      "train.batch_size=8",
      "train.steps=2",
      "train.eval_every=0",
      "train.log_every=1",
      "model.num_layers=1",
    ],
  )
  loop.run(config, str(tmp_path), log=lambda _: None)
  for year in (2010, 2011):
    events = EventAccumulator(str(tmp_path / f"year={year}" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2]
  assert not os.path.exists(tmp_path / "tensorboard")


def test_config_json_of_a_workdir_older_than_these_keys_is_read():
  config = configs.get("tiny_temporal")
  saved = configs.to_dict(config)
  for key in ("eval_examples", "keep_best", "profile_steps"):
    del saved["train"][key]
  assert configs.from_dict(saved) == config
  saved["train"]["keep_bestt"] = "loss"
  with pytest.raises(ConfigError, match="keep_bestt"):
    configs.from_dict(saved)
