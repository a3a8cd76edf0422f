"""T5X's Adafactor state as tlm's optax Adafactor state: continuing a T5X run here.

A T5X training checkpoint holds, besides the parameters (`target`), `state/step` and T5X's
Adafactor slots per parameter, `state/param_states/<param>/{v_row, v_col, v, m}`
(t5x/adafactor.py `_AdafactorParamState`; one-element placeholders for unused slots). tlm's
Adafactor (tlm/train/optim.py) is optax's chain, whose state holds `FactoredState(count, v_row,
v_col, v)` and the learning-rate schedule's `count`.

The two are the same numbers. For a parameter of rank <= 2 without an explicit factor rule,
T5X factors with its heuristic (`Adafactor._factored_dims`, which scalable T5's logical rules
also fall back to for such parameters): `np.argsort(shape)`, the second largest dim the rows
and the largest the columns, if the second largest is >= `min_dim_size_to_factor` (128);
`v_row` is the mean of g^2 over the largest dim, `v_col` over the second largest. optax's
`scale_by_factored_rms` makes exactly that choice with the same `np.argsort` and the same
update (decay `1 - (step + 1)^-0.8`, epsilon1 added to g^2, `row_col_mean`, the same factor
exponents), and T5X's clipping, parameter scale and learning rate are tlm's chain
(`clip_by_block_rms`, the parameter RMS floored at epsilon2). So `state_from_t5x` copies
`v_row`, `v_col` and `v` and sets both counts to T5X's `step`: the next update equals T5X's
with T5's settings (tests/test_t5x_optimizer.py checks it against a transcription of
T5X's `apply_param_gradient`).

Refused (a `CheckpointError` naming the checkpoint): momentum (`beta1`: a non-placeholder `m`,
which tlm's T5 Adafactor does not keep), slots whose shapes are not the factoring above (a T5X
run with other factor rules or `min_dim_size_to_factor`), missing or unexpected slots.
Hyperparameters are not stored in a checkpoint: the run's own (T5's) are used.
"""

import jax
import numpy as np
import optax

from tlm import storage
from tlm.errors import CheckpointError
from tlm.models.formats import t5x
from tlm.train.optim import Adafactor, factored_state

_SLOTS = ("v_row", "v_col", "v")


def _paths(tree) -> list[str]:
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return ["/".join(str(getattr(k, "key", k)) for k in path) for path, _ in leaves]


def state_from_t5x(
  optimizer: Adafactor, abstract_params, t5x_state: dict[str, np.ndarray], source: str
):
  """tlm's optimizer state (numpy leaves) holding a T5X Adafactor state.

  Args:
    optimizer: the run's Adafactor.
    abstract_params: the parameters or their shapes (a tree like the model's params).
    t5x_state: `{name: array}` below a T5X checkpoint's `state` ("step",
      "param_states/<param>/<slot>"), e.g. `tlm.models.formats.t5x.read(..., "state")`.
    source: the checkpoint, named in errors.

  Returns:
    A tree like `optimizer.init(params)`.

  Raises:
    CheckpointError: listing the slots that are missing, unexpected or of another shape, or
      momentum.
  """
  abstract = jax.eval_shape(optimizer.init, abstract_params)
  step = t5x_state.get("step")
  if step is None or np.shape(step) != () or not np.issubdtype(np.asarray(step).dtype, np.integer):
    raise CheckpointError(f"{source}: no integer state/step (not a T5X training checkpoint)")
  if not 0 <= int(step) < 2**31:
    raise CheckpointError(f"{source}: state/step {int(step)} is out of range")
  count = np.asarray(step, np.int32)
  factored = factored_state(abstract)
  params = _paths(abstract_params)
  missing, mismatched, used = [], [], {"step"}
  slots: dict[str, list] = {slot: [] for slot in _SLOTS}
  for slot in _SLOTS:
    expected = jax.tree.leaves(getattr(factored, slot))
    for path, want in zip(params, expected):
      name = f"param_states/{path}/{slot}"
      value = t5x_state.get(name)
      used.add(name)
      if value is None:
        missing.append(name)
      elif value.shape != want.shape:
        mismatched.append(f"{name} (shape {list(value.shape)}, expected {list(want.shape)})")
      slots[slot].append(np.asarray(value, np.float32) if value is not None else None)
  for path in params:
    name = f"param_states/{path}/m"
    used.add(name)
    m = t5x_state.get(name)
    if m is not None and m.shape != (1,):
      mismatched.append(f"{name} (momentum: T5X's beta1, which tlm's Adafactor does not keep)")
  unexpected = sorted(set(t5x_state) - used)
  problems = [
    f"{label} ({len(items)}): {', '.join(items[:8])}{' ...' if len(items) > 8 else ''}"
    for label, items in (
      ("missing", missing),
      ("unexpected", unexpected),
      ("mismatched", mismatched),
    )
    if items
  ]
  if problems:
    raise CheckpointError(
      f"{source}: T5X Adafactor state does not match tlm's Adafactor: {'; '.join(problems)}"
    )
  treedef = jax.tree.structure(abstract_params)
  state = optax.FactoredState(
    count=count, **{slot: jax.tree.unflatten(treedef, slots[slot]) for slot in _SLOTS}
  )

  def fill(node):
    if isinstance(node, optax.FactoredState):
      return state
    if isinstance(node, optax.ScaleByScheduleState):
      return optax.ScaleByScheduleState(count=count)
    return node

  is_node = lambda x: isinstance(x, (optax.FactoredState, optax.ScaleByScheduleState))
  filled = jax.tree.map(fill, abstract, is_leaf=is_node)
  leftover = [x for x in jax.tree.leaves(filled) if isinstance(x, jax.ShapeDtypeStruct)]
  if leftover:  # a state this mapping does not know (another optimizer chain)
    raise CheckpointError(f"{source}: tlm's optimizer state has parts T5X's has not")
  return filled


def load_t5x_opt_state(path: str, optimizer: Adafactor, abstract_params, shardings):
  """The optimizer state of the T5X checkpoint at `path`, placed on `shardings`.

  Raises:
    CheckpointError: `path` is not a T5X checkpoint, or its Adafactor state does not map.
  """
  found = t5x.find(path) if storage.exists(path) else None
  if found is None:
    raise CheckpointError(
      f"{path}: model.init_optimizer_state needs a T5X checkpoint (with T5X's Adafactor state)"
    )
  step_dir, kind = found
  source = storage.join(step_dir, "checkpoint" if kind == "legacy" else t5x.ORBAX_ITEM)
  host = state_from_t5x(optimizer, abstract_params, t5x.read(step_dir, kind, "state"), source)

  def put(value, sharding):
    value = np.asarray(value)
    return jax.make_array_from_callback(value.shape, sharding, lambda idx: value[idx])

  return jax.tree.map(put, host, shardings)
