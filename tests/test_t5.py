"""The T5 network: parameter names/shapes/axes, config round trips, packing, cached decoding,
bf16 and remat (tlm/models/t5.py)."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from jax.sharding import PartitionSpec as P

from tlm.errors import ConfigError
from tlm.models import t5


def _layer_params(stack, i, mlp):
  p = f"{stack}/layers_{i}/"
  if stack == "encoder":
    names = {p + "pre_attention_layer_norm/scale": (64,)}
    names.update({p + f"attention/{n}/kernel": (64, 64) for n in ("query", "key", "value")})
    names[p + "attention/out/kernel"] = (64, 64)
  else:
    names = {
      p + "pre_self_attention_layer_norm/scale": (64,),
      p + "pre_cross_attention_layer_norm/scale": (64,),
    }
    for a in ("self_attention", "encoder_decoder_attention"):
      names.update({p + f"{a}/{n}/kernel": (64, 64) for n in ("query", "key", "value", "out")})
  names[p + "pre_mlp_layer_norm/scale"] = (64,)
  names.update({p + f"mlp/{n}/kernel": (64, 128) for n in mlp})
  names[p + "mlp/wo/kernel"] = (128, 64)
  return names


def _golden(mlp, untied):
  # tiny: emb 64, 4 heads x 16, mlp 128, 2 + 2 layers, 32 buckets, vocab 512.
  names = {
    "token_embedder/embedding": (512, 64),
    "encoder/relpos_bias/rel_embedding": (4, 32),
    "encoder/encoder_norm/scale": (64,),
    "decoder/relpos_bias/rel_embedding": (4, 32),
    "decoder/decoder_norm/scale": (64,),
  }
  for stack in ("encoder", "decoder"):
    for i in range(2):
      names.update(_layer_params(stack, i, mlp))
  if untied:
    names["decoder/logits_dense/kernel"] = (64, 512)
  return names


GOLDEN = {"tiny": _golden(("wi",), False), "tiny-v1_1": _golden(("wi_0", "wi_1"), True)}


def _flat(tree, prefix=""):
  out = {}
  for k, v in tree.items():
    path = f"{prefix}/{k}" if prefix else k
    out.update(_flat(v, path) if isinstance(v, dict) else {path: v})
  return out


def random_params(cfg, seed=0):
  """T5X-scaled random parameters from numpy (compiling the jax initialisers is slow on CPU)."""
  rs = np.random.RandomState(seed)
  x = jnp.ones((1, 1), jnp.int32)
  abstract = jax.eval_shape(lambda: t5.Transformer(cfg).init(jax.random.key(0), x, x))

  def draw(path, leaf):
    name = "/".join(k.key for k in path)
    shape = leaf.value.shape
    if name.endswith("scale"):
      value = 1.0 + 0.2 * rs.randn(*shape)
    elif name.endswith("embedding"):
      value = rs.randn(*shape)
    else:
      value = rs.randn(*shape) / np.sqrt(shape[0])
    return leaf.replace_boxed(jnp.asarray(value, jnp.float32))

  return jax.tree_util.tree_map_with_path(
    draw, abstract, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned)
  )


@pytest.fixture(scope="module", params=["tiny", "tiny-v1_1"])
def model(request):
  cfg = t5.get_preset(request.param, dropout_rate=0.0)
  return request.param, cfg, random_params(cfg)


def test_golden_parameter_names_shapes_and_logical_axes(model):
  name, cfg, _ = model
  x = jnp.ones((1, 4), jnp.int32)
  variables = jax.eval_shape(lambda: t5.Transformer(cfg).init(jax.random.key(0), x, x))
  params = _flat(nn.meta.unbox(variables)["params"])
  assert {k: tuple(v.shape) for k, v in params.items()} == GOLDEN[name]
  assert all(v.dtype == jnp.float32 for v in params.values())
  specs = _flat(nn.get_partition_spec(variables)["params"])
  assert specs["token_embedder/embedding"] == P("vocab", "embed")
  assert specs["encoder/relpos_bias/rel_embedding"] == P("heads", "relpos_buckets")
  assert specs["encoder/layers_0/attention/query/kernel"] == P("embed", "joined_kv")
  assert specs["decoder/layers_1/encoder_decoder_attention/out/kernel"] == P("joined_kv", "embed")
  assert specs["decoder/layers_0/mlp/wo/kernel"] == P("mlp", "embed")
  assert specs["decoder/decoder_norm/scale"] == P("embed")
  if cfg.logits_via_embedding:
    assert "decoder/logits_dense/kernel" not in specs
  else:
    assert specs["decoder/logits_dense/kernel"] == P("embed", "vocab")
  # Every parameter is boxed with logical names.
  assert all(isinstance(s, P) and len(s) == params[k].ndim for k, s in specs.items())


def test_config_dict_round_trip_and_errors():
  cfg = t5.get_preset("t5-v1_1-base", dtype="bfloat16", remat=True)
  assert t5.T5Config.from_dict(cfg.to_dict()) == cfg
  assert cfg.to_dict()["mlp_activations"] == ["gelu", "linear"]
  with pytest.raises(ConfigError, match="emb_size"):
    t5.T5Config.from_dict({**cfg.to_dict(), "emb_size": 3})
  with pytest.raises(ConfigError, match="vocab_size"):
    t5.T5Config.from_dict({"emb_dim": 8})
  with pytest.raises(ConfigError, match="mlp_activations"):
    t5.T5Config(vocab_size=8, mlp_activations=("swish",))
  with pytest.raises(ConfigError, match="num_heads"):
    t5.T5Config(vocab_size=8, num_heads=0)
  with pytest.raises(ConfigError, match="unknown model preset"):
    t5.get_preset("t5-huge")


def test_published_presets():
  small, xxl = t5.get_preset("t5-small"), t5.get_preset("t5-v1_1-xxl")
  assert (small.emb_dim, small.num_heads, small.num_encoder_layers, small.mlp_dim) == (
    512,
    8,
    6,
    2048,
  )
  assert small.mlp_activations == ("relu",) and small.logits_via_embedding
  assert (xxl.emb_dim, xxl.num_heads, xxl.head_dim, xxl.mlp_dim, xxl.num_decoder_layers) == (
    4096,
    64,
    64,
    10240,
    24,
  )
  assert xxl.mlp_activations == ("gelu", "linear") and not xxl.logits_via_embedding
  assert t5.get_preset("t5-11b").mlp_dim == 65536 and t5.get_preset("t5-3b").head_dim == 128
  assert all(t5.get_preset(n).vocab_size == 32128 for n in t5.PRESETS if "tiny" not in n)
  assert t5.get_preset("tiny", vocab_size=1100).vocab_size == 1100


def test_hf_config_round_trip_and_tying_rules():
  for name in ("t5-large", "t5-v1_1-small", "tiny"):
    cfg = t5.get_preset(name)
    assert t5.from_hf_config(t5.to_hf_config(cfg)) == cfg
  hf = t5.to_hf_config(t5.get_preset("t5-v1_1-small"))
  # Published 1.1 configs say tie_word_embeddings false and have no scale key.
  legacy = {k: v for k, v in hf.items() if k != "scale_decoder_outputs"}
  assert not t5.from_hf_config(legacy).logits_via_embedding
  # transformers >= 5 writes tie true + scale false for 1.1: unscaled logits.
  assert not t5.from_hf_config({**hf, "tie_word_embeddings": True}).logits_via_embedding
  v10 = {k: v for k, v in t5.to_hf_config(t5.get_preset("t5-base")).items() if "tie" not in k}
  assert t5.from_hf_config({k: v for k, v in v10.items() if "scale" not in k}).logits_via_embedding
  with pytest.raises(ConfigError, match="feed_forward_proj"):
    t5.from_hf_config({**hf, "feed_forward_proj": "gated-mish"})
  with pytest.raises(ConfigError, match="d_model"):
    t5.from_hf_config({k: v for k, v in hf.items() if k != "d_model"})


def _batch(rs, batch, length, vocab, lengths):
  x = rs.randint(2, vocab, (batch, length))
  for b, n in enumerate(lengths):
    x[b, n:] = 0
  return x


# Every forward pass below uses these shapes, so each config compiles once.
BATCH, INPUT_LEN, TARGET_LEN = 3, 11, 8


@functools.cache
def _forward(cfg):
  model = t5.Transformer(cfg)
  return jax.jit(lambda v, *args: model.apply(v, *args, enable_dropout=False))


def test_packed_inputs_equal_separate_examples(model):
  _, cfg, variables = model
  rs = np.random.RandomState(0)
  a_in, b_in = rs.randint(2, 500, 5), rs.randint(2, 500, 4)
  a_out, b_out = rs.randint(2, 500, 3), rs.randint(2, 500, 4)
  shift = lambda y: np.concatenate([[0], y[:-1]])
  pad = lambda x, n: np.pad(x, (0, n - len(x)))
  # Row 0 packs a and b; rows 1 and 2 hold them alone (segment 1, then padding).
  encoder_tokens = np.stack(
    [np.concatenate([a_in, b_in, [0, 0]]), pad(a_in, INPUT_LEN), pad(b_in, INPUT_LEN)]
  )
  decoder_tokens = np.stack(
    [
      np.concatenate([shift(a_out), shift(b_out), [0]]),
      pad(shift(a_out), TARGET_LEN),
      pad(shift(b_out), TARGET_LEN),
    ]
  )
  encoder_segments = np.stack([[1] * 5 + [2] * 4 + [0, 0], pad([1] * 5, 11), pad([1] * 4, 11)])
  decoder_segments = np.stack([[1] * 3 + [2] * 4 + [0], pad([1] * 3, 8), pad([1] * 4, 8)])
  logits = np.asarray(
    _forward(cfg)(variables, encoder_tokens, decoder_tokens, encoder_segments, decoder_segments)
  )
  np.testing.assert_allclose(logits[0, :3], logits[1, :3], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(logits[0, 3:7], logits[2, :4], rtol=1e-5, atol=1e-5)


def test_cached_decoding_step_by_step_equals_the_full_forward_pass(model):
  _, cfg, variables = model
  m = t5.Transformer(cfg)
  rs = np.random.RandomState(1)
  x = _batch(rs, BATCH, INPUT_LEN, 500, [11, 4, 6])
  y = rs.randint(2, 500, (BATCH, TARGET_LEN))
  y[:, 0] = 0
  full = np.asarray(_forward(cfg)(variables, x, y))

  @jax.jit
  def decode(v, tokens):
    encoded = m.apply(v, x, enable_dropout=False, method=m.encode)
    return m.apply(
      v, encoded, x, tokens, enable_dropout=False, decode=True, mutable=["cache"],
      method=m.decode,
    )  # fmt: skip

  _, state = decode(variables, np.zeros((BATCH, TARGET_LEN), np.int32))
  for i in range(TARGET_LEN):
    logits, state = decode({**variables, **state}, y[:, i : i + 1])
    np.testing.assert_allclose(logits[:, 0], full[:, i], rtol=1e-5, atol=1e-5)
  assert int(state["cache"]["decoder"]["cache_index"]) == TARGET_LEN


def test_decoder_rows_may_share_an_encoder_row(model):
  _, cfg, variables = model
  m = t5.Transformer(cfg)
  rs = np.random.RandomState(2)
  x = _batch(rs, 1, INPUT_LEN, 500, [7])
  y = rs.randint(2, 500, (BATCH, TARGET_LEN))

  @jax.jit
  def grouped(v):
    encoded = m.apply(v, x, enable_dropout=False, method=m.encode)
    return m.apply(v, encoded, x, y, enable_dropout=False, method=m.decode)

  repeated = _forward(cfg)(variables, np.repeat(x, BATCH, 0), y)
  np.testing.assert_allclose(grouped(variables), repeated, rtol=1e-5, atol=1e-5)


def test_bf16_compute_keeps_float32_params_and_logits():
  cfg = t5.get_preset("tiny-v1_1", dropout_rate=0.0)
  variables = random_params(cfg)
  rs = np.random.RandomState(3)
  x = _batch(rs, BATCH, INPUT_LEN, 500, [11, 5, 8])
  y = rs.randint(2, 500, (BATCH, TARGET_LEN))
  bf16_cfg = dataclasses.replace(cfg, dtype="bfloat16")
  f32 = np.asarray(_forward(cfg)(variables, x, y))
  bf16 = _forward(bf16_cfg)(variables, x, y)
  assert bf16.dtype == jnp.float32
  fresh = jax.eval_shape(lambda: t5.Transformer(bf16_cfg).init(jax.random.key(0), x, y))
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(nn.meta.unbox(fresh)))
  # bf16 has ~3 significant digits: close to float32, not equal.
  assert not np.array_equal(np.asarray(bf16), f32)
  np.testing.assert_allclose(bf16, f32, atol=0.05 * float(np.abs(f32).max()))


def test_remat_gives_the_same_loss_and_gradients():
  # One layer each: remat wraps layers, and compiling gradients is slow on CPU.
  cfg = t5.get_preset("tiny-v1_1", dropout_rate=0.0, num_encoder_layers=1, num_decoder_layers=1)
  variables = random_params(cfg, 1)
  rs = np.random.RandomState(4)
  x, y = _batch(rs, 2, 6, 500, [6, 3]), rs.randint(2, 500, (2, 4))

  def loss(cfg, params):
    logits = t5.Transformer(cfg).apply(params, x, y, enable_dropout=True)
    return jnp.mean(logits**2)

  grad = jax.jit(jax.value_and_grad(loss, argnums=1), static_argnums=0)
  l1, g1 = grad(cfg, variables)
  l2, g2 = grad(dataclasses.replace(cfg, remat=True), variables)
  np.testing.assert_allclose(l1, l2, rtol=1e-6)
  for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_dropout_is_active_when_enabled():
  cfg = t5.get_preset("tiny", dropout_rate=0.3, num_encoder_layers=1, num_decoder_layers=1)
  variables = random_params(cfg, 2)
  rs = np.random.RandomState(5)
  x, y = _batch(rs, 2, 6, 500, [6, 3]), rs.randint(2, 500, (2, 4))
  model = t5.Transformer(cfg)
  run = jax.jit(lambda rng: model.apply(variables, x, y, rngs={"dropout": rng}))
  a, b = run(jax.random.key(1)), run(jax.random.key(2))
  assert not np.allclose(a, b)
  # (Without enable_dropout nothing is dropped: the HF parity tests run configs with
  # dropout_rate 0.1 and match to 1e-4.)
