"""The train step and loop on one device: T5X loss, microbatching, overfitting one batch, the
non-finite-loss stop, initialisation from a checkpoint, resume checks and Yearly experts."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import linen as nn

from tests.helpers import tiny_config
from tlm import configs
from tlm.errors import CheckpointError, ConfigError
from tlm.input.mixture import TrainingData
from tlm.models import t5
from tlm.models.formats.hf_config import to_hf_config
from tlm.models.shapes import model_config
from tlm.models.t5 import Transformer
from tlm.sharding import partitioning
from tlm.train import loop
from tlm.train import step as train_step
from tlm.train.checkpointing import CheckpointManager, load_init_params
from tlm.train.optim import factored_state, make_optimizer
from tlm.train.state import TrainState, state_layout


def test_loss_sums_match_numpy():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 3, 5)).astype(np.float32) * 3
  targets = np.array([[1, 4, 0], [2, 2, 3]], np.int32)
  weights = np.array([[1, 1, 0], [1, 0.5, 1]], np.float32)
  got = jax.device_get(train_step.loss_sums(jnp.asarray(logits), targets, weights, 1e-4))
  log_z = np.log(np.exp(logits.astype(np.float64)).sum(-1))
  xent = log_z - np.take_along_axis(logits, targets[..., None], -1)[..., 0]
  z = 1e-4 * log_z**2
  np.testing.assert_allclose(got["loss"], ((xent + z) * weights).sum(), rtol=1e-6)
  np.testing.assert_allclose(got["z_loss"], (z * weights).sum(), rtol=1e-6)
  assert got["weight"] == 4.5
  np.testing.assert_allclose(
    got["correct"], ((logits.argmax(-1) == targets) * weights).sum(), rtol=1e-6
  )


@pytest.fixture(scope="module")
def tiny():
  config = tiny_config("train.learning_rate=1e-2", "model.num_layers=1")
  data = TrainingData(config)
  model = Transformer(model_config(config.model, data.vocab.vocab_size))
  optimizer = make_optimizer("constant", 1e-2)
  mesh = partitioning.make_mesh(1, 1, jax.devices()[:1])
  with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.AXIS_RULES):
    layout = state_layout(model, optimizer, mesh)
  rng = np.random.default_rng(0)
  params = jax.tree.map(
    lambda x: (rng.normal(size=x.shape) * 0.5).astype(np.float32), layout.abstract.params
  )
  batch = data.train_batch(0, 0, 8)[0]
  data.close()  # its prefetching thread

  def fresh_state():
    p = jax.tree.map(jnp.asarray, params)
    return TrainState(jnp.zeros((), jnp.int32), p, optimizer.init(p))

  step = jax.jit(train_step.make_train_step(model, optimizer), donate_argnums=(0,))
  return {
    "model": model,
    "optimizer": optimizer,
    "batch": batch,
    "state": fresh_state,
    "step": step,
  }


class _GradientsAsParams:
  """An optimizer whose new parameters are the gradient it was given: the gradient a step
  applies, read back as it is. Adafactor's parameters are no stand-in for it: on an unfactored
  matrix the update is about lr * g / sqrt(g^2 + 1e-30), so a gradient within float rounding
  of zero moves its parameter by +-lr, and which sign it gets depends on the summation order."""

  def update(self, grads, opt_state, params):
    return grads, opt_state

  def learning_rate(self, step):
    return jnp.zeros((), jnp.float32)


def test_microbatches_accumulate_the_full_batch_gradient(tiny):
  one, m1 = tiny["step"](tiny["state"](), tiny["batch"])
  step4 = jax.jit(train_step.make_train_step(tiny["model"], tiny["optimizer"], microbatches=4))
  four, m4 = step4(tiny["state"](), tiny["batch"])
  for k in ("loss", "weight", "correct", "grad_norm"):
    np.testing.assert_allclose(float(m4[k]), float(m1[k]), rtol=1e-5, err_msg=k)
  # The optimizer is applied once per step, not once per microbatch.
  assert int(four.step) == 1 and int(factored_state(four.opt_state).count) == 1
  gradients = {}
  for m in (1, 4):
    step = jax.jit(train_step.make_train_step(tiny["model"], _GradientsAsParams(), microbatches=m))
    gradients[m] = step(tiny["state"](), tiny["batch"])[0].params
  for a, b in zip(jax.tree.leaves(gradients[4]), jax.tree.leaves(gradients[1])):
    a, b = np.asarray(a), np.asarray(b)
    scale = np.abs(b).max()
    assert scale > 0  # a gradient that reaches this parameter
    # float32 sums in another order: their rounding is relative to the leaf's largest entries
    # (measured: 4e-6 of it); a microbatch dropped or normalised twice is off by 25% or more.
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * scale)


def test_tiny_overfits_one_batch(tiny):
  state = tiny["state"]()
  losses = []
  for _ in range(400):
    state, m = tiny["step"](state, tiny["batch"])
    losses.append(float(m["loss"]) / float(m["weight"]))
  assert losses[0] > 3.0
  assert losses[-1] < 0.05, losses[-10:]
  # Every target token but the ambiguous ones (the same masked sentence with two answers).
  assert float(m["correct"]) >= 0.95 * float(m["weight"])


class _Poisoned:
  """The fixture data with NaN loss weights at one step."""

  def __init__(self, data, bad_step):
    self.data, self.bad_step, self.vocab = data, bad_step, data.vocab

  def train_batch(self, step, start, stop):
    batch, stats = self.data.train_batch(step, start, stop)
    if step == self.bad_step:
      batch = dict(batch, decoder_loss_weights=batch["decoder_loss_weights"] * np.nan)
    return batch, stats

  def eval_batches(self, start, stop):
    return []


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("nan"))
  config = tiny_config(
    "train.steps=8", "train.checkpoint_every=2", "train.log_every=1", "model.num_layers=1"
  )
  lines = []
  with pytest.raises(loop.NonFiniteLossError) as e:
    loop.train(config, workdir, data=_Poisoned(TrainingData(config), 4), log=lines.append)
  return {"workdir": workdir, "error": str(e.value), "config": config, "lines": lines}


def test_non_finite_loss_stops_with_the_last_good_checkpoint(nan_run):
  workdir = nan_run["workdir"]
  assert "non-finite loss (nan) at step 5" in nan_run["error"]
  assert "last good checkpoint: step 4" in nan_run["error"]
  manager = CheckpointManager(workdir)
  assert manager.all_steps() == [2, 4]
  manager.close()
  records = [line for line in open(os.path.join(workdir, "metrics.jsonl"))]
  assert len(records) == 4 and all("NaN" not in r for r in records)
  assert nan_run["lines"][-1].startswith("step 4/8 loss ")
  assert "tokens/s ETA" in nan_run["lines"][-1]
  for name in ("config.json", "model_config.json", "spiece.model"):
    assert os.path.isfile(os.path.join(workdir, name))


def test_non_finite_loss_between_log_steps_is_caught_at_the_next_boundary(tmp_path):
  # Metrics are fetched at log and save boundaries only: the NaN of step 6 is found at step 8,
  # before step 8 is saved.
  config = tiny_config(
    "train.steps=12", "train.checkpoint_every=4", "train.log_every=100", "model.num_layers=1"
  )
  lines = []
  with pytest.raises(loop.NonFiniteLossError, match="at step 6;.*last good checkpoint: step 4"):
    loop.train(config, str(tmp_path), data=_Poisoned(TrainingData(config), 5), log=lines.append)
  manager = CheckpointManager(str(tmp_path))
  assert manager.all_steps() == [4]
  manager.close()
  assert not [line for line in lines if line.startswith("step ")]


def test_init_from_a_training_workdir(nan_run):
  config = nan_run["config"]
  vocab = TrainingData(config).vocab
  t5 = model_config(config.model, vocab.vocab_size)
  optimizer = make_optimizer("constant", 1e-2)
  mesh = partitioning.make_mesh(1, 1, jax.devices()[:1])
  with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.AXIS_RULES):
    layout = state_layout(Transformer(t5), optimizer, mesh)
  params = load_init_params(nan_run["workdir"], t5, layout.abstract.params)
  manager = CheckpointManager(nan_run["workdir"])
  saved, _, data_state = manager.restore(4, layout.abstract.params, layout.abstract.opt_state)
  manager.close()
  assert data_state["step"] == 4
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(saved)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.all(np.isfinite(np.asarray(a)))
  other = model_config(configs.replace(config, "model.preset", "tiny").model, 180)  # T5 1.0
  with pytest.raises(CheckpointError, match="architecture differs.*mlp_activations"):
    load_init_params(nan_run["workdir"], other, layout.abstract.params)
  with pytest.raises(CheckpointError, match="no such file"):
    load_init_params(nan_run["workdir"] + "/nope", t5, layout.abstract.params)


def test_resume_with_another_data_stream_is_refused(nan_run):
  config = configs.replace(nan_run["config"], "data.seed", 7)
  with pytest.raises(ConfigError, match="data.seed"):
    loop.Trainer(config, nan_run["workdir"], log=lambda _: None)


def test_yearly_experts_train_in_year_workdirs(tmp_path):
  config = configs.get("tiny_yearly")
  runs = configs.expert_runs(config, str(tmp_path))
  assert [c.data.year for c, _ in runs] == list(range(2010, 2019))
  assert [w for _, w in runs][4] == str(tmp_path / "year=2014")
  one = configs.expert_runs(configs.replace(config, "data.year", 2014), "W")
  assert [(c.data.year, w) for c, w in one] == [(2014, os.path.join("W", "year=2014"))]
  temporal = configs.get("tiny_temporal")
  assert configs.expert_runs(temporal, "W") == [(temporal, "W")]


def test_model_config_fits_the_vocabulary():
  cfg = model_config(configs.get("tiny_temporal").model, 180)
  assert cfg.vocab_size == 256 and cfg.dropout_rate == 0.0
  large = model_config(configs.get("large_temporal").model, 32100)
  assert large.vocab_size == 32128 and large.dtype == "bfloat16" and large.remat
  with pytest.raises(ConfigError, match="data.vocab"):
    model_config(configs.get("large_temporal").model, 40000)
  sized = configs.override(
    configs.get("tiny_temporal"), ["model.emb_dim=128", "model.num_layers=1", "model.mlp_dim=96"]
  )
  cfg = model_config(sized.model, 180)
  assert (cfg.emb_dim, cfg.num_encoder_layers, cfg.num_decoder_layers) == (128, 1, 1)
  assert (cfg.mlp_dim, cfg.num_heads, cfg.head_dim) == (96, 4, 16)  # the rest: the preset's
  with pytest.raises(ConfigError, match="num_heads"):
    model_config(configs.replace(sized, "model.num_heads", -1).model, 180)
  assert not cfg.relpos_bias_per_layer  # a table per layer (scalable T5, umT5) only when set
  per_layer = configs.override(configs.get("tiny_temporal"), ["model.relpos_bias_per_layer=true"])
  assert model_config(per_layer.model, 180).relpos_bias_per_layer


@pytest.mark.slow
def test_dry_run_reports_the_published_parameter_count(tmp_path):
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=root)
  env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"
  out = tmp_path / "dry.json"
  script = os.path.join(root, "tests", "fixtures", "train", "dry_runs.py")
  subprocess.run([sys.executable, script, str(out)], cwd=root, env=env, check=True, timeout=600)
  report = json.loads(out.read_text())
  large = report["large"]
  # T5.1.1-Large as transformers builds it (meta device: nothing allocated), and the paper's
  # "770M parameters" (§2.3) to within 2%.
  hf_config = transformers.T5Config(**to_hf_config(t5.get_preset("t5-v1_1-large")))
  with torch.device("meta"):
    hf_model = transformers.T5ForConditionalGeneration(hf_config)
    # transformers 5 always ties lm_head to the embedding; T5.1.1 has its own (logits_dense).
    hf_model.lm_head.weight = torch.nn.Parameter(torch.empty_like(hf_model.lm_head.weight))
  hf_count = sum(p.numel() for p in hf_model.parameters())
  assert large["parameters"] == hf_count == 783_150_080
  assert abs(large["parameters"] / 770e6 - 1) < 0.02
  assert large["devices"] == 8 and large["mesh"] == {"data": 8, "model": 1}
  tokens = large["tokens_per_step"]
  assert tokens == 2048 * (128 + 32)
  # An encoder-decoder step costs between 6 * (N / 2) and 6 * N FLOPs per token.
  n = large["parameters"]
  assert 3 * n * tokens < large["flops_per_step"] < 6 * n * tokens
  tiny = report["tiny"]
  assert tiny["mesh"] == {"data": 2, "model": 4} and tiny["memory_per_device"]["peak_estimate"] > 0
  assert tiny["flops_per_device"] > 0 and tiny["compile_seconds"] > 0
  assert any(line.startswith("large_temporal: 783,150,080 parameters") for line in report["lines"])
  assert any(line.startswith("memory per device:") for line in report["lines"])
