"""Continuing a T5X run: T5X's Adafactor state, after T5X updates, read into tlm's
optax Adafactor gives the update T5X would have made next.

The reference is `t5x_adafactor_update`, T5X's `Adafactor.apply_param_gradient`
(t5x/adafactor.py) transcribed in numpy for T5's settings (decay_rate 0.8, no momentum,
clipping 1.0, parameter scale, epsilon1 1e-30, epsilon2 1e-3, heuristic factoring with
min_dim_size_to_factor 128), run on a model wide enough (128) that T5X factors its matrices.
"""

import jax
import numpy as np
import pytest
from flax import traverse_util

from tests import t5x_reference as ref
from tests.helpers import tiny_config
from tlm.errors import CheckpointError, ConfigError
from tlm.models import checkpoints, t5
from tlm.models.formats import t5x
from tlm.train import t5x_optimizer
from tlm.train.optim import make_optimizer

LR = 1e-2
CFG = t5.get_preset(
  "tiny-v1_1",
  vocab_size=300,
  emb_dim=128,
  num_heads=2,
  head_dim=64,
  mlp_dim=256,
  num_encoder_layers=1,
  num_decoder_layers=1,
)


def t5x_adafactor_update(step, param, state, grad, lr=LR):
  """t5x/adafactor.py `apply_param_gradient` (float32), T5's settings, heuristic rule."""
  f32 = np.float32
  decay_rate = f32(1.0) - (f32(step) + f32(1.0)) ** f32(-0.8)
  averaging_dims = tuple(range(param.ndim))
  param_scale = np.sqrt(np.mean(param * param, axis=averaging_dims, keepdims=True))
  update_scale = f32(lr) * np.maximum(param_scale, f32(1e-3))
  mixing_rate = f32(1.0) - decay_rate
  grad_sqr = grad * grad + f32(1e-30)
  updates = {k: np.zeros((1,), f32) for k in ("v_row", "v_col", "v", "m")}
  factored_dims = None
  if param.ndim >= 2:
    sorted_dims = np.argsort(param.shape)
    if param.shape[sorted_dims[-2]] >= 128:
      factored_dims = ((int(sorted_dims[-2]),), (int(sorted_dims[-1]),))
  if factored_dims is not None:
    d1, d0 = factored_dims
    new_v_row = decay_rate * state["v_row"] + mixing_rate * np.mean(grad_sqr, axis=d0)
    new_v_col = decay_rate * state["v_col"] + mixing_rate * np.mean(grad_sqr, axis=d1)
    updates["v_row"], updates["v_col"] = new_v_row, new_v_col
    reduced_d1 = tuple(d - len([e for e in d0 if e < d]) for d in d1)
    row_col_mean = np.mean(new_v_row, axis=reduced_d1, keepdims=True)
    row_factor = (new_v_row / row_col_mean) ** f32(-0.5)
    col_factor = new_v_col ** f32(-0.5)
    y = grad * np.expand_dims(row_factor, axis=d0) * np.expand_dims(col_factor, axis=d1)
  else:
    new_v = decay_rate * state["v"] + mixing_rate * grad_sqr
    updates["v"] = new_v
    y = grad * new_v ** f32(-0.5)
  clipping_denom = np.maximum(
    f32(1.0), np.sqrt(np.mean(y * y, axis=averaging_dims, keepdims=True)) / f32(1.0)
  )
  y = y / clipping_denom
  return (param - update_scale * y).astype(f32), {k: v.astype(f32) for k, v in updates.items()}


def _t5x_run(steps: int, seed: int = 0):
  """(params, param_states, grads of the next step) after `steps` T5X updates."""
  rs = np.random.RandomState(seed)
  flat = {k: rs.randn(*s).astype(np.float32) for k, s in checkpoints.param_shapes(CFG).items()}
  states = traverse_util.flatten_dict(ref.adafactor_init(checkpoints.unflatten(flat)), sep="/")
  grads = None
  for step in range(steps + 1):
    grads = {k: rs.randn(*v.shape).astype(np.float32) * 0.1 for k, v in flat.items()}
    if step == steps:
      break
    for name in flat:
      slots = {s: states[f"{name}/{s}"] for s in ("v_row", "v_col", "v", "m")}
      flat[name], new = t5x_adafactor_update(step, flat[name], slots, grads[name])
      states.update({f"{name}/{s}": v for s, v in new.items()})
  return flat, states, grads


def _save(tmp_path, flat, states, step, kind="legacy"):
  state = {
    "target": checkpoints.unflatten(flat),
    "state": {
      "step": np.asarray(step, np.int32),
      "param_states": traverse_util.unflatten_dict(states, sep="/"),
    },
  }
  if kind == "legacy":
    return ref.save_legacy(str(tmp_path), state, step)
  return ref.save_orbax(str(tmp_path), state, step)


@pytest.mark.parametrize("kind", ["legacy", "orbax"])
def test_t5x_adafactor_state_continues_as_t5x_would(tmp_path, kind):
  flat, states, grads = _t5x_run(steps=3)
  step_dir = _save(tmp_path, flat, states, 3, kind)
  # The model is wide enough that T5X factored its matrices (and not its vectors).
  assert states["token_embedder/embedding/v_row"].shape == (128,)
  assert states["encoder/layers_0/mlp/wi_0/kernel/v_col"].shape == (256,)
  assert states["encoder/relpos_bias/rel_embedding/v"].shape == (2, 32)
  cfg, params = checkpoints.load_checkpoint(str(tmp_path))
  assert cfg == CFG
  optimizer = make_optimizer("constant", LR)
  opt_state = t5x_optimizer.state_from_t5x(
    optimizer, params, t5x.read(step_dir, kind, "state"), step_dir
  )
  # tlm's next update and T5X's.
  new_params, new_state = jax.jit(optimizer.update)(checkpoints.unflatten(grads), opt_state, params)
  factored = jax.tree.map(np.asarray, t5x_optimizer.factored_state(new_state))
  assert int(factored.count) == 4
  ours = dict(checkpoints.flatten(jax.tree.map(np.asarray, new_params)))
  for name in flat:
    slots = {s: states[f"{name}/{s}"] for s in ("v_row", "v_col", "v", "m")}
    expected, new = t5x_adafactor_update(3, flat[name], slots, grads[name])
    np.testing.assert_allclose(ours[name], expected, rtol=2e-6, atol=1e-7, err_msg=name)
    assert not np.array_equal(expected, flat[name]), name
    for slot in ("v_row", "v_col", "v"):
      got = dict(checkpoints.flatten(getattr(factored, slot)))[name]
      np.testing.assert_allclose(got, new[slot], rtol=2e-6, atol=1e-30, err_msg=f"{name}/{slot}")
  # A fresh optimizer state would not give T5X's update: the state matters.
  fresh = optimizer.init(params)
  other, _ = jax.jit(optimizer.update)(checkpoints.unflatten(grads), fresh, params)
  name = "encoder/layers_0/mlp/wi_0/kernel"
  expected, _ = t5x_adafactor_update(
    3, flat[name], {s: states[f"{name}/{s}"] for s in ("v_row", "v_col", "v", "m")}, grads[name]
  )
  assert np.abs(dict(checkpoints.flatten(other))[name] - expected).max() > 1e-5


def _state(tmp_path, change):
  flat, states, _ = _t5x_run(steps=1)
  change(flat, states)
  step_dir = _save(tmp_path, flat, states, 1)
  params = checkpoints.unflatten(flat)
  state = t5x.read(step_dir, "legacy", "state")
  return lambda: t5x_optimizer.state_from_t5x(
    make_optimizer("constant", LR), params, state, f"{step_dir}/checkpoint"
  )


@pytest.mark.parametrize(
  "change, match",
  [
    (
      lambda f, s: s.update({"decoder/decoder_norm/scale/m": np.ones(128, np.float32)}),
      r"decoder/decoder_norm/scale/m \(momentum",
    ),
    (
      lambda f, s: s.update({"token_embedder/embedding/v_row": np.ones(300, np.float32)}),
      r"token_embedder/embedding/v_row \(shape \[300\], expected \[128\]\)",
    ),
    (lambda f, s: s.pop("encoder/encoder_norm/scale/v"), "missing .1.: param_states/encoder/"),
    (
      lambda f, s: s.update({"extra/v": np.ones(1, np.float32)}),
      "unexpected .1.: param_states/extra/v",
    ),
  ],
)
def test_t5x_adafactor_state_that_does_not_map(tmp_path, change, match):
  restore = _state(tmp_path, change)
  with pytest.raises(CheckpointError, match=match) as e:
    restore()
  assert str(e.value).startswith(f"{tmp_path}/checkpoint_1/checkpoint: ")
  assert "\n" not in str(e.value)


def test_without_a_step_it_is_not_a_training_checkpoint():
  params = checkpoints.unflatten(
    {k: np.zeros(s, np.float32) for k, s in checkpoints.param_shapes(CFG).items()}
  )
  with pytest.raises(CheckpointError, match="ckpt: no integer state/step"):
    t5x_optimizer.state_from_t5x(make_optimizer("constant", LR), params, {}, "ckpt")


def test_training_continues_a_t5x_run_with_its_adafactor_state(tmp_path):
  # model.init_optimizer_state: the run starts at its step 0 from the T5X checkpoint's
  # parameters and Adafactor state (counts at T5X's step); without it, a fresh optimizer.
  from tlm import configs
  from tlm.input.mixture import TrainingData
  from tlm.models.shapes import model_config
  from tlm.train import loop

  config = tiny_config("train.steps=1", "train.checkpoint_every=1", "model.num_layers=1")
  data = TrainingData(config)
  cfg = model_config(config.model, data.vocab.vocab_size)
  rs = np.random.RandomState(0)
  flat = {k: rs.randn(*s).astype(np.float32) for k, s in checkpoints.param_shapes(cfg).items()}
  states = traverse_util.flatten_dict(ref.adafactor_init(checkpoints.unflatten(flat)), sep="/")
  states = {k: (v + rs.rand(*v.shape).astype(np.float32)) for k, v in states.items()}
  _save(tmp_path / "t5x", flat, states, 700)
  config = configs.replace(config, "model.init_checkpoint", str(tmp_path / "t5x"))
  fresh = loop.Trainer(config, str(tmp_path / "fresh"), data=data)
  assert int(t5x_optimizer.factored_state(fresh.state.opt_state).count) == 0
  fresh.manager.close()
  config = configs.replace(config, "model.init_optimizer_state", True)
  with pytest.raises(ConfigError, match="needs model.init_checkpoint"):
    loop.Trainer(configs.replace(config, "model.init_checkpoint", ""), str(tmp_path / "x"))
  trainer = loop.Trainer(config, str(tmp_path / "run"), data=data)
  assert int(trainer.state.step) == 0
  factored = jax.tree.map(np.asarray, t5x_optimizer.factored_state(trainer.state.opt_state))
  assert int(factored.count) == 700
  for slot in ("v_row", "v_col", "v"):
    for name, value in checkpoints.flatten(getattr(factored, slot)):
      np.testing.assert_array_equal(value, states[f"{name}/{slot}"], err_msg=f"{name}/{slot}")
  result = trainer.fit()
  assert result["step"] == 1


def test_init_optimizer_state_needs_a_t5x_checkpoint(tmp_path):
  params = checkpoints.unflatten(
    {k: np.zeros(s, np.float32) for k, s in checkpoints.param_shapes(CFG).items()}
  )
  (tmp_path / "config.json").write_text("{}")  # an HF directory, say
  with pytest.raises(CheckpointError, match="needs a T5X checkpoint"):
    t5x_optimizer.load_t5x_opt_state(str(tmp_path), make_optimizer("constant", LR), params, None)
