"""Attention masks: which query positions may attend to which keys, and the additive bias
that applies a mask to the attention logits.

Mirrors the mask helpers of T5X's `t5x/examples/t5/layers.py` (`make_attention_mask`,
`make_causal_mask`, `combine_masks`) and its `MASK_BIAS`.
"""

from collections.abc import Callable

import jax.numpy as jnp

from tlm.models.dense import Array, DType

# Added to the attention logits of masked positions (T5X's value). Finite, so a fully
# masked row (a padding query) gives a uniform softmax rather than NaN.
MASK_BIAS = -1e10


def mask_to_bias(mask: Array | None, dtype: DType = jnp.float32) -> Array | None:
  """Boolean/0-1 mask (1 = may attend) -> additive bias (0 or MASK_BIAS)."""
  if mask is None:
    return None
  return jnp.where(mask > 0, 0.0, MASK_BIAS).astype(dtype)


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
