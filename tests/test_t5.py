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
from tlm.models import decoding, t5
from tlm.models.formats.hf_config import from_hf_config, to_hf_config


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


@pytest.mark.parametrize("name", ["tiny", "tiny-v1_1"])
def test_golden_parameter_names_shapes_and_logical_axes(name):
  cfg = t5.get_preset(name)
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


def test_per_layer_relative_position_tables_names_axes_and_config():
  # relpos_bias_per_layer: each layer's own table where T5X's scalable T5 keeps it unscanned
  # (`layers_N/relpos_bias`), none per stack; the rest as in the golden list.
  cfg = t5.get_preset("tiny-v1_1", relpos_bias_per_layer=True)
  x = jnp.ones((1, 4), jnp.int32)
  variables = jax.eval_shape(lambda: t5.Transformer(cfg).init(jax.random.key(0), x, x))
  params = _flat(nn.meta.unbox(variables)["params"])
  expected = {k: v for k, v in GOLDEN["tiny-v1_1"].items() if "relpos_bias" not in k}
  for stack in ("encoder", "decoder"):
    expected.update({f"{stack}/layers_{i}/relpos_bias/rel_embedding": (4, 32) for i in range(2)})
  assert {k: tuple(v.shape) for k, v in params.items()} == expected
  specs = _flat(nn.get_partition_spec(variables)["params"])
  tables = [k for k in specs if "relpos_bias" in k]
  assert len(tables) == 4 and all(specs[k] == P("heads", "relpos_buckets") for k in tables)
  assert t5.T5Config.from_dict(cfg.to_dict()) == cfg
  assert not t5.get_preset("tiny-v1_1").relpos_bias_per_layer  # off by default
  assert from_hf_config(to_hf_config(cfg)) == cfg and to_hf_config(cfg)["model_type"] == "umt5"
  with pytest.raises(ConfigError, match="relpos_bias_per_layer must be a boolean"):
    t5.T5Config(vocab_size=8, relpos_bias_per_layer=1)


def _per_layer_copy(cfg, variables, changed_layer=None):
  """A per-layer config and params whose every table is the stack's shared one (or, for
  `changed_layer`, that table times 3: adding a constant would leave every softmax as it is)."""
  per_layer = dataclasses.replace(cfg, relpos_bias_per_layer=True)
  params = jax.tree.map(lambda v: v, nn.meta.unbox(variables)["params"])
  for stack in ("encoder", "decoder"):
    shared = params[stack].pop("relpos_bias")["rel_embedding"]
    for i in range(cfg.num_encoder_layers):
      table = shared * 3.0 if i == changed_layer else shared
      params[stack][f"layers_{i}"]["relpos_bias"] = {"rel_embedding": table}
  return per_layer, {"params": params}


@pytest.mark.parametrize("remat", ["none", "full"])
def test_per_layer_tables_all_equal_compute_the_shared_model(remat):
  cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB, remat=remat)
  variables = random_params(cfg)
  rs = np.random.RandomState(4)
  x, y = _inputs(rs), rs.randint(2, VOCAB, (BATCH, TARGET_LEN))
  shared = np.asarray(decoding.logits(cfg, variables, x, y))
  per_layer, same = _per_layer_copy(cfg, variables)
  np.testing.assert_allclose(decoding.logits(per_layer, same, x, y), shared, rtol=0, atol=1e-6)
  # Not a comparison that ignores the tables: one layer's own table changes the logits.
  _, changed = _per_layer_copy(cfg, variables, changed_layer=1)
  assert np.abs(np.asarray(decoding.logits(per_layer, changed, x, y)) - shared).max() > 1e-2


def test_config_dict_round_trip_and_errors():
  cfg = t5.get_preset("t5-v1_1-base", dtype="bfloat16", remat="full")
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
  with pytest.raises(ConfigError, match="key 'model.preset': unknown model preset 't5-huge'"):
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
    assert from_hf_config(to_hf_config(cfg)) == cfg
  hf = to_hf_config(t5.get_preset("t5-v1_1-small"))
  # Published 1.1 configs say tie_word_embeddings false and have no scale key.
  legacy = {k: v for k, v in hf.items() if k != "scale_decoder_outputs"}
  assert not from_hf_config(legacy).logits_via_embedding
  # transformers >= 5 writes tie true + scale false for 1.1: unscaled logits.
  assert not from_hf_config({**hf, "tie_word_embeddings": True}).logits_via_embedding
  v10 = {k: v for k, v in to_hf_config(t5.get_preset("t5-base")).items() if "tie" not in k}
  assert from_hf_config({k: v for k, v in v10.items() if "scale" not in k}).logits_via_embedding
  with pytest.raises(ConfigError, match="feed_forward_proj"):
    from_hf_config({**hf, "feed_forward_proj": "gated-mish"})
  with pytest.raises(ConfigError, match="d_model"):
    from_hf_config({k: v for k, v in hf.items() if k != "d_model"})


def _batch(rs, batch, length, vocab, lengths):
  x = rs.randint(2, vocab, (batch, length))
  for b, n in enumerate(lengths):
    x[b, n:] = 0
  return x


# The tests below use the configs and shapes of tests/test_decoding.py (vocabulary 300,
# 16 inputs of 12 tokens, 10 target tokens) so that compiled programs are shared.
VOCAB, BATCH, INPUT_LEN, TARGET_LEN = 300, 16, 12, 10


def _inputs(rs):
  return _batch(rs, BATCH, INPUT_LEN, VOCAB, rs.randint(2, INPUT_LEN + 1, BATCH))


def test_packed_inputs_equal_separate_examples():
  cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB)
  variables = random_params(cfg)
  rs = np.random.RandomState(0)
  a_in, b_in = rs.randint(2, VOCAB, 5), rs.randint(2, VOCAB, 4)
  a_out, b_out = rs.randint(2, VOCAB, 3), rs.randint(2, VOCAB, 4)
  shift = lambda y: np.concatenate([[0], y[:-1]])
  pad = lambda x, n: np.pad(x, (0, n - len(x)))
  # Row 0 packs a and b; rows 1 and 2 hold them alone (segment 1, then padding).
  encoder_tokens = np.stack([pad(np.concatenate([a_in, b_in]), 11), pad(a_in, 11), pad(b_in, 11)])
  decoder_tokens = np.stack(
    [
      pad(np.concatenate([shift(a_out), shift(b_out)]), 8),
      pad(shift(a_out), 8),
      pad(shift(b_out), 8),
    ]
  )
  encoder_segments = np.stack([pad([1] * 5 + [2] * 4, 11), pad([1] * 5, 11), pad([1] * 4, 11)])
  decoder_segments = np.stack([pad([1] * 3 + [2] * 4, 8), pad([1] * 3, 8), pad([1] * 4, 8)])
  forward = jax.jit(lambda v, *args: t5.Transformer(cfg).apply(v, *args, enable_dropout=False))
  logits = np.asarray(
    forward(variables, encoder_tokens, decoder_tokens, encoder_segments, decoder_segments)
  )
  np.testing.assert_allclose(logits[0, :3], logits[1, :3], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(logits[0, 3:7], logits[2, :4], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("per_layer", [False, True], ids=["shared", "per-layer"])
def test_cached_decoding_step_by_step_equals_the_full_forward_pass(per_layer):
  # T5 1.1 here; the HF greedy parity tests check both families' cached decoding. A table per
  # layer: each layer gathers its own at the decode step's query offset.
  cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB, relpos_bias_per_layer=per_layer)
  variables = random_params(cfg)
  m = t5.Transformer(cfg)
  rs = np.random.RandomState(1)
  x = _inputs(rs)
  y = rs.randint(2, VOCAB, (BATCH, TARGET_LEN))
  y[:, 0] = 0
  full = np.asarray(decoding.logits(cfg, variables, x, y))

  @jax.jit
  def decode(v, tokens):
    encoded = m.apply(v, x, enable_dropout=False, method=m.encode)
    step = functools.partial(m.apply, method=m.decode, enable_dropout=False, decode=True)
    return step(v, encoded, x, tokens, mutable=["cache"])

  _, state = decode(variables, np.zeros((BATCH, TARGET_LEN), np.int32))
  assert sorted(state["cache"]["decoder"]["layers_0"]) == [
    "encoder_decoder_attention",
    "self_attention",
  ]
  # Cross-attention keys/values are computed once, for the encoder length; caches are laid
  # out [batch, heads, head_dim, length].
  layer = state["cache"]["decoder"]["layers_0"]
  cross = layer["encoder_decoder_attention"]["cached_key"]
  assert cross.shape == (BATCH, cfg.num_heads, cfg.head_dim, INPUT_LEN)
  assert layer["self_attention"]["cached_value"].shape == (BATCH, 4, 16, TARGET_LEN)
  for i in range(TARGET_LEN):
    logits, state = decode({**variables, **state}, y[:, i : i + 1])
    np.testing.assert_allclose(logits[:, 0], full[:, i], rtol=1e-5, atol=1e-5)
  assert int(state["cache"]["decoder"]["cache_index"]) == TARGET_LEN


def test_bf16_compute_keeps_float32_params_and_logits():
  cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB)
  variables = random_params(cfg)
  rs = np.random.RandomState(3)
  x, y = _inputs(rs), rs.randint(2, VOCAB, (BATCH, TARGET_LEN))
  bf16_cfg = dataclasses.replace(cfg, dtype="bfloat16")
  f32 = np.asarray(decoding.logits(cfg, variables, x, y))
  bf16 = decoding.logits(bf16_cfg, variables, x, y)
  assert bf16.dtype == jnp.float32
  fresh = jax.eval_shape(lambda: t5.Transformer(bf16_cfg).init(jax.random.key(0), x, y))
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(nn.meta.unbox(fresh)))
  # bf16 has ~3 significant digits: close to float32, not equal.
  assert not np.array_equal(np.asarray(bf16), f32)
  np.testing.assert_allclose(bf16, f32, atol=0.05 * float(np.abs(f32).max()))


def test_remat_wraps_every_layer_in_a_checkpoint():
  # Remat changes what the backward pass stores, not values (JAX's guarantee): check that
  # each layer, and only with remat, is a rematerialised block of the gradient program.
  x, y = jnp.ones((2, 6), jnp.int32), jnp.ones((2, 4), jnp.int32)

  def checkpoints_in_gradient(cfg):
    params = jax.eval_shape(lambda: t5.Transformer(cfg).init(jax.random.key(0), x, y))

    def loss(p):
      return jnp.mean(t5.Transformer(cfg).apply(p, x, y, enable_dropout=False) ** 2)

    jaxpr = jax.make_jaxpr(jax.grad(loss))(params)
    return str(jaxpr).count("checkpoint[") + str(jaxpr).count("remat2[")

  cfg = t5.get_preset("tiny-v1_1")
  assert checkpoints_in_gradient(cfg) == 0
  # One rematerialised block per layer (2 encoder + 2 decoder).
  assert checkpoints_in_gradient(dataclasses.replace(cfg, remat="full")) == 2 + 2
