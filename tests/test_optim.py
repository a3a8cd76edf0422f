"""Adafactor against a numpy transcription of Mesh-TF's AdafactorOptimizer (T5's settings),
against optax.adafactor, and a hand-computed first step; its state's layout and partitioning;
the learning-rate schedules."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tlm.errors import CheckpointError, ConfigError
from tlm.sharding import partitioning
from tlm.train import optim
from tlm.train.checkpointing import CheckpointManager


def _mesh_tf_adafactor(params, grads_per_step, lr):
  """Mesh TensorFlow's `AdafactorOptimizer.apply_grad` with T5's operative config, in numpy.

  Written from the Mesh-TF formulation (d0 = the largest dim, vr drops d0, vc drops d1, the
  long-term mean averages vr over d1), not from tlm's code.
  """
  params = {k: v.astype(np.float64) for k, v in params.items()}
  vr, vc, v = {}, {}, {}
  for step, grads in enumerate(grads_per_step):
    decay = 1.0 - (step + 1.0) ** -0.8
    for name, p in params.items():
      g = grads[name].astype(np.float64)
      g2 = g * g + 1e-30
      dims = sorted(range(p.ndim), key=lambda d: -p.shape[d])  # stable: earlier dim first
      factored = p.ndim >= 2 and p.shape[dims[1]] >= 128
      if factored:
        d0, d1 = dims[0], dims[1]
        vr[name] = decay * vr.get(name, 0.0) + (1 - decay) * g2.mean(axis=d0, keepdims=True)
        vc[name] = decay * vc.get(name, 0.0) + (1 - decay) * g2.mean(axis=d1, keepdims=True)
        long_term_mean = vr[name].mean(axis=d1, keepdims=True)
        x = g / np.sqrt(vr[name] / long_term_mean) / np.sqrt(vc[name])
      else:
        v[name] = decay * v.get(name, 0.0) + (1 - decay) * g2
        x = g / np.sqrt(v[name])
      x = x / max(1.0, np.sqrt(np.mean(x * x)) / 1.0)
      scale = lr * max(np.sqrt(np.mean(p * p)), 1e-3)
      params[name] = p - scale * x
  return params


_SHAPES = {
  "matrix": (130, 140),  # factored
  "square": (128, 128),  # factored, tied dims
  "cube": (3, 140, 130),  # factored over the last two dims
  "thin": (200, 3),  # second largest dim < 128: full second moment
  "vector": (7,),
  "tiny_scale": (4, 5),  # RMS below epsilon2
}


def _problem(steps=4, seed=0):
  rng = np.random.default_rng(seed)
  params = {k: rng.normal(size=s).astype(np.float32) for k, s in _SHAPES.items()}
  params["tiny_scale"] *= 1e-5
  grads = [
    {k: (rng.normal(size=s) * rng.uniform(0.1, 10)).astype(np.float32) for k, s in _SHAPES.items()}
    for _ in range(steps)
  ]
  return params, grads


def _run_tlm(params, grads, lr):
  opt = optim.make_optimizer("constant", lr)
  p = jax.tree.map(jnp.asarray, params)
  state = opt.init(p)
  update = jax.jit(opt.update)
  for g in grads:
    p, state = update(jax.tree.map(jnp.asarray, g), state, p)
  return p, state


def test_matches_mesh_tf_formula():
  params, grads = _problem()
  got, state = _run_tlm(params, grads, 1e-3)
  want = _mesh_tf_adafactor(params, grads, 1e-3)
  for name in _SHAPES:
    np.testing.assert_allclose(np.asarray(got[name]), want[name], rtol=2e-6, atol=1e-9)
  assert int(optim.factored_state(state).count) == len(grads)


def test_matches_optax_adafactor():
  params, grads = _problem(seed=1)
  got, _ = _run_tlm(params, grads, 1e-3)
  tx = optax.adafactor(learning_rate=1e-3)  # optax's defaults are T5's
  p = jax.tree.map(jnp.asarray, params)
  state = tx.init(p)

  @jax.jit
  def step(g, state, p):
    updates, state = tx.update(g, state, p)
    return optax.apply_updates(p, updates), state

  for g in grads:
    p, state = step(jax.tree.map(jnp.asarray, g), state, p)
  for name in _SHAPES:
    np.testing.assert_allclose(np.asarray(got[name]), np.asarray(p[name]), rtol=2e-6, atol=1e-9)


def test_first_step_by_hand():
  # Step 0: decay = 1 - 1^-0.8 = 0, so v = g^2 + eps1 and the update is sign(g) (RMS 1, not
  # clipped); it is scaled by lr * RMS(param).
  p = {"w": np.array([3.0, -4.0, 0.0, 0.0], np.float32)}  # RMS = sqrt(25 / 4) = 2.5
  g = {"w": np.array([0.5, -2.0, 1e-3, -7.0], np.float32)}
  got, state = _run_tlm(p, [g], 0.1)
  np.testing.assert_allclose(
    np.asarray(got["w"]), [3.0 - 0.25, -4.0 + 0.25, -0.25, 0.25], rtol=1e-6
  )
  v = optim.factored_state(state).v
  np.testing.assert_allclose(np.asarray(v["w"]), np.square(g["w"]) + 1e-30, rtol=1e-6)


def test_clipping_by_hand():
  # Second step with v from a tiny first gradient: the raw update has RMS >> 1 and is clipped
  # back to RMS 1. decay(1) = 1 - 2^-0.8.
  p = {"w": np.array([1.0, 1.0], np.float32)}
  g1 = {"w": np.array([1e-3, 1e-3], np.float32)}
  g2 = {"w": np.array([1.0, 2.0], np.float32)}
  got, _ = _run_tlm(p, [g1, g2], 0.01)
  d = 1.0 - 2.0**-0.8
  v = d * 1e-6 + (1 - d) * np.array([1.0, 4.0])
  x = np.array([1.0, 2.0]) / np.sqrt(v)
  x = x / np.sqrt(np.mean(x * x))  # clipped to RMS 1
  after_first = 1.0 - 0.01 * 1.0  # first step: sign(g) * lr * RMS(p) with RMS(p) = 1
  want = after_first - 0.01 * after_first * x
  np.testing.assert_allclose(np.asarray(got["w"]), want, rtol=1e-6)


def test_state_shapes_and_partition_specs():
  opt = optim.make_optimizer("constant", 1e-3)
  params = {
    "emb": jnp.zeros((512, 256)),
    "wo": jnp.zeros((256, 512)),
    "sq": jnp.zeros((256, 256)),
    "scale": jnp.zeros((256,)),
    "rel": jnp.zeros((4, 32)),
  }
  specs = {
    "emb": P("model", None),
    "wo": P("model", None),
    "sq": P("model", None),
    "scale": P(None),
    "rel": P(),
  }
  state = optim.factored_state(opt.init(params))
  assert state.v_row["emb"].shape == (256,)  # drops the largest dim (512)
  assert state.v_col["emb"].shape == (512,)
  assert state.v["emb"].shape == (1,)
  assert state.v["scale"].shape == (256,)
  assert state.v["rel"].shape == (4, 32)
  s = opt.state_partition_specs(specs, params)
  f = optim.factored_state(s)
  assert f.count == P()
  assert f.v_row["emb"] == P(None) and f.v_col["emb"] == P("model")
  assert f.v_row["wo"] == P("model") and f.v_col["wo"] == P(None)
  assert f.v_row["sq"] == P("model") and f.v_col["sq"] == P(None)  # optax: dim 1 is "largest"
  assert f.v["emb"] == P() and f.v["scale"] == P(None) and f.v["rel"] == P(None, None)
  assert f.v_row["scale"] == P() and f.v_col["rel"] == P()
  is_spec = lambda x: isinstance(x, P)
  assert all(x == P() for x in jax.tree.leaves(s[1:], is_leaf=is_spec))  # schedule count
  state_leaves = jax.tree.leaves(opt.init(params))
  assert jax.tree.structure(s, is_leaf=is_spec) == jax.tree.structure(opt.init(params))
  # Every spec fits its slot: as many entries as dims (placeholders and counts: none or all).
  for spec, x in zip(jax.tree.leaves(s, is_leaf=is_spec), state_leaves):
    assert len(spec) in (0, x.ndim), (spec, x.shape)


@pytest.mark.parametrize(
  "shape", [(130, 140), (140, 130), (128, 128), (3, 140, 130), (140, 3, 140)]
)
def test_factored_dims_are_the_dims_optax_reduces(shape):
  # With decay 0 at the first update, v_row is the mean of g^2 over the largest dim and v_col
  # over the second largest: the layout `state_partition_specs` assumes, checked against
  # optax's state itself (rows and columns of a square matrix get distinct values).
  g = np.arange(1, np.prod(shape) + 1, dtype=np.float32).reshape(shape) ** 0.5
  opt = optim.make_optimizer("constant", 1e-3)
  p = {"w": jnp.ones(shape)}
  _, state = opt.update({"w": jnp.asarray(g)}, opt.init(p), p)
  second, largest = optim.factored_dims(shape)
  f = optim.factored_state(state)
  np.testing.assert_allclose(np.asarray(f.v_row["w"]), (g * g).mean(axis=largest), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(f.v_col["w"]), (g * g).mean(axis=second), rtol=1e-6)


def test_factored_dims():
  assert optim.factored_dims((130, 140)) == (0, 1)
  assert optim.factored_dims((140, 130)) == (1, 0)
  assert optim.factored_dims((128, 128)) == (0, 1)  # the later dim counts as the larger
  assert optim.factored_dims((127, 4096)) is None
  assert optim.factored_dims((4096,)) is None
  assert optim.factored_dims((3, 140, 130)) == (2, 1)


def test_an_optimizer_state_of_another_layout_is_refused_in_one_line(tmp_path):
  # A checkpoint whose optimizer state has another layout (here the {count, v_row, v_col, v}
  # dict of a hand-written Adafactor) is refused with a one-line reason, not restored into
  # optax's tree (nor an orbax traceback).
  opt = optim.make_optimizer("constant", 1e-3)
  params = {"dense": {"kernel": jnp.ones((130, 140))}, "scale": jnp.ones((7,))}
  pre_optax = {
    "count": jnp.zeros((), jnp.int32),
    "v_row": {"dense": {"kernel": jnp.zeros((130,))}, "scale": jnp.zeros((1,))},
    "v_col": {"dense": {"kernel": jnp.zeros((140,))}, "scale": jnp.zeros((1,))},
    "v": {"dense": {"kernel": jnp.zeros((1,))}, "scale": jnp.zeros((7,))},
  }
  mesh = partitioning.make_mesh(1, 1, jax.devices()[:1])
  abstract = lambda tree: jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P())), tree
  )
  for name, opt_state, model_params in (
    ("old", pre_optax, params),
    ("new", opt.init(params), params),
    ("other_model", opt.init(params), {"dense": {"kernel": jnp.ones((130, 140))}}),
  ):
    manager = CheckpointManager(str(tmp_path / name), async_save=False)
    manager.save(1, model_params, opt_state, {"step": 1})
    manager.close()
  manager = CheckpointManager(str(tmp_path / "old"))
  with pytest.raises(CheckpointError) as error:
    manager.restore(1, abstract(params), abstract(opt.init(params)))
  message = str(error.value)
  assert "\n" not in message and "does not match the model and optimizer" in message
  # The same parameters with optax's state restore; another model is refused as before.
  restored = CheckpointManager(str(tmp_path / "new")).restore(
    1, abstract(params), abstract(opt.init(params))
  )
  assert int(optim.factored_state(restored[1]).count) == 0
  with pytest.raises(CheckpointError, match="does not match the model and optimizer"):
    CheckpointManager(str(tmp_path / "other_model")).restore(
      1, abstract(params), abstract(opt.init(params))
    )


def test_schedules():
  const = optim.learning_rate_schedule("constant", 1e-3)
  np.testing.assert_allclose(float(const(jnp.int32(123456))), 1e-3, rtol=1e-7)
  rsqrt = optim.learning_rate_schedule("rsqrt", 0.01, warmup_steps=10_000)
  np.testing.assert_allclose(float(rsqrt(jnp.int32(0))), 0.01, rtol=1e-6)
  np.testing.assert_allclose(float(rsqrt(jnp.int32(10_000))), 0.01, rtol=1e-6)
  np.testing.assert_allclose(float(rsqrt(jnp.int32(40_000))), 0.005, rtol=1e-6)
  with pytest.raises(ConfigError, match="rsqrt"):
    optim.learning_rate_schedule("rsqrt", 0.01, warmup_steps=0)
  with pytest.raises(ConfigError, match="unknown train.schedule"):
    optim.learning_rate_schedule("cosine", 0.01)
  with pytest.raises(ConfigError, match="learning_rate"):
    optim.learning_rate_schedule("constant", 0.0)
