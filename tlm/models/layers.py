"""T5 building blocks in Flax Linen: dense, embedding, RMS norm, relative position biases,
multi-head dot-product attention with a KV cache, the MLP block and the mask helpers.

Mirrors T5X's `t5x/examples/t5/layers.py` (parameter names, 2-D kernels, logical axis names,
initialisers) with the numerics of HF transformers' `modeling_t5.py`, which follows Mesh
TensorFlow: the relative-position buckets are computed in float32 exactly as there, GELU is
the tanh approximation (HF `gelu_new`, T5X `nn.gelu`), RMS norm runs in float32.

Departures from T5X, each for a reason stated where it happens: attention logits and softmax
are always float32 (bf16 compute stays stable); the cross-attention keys/values are cached
once per decode instead of being recomputed every step; cross-attention accepts a decoder
batch that is a multiple of the encoder batch (beams, ranked candidates) so the encoder
output is projected once per input.
"""

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from jax import lax

Array = jax.Array
DType = Any
Initializer = Callable[..., Array]

# Added to the attention logits of masked positions (T5X's value). Finite, so a fully
# masked row (a padding query) gives a uniform softmax rather than NaN.
MASK_BIAS = -1e10

default_kernel_init = nn.initializers.variance_scaling(1.0, "fan_in", "truncated_normal")
attention_kernel_init = nn.initializers.variance_scaling(1.0, "fan_in", "normal")
relpos_init = nn.initializers.variance_scaling(1.0, "fan_avg", "uniform")
embedding_init = nn.initializers.normal(stddev=1.0)


def _gelu_tanh(x: Array) -> Array:
  # T5 1.1's gated-GELU uses the tanh approximation: HF maps "gated-gelu" to `gelu_new`,
  # T5X to flax `nn.gelu` (approximate=True), Mesh TF to its approximate gelu.
  return jax.nn.gelu(x, approximate=True)


ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
  "relu": jax.nn.relu,
  "gelu": _gelu_tanh,
  "silu": jax.nn.silu,
  "linear": lambda x: x,
}


def _matmul(x: Array, kernel: Array) -> Array:
  """`x @ kernel` (`x` `[..., in]`, `kernel` `[in, out]`), the matmul of every dense layer.

  On the CPU backend its kernel gradient is computed as `(dy^T x)^T` (`_matmul_cpu`): plain
  autodiff asks for `x^T dy`, and XLA's CPU backend then materialises `dy` transposed (a
  strided `[out, tokens]` copy fused into the activation gradient), which benchmarks/train.py
  measured as a sixth of the CPU train step. Elsewhere plain autodiff is used: the custom rule
  was never measured on an accelerator, and it hides the matmuls from remat policies and
  from the compilers' own layout choices. The sums are the same either way
  (tests/test_remat.py, tests/test_hf_parity.py).
  """
  if jax.default_backend() == "cpu":
    return _matmul_cpu(x, kernel)
  return jnp.dot(x, kernel)


@jax.custom_vjp
def _matmul_cpu(x: Array, kernel: Array) -> Array:
  """`x @ kernel` whose kernel gradient is the transpose of the small `[out, in]` `dy^T x`."""
  return jnp.dot(x, kernel)


def _matmul_fwd(x: Array, kernel: Array) -> tuple[Array, tuple[Array, Array]]:
  return jnp.dot(x, kernel), (x, kernel)


def _matmul_bwd(residuals: tuple[Array, Array], dy: Array) -> tuple[Array, Array]:
  x, kernel = residuals
  dx = jnp.dot(dy, kernel.T)
  dkernel_t = jnp.dot(dy.reshape(-1, dy.shape[-1]).T, x.reshape(-1, x.shape[-1]))
  return dx, dkernel_t.T


_matmul_cpu.defvjp(_matmul_fwd, _matmul_bwd)


def _canonicalize(x: int | Sequence[int]) -> tuple[int, ...]:
  return tuple(x) if isinstance(x, Sequence) else (x,)


class DenseGeneral(nn.Module):
  """A bias-free linear map over the trailing axes, with a 2-D kernel.

  The kernel is stored as `[prod(input axes), prod(features)]` (T5X's layout, so checkpoints
  map without reshapes) and reshaped at use.

  Attributes:
    features: output feature dims, e.g. `(num_heads, head_dim)` for a query projection.
    axis: the trailing input axes to contract, e.g. `(-2, -1)` for the attention output.
    dtype: computation dtype; the kernel is stored in float32.
    kernel_init: initialiser of the 2-D kernel.
    kernel_axes: logical axis names of the 2-D kernel.
  """

  features: int | Sequence[int]
  axis: int | Sequence[int] = -1
  dtype: DType = jnp.float32
  kernel_init: Initializer = default_kernel_init
  kernel_axes: tuple[str, ...] = ()

  @nn.compact
  def __call__(self, inputs: Array) -> Array:
    features = _canonicalize(self.features)
    axis = tuple(sorted(a % inputs.ndim for a in _canonicalize(self.axis)))
    if axis != tuple(range(inputs.ndim - len(axis), inputs.ndim)):
      raise ValueError(f"DenseGeneral contracts trailing axes only, got {self.axis}")
    in_dims = inputs.shape[axis[0] :]
    kernel = self.param(
      "kernel",
      nn.with_logical_partitioning(self.kernel_init, self.kernel_axes),
      (int(np.prod(in_dims)), int(np.prod(features))),
      jnp.float32,
    )
    kernel = jnp.asarray(kernel, self.dtype)
    # [..., *in_dims] -> [..., prod(in_dims)] @ [prod(in_dims), prod(features)]
    x = jnp.asarray(inputs, self.dtype).reshape(inputs.shape[: axis[0]] + (kernel.shape[0],))
    y = _matmul(x, kernel)
    return y.reshape(inputs.shape[: axis[0]] + features)


class Embed(nn.Module):
  """Token embedding `[vocab, embed]`, also used (via `attend`) as the tied output layer.

  Attributes:
    num_embeddings: vocabulary size of the table.
    features: embedding width.
    dtype: dtype of looked-up embeddings.
    attend_dtype: dtype of `attend` (float32: T5 computes logits in float32).
    embedding_init: initialiser of the table.
  """

  num_embeddings: int
  features: int
  dtype: DType = jnp.float32
  attend_dtype: DType = jnp.float32
  embedding_init: Initializer = embedding_init

  def setup(self):
    self.embedding = self.param(
      "embedding",
      nn.with_logical_partitioning(self.embedding_init, ("vocab", "embed")),
      (self.num_embeddings, self.features),
      jnp.float32,
    )

  def __call__(self, inputs: Array) -> Array:
    """Looks up `[...]` int ids -> `[..., features]`."""
    if not jnp.issubdtype(inputs.dtype, jnp.integer):
      raise ValueError("Embed inputs must be integer ids")
    output = jnp.take(jnp.asarray(self.embedding, self.dtype), inputs, axis=0)
    return nn.with_logical_constraint(output, ("batch", "length", "embed"))

  def attend(self, query: Array) -> Array:
    """Inner products of `[..., features]` queries with every embedding: `[..., vocab]`."""
    embedding = jnp.asarray(self.embedding, self.attend_dtype)
    return jnp.dot(jnp.asarray(query, self.attend_dtype), embedding.T)


class RMSNorm(nn.Module):
  """T5's layer norm: scale only, no mean subtraction, no bias; computed in float32.

  Attributes:
    epsilon: added to the mean square.
    dtype: dtype of the output.
  """

  epsilon: float = 1e-6
  dtype: DType = jnp.float32

  @nn.compact
  def __call__(self, x: Array) -> Array:
    x = jnp.asarray(x, jnp.float32)
    scale = self.param(
      "scale",
      nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
      (x.shape[-1],),
      jnp.float32,
    )
    mean_square = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
    y = x * lax.rsqrt(mean_square + self.epsilon) * scale
    return jnp.asarray(y, self.dtype)


def relative_position_bucket(
  relative_position: np.ndarray, bidirectional: bool, num_buckets: int, max_distance: int
) -> np.ndarray:
  """T5's bucket of each relative position `memory_position - query_position` (numpy).

  Half of the buckets (per direction when bidirectional) are exact distances, the rest
  log-spaced up to `max_distance`; farther distances share the last bucket. In causal
  (decoder) mode positive relative positions (the future) all fall into bucket 0. Computed
  in float32 like Mesh TF and HF (T5X adds an epsilon inside the log, which can move a
  boundary distance by one bucket; HF parity decides here).

  Args:
    relative_position: int array of key position minus query position.
    bidirectional: encoder (True) or decoder (False) bucketing.
    num_buckets: total number of buckets.
    max_distance: distance at which the last bucket starts.

  Returns:
    int32 array of bucket ids in `[0, num_buckets)`, the shape of `relative_position`.
  """
  relative_position = np.asarray(relative_position, np.int64)
  buckets = np.zeros_like(relative_position)
  if bidirectional:
    num_buckets //= 2
    buckets += (relative_position > 0) * num_buckets
    distance = np.abs(relative_position)
  else:
    distance = -np.minimum(relative_position, 0)
  max_exact = num_buckets // 2
  with np.errstate(divide="ignore"):  # log(0) for distance 0, which uses the exact branch
    scaled = (
      np.log(distance.astype(np.float32) / np.float32(max_exact))
      / np.float32(np.log(max_distance / max_exact))
      * np.float32(num_buckets - max_exact)
    )
  large = max_exact + np.where(distance < max_exact, 0, scaled).astype(np.int64)
  large = np.minimum(large, num_buckets - 1)
  buckets += np.where(distance < max_exact, distance, large)
  return buckets.astype(np.int32)


class RelativePositionBiases(nn.Module):
  """Per-head learned bias for each relative-position bucket, added to attention logits.

  One table per stack (encoder, decoder), shared by all its layers, as in T5.

  Attributes:
    num_buckets: number of buckets.
    max_distance: distance at which the last bucket starts.
    num_heads: attention heads.
    dtype: dtype of the returned bias.
  """

  num_buckets: int
  max_distance: int
  num_heads: int
  dtype: DType = jnp.float32

  @nn.compact
  def __call__(
    self, qlen: int, klen: int, bidirectional: bool, query_offset: Array | int = 0
  ) -> Array:
    """Bias `[1, heads, qlen, klen]` for queries at `query_offset + arange(qlen)`.

    Args:
      qlen: number of query positions (static).
      klen: number of key positions (static).
      bidirectional: encoder (True) or causal decoder (False) bucketing.
      query_offset: position of the first query; may be traced (a decode step).

    Returns:
      The bias, broadcastable over the batch.
    """
    rel_embedding = self.param(
      "rel_embedding",
      nn.with_logical_partitioning(relpos_init, ("heads", "relpos_buckets")),
      (self.num_heads, self.num_buckets),
      jnp.float32,
    )
    # Buckets depend only on the distance clipped to max_distance (beyond it every distance
    # is in the last bucket), so a static table over [-max_distance, max_distance] serves
    # traced offsets too.
    span = np.arange(-self.max_distance, self.max_distance + 1)
    table = jnp.asarray(
      relative_position_bucket(span, bidirectional, self.num_buckets, self.max_distance)
    )
    # [qlen, klen] relative positions, memory minus query.
    relative = jnp.arange(klen)[None, :] - (jnp.arange(qlen)[:, None] + query_offset)
    relative = jnp.clip(relative, -self.max_distance, self.max_distance)
    buckets = jnp.take(table, relative + self.max_distance)
    # [heads, buckets] gathered at [qlen, klen] -> [heads, qlen, klen]
    values = jnp.take(jnp.asarray(rel_embedding, self.dtype), buckets, axis=1)
    return values[None]


def dot_product_attention(
  query: Array,
  key: Array,
  value: Array,
  bias: Array | None = None,
  dropout_rng: Array | None = None,
  dropout_rate: float = 0.0,
  deterministic: bool = True,
  dtype: DType = jnp.float32,
) -> Array:
  """Softmax attention without 1/sqrt(d) scaling (T5 folds it into the query init).

  Leading (batch) dims of query and key/value broadcast against each other, so a key batch
  `[B, 1, ...]` serves queries `[B, r, ...]`.

  Args:
    query: `[..., q_len, heads, head_dim]`.
    key: `[..., kv_len, heads, head_dim]`.
    value: `[..., kv_len, heads, head_dim]`.
    bias: broadcastable to `[..., heads, q_len, kv_len]` (masks and position biases).
    dropout_rng: key for attention dropout.
    dropout_rate: dropout on the attention weights, shared along the query axis (T5X).
    deterministic: disables dropout.
    dtype: dtype of the weights applied to `value`.

  Returns:
    `[..., q_len, heads, head_dim]`.
  """
  # Logits and softmax in float32 whatever the compute dtype.
  logits = jnp.einsum("...qhd,...khd->...hqk", query, key, preferred_element_type=jnp.float32)
  if bias is not None:
    logits = logits + jnp.asarray(bias, jnp.float32)
  weights = jax.nn.softmax(logits, axis=-1)
  if not deterministic and dropout_rate > 0.0:
    keep_prob = 1.0 - dropout_rate
    shape = list(weights.shape)
    shape[-2] = 1
    keep = jax.random.bernoulli(dropout_rng, keep_prob, shape)
    weights = weights * keep / keep_prob
  weights = weights.astype(dtype)
  return jnp.einsum("...hqk,...khd->...qhd", weights, jnp.asarray(value, dtype))


def mask_to_bias(mask: Array | None, dtype: DType = jnp.float32) -> Array | None:
  """Boolean/0-1 mask (1 = may attend) -> additive bias (0 or MASK_BIAS)."""
  if mask is None:
    return None
  return jnp.where(mask > 0, 0.0, MASK_BIAS).astype(dtype)


class MultiHeadDotProductAttention(nn.Module):
  """Multi-head attention with T5X's parameter layout and an optional decode cache.

  Decode mode (`decode=True`) keeps the variables in the "cache" collection, as
  `[batch, heads, head_dim, length]`:
  - self-attention: the first call (no cache yet) allocates `cached_key`/`cached_value`
    for the length of its input and attends normally;
    each later call takes one token, writes its key/value at `decode_index` and attends to
    the whole cache (the caller's mask hides unwritten slots).
  - cross-attention: the first call projects the encoder output and stores it; later calls
    reuse it, so the encoder keys/values are computed once per decode, not per step.

  Attributes:
    num_heads: attention heads.
    head_dim: width of each head.
    dtype: computation dtype.
    dropout_rate: attention-weight dropout.
    kernel_init: initialiser of the projections (the query's is divided by sqrt(head_dim)).
    is_cross_attention: keys/values come from the encoder (selects the cache behaviour).
  """

  num_heads: int
  head_dim: int
  dtype: DType = jnp.float32
  dropout_rate: float = 0.0
  kernel_init: Initializer = attention_kernel_init
  is_cross_attention: bool = False

  @nn.compact
  def __call__(
    self,
    inputs_q: Array,
    inputs_kv: Array,
    mask: Array | None = None,
    bias: Array | None = None,
    *,
    decode: bool = False,
    decode_index: Array | None = None,
    deterministic: bool = True,
  ) -> Array:
    """Attends from `inputs_q` `[Bq, q_len, embed]` to `inputs_kv` `[Bk, kv_len, embed]`.

    `Bq` must be a multiple `r * Bk` of `Bk`; query rows `i*r .. i*r + r-1` attend to key
    row `i` (beams or candidates sharing one encoder output). Masks and biases then have a
    batch dim of `Bk` or 1.

    Args:
      inputs_q: queries' input.
      inputs_kv: keys' and values' input.
      mask: 1 where attention is allowed, broadcastable to `[B, heads, q_len, kv_len]`.
      bias: additive bias broadcastable to the same shape (relative positions).
      decode: use/initialise the decode cache (see class docstring).
      decode_index: decode step position (self-attention decode steps).
      deterministic: disables dropout.

    Returns:
      `[Bq, q_len, embed]`.
    """
    projection = functools.partial(
      DenseGeneral,
      features=(self.num_heads, self.head_dim),
      kernel_axes=("embed", "joined_kv"),
      dtype=self.dtype,
    )
    # No 1/sqrt(head_dim) on the logits: T5 folds it into the query initialisation.
    depth_scaling = np.sqrt(self.head_dim).astype(np.float32)
    query_init = lambda *args: self.kernel_init(*args) / depth_scaling
    qkv_axes = ("batch", "length", "heads", "kv")

    # [batch, length, embed] -> [batch, length, heads, head_dim]
    query = projection(kernel_init=query_init, name="query")(inputs_q)
    query = nn.with_logical_constraint(query, qkv_axes)

    # The caches hold keys/values as [batch, heads, head_dim, length] (T5X's layout): the
    # attention dots read that layout directly, where [batch, length, heads, head_dim] would
    # be transposed again at every decode step.
    to_cache = lambda x: jnp.moveaxis(x, -3, -1)
    from_cache = lambda x: jnp.moveaxis(x, -1, -3)
    cached = decode and self.has_variable("cache", "cached_key")
    if self.is_cross_attention and cached:
      key = from_cache(self.get_variable("cache", "cached_key"))
      value = from_cache(self.get_variable("cache", "cached_value"))
    else:
      key = projection(kernel_init=self.kernel_init, name="key")(inputs_kv)
      value = projection(kernel_init=self.kernel_init, name="value")(inputs_kv)
      key = nn.with_logical_constraint(key, qkv_axes)
      value = nn.with_logical_constraint(value, qkv_axes)

    if decode and self.is_cross_attention and not cached:
      self.put_variable("cache", "cached_key", to_cache(key))
      self.put_variable("cache", "cached_value", to_cache(value))
    elif decode and not self.is_cross_attention:
      if not cached:
        self.put_variable("cache", "cached_key", to_cache(jnp.zeros_like(key)))
        self.put_variable("cache", "cached_value", to_cache(jnp.zeros_like(value)))
      else:
        if inputs_q.shape[1] != 1 or decode_index is None:
          raise ValueError("a self-attention decode step takes one token and a decode_index")
        start = (0, 0, 0, decode_index)
        cached_key = self.get_variable("cache", "cached_key")
        cached_value = self.get_variable("cache", "cached_value")
        cached_key = lax.dynamic_update_slice(cached_key, to_cache(key), start)
        cached_value = lax.dynamic_update_slice(cached_value, to_cache(value), start)
        self.put_variable("cache", "cached_key", cached_key)
        self.put_variable("cache", "cached_value", cached_value)
        key, value = from_cache(cached_key), from_cache(cached_value)

    attention_bias = mask_to_bias(mask)
    if bias is not None:
      attention_bias = bias if attention_bias is None else attention_bias + bias

    dropout_rng = None
    if not deterministic and self.dropout_rate > 0.0:
      dropout_rng = self.make_rng("dropout")

    batch_q, batch_k = query.shape[0], key.shape[0]
    if batch_q != batch_k:
      if batch_q % batch_k:
        raise ValueError(f"query batch {batch_q} is not a multiple of key batch {batch_k}")
      # [r*Bk, q, h, d] -> [Bk, r, q, h, d] against keys [Bk, 1, k, h, d]: the keys are not
      # repeated per beam/candidate.
      query = query.reshape((batch_k, batch_q // batch_k) + query.shape[1:])
      key, value = key[:, None], value[:, None]
      if attention_bias is not None:
        attention_bias = attention_bias[:, None]
    x = dot_product_attention(
      query,
      key,
      value,
      bias=attention_bias,
      dropout_rng=dropout_rng,
      dropout_rate=self.dropout_rate,
      deterministic=deterministic,
      dtype=self.dtype,
    )
    x = x.reshape((batch_q,) + x.shape[-3:])
    # [batch, length, heads, head_dim] -> [batch, length, embed]
    return DenseGeneral(
      features=inputs_q.shape[-1],
      axis=(-2, -1),
      kernel_init=self.kernel_init,
      kernel_axes=("joined_kv", "embed"),
      dtype=self.dtype,
      name="out",
    )(x)


class MlpBlock(nn.Module):
  """T5 feed-forward block: `wo(act_0(wi_0 x) * act_1(wi_1 x) ...)`, dropout in between.

  One activation gives T5 1.0's `wi`/`wo` (ReLU); two give 1.1's gated GELU `wi_0`, `wi_1`.

  Attributes:
    intermediate_dim: hidden width (`mlp`).
    activations: activation names from `ACTIVATIONS`, one per input projection.
    dropout_rate: dropout on the hidden activations, shared along the length axis.
    dtype: computation dtype.
  """

  intermediate_dim: int
  activations: Sequence[str] = ("relu",)
  dropout_rate: float = 0.0
  dtype: DType = jnp.float32

  @nn.compact
  def __call__(self, inputs: Array, deterministic: bool = True) -> Array:
    hidden = None
    for i, name in enumerate(self.activations):
      dense_name = "wi" if len(self.activations) == 1 else f"wi_{i}"
      x = DenseGeneral(
        self.intermediate_dim,
        dtype=self.dtype,
        kernel_axes=("embed", "mlp"),
        name=dense_name,
      )(inputs)
      x = ACTIVATIONS[name](x)
      hidden = x if hidden is None else hidden * x
    hidden = nn.Dropout(rate=self.dropout_rate, broadcast_dims=(-2,))(
      hidden, deterministic=deterministic
    )
    hidden = nn.with_logical_constraint(hidden, ("batch", "length", "mlp"))
    return DenseGeneral(
      inputs.shape[-1], dtype=self.dtype, kernel_axes=("mlp", "embed"), name="wo"
    )(hidden)


def make_attention_mask(
  query_input: Array, key_input: Array, pairwise_fn: Callable = jnp.logical_and
) -> Array:
  """`[batch, q_len]` x `[batch, kv_len]` -> `[batch, 1, q_len, kv_len]` boolean mask."""
  mask = pairwise_fn(query_input[..., :, None], key_input[..., None, :])
  return mask[..., None, :, :].astype(bool)


def make_causal_mask(length: int) -> Array:
  """`[1, 1, length, length]`: query i may attend to keys 0..i."""
  idx = jnp.arange(length)
  return (idx[None, :] <= idx[:, None])[None, None]


def combine_masks(*masks: Array | None) -> Array | None:
  """Logical AND of the given masks (None entries skipped; None if all are None)."""
  masks = [m for m in masks if m is not None]
  if not masks:
    return None
  out = masks[0]
  for m in masks[1:]:
    out = jnp.logical_and(out, m)
  return out


def make_padding_and_segment_mask(
  query_valid: Array,
  key_valid: Array,
  query_segment_ids: Array | None = None,
  key_segment_ids: Array | None = None,
) -> Array:
  """Mask of real (non-padding) query/key pairs, restricted to equal segments if packed.

  Args:
    query_valid: `[batch, q_len]` true at real query positions.
    key_valid: `[batch, kv_len]` true at real key positions.
    query_segment_ids: `[batch, q_len]` packing segment ids (0 = padding), optional.
    key_segment_ids: `[batch, kv_len]`, given together with `query_segment_ids`.

  Returns:
    `[batch, 1, q_len, kv_len]` boolean mask.
  """
  mask = make_attention_mask(query_valid, key_valid)
  if query_segment_ids is not None:
    mask = jnp.logical_and(mask, make_attention_mask(query_segment_ids, key_segment_ids, jnp.equal))
  return mask
