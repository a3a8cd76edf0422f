"""Device mesh, the one list of logical-axis rules, and sharded placement of state and batches.

Mirrors T5X's partitioning (`t5x/partitioning.py`, `standard_logical_axis_rules` with one
dimension of data and one of model parallelism): every parameter and key activation of
`tlm.models.t5` carries logical axis names, and `AXIS_RULES` maps them onto a 2-D mesh with
axes ("data", "model"). The batch is split along "data"; attention heads, the MLP hidden units,
the joined key/value projections and the vocabulary are split along "model" (Megatron-style
tensor parallelism); everything else is replicated. With `mesh.model=1` this is plain data
parallelism.

With `mesh.fsdp=true` (`axis_rules(fsdp=True)`, T5X's `parameter_partitioning_dims=2`) the
parameters' "embed" dimension is split along "data" as well, and with it the optimizer state
(its slots take their parameter's sharding): each device then holds 1/(data x model) of the
model, and XLA gathers each layer's weights over "data" where it needs them (ZeRO-3 / FSDP).
Activations keep "embed" unsplit, because their "batch" dimension already takes "data" and
flax assigns each mesh axis once per array, in rule order.

`place_params` puts host parameters onto the shardings of an abstract tree
(`tlm.models.shapes.abstract_params`), strictly: training's init from a checkpoint and the
inference `Predictor` place them the same way.

Multi-host (JAX multi-controller): each process materialises only the rows of the global batch
held by its own devices (`process_rows`) and `global_batch` assembles them into global arrays
with `jax.make_array_from_process_local_data`.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from flax import linen as nn
from flax import traverse_util
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from tlm.errors import CheckpointError, ConfigError

DATA_AXIS = "data"
MODEL_AXIS = "model"

# Logical axis -> mesh axis (None: replicated). The only place these decisions are made.
AXIS_RULES: tuple[tuple[str, str | None], ...] = (
  ("batch", DATA_AXIS),
  ("vocab", MODEL_AXIS),
  ("mlp", MODEL_AXIS),
  ("heads", MODEL_AXIS),
  ("joined_kv", MODEL_AXIS),
  ("embed", None),
  ("kv", None),
  ("length", None),
  ("relpos_buckets", None),
  ("mlp_activations", None),
  ("layers", None),
)

BATCH_SPEC = PartitionSpec(DATA_AXIS, None)


def axis_rules(fsdp: bool = False) -> tuple[tuple[str, str | None], ...]:
  """`AXIS_RULES`, or with `fsdp` the parameters' "embed" dimension also split along "data".

  The ("embed", "data") rule comes after ("batch", "data"), so an activation
  [batch, length, embed] keeps "embed" replicated (one mesh axis per array dimension), while a
  kernel [embed, mlp] is split over both axes.
  """
  if not fsdp:
    return AXIS_RULES
  return (AXIS_RULES[0], ("embed", DATA_AXIS)) + AXIS_RULES[1:]


def make_mesh(data: int = -1, model: int = 1, devices: Sequence[Any] | None = None) -> Mesh:
  """A ("data", "model") mesh over all devices (of every process).

  Args:
    data: data-parallel size; -1 takes the devices left over by `model`.
    model: model-parallel size; -1 takes the devices left over by `data`.
    devices: defaults to `jax.devices()`.

  Raises:
    ConfigError: if the sizes do not multiply to the number of devices.
  """
  devices = list(jax.devices() if devices is None else devices)
  n = len(devices)
  if data == -1 and model == -1:
    raise ConfigError("mesh.data and mesh.model cannot both be -1")
  if data == -1:
    data = n // model if model > 0 and n % model == 0 else 0
  elif model == -1:
    model = n // data if data > 0 and n % data == 0 else 0
  if data < 1 or model < 1 or data * model != n:
    raise ConfigError(
      f"mesh.data x mesh.model must use all {n} devices, got mesh.data={data}, mesh.model={model}"
    )
  # Auto axes: shardings propagate from the parameters and the batch as in T5X (GSPMD).
  auto = (AxisType.Auto, AxisType.Auto)
  if devices == list(jax.devices()):
    # jax.make_mesh orders devices for the physical topology (TPU/GPU interconnect).
    return jax.make_mesh((data, model), (DATA_AXIS, MODEL_AXIS), axis_types=auto)
  return Mesh(np.asarray(devices).reshape(data, model), (DATA_AXIS, MODEL_AXIS), axis_types=auto)


def logical_to_mesh(logical_specs: Any, rules: Sequence | None = None) -> Any:
  """Maps a tree of logical PartitionSpecs (axis names like "embed") to mesh PartitionSpecs.

  Args:
    logical_specs: the tree.
    rules: the rules; None takes those of the enclosing `nn.logical_axis_rules` context (the
      training loop's and the predictor's), else `AXIS_RULES`.
  """
  if rules is None:
    rules = nn.get_logical_axis_rules() or AXIS_RULES
  return nn.logical_to_mesh(logical_specs, rules)


def bytes_per_device(tree: Any) -> int:
  """Bytes of the largest per-device share of a tree of sharded arrays or ShapeDtypeStructs."""
  per_device: dict[Any, int] = {}
  for leaf in jax.tree.leaves(tree):
    itemsize = np.dtype(leaf.dtype).itemsize
    for device, index in leaf.sharding.devices_indices_map(tuple(leaf.shape)).items():
      shape = [
        len(range(*s.indices(n))) if isinstance(s, slice) else 1 for s, n in zip(index, leaf.shape)
      ]
      per_device[device] = per_device.get(device, 0) + int(np.prod(shape)) * itemsize
  return max(per_device.values(), default=0)


def shardings(mesh: Mesh, specs: Any) -> Any:
  """A NamedSharding per mesh PartitionSpec in `specs`."""
  return jax.tree.map(
    lambda s: NamedSharding(mesh, s), specs, is_leaf=lambda x: isinstance(x, PartitionSpec)
  )


def check_batch(mesh: Mesh, batch_size: int, microbatches: int = 1) -> None:
  """Checks that every microbatch splits evenly over the data axis.

  Raises:
    ConfigError: naming train.batch_size / train.microbatches / mesh.data.
  """
  data = mesh.shape[DATA_AXIS]
  if microbatches < 1 or batch_size % microbatches:
    raise ConfigError(
      f"train.batch_size={batch_size} is not divisible by train.microbatches={microbatches}"
    )
  if (batch_size // microbatches) % data:
    raise ConfigError(
      f"each microbatch of train.batch_size / train.microbatches = {batch_size // microbatches}"
      f" rows must split evenly over mesh.data={data} devices"
    )


def process_rows(mesh: Mesh, batch_size: int) -> tuple[int, int]:
  """The rows [start, stop) of the global batch that this process's devices hold.

  The rows are read off the batch sharding itself, so any device order the mesh has is
  honoured. Processes that share data-axis positions (model axis across hosts) get the same
  rows.

  Raises:
    ConfigError: if this process's rows are not one contiguous block.
  """
  sharding = NamedSharding(mesh, BATCH_SPEC)
  index_map = sharding.addressable_devices_indices_map((batch_size, 1))
  blocks = sorted(
    {
      (idx[0].start or 0, batch_size if idx[0].stop is None else idx[0].stop)
      for idx in index_map.values()
    }
  )
  start, stop = blocks[0][0], blocks[0][1]
  for b_start, b_stop in blocks[1:]:
    if b_start != stop:
      raise ConfigError(
        f"process {jax.process_index()} holds non-contiguous batch rows {blocks}; "
        "use a mesh whose data axis follows the process order"
      )
    stop = b_stop
  return start, stop


def global_batch(
  mesh: Mesh, local: Mapping[str, np.ndarray], batch_size: int
) -> dict[str, jax.Array]:
  """Assembles per-process row blocks (from `process_rows`) into global batch arrays.

  Args:
    mesh: the mesh.
    local: feature -> this process's rows `[stop - start, length]`.
    batch_size: rows of the global batch.

  Returns:
    feature -> global `[batch_size, length]` array sharded along "data".
  """
  sharding = NamedSharding(mesh, BATCH_SPEC)
  return {
    k: jax.make_array_from_process_local_data(sharding, v, (batch_size,) + v.shape[1:])
    for k, v in local.items()
  }


def abstract_batch(
  mesh: Mesh, batch_size: int, input_length: int, target_length: int
) -> dict[str, jax.ShapeDtypeStruct]:
  """Shapes, dtypes and shardings of a packed training batch, allocating nothing."""
  sharding = NamedSharding(mesh, BATCH_SPEC)
  out = {}
  for name in (
    "encoder_input_tokens",
    "encoder_segment_ids",
    "encoder_positions",
  ):
    out[name] = jax.ShapeDtypeStruct((batch_size, input_length), np.int32, sharding=sharding)
  for name in (
    "decoder_target_tokens",
    "decoder_input_tokens",
    "decoder_segment_ids",
    "decoder_positions",
  ):
    out[name] = jax.ShapeDtypeStruct((batch_size, target_length), np.int32, sharding=sharding)
  out["decoder_loss_weights"] = jax.ShapeDtypeStruct(
    (batch_size, target_length), np.float32, sharding=sharding
  )
  return out


def place_params(params: Any, abstract_params: Any, path: str) -> Any:
  """Puts host (numpy) parameters onto the abstract tree's shardings, strictly.

  Every process reads the whole tree and keeps the shards its devices hold.

  Raises:
    CheckpointError: listing missing, unexpected and mis-shaped parameters.
  """
  have = traverse_util.flatten_dict(params, sep="/")
  want = traverse_util.flatten_dict(abstract_params, sep="/")
  missing = sorted(set(want) - set(have))
  unexpected = sorted(set(have) - set(want))
  shapes = sorted(
    f"{k} {tuple(np.shape(have[k]))} != {tuple(want[k].shape)}"
    for k in set(want) & set(have)
    if tuple(np.shape(have[k])) != tuple(want[k].shape)
  )
  if missing or unexpected or shapes:
    raise CheckpointError(
      f"{path}: parameters do not match the model: missing {missing}, unexpected {unexpected}, "
      f"wrong shapes {shapes}"
    )

  def put(arr, spec):
    arr = np.asarray(arr)
    return jax.make_array_from_callback(
      spec.shape, spec.sharding, lambda idx: np.asarray(arr[idx], dtype=spec.dtype)
    )

  return traverse_util.unflatten_dict({k: put(have[k], v) for k, v in want.items()}, sep="/")
