"""T5's relative position biases: the bucket of each query-key distance and the learned
per-head bias of each bucket, one table per stack (T5) or per layer (scalable T5, umT5).

Mirrors T5X's `RelativePositionBiases` (`t5x/examples/t5/layers.py`: parameter name, logical
axes, initialiser) with the bucketing of HF transformers' `modeling_t5.py` and Mesh TensorFlow,
computed in float32 exactly as there.
"""

import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from tlm.models.dense import Array, DType

relpos_init = nn.initializers.variance_scaling(1.0, "fan_avg", "uniform")


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

  One table per stack (encoder, decoder), shared by all its layers, as in T5; with
  `T5Config.relpos_bias_per_layer` one in each layer, as in T5X's scalable T5 and umT5.

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
