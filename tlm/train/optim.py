"""Adafactor with T5's settings, and the learning-rate schedules.

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

Learning rate: "constant" (the paper's fixed 1e-3) or "rsqrt", T5's pre-training schedule
1/sqrt(max(step, warmup_steps)), scaled here so that it equals `learning_rate` during the
warm-up phase (T5: 0.01 for 10^4 steps, then decaying).

The state is a plain dict of per-parameter slot trees (`v_row`, `v_col`, `v`) plus the update
count, so that its shardings follow from the parameters' (`state_partition_specs`) and orbax
saves it as ordinary arrays. Slots a parameter does not use hold a one-element placeholder.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
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

  As Mesh-TF's `_factored_dims`: parameters with fewer than two dims, or whose second largest
  dim is below `min_dim_size_to_factor`, keep a full second-moment estimate. Of two equal
  dims the earlier counts as the larger (Mesh-TF's stable sort); the estimate is symmetric.
  """
  if len(shape) < 2:
    return None
  order = sorted(range(len(shape)), key=lambda d: (shape[d], -d))
  d0, d1 = order[-2], order[-1]  # d0: second largest, d1: largest
  if shape[d0] < min_dim_size_to_factor:
    return None
  return d0, d1


_PLACEHOLDER = (1,)
_SLOTS = ("v_row", "v_col", "v")


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

  def _dims(self, shape):
    return factored_dims(tuple(shape), self.min_dim_size_to_factor) if self.factored else None

  def _slot_shapes(self, shape) -> dict[str, tuple[int, ...]]:
    dims = self._dims(shape)
    if dims is None:
      return {"v_row": _PLACEHOLDER, "v_col": _PLACEHOLDER, "v": tuple(shape)}
    d0, d1 = dims
    # v_row keeps every dim but the largest (d1): means of g^2 over d1; v_col drops d0.
    row = tuple(s for i, s in enumerate(shape) if i != d1)
    col = tuple(s for i, s in enumerate(shape) if i != d0)
    return {"v_row": row, "v_col": col, "v": _PLACEHOLDER}

  def init(self, params: Any) -> dict[str, Any]:
    """Zero second moments for every parameter, and an update count of 0."""
    leaves, treedef = jax.tree.flatten(params)
    slots = [self._slot_shapes(p.shape) for p in leaves]
    state = {"count": jnp.zeros((), jnp.int32)}
    for name in _SLOTS:
      state[name] = treedef.unflatten([jnp.zeros(s[name], jnp.float32) for s in slots])
    return state

  def state_partition_specs(self, param_specs: Any, params: Any) -> dict[str, Any]:
    """Mesh partition specs of the state, derived from those of the parameters.

    Args:
      param_specs: a PartitionSpec per parameter (mesh axes).
      params: the parameters or their abstract shapes (anything with `.shape`).

    Returns:
      A tree like `init(params)`: a factored slot keeps the spec entries of the dims it keeps,
      a full slot the parameter's spec, placeholders and the count are replicated.
    """
    leaves, treedef = jax.tree.flatten(params)
    specs = treedef.flatten_up_to(param_specs)
    out = {name: [] for name in _SLOTS}
    for spec, p in zip(specs, leaves):
      entries = tuple(spec) + (None,) * (len(p.shape) - len(tuple(spec)))
      dims = self._dims(p.shape)
      if dims is None:
        slot = {"v_row": PartitionSpec(), "v_col": PartitionSpec(), "v": PartitionSpec(*entries)}
      else:
        d0, d1 = dims
        slot = {
          "v_row": PartitionSpec(*(e for i, e in enumerate(entries) if i != d1)),
          "v_col": PartitionSpec(*(e for i, e in enumerate(entries) if i != d0)),
          "v": PartitionSpec(),
        }
      for name in _SLOTS:
        out[name].append(slot[name])
    return {"count": PartitionSpec(), **{k: treedef.unflatten(v) for k, v in out.items()}}

  def _update_one(self, grad, param, v_row, v_col, v, decay, lr):
    grad = grad.astype(jnp.float32)
    grad_sq = jnp.square(grad) + self.epsilon1
    mix = 1.0 - decay
    dims = self._dims(param.shape)
    if dims is not None:
      d0, d1 = dims
      new_row = decay * v_row + mix * jnp.mean(grad_sq, axis=d1)
      new_col = decay * v_col + mix * jnp.mean(grad_sq, axis=d0)
      # v_hat[i, j] = row[i] * col[j] / mean(row): the rank-1 estimate of Shazeer & Stern.
      row_mean = jnp.mean(new_row, axis=d0 if d0 < d1 else d0 - 1, keepdims=True)
      row_factor = jnp.expand_dims(jax.lax.rsqrt(new_row / row_mean), d1)
      col_factor = jnp.expand_dims(jax.lax.rsqrt(new_col), d0)
      update = grad * row_factor * col_factor
      new_v = v
    else:
      new_v = decay * v + mix * grad_sq
      update = grad * jax.lax.rsqrt(new_v)
      new_row, new_col = v_row, v_col
    if self.clipping_threshold is not None:
      rms = jnp.sqrt(jnp.mean(jnp.square(update)))
      update = update / jnp.maximum(1.0, rms / self.clipping_threshold)
    scale = lr
    if self.multiply_by_parameter_scale:
      param_rms = jnp.sqrt(jnp.mean(jnp.square(param.astype(jnp.float32))))
      scale = scale * jnp.maximum(param_rms, self.epsilon2)
    new_param = (param.astype(jnp.float32) - scale * update).astype(param.dtype)
    return new_param, new_row, new_col, new_v

  def update(self, grads: Any, state: dict[str, Any], params: Any) -> tuple[Any, dict[str, Any]]:
    """Applies one Adafactor update.

    Args:
      grads: gradients, like `params`.
      state: from `init` or a previous `update`.
      params: the current parameters.

    Returns:
      (new_params, new_state).
    """
    count = state["count"]
    decay = 1.0 - jnp.power(count.astype(jnp.float32) + 1.0, -self.decay_rate)
    lr = self.learning_rate(count)
    leaves, treedef = jax.tree.flatten(params)
    columns = [treedef.flatten_up_to(t) for t in (grads, *(state[k] for k in _SLOTS))]
    results = [self._update_one(g, p, *slots, decay, lr) for p, g, *slots in zip(leaves, *columns)]
    new_params, new_row, new_col, new_v = (treedef.unflatten(list(x)) for x in zip(*results))
    return new_params, {"count": count + 1, "v_row": new_row, "v_col": new_col, "v": new_v}


def make_optimizer(schedule: str, learning_rate: float, warmup_steps: int = 0) -> Adafactor:
  """T5's Adafactor with the given learning-rate schedule (see `learning_rate_schedule`)."""
  return Adafactor(learning_rate_schedule(schedule, learning_rate, warmup_steps))
