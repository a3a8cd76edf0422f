"""The training state (step, parameters, Adafactor state): its shapes and shardings.

As in big_vision and T5X, the state is never materialised on one device and then split: its
shapes come from `jax.eval_shape` of the initialiser, its shardings from the model's logical
axis names through `tlm.sharding.partitioning.AXIS_RULES`, and the random initialisation runs
under `jax.jit(..., out_shardings=...)` so that each device creates only its own shards.
"""

import dataclasses
from typing import Any

import flax
import jax
import jax.numpy as jnp
from flax import linen as nn
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tlm.errors import ConfigError
from tlm.models.shapes import abstract_variables, unboxed
from tlm.models.t5 import Transformer
from tlm.sharding import partitioning
from tlm.train.optim import Adafactor


@flax.struct.dataclass
class TrainState:
  """Everything a training step updates.

  Attributes:
    step: optimizer updates applied so far (int32 scalar).
    params: the model parameters (plain nested dicts, T5X names).
    opt_state: Adafactor's (optax) state (`tlm.train.optim.Adafactor.init`).
  """

  step: jax.Array
  params: Any
  opt_state: Any


def _init_variables(model: Transformer, rng: jax.Array) -> Any:
  # Parameter shapes do not depend on the batch or the lengths (relative position buckets).
  tokens = jnp.ones((1, 4), jnp.int32)
  return model.init({"params": rng, "dropout": rng}, tokens, tokens, enable_dropout=False)["params"]


@dataclasses.dataclass(frozen=True)
class StateLayout:
  """Shapes and shardings of a TrainState on a mesh.

  Attributes:
    abstract: a TrainState of jax.ShapeDtypeStruct with shardings (allocates nothing).
    shardings: a TrainState of NamedSharding.
    param_specs: mesh PartitionSpecs of the parameters (from the logical axis names).
    logical_specs: logical PartitionSpecs of the parameters, as the model declares them.
  """

  abstract: TrainState
  shardings: TrainState
  param_specs: Any
  logical_specs: Any


def state_layout(model: Transformer, optimizer: Adafactor, mesh: Mesh) -> StateLayout:
  """Derives the state's shapes and shardings without allocating it."""
  boxed = abstract_variables(model.config)
  logical_specs = nn.get_partition_spec(boxed)
  param_specs = partitioning.logical_to_mesh(logical_specs)
  params_shape = unboxed(boxed)
  opt_shape = jax.eval_shape(optimizer.init, params_shape)
  # The optimizer's slots take the logical axis names of the parameter dims they keep, mapped
  # by the same rules as the parameters.
  opt_logical = optimizer.state_partition_specs(logical_specs, params_shape)
  opt_specs = partitioning.logical_to_mesh(opt_logical)
  specs = TrainState(step=PartitionSpec(), params=param_specs, opt_state=opt_specs)
  shapes = TrainState(
    step=jax.ShapeDtypeStruct((), jnp.int32), params=params_shape, opt_state=opt_shape
  )
  is_spec = lambda x: isinstance(x, PartitionSpec)
  shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), specs, is_leaf=is_spec)
  abstract = jax.tree.map(
    lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), shapes, shardings
  )
  return StateLayout(abstract, shardings, param_specs, logical_specs)


def seed_key(seed: int) -> jax.Array:
  """The jax PRNG key of a 64-bit `train.seed` (`tlm.configs.schema.MAX_SEED`).

  Without 64-bit mode `jax.random.key` keeps only a seed's low 32 bits (2**32 and 0 give one
  key), so the high 32 bits are folded in; a seed below 2**32 gets `jax.random.key(seed)`
  itself, the key of every run trained before.
  """
  if not 0 <= seed < 2**64:
    raise ConfigError(f"train.seed must be in [0, 2**64 - 1], got {seed}")
  key = jax.random.key(seed & 0xFFFFFFFF)
  return jax.random.fold_in(key, seed >> 32) if seed >> 32 else key


def state_initializer(model: Transformer, optimizer: Adafactor, layout: StateLayout):
  """The jitted `key -> TrainState` of `init_state` (traced once, then reused per key shape)."""

  def init(rng):
    params = nn.meta.unbox(_init_variables(model, rng))
    return TrainState(jnp.zeros((), jnp.int32), params, optimizer.init(params))

  return jax.jit(init, out_shardings=layout.shardings)


def init_state(model: Transformer, optimizer: Adafactor, layout: StateLayout, seed: int):
  """Random parameters (T5X initialisers) and a fresh optimizer, created already sharded."""
  return state_initializer(model, optimizer, layout)(seed_key(seed))


def state_from_params(params: Any, optimizer: Adafactor, layout: StateLayout) -> TrainState:
  """Step 0 with given (already sharded) parameters and a fresh optimizer state."""
  opt_state = jax.jit(optimizer.init, out_shardings=layout.shardings.opt_state)(params)
  step = jax.device_put(jnp.zeros((), jnp.int32), layout.shardings.step)
  return TrainState(step, params, opt_state)
