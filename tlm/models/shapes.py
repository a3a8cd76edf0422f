"""A config's model and its parameter tree, with nothing allocated.

One home for what training, inference, conversion and the dry runs all derive from a model's
architecture: its `T5Config` (`model_config`), its parameter tree as shapes
(`abstract_variables`, the one `jax.eval_shape` of `Transformer.init`; `param_shapes`,
`abstract_params` with shardings) and its size (`param_count`). As T5X and big_vision do,
shapes come from `jax.eval_shape` of the initialiser, never from initialising.
"""

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import linen as nn
from flax import traverse_util
from jax.sharding import Mesh, NamedSharding

from tlm.configs import ModelConfig
from tlm.errors import ConfigError
from tlm.models.t5 import T5Config, Transformer, get_preset
from tlm.sharding.partitioning import logical_to_mesh

# The embedding table is padded to a multiple of this (T5: 32100 ids in a 32128-row table),
# so that it splits evenly over any model axis up to 128.
_VOCAB_MULTIPLE = 128


def model_config(model: ModelConfig, vocab_size: int) -> T5Config:
  """The T5Config of a model section: the preset, its sizes overridden where the section sets
  them, and an embedding table that fits the vocabulary.

  Args:
    model: the config's model section.
    vocab_size: ids of the vocabulary (SentencePiece pieces + sentinels).

  Raises:
    ConfigError: if a published preset's table is smaller than the vocabulary.
  """
  base = get_preset(model.preset)
  if model.preset.startswith("tiny"):
    size = -(-vocab_size // _VOCAB_MULTIPLE) * _VOCAB_MULTIPLE
  else:
    size = base.vocab_size
    if size < vocab_size:
      raise ConfigError(
        f"model.preset {model.preset!r} has {size} embeddings but the vocabulary has "
        f"{vocab_size} ids; set data.vocab to the checkpoint's spiece.model"
      )
  sizes = {
    "emb_dim": model.emb_dim,
    "num_heads": model.num_heads,
    "head_dim": model.head_dim,
    "mlp_dim": model.mlp_dim,
    "num_encoder_layers": model.num_layers,
    "num_decoder_layers": model.num_layers,
  }
  bad = [k for k, v in sizes.items() if v < 0]
  if bad:
    raise ConfigError(f"model sizes must be >= 0 (0 keeps the preset's): {bad}")
  return dataclasses.replace(
    base,
    vocab_size=size,
    dropout_rate=model.dropout_rate,
    dtype=model.dtype,
    remat=model.remat,
    relpos_bias_per_layer=model.relpos_bias_per_layer,
    **{k: v for k, v in sizes.items() if v > 0},
  )


def abstract_variables(t5: T5Config) -> Any:
  """The "params" tree of `Transformer(t5)` as ShapeDtypeStructs, still boxed with their
  logical axis names (`nn.get_partition_spec` reads them). Parameter shapes depend on neither
  the batch nor the lengths (relative positions are bucketed)."""
  tokens = jax.ShapeDtypeStruct((1, 4), np.int32)
  return jax.eval_shape(
    lambda t: Transformer(t5).init(jax.random.key(0), t, t, enable_dropout=False), tokens
  )["params"]


def unboxed(tree: Any) -> Any:
  """`tree` with flax's metadata boxes replaced by their values. (The boxes' own `unbox` adds
  sharding constraints, which need traced values.)"""
  is_box = lambda x: isinstance(x, nn.meta.AxisMetadata)
  return jax.tree.map(lambda x: x.value if is_box(x) else x, tree, is_leaf=is_box)


@functools.lru_cache(maxsize=16)
def param_shapes(t5: T5Config) -> dict[str, tuple[int, ...]]:
  """Flat `{path "a/b/c": shape}` of a config's parameters."""
  # The boxed tree flattened as it is: flax's own (insertion) order, which callers that draw
  # random parameters path by path rely on (a jax tree map would sort the keys).
  flat = traverse_util.flatten_dict(abstract_variables(t5), sep="/")
  return {path: tuple(getattr(leaf, "value", leaf).shape) for path, leaf in flat.items()}


def abstract_params(
  t5: T5Config, mesh: Mesh, rules: Sequence | None = None, dtype: Any = np.float32
) -> Any:
  """The "params" tree of `Transformer(t5)` as ShapeDtypeStructs with shardings.

  The shardings come from the parameters' logical axis names through `rules`
  (`tlm.sharding.partitioning.logical_to_mesh`).

  Args:
    t5: the model's architecture.
    mesh: the mesh.
    rules: the axis rules (default: the enclosing context's, else AXIS_RULES).
    dtype: the dtype the parameters are placed in (float32, or bfloat16 for inference).
  """
  boxed = abstract_variables(t5)
  specs = logical_to_mesh(nn.get_partition_spec(boxed), rules)
  return jax.tree.map(
    lambda x, s: jax.ShapeDtypeStruct(x.shape, dtype, sharding=NamedSharding(mesh, s)),
    unboxed(boxed),
    specs,
    is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct),
  )


def param_count(params: Any) -> int:
  """Number of parameters of a (possibly abstract) parameter tree."""
  return int(sum(np.prod(x.shape, dtype=np.int64) for x in jax.tree.leaves(params)))
