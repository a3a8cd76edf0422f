"""Multi-head dot-product attention with T5X's parameter layout and a KV cache for decoding.

Mirrors T5X's `t5x/examples/t5/layers.py` (`dot_product_attention`,
`MultiHeadDotProductAttention`: parameter names, 2-D kernels, logical axis names, no
1/sqrt(d) scaling of the logits, which T5 folds into the query initialisation).

Departures from T5X, each for a reason stated where it happens: attention logits and softmax
are always float32 (bf16 compute stays stable); the cross-attention keys/values are cached
once per decode instead of being recomputed every step; cross-attention accepts a decoder
batch that is a multiple of the encoder batch (beams, ranked candidates) so the encoder
output is projected once per input.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from jax import lax

from tlm.models.dense import Array, DenseGeneral, DType, Initializer
from tlm.models.masks import mask_to_bias

attention_kernel_init = nn.initializers.variance_scaling(1.0, "fan_in", "normal")


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
