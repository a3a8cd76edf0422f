"""T5 building blocks in Flax Linen: the token embedding, RMS norm and the MLP block, and the
one namespace (`layers.X`) through which t5.py reaches every layer.

Mirrors T5X's `t5x/examples/t5/layers.py` (parameter names, 2-D kernels, logical axis names,
initialisers) with the numerics of HF transformers' `modeling_t5.py`, which follows Mesh
TensorFlow: GELU is the tanh approximation (HF `gelu_new`, T5X `nn.gelu`), RMS norm runs in
float32. T5X keeps all its layers in one file; here each concept has its own module, and
their names are re-exported below:
- `dense`: `DenseGeneral` and the matmul of every kernel (a CPU-only custom VJP);
- `relative_position`: `relative_position_bucket`, `RelativePositionBiases`;
- `attention`: `dot_product_attention`, `MultiHeadDotProductAttention` (KV cache);
- `masks`: `MASK_BIAS`, `mask_to_bias` and the mask constructors.
"""

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from flax import linen as nn
from jax import lax

from tlm.models.attention import (
  MultiHeadDotProductAttention as MultiHeadDotProductAttention,
)
from tlm.models.attention import attention_kernel_init as attention_kernel_init
from tlm.models.attention import dot_product_attention as dot_product_attention
from tlm.models.dense import Array, DType, Initializer
from tlm.models.dense import DenseGeneral as DenseGeneral
from tlm.models.dense import default_kernel_init as default_kernel_init
from tlm.models.masks import MASK_BIAS as MASK_BIAS
from tlm.models.masks import combine_masks as combine_masks
from tlm.models.masks import make_attention_mask as make_attention_mask
from tlm.models.masks import make_causal_mask as make_causal_mask
from tlm.models.masks import make_padding_and_segment_mask as make_padding_and_segment_mask
from tlm.models.masks import mask_to_bias as mask_to_bias
from tlm.models.relative_position import RelativePositionBiases as RelativePositionBiases
from tlm.models.relative_position import relative_position_bucket as relative_position_bucket
from tlm.models.relative_position import relpos_init as relpos_init

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
