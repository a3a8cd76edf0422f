"""Layers against numpy references and hand-computed tables (tlm/models/layers.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from tlm.models import layers


def _random_params(module, *args, seed=0, **kwargs):
  """Random numpy params of the module's shapes (compiling jax initialisers is slow on CPU)."""
  rs = np.random.RandomState(seed)
  abstract = nn.meta.unbox(jax.eval_shape(lambda: module.init(jax.random.key(0), *args, **kwargs)))
  return jax.tree.map(lambda a: rs.randn(*a.shape).astype(np.float32) * 0.5, abstract["params"])


def _init_apply(module, *args, **kwargs):
  params = _random_params(module, *args, **kwargs)
  apply = jax.jit(lambda p, *a: module.apply({"params": p}, *a, **kwargs))
  return params, np.asarray(apply(params, *args))


def _softmax(x):
  x = x - x.max(-1, keepdims=True)
  e = np.exp(x)
  return e / e.sum(-1, keepdims=True)


def _np_attention(q, k, v, bias):
  """[b, q, h, d] x [b, k, h, d] -> [b, q, h, d], no 1/sqrt(d) scaling, float64."""
  logits = np.einsum("bqhd,bkhd->bhqk", q, k) + bias
  return np.einsum("bhqk,bkhd->bqhd", _softmax(logits), v)


def test_dense_general_is_a_2d_kernel_matmul():
  x = np.random.RandomState(0).randn(2, 3, 4, 5).astype(np.float32)
  params, y = _init_apply(layers.DenseGeneral(features=7, axis=(-2, -1)), x)
  kernel = np.asarray(params["kernel"], np.float64)
  assert kernel.shape == (20, 7)
  np.testing.assert_allclose(y, x.reshape(2, 3, 20) @ kernel, rtol=1e-5, atol=1e-6)
  params, y = _init_apply(layers.DenseGeneral(features=(2, 3)), x)
  assert params["kernel"].shape == (5, 6)
  ref = (x @ np.asarray(params["kernel"], np.float64)).reshape(2, 3, 4, 2, 3)
  np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_rms_norm_matches_numpy_in_float32_even_for_bf16_inputs():
  x = np.random.RandomState(1).randn(3, 8).astype(np.float32) * 5
  module = layers.RMSNorm(epsilon=1e-6)
  variables = jax.eval_shape(lambda: module.init(jax.random.key(0), x))
  scale = np.linspace(0.5, 2.0, 8).astype(np.float32)
  y = np.asarray(module.apply({"params": {"scale": scale}}, x))
  ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * scale
  np.testing.assert_allclose(y, ref, rtol=1e-6)
  assert nn.get_partition_spec(variables)["params"]["scale"] == jax.sharding.PartitionSpec("embed")
  y16 = layers.RMSNorm(dtype=jnp.bfloat16).apply({"params": {"scale": scale}}, x)
  assert y16.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(y16, np.float32), ref, rtol=1e-2)


# Hand-computed buckets (num_buckets=8, max_distance=16). Bidirectional: 4 buckets per side,
# exact below 2, then 2 + floor(2 ln(n/2) / ln 8) capped at 3; keys after the query add 4.
# Causal: exact below 4, then 4 + floor(4 ln(n/4) / ln 4) capped at 7; the future is bucket 0.
BIDIRECTIONAL_8_16 = {0: 0, -1: 1, -2: 2, -3: 2, -5: 2, -6: 3, -7: 3, -16: 3, -200: 3,
                      1: 5, 2: 6, 5: 6, 6: 7, 100: 7}  # fmt: skip
CAUSAL_8_16 = {0: 0, -1: 1, -2: 2, -3: 3, -4: 4, -5: 4, -6: 5, -7: 5, -8: 6, -11: 6, -12: 7,
               -16: 7, -100: 7, 1: 0, 3: 0}  # fmt: skip
# T5's default (32 buckets, max distance 128), bidirectional: 16 per side, exact below 8.
BIDIRECTIONAL_32_128 = {-7: 7, -8: 8, -15: 9, -16: 10, -20: 10, -23: 11, -127: 15, -128: 15,
                        -1000: 15, 1: 17, 16: 26, 500: 31}  # fmt: skip


@pytest.mark.parametrize(
  "table, bidirectional, num_buckets, max_distance",
  [
    (BIDIRECTIONAL_8_16, True, 8, 16),
    (CAUSAL_8_16, False, 8, 16),
    (BIDIRECTIONAL_32_128, True, 32, 128),
  ],
)
def test_relative_position_buckets_hand_computed(table, bidirectional, num_buckets, max_distance):
  rel = np.array(list(table))
  got = layers.relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
  np.testing.assert_array_equal(got, np.array(list(table.values())))


def test_relative_position_biases_gather_the_table_and_support_a_traced_offset():
  module = layers.RelativePositionBiases(num_buckets=8, max_distance=16, num_heads=3)
  table = np.random.RandomState(0).randn(3, 8).astype(np.float32)
  assert _random_params(module, 5, 7, True)["rel_embedding"].shape == (3, 8)
  variables = {"params": {"rel_embedding": table}}
  for bidirectional in (True, False):
    bias = np.asarray(module.apply(variables, 5, 7, bidirectional))
    rel = np.arange(7)[None, :] - np.arange(5)[:, None]
    buckets = layers.relative_position_bucket(rel, bidirectional, 8, 16)
    np.testing.assert_array_equal(bias, table[:, buckets][None])
    # One decode step at position 3 is row 3 of the full table (offset traced under jit).
    row = jax.jit(lambda i, b=bidirectional: module.apply(variables, 1, 7, b, query_offset=i))(3)
    np.testing.assert_array_equal(np.asarray(row), bias[:, :, 3:4])


def test_dot_product_attention_against_numpy_with_mask_and_bias():
  rs = np.random.RandomState(2)
  q, k, v = (rs.randn(2, n, 3, 4).astype(np.float32) for n in (5, 6, 6))
  mask = rs.rand(2, 1, 5, 6) > 0.3
  mask[..., 0] = True
  pos = rs.randn(1, 3, 5, 6).astype(np.float32)
  bias = np.asarray(layers.mask_to_bias(mask)) + pos
  got = np.asarray(layers.dot_product_attention(q, k, v, bias=bias))
  ref = _np_attention(q, k, v, np.where(mask, 0.0, -1e10) + pos)
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
  # A masked key gets exactly zero weight: changing its value changes nothing.
  v2 = v.copy()
  v2[:, 1] += 100.0 * (~mask[:, 0, :, 1]).all(-1)[:, None, None]
  np.testing.assert_allclose(
    np.asarray(layers.dot_product_attention(q, k, v2, bias=bias)), got, rtol=1e-6
  )


def _np_mha(params, xq, xkv, bias, heads):
  def proj(x, name):
    kernel = np.asarray(params[name]["kernel"], np.float64)
    return (x @ kernel).reshape(x.shape[:2] + (heads, -1))

  ctx = _np_attention(proj(xq, "query"), proj(xkv, "key"), proj(xkv, "value"), bias)
  out = np.asarray(params["out"]["kernel"], np.float64)
  return ctx.reshape(ctx.shape[:2] + (-1,)) @ out


def test_multi_head_attention_matches_numpy_and_scales_the_query_init():
  rs = np.random.RandomState(3)
  xq, xkv = rs.randn(2, 5, 16).astype(np.float32), rs.randn(2, 7, 16).astype(np.float32)
  mask = layers.make_attention_mask(np.ones((2, 5), bool), np.arange(7)[None].repeat(2, 0) < 5)
  pos = rs.randn(1, 4, 5, 7).astype(np.float32)
  module = layers.MultiHeadDotProductAttention(num_heads=4, head_dim=8)
  params, y = _init_apply(module, xq, xkv, mask, pos)
  assert {k: v["kernel"].shape for k, v in params.items()} == {
    "query": (16, 32),
    "key": (16, 32),
    "value": (16, 32),
    "out": (32, 16),
  }
  ref = _np_mha(params, xq, xkv, np.where(np.asarray(mask), 0.0, -1e10) + pos, 4)
  np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
  # T5 has no 1/sqrt(head_dim) on the logits: it is folded into the query initialiser.
  ones = layers.MultiHeadDotProductAttention(4, 16, kernel_init=nn.initializers.ones)
  p = nn.meta.unbox(ones.init(jax.random.key(1), xq[:1, :1], xq[:1, :1]))["params"]
  np.testing.assert_array_equal(p["query"]["kernel"], np.full((16, 64), 0.25, np.float32))
  np.testing.assert_array_equal(p["key"]["kernel"], np.ones((16, 64), np.float32))


def test_grouped_cross_attention_equals_repeating_the_keys():
  rs = np.random.RandomState(4)
  xq, xkv = rs.randn(6, 3, 16).astype(np.float32), rs.randn(2, 5, 16).astype(np.float32)
  key_valid = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
  module = layers.MultiHeadDotProductAttention(4, 4, is_cross_attention=True)
  params = {"params": _random_params(module, xq, np.repeat(xkv, 3, 0))}
  apply = jax.jit(module.apply)
  grouped = apply(params, xq, xkv, key_valid[:, None, None, :])
  repeated = apply(params, xq, np.repeat(xkv, 3, 0), np.repeat(key_valid, 3, 0)[:, None, None, :])
  np.testing.assert_allclose(np.asarray(grouped), np.asarray(repeated), rtol=1e-5, atol=1e-6)


def _gelu_tanh(x):
  return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize("activations", [("relu",), ("gelu", "linear")])
def test_mlp_block_both_families_against_numpy(activations):
  x = np.random.RandomState(5).randn(2, 3, 8).astype(np.float32)
  params, y = _init_apply(layers.MlpBlock(16, activations), x)
  p = {k: np.asarray(v["kernel"], np.float64) for k, v in params.items()}
  if activations == ("relu",):
    assert sorted(p) == ["wi", "wo"]
    ref = np.maximum(x @ p["wi"], 0) @ p["wo"]
  else:
    assert sorted(p) == ["wi_0", "wi_1", "wo"]
    ref = (_gelu_tanh(x @ p["wi_0"]) * (x @ p["wi_1"])) @ p["wo"]
  np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_mlp_dropout_is_shared_along_the_length_axis_as_in_t5x():
  x = np.ones((2, 6, 4), np.float32)
  module = layers.MlpBlock(32, ("relu",), dropout_rate=0.5)
  params = _random_params(module, x)
  params["wi"]["kernel"] = np.abs(params["wi"]["kernel"])  # every hidden unit active
  run = jax.jit(lambda key: module.apply({"params": params}, x, False, rngs={"dropout": key}))
  y = np.asarray(run(jax.random.key(3)))
  # Identical inputs at every position get the same mask along the length, not across rows.
  np.testing.assert_array_equal(y, np.broadcast_to(y[:, :1], y.shape))
  assert not np.allclose(y[0], y[1])
  assert not np.allclose(y, np.asarray(run(jax.random.key(4))))
  # Deterministic: nothing dropped.
  ref = np.maximum(x @ params["wi"]["kernel"], 0) @ params["wo"]["kernel"]
  np.testing.assert_allclose(module.apply({"params": params}, x, True), ref, rtol=1e-5)


def test_mask_helpers_padding_causal_and_segments():
  tokens = np.array([[5, 6, 7, 0]])
  segments = np.array([[1, 1, 2, 0]])
  mask = np.asarray(layers.make_padding_and_segment_mask(tokens > 0, tokens > 0))
  np.testing.assert_array_equal(mask[0, 0], [[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [0] * 4])
  mask = np.asarray(
    layers.make_padding_and_segment_mask(tokens > 0, tokens > 0, segments, segments)
  )
  np.testing.assert_array_equal(mask[0, 0], [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0] * 4])
  causal = np.asarray(layers.make_causal_mask(3))
  np.testing.assert_array_equal(causal[0, 0], [[1, 0, 0], [1, 1, 0], [1, 1, 1]])
  combined = np.asarray(layers.combine_masks(causal, np.array([[[[1, 0, 1]]]], bool)))
  np.testing.assert_array_equal(combined[0, 0], [[1, 0, 0], [1, 0, 0], [1, 0, 1]])
  assert layers.combine_masks(None, None) is None
  bias = np.asarray(layers.mask_to_bias(np.array([True, False])))
  np.testing.assert_array_equal(bias, [0.0, layers.MASK_BIAS])
