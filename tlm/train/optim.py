"""Adafactor with T5's settings (optax's building blocks), and the learning-rate schedules.

The paper "uses the same set of hyperparameters as Raffel et al. (2020)" with a constant learning
rate of 1e-3 (§2.3). T5 trains with Adafactor (Shazeer & Stern, ICML 2018) as implemented in
Mesh TensorFlow (`mesh_tensorflow/optimize.py`, `AdafactorOptimizer`) and reproduced by T5X
(`t5x/adafactor.py`); every setting below is T5's operative config for that optimizer:

- factored second moments (`factored=True`) for parameters whose two largest dims are both
  >= 128 (`min_dim_size_to_factor=128`): row and column means of g^2 instead of the full g^2;
- second-moment decay `1 - (k + 1)^-0.8` at update k (`decay_rate=None` in T5's gin, i.e.
  Mesh-TF's default `adafactor_decay_rate_pow(0.8)`; T5X `decay_rate=0.8`), so the first update
  uses g^2 alone;
- `epsilon1=1e-30` added to g^2; `epsilon2=1e-3`, the floor of the parameter-scale RMS;
- update clipping at RMS 1.0 (`clipping_threshold=1.0`);
- the step multiplied by the parameter's RMS (`multiply_by_parameter_scale=True`);
- no momentum (`beta1=0.0`), hence no first-moment slot; no weight decay.

The update is optax's: the chain `optax.adafactor` builds (`scale_by_factored_rms`,
`clip_by_block_rms`, `scale_by_learning_rate`, `scale_by_param_block_rms`), assembled here so
that every setting above is stated, epsilon2 included; the parameter scale is a 3-line
equivalent of optax's, which reads every parameter twice. `tests/test_optim.py` checks it against a
numpy transcription of Mesh-TF's update and against `optax.adafactor` itself.

Learning rate: "constant" (the paper's fixed 1e-3) or "rsqrt", T5's pre-training schedule
1/sqrt(max(step, warmup_steps)), scaled here so that it equals `learning_rate` during the
warm-up phase (T5: 0.01 for 10^4 steps, then decaying).

The state is optax's (a tuple with one `optax.FactoredState`: `count` and the per-parameter
slot trees `v_row`, `v_col`, `v`; slots a parameter does not use hold a one-element
placeholder). `Adafactor.state_partition_specs` gives each slot the partitioning of its
parameter's kept dims, as T5X's `Adafactor.derive_logical_axes` does, so that the state is
sharded like the parameters. Checkpoints written before tlm used optax's state (a dict
`{count, v_row, v_col, v}`) do not resume: `tlm.train.checkpointing` refuses them.
"""

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import PartitionSpec

from tlm.errors import ConfigError

Schedule = Callable[[jax.Array], jax.Array]


def learning_rate_schedule(name: str, learning_rate: float, warmup_steps: int = 0) -> Schedule:
  """Returns step -> learning rate.

  Args:
    name: "constant" or "rsqrt" (constant for `warmup_steps`, then decaying as 1/sqrt(step)).
    learning_rate: the rate of the constant phase.
    warmup_steps: length of the constant phase of "rsqrt".

  Raises:
    ConfigError: for an unknown schedule or a non-positive rate.
  """
  if not learning_rate > 0:
    raise ConfigError(f"train.learning_rate must be > 0, got {learning_rate}")
  if name == "constant":
    return lambda step: jnp.full((), learning_rate, jnp.float32)
  if name == "rsqrt":
    if warmup_steps < 1:
      raise ConfigError("train.schedule=rsqrt needs train.warmup_steps >= 1")
    w = float(warmup_steps)
    return lambda step: learning_rate * jnp.sqrt(w / jnp.maximum(step.astype(jnp.float32), w))
  raise ConfigError(f"unknown train.schedule {name!r}; expected 'constant' or 'rsqrt'")


def factored_dims(shape: tuple[int, ...], min_dim_size_to_factor: int = 128):
  """The (second largest, largest) dims of `shape` if both are big enough to factor, else None.

  The rule of optax's `scale_by_factored_rms` (`np.argsort` of the shape), which decides the
  state's layout: parameters with fewer than two dims, or whose second largest dim is below
  `min_dim_size_to_factor`, keep a full second-moment estimate; of two equal dims the later
  counts as the larger. (Mesh-TF takes the earlier; the estimate row x col / mean(row) is
  symmetric, so only which slot holds which mean differs.)
  """
  if len(shape) < 2:
    return None
  order = np.argsort(shape)
  second, largest = int(order[-2]), int(order[-1])
  if shape[second] < min_dim_size_to_factor:
    return None
  return second, largest


def _scale_by_param_rms(min_scale: float) -> optax.GradientTransformation:
  """`optax.scale_by_param_block_rms`, less its second pass over every parameter.

  optax computes the RMS twice (`numerics.safe_root_mean_squares`, for finite gradients *of*
  the RMS at 0); XLA does not merge the two, and nothing differentiates the optimizer here.
  """

  def update(updates, state, params):
    scale = lambda p: jnp.maximum(jnp.sqrt(jnp.mean(jnp.square(p))), min_scale)
    return jax.tree.map(lambda u, p: u * scale(p), updates, params), state

  return optax.GradientTransformation(optax.init_empty_state, update)


@dataclasses.dataclass(frozen=True)
class Adafactor:
  """Adafactor as T5 runs it (see the module docstring for the source of every default).

  Attributes:
    learning_rate: step -> rate (the step is the number of updates applied before this one).
    decay_rate: exponent of the second-moment decay `1 - (k + 1)^-decay_rate`.
    clipping_threshold: the update's RMS is clipped to this (None disables clipping).
    multiply_by_parameter_scale: scale the step by max(RMS(param), epsilon2).
    epsilon1: added to the squared gradient.
    epsilon2: lower bound of the parameter scale.
    factored: factor second moments of large matrices.
    min_dim_size_to_factor: see `factored_dims`.
  """

  learning_rate: Schedule
  decay_rate: float = 0.8
  clipping_threshold: float | None = 1.0
  multiply_by_parameter_scale: bool = True
  epsilon1: float = 1e-30
  epsilon2: float = 1e-3
  factored: bool = True
  min_dim_size_to_factor: int = 128

  @functools.cached_property
  def transformation(self) -> optax.GradientTransformation:
    """The chain `optax.adafactor` builds, with these settings."""
    chain = [
      optax.scale_by_factored_rms(
        factored=self.factored,
        decay_rate=self.decay_rate,
        min_dim_size_to_factor=self.min_dim_size_to_factor,
        epsilon=self.epsilon1,
      )
    ]
    if self.clipping_threshold is not None:
      chain.append(optax.clip_by_block_rms(self.clipping_threshold))
    chain.append(optax.scale_by_learning_rate(self.learning_rate, flip_sign=False))
    if self.multiply_by_parameter_scale:
      chain.append(_scale_by_param_rms(self.epsilon2))
    chain.append(optax.scale(-1.0))  # descent
    return optax.chain(*chain)

  def init(self, params: Any) -> Any:
    """Zero second moments for every parameter, and update counts of 0."""
    return self.transformation.init(params)

  def update(self, grads: Any, state: Any, params: Any) -> tuple[Any, Any]:
    """Applies one Adafactor update.

    Args:
      grads: gradients, like `params`.
      state: from `init` or a previous `update`.
      params: the current parameters.

    Returns:
      (new_params, new_state).
    """
    updates, state = self.transformation.update(grads, state, params)
    return optax.apply_updates(params, updates), state

  def _slot_specs(self, spec: PartitionSpec, shape: tuple[int, ...]):
    entries = tuple(spec) + (None,) * (len(shape) - len(tuple(spec)))
    dims = factored_dims(shape, self.min_dim_size_to_factor) if self.factored else None
    if dims is None:
      return PartitionSpec(), PartitionSpec(), PartitionSpec(*entries)
    second, largest = dims
    # v_row averages g^2 over the largest dim, v_col over the second largest: each keeps the
    # entries of the dims it keeps.
    v_row = PartitionSpec(*(e for i, e in enumerate(entries) if i != largest))
    v_col = PartitionSpec(*(e for i, e in enumerate(entries) if i != second))
    return v_row, v_col, PartitionSpec()

  def state_partition_specs(self, param_specs: Any, params: Any) -> Any:
    """Partition specs of the state, derived from those of the parameters.

    Args:
      param_specs: a PartitionSpec per parameter, of logical axis names or of mesh axes (the
        state's specs are then of the same kind).
      params: the parameters or their abstract shapes (anything with `.shape`).

    Returns:
      A tree like `init(params)`: a factored slot keeps the spec entries of the dims it keeps,
      a full slot the parameter's spec; placeholders and the counts are replicated.
    """
    leaves, treedef = jax.tree.flatten(params)
    specs = treedef.flatten_up_to(param_specs)
    slots = [self._slot_specs(s, tuple(p.shape)) for s, p in zip(specs, leaves)]
    v_row, v_col, v = (treedef.unflatten(list(x)) for x in zip(*slots))

    def node(x):
      if isinstance(x, optax.FactoredState):
        return optax.FactoredState(count=PartitionSpec(), v_row=v_row, v_col=v_col, v=v)
      if x.shape:  # a per-parameter state this rule does not know (e.g. momentum)
        raise ValueError(f"no partitioning rule for an optimizer state of shape {x.shape}")
      return PartitionSpec()

    is_factored = lambda x: isinstance(x, optax.FactoredState)
    return jax.tree.map(node, jax.eval_shape(self.init, params), is_leaf=is_factored)


def factored_state(opt_state: Any) -> optax.FactoredState:
  """The `optax.FactoredState` (update count and second moments) of an `Adafactor` state."""
  is_factored = lambda x: isinstance(x, optax.FactoredState)
  (found,) = [x for x in jax.tree.leaves(opt_state, is_leaf=is_factored) if is_factored(x)]
  return found


def make_optimizer(schedule: str, learning_rate: float, warmup_steps: int = 0) -> Adafactor:
  """T5's Adafactor with the given learning-rate schedule (see `learning_rate_schedule`)."""
  return Adafactor(learning_rate_schedule(schedule, learning_rate, warmup_steps))
