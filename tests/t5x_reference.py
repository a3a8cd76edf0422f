"""T5X checkpoints written and read as T5X itself does, for the tests: the independent reference
for tlm's T5X reader (tlm/models/formats/t5x*.py) and writer (`--format=t5x`).

Transcribed from google-research/t5x, t5x/checkpoints.py, with the same libraries (tensorstore,
flax.serialization's msgpack, orbax), not from tlm's code:

- `save_legacy` is `Checkpointer.save` + `_write_state_to_tensorstore` on one host: every
  array with partitioning axes goes to TensorStore's zarr driver with the spec of `_get_spec`
  (relative path `name.replace("/", ".")`, gzip, chunks from `_choose_chunk_shape`; on GCS the
  `gcs` kvstore with the dummy bucket `t5x-dummy-bucket`), target arrays cast to `save_dtype`
  through a `cast` driver; arrays without axes stay in the msgpack; the msgpack file
  `checkpoint` is `to_bytes({"version": 3, "optimizer": written_state_dict})` written into
  `checkpoint_STEP.tmp-TIME`, renamed to `checkpoint_STEP` at the end.
- `load_legacy` is `load_t5x_checkpoint` + `_read_ts`: `msgpack_restore`, specs written for GCS
  turned into local `file` specs (`_maybe_update_ts_from_gcs_to_file`), `chunks` and
  `compressor` dropped from the spec, the path made absolute, uint16 refused, `ts.open` + read.
- `save_orbax` is `OrbaxCheckpointManagerInterface.save`: an Orbax `CheckpointManager` with
  `step_prefix="checkpoint"` and the item `state` (`PyTreeCheckpointHandler(use_ocdbt=True)`),
  `SaveArgs(dtype=save_dtype)` for the target.
- `scan_layers` is the parameter tree of `t5x/examples/scalable_t5/network.py` with
  `scan_layers=True` made from the one it has with `scan_layers=False`: each layer's
  `RelativePositionBiases(name="relpos_bias")` ([heads, buckets], its own), `DenseGeneral`
  attention kernels with `features=(heads, kv)` (3-D), and `scan_with_axes(..., name=stack)`
  inserting the layer axis at `param_scan_axis` (default 1) under `<stack>/<stack>`.
- `adafactor_init` is `t5x/adafactor.py` `Adafactor.init_state` with its default heuristic
  factoring (`_factored_dims`), and `adafactor_axes` which of its slots T5X partitions
  (`derive_logical_axes`: `v` when not a placeholder, `m` with momentum; never `v_row`/`v_col`).
"""

import os
import time

import jax.numpy as jnp
import numpy as np
import tensorstore as ts
from flax import serialization, traverse_util

VERSION = 3
DUMMY_BUCKET = "t5x-dummy-bucket"


def register_ts_spec_for_serialization():
  """t5x/checkpoints.py: flax writes a `ts.Spec` leaf as its `to_json()` dict."""
  serialization.register_serialization_state(
    ts.Spec,
    ty_to_state_dict=lambda t: t.to_json(),
    ty_from_state_dict=lambda t, s: ts.Spec(s) if isinstance(s, dict) else s,
    override=True,
  )


register_ts_spec_for_serialization()


def choose_chunk_shape(write_shape, target_elements):
  """t5x/checkpoints.py `_choose_chunk_shape`."""
  rank = len(write_shape)
  dim_factors = [[i for i in range(1, size + 1) if size % i == 0] for size in write_shape]

  def total():
    n = 1
    for i in range(rank):
      n *= dim_factors[i][-1]
    return n

  while total() > target_elements:
    dim_to_reduce, dim_to_reduce_size = -1, 1
    for i in range(rank):
      if dim_factors[i][-1] > dim_to_reduce_size:
        dim_to_reduce_size, dim_to_reduce = dim_factors[i][-1], i
    dim_factors[dim_to_reduce].pop()
  return [dim_factors[i][-1] for i in range(rank)]


def get_spec(gcs: bool, arr, name, metadata) -> ts.Spec:
  """t5x/checkpoints.py `_get_spec`."""
  if gcs:
    spec = {
      "driver": "zarr",
      "dtype": jnp.dtype(arr.dtype).name,
      "kvstore": {"driver": "gcs", "bucket": DUMMY_BUCKET},
      "path": name.replace("/", "."),
      "metadata": metadata,
    }
  else:
    spec = {
      "driver": "zarr",
      "dtype": jnp.dtype(arr.dtype).name,
      "kvstore": {"driver": "file", "path": name.replace("/", ".")},
      "metadata": metadata,
    }
  return ts.Spec(spec)


def scan_layers(target: dict, param_scan_axis: int = 1) -> dict:
  """scalable_t5's scanned `target` from its unscanned one (`<stack>/layers_N/...`, every layer
  with its own `relpos_bias/rel_embedding`, 2-D attention kernels [embed, heads * kv])."""
  out = {k: v for k, v in target.items() if k not in ("encoder", "decoder")}
  for stack in ("encoder", "decoder"):
    tree = dict(target[stack])
    names = sorted((k for k in tree if k.startswith("layers_")), key=lambda k: int(k[7:]))
    layers = [traverse_util.flatten_dict(tree.pop(k), sep="/") for k in names]
    heads = layers[0]["relpos_bias/rel_embedding"].shape[0]
    for layer in layers:
      for name, value in layer.items():
        kind = name.split("/")[-2] if name.endswith("/kernel") else None
        if kind in ("query", "key", "value"):
          layer[name] = value.reshape(value.shape[0], heads, -1)  # [embed, heads, kv]
        elif kind == "out":
          layer[name] = value.reshape(heads, -1, value.shape[1])  # [heads, kv, embed]
    stacked = {n: np.stack([layer[n] for layer in layers], param_scan_axis) for n in layers[0]}
    tree[stack] = traverse_util.unflatten_dict(stacked, sep="/")
    out[stack] = tree
  return out


def adafactor_init(params: dict, min_dim_size_to_factor: int = 128, beta1=None) -> dict:
  """`Adafactor.init_state(params).param_states` as nested dicts (heuristic factoring)."""
  flat = traverse_util.flatten_dict(params, sep="/")
  states = {}
  for path, param in flat.items():
    state = {k: np.zeros((1,), np.float32) for k in ["v_row", "v_col", "v", "m"]}
    shape = param.shape
    factored = None
    if len(shape) >= 2:
      sorted_dims = np.argsort(shape)
      if shape[sorted_dims[-2]] >= min_dim_size_to_factor:
        factored = ((int(sorted_dims[-2]),), (int(sorted_dims[-1]),))
    if factored is not None:
      d1, d0 = factored
      state["v_row"] = np.zeros(np.delete(shape, d0), np.float32)
      state["v_col"] = np.zeros(np.delete(shape, d1), np.float32)
    else:
      state["v"] = np.zeros(shape, np.float32)
    if beta1 is not None:
      state["m"] = np.zeros(shape, np.float32)
    states[path] = state
  return traverse_util.unflatten_dict(states, sep="/")


def adafactor_axes(param_states: dict, beta1=None) -> dict:
  """Whether T5X partitions each slot (`derive_logical_axes`), as True (axes) / None."""

  def rule(state):
    return {
      "v_row": None,
      "v_col": None,
      "v": True if "v" in state and state["v"].shape != (1,) else None,
      "m": True if beta1 else None,
    }

  flat = traverse_util.flatten_dict(param_states, sep="/", is_leaf=lambda _, x: "v_row" in x)
  return traverse_util.unflatten_dict({k: rule(v) for k, v in flat.items()}, sep="/")


def save_legacy(
  model_dir: str,
  state_dict: dict,
  step: int,
  save_dtype=np.float32,
  gcs: bool = False,
  target_elements: int = 64 * 1024 * 1024 // 4,
  axes: dict | None = None,
) -> str:
  """`Checkpointer.save` of `state_dict` ({"target", "state"}) into `model_dir/checkpoint_STEP`.

  `axes`: a tree like `state_dict` with True for partitioned arrays (written to zarr); by
  default every target array and the slots `adafactor_axes` marks. `target_elements` is the
  chunk size (T5X: 64 MiB of elements); smaller gives several chunks per array.
  """
  if axes is None:
    axes = {"target": _all_true(state_dict["target"]), "state": {"step": None}}
    if "param_states" in state_dict["state"]:
      axes["state"]["param_states"] = adafactor_axes(state_dict["state"]["param_states"])
  final_dir = os.path.join(model_dir, f"checkpoint_{step}")
  tmp_dir = final_dir + f".tmp-{int(time.time())}"
  os.makedirs(tmp_dir)
  flat_state = traverse_util.flatten_dict(state_dict, sep="/")
  flat_axes = traverse_util.flatten_dict(axes, sep="/")
  written = {}
  for name, arr in flat_state.items():
    is_target = name.startswith("target/")
    if flat_axes.get(name) is None:
      written[name] = arr.astype(save_dtype) if is_target else arr  # `_cast` in msgpack
      continue
    chunk_shape = choose_chunk_shape(arr.shape, target_elements)
    metadata = {"compressor": {"id": "gzip"}, "shape": arr.shape, "chunks": np.array(chunk_shape)}
    param_spec = get_spec(gcs, arr, name, metadata)
    tmp_ts_spec_dict = param_spec.to_json()
    if is_target:
      tmp_ts_spec_dict["dtype"] = jnp.dtype(save_dtype).name
    param_spec = ts.Spec(tmp_ts_spec_dict)
    # `_update_ts_path_from_relative_to_absolute(ckpt_dir, ...)`: for GCS the bucket would be
    # replaced by the real one; tensorstore writes the same objects through a local `file`
    # kvstore here (no network in tests), uploaded afterwards.
    tmp_ts_spec_dict["kvstore"] = {
      "driver": "file",
      "path": os.path.join(tmp_dir, tmp_ts_spec_dict["kvstore"]["path"]),
    }
    if is_target:
      tmp_ts_spec_dict = {"base": tmp_ts_spec_dict, "driver": "cast", "dtype": arr.dtype.name}
    t = ts.open(tmp_ts_spec_dict, create=True, open=True).result()
    t.write(arr).result()
    written[name] = param_spec
  written_state_dict = traverse_util.unflatten_dict(written, sep="/")
  msgpack_bytes = serialization.to_bytes({"version": VERSION, "optimizer": written_state_dict})
  with open(os.path.join(tmp_dir, "checkpoint"), "wb") as fp:
    fp.write(msgpack_bytes)
  os.rename(tmp_dir, final_dir)
  return final_dir


def _all_true(tree):
  return {k: _all_true(v) if isinstance(v, dict) else True for k, v in tree.items()}


def _is_spec_leaf(value):
  return not isinstance(value, dict) or set(value.keys()) >= {"driver", "kvstore", "metadata"}


def _gcs_to_file(spec):
  """`_maybe_update_ts_from_gcs_to_file` on one leaf."""
  if not isinstance(spec, dict):
    return spec
  if spec["kvstore"]["driver"] == "gcs":
    path = spec["kvstore"].pop("path")
    spec["kvstore"] = {"path": path, "driver": "file"}
  elif spec["kvstore"]["driver"] == "gfile":
    spec["kvstore"]["driver"] = "file"
  elif spec["kvstore"]["driver"] != "file":
    raise ValueError(f"Unsupported TensoreStore driver. Got {spec['kvstore']['driver']}.")
  return spec


def load_legacy(path: str) -> dict:
  """`load_t5x_checkpoint(path)` (a `checkpoint_STEP` directory): the state dict, with
  `{"target": ..., "state": ...}` as numpy arrays."""
  ckpt_path = os.path.join(path, "checkpoint")
  with open(ckpt_path, "rb") as fp:
    ckpt_contents = serialization.msgpack_restore(fp.read())
  assert ckpt_contents["version"] >= 2  # `_get_optimizer_state_dict`
  state = ckpt_contents["optimizer"]
  flat = traverse_util.flatten_dict(state, sep="/", is_leaf=lambda _, x: _is_spec_leaf(x))
  out = {}
  for name, leaf in flat.items():
    leaf = _gcs_to_file(leaf)
    if not isinstance(leaf, dict):
      out[name] = leaf
      continue
    tmp_ts_spec_dict = dict(leaf, metadata=dict(leaf["metadata"]))
    del tmp_ts_spec_dict["metadata"]["chunks"]
    del tmp_ts_spec_dict["metadata"]["compressor"]
    kvstore = dict(tmp_ts_spec_dict["kvstore"])
    kvstore["path"] = os.path.join(os.path.dirname(ckpt_path), kvstore["path"])
    tmp_ts_spec_dict["kvstore"] = kvstore
    if tmp_ts_spec_dict.get("dtype") == "uint16":
      raise ValueError("Found unsupported uint16 type in Tensorstore spec")
    out[name] = ts.open(tmp_ts_spec_dict, open=True).result().read().result()
  return traverse_util.unflatten_dict(out, sep="/")


def save_orbax(model_dir: str, state_dict: dict, step: int, save_dtype=None) -> str:
  """`OrbaxCheckpointManagerInterface.save`: `model_dir/checkpoint_STEP/state/`."""
  import orbax.checkpoint as ocp

  options = ocp.CheckpointManagerOptions(
    step_prefix="checkpoint", cleanup_tmp_directories=True, enable_async_checkpointing=False
  )
  manager = ocp.CheckpointManager(
    model_dir, options=options, item_handlers={"state": ocp.PyTreeCheckpointHandler(use_ocdbt=True)}
  )
  flat = traverse_util.flatten_dict(state_dict, sep="/")
  save_args = traverse_util.unflatten_dict(
    {k: ocp.SaveArgs(dtype=save_dtype if k.split("/")[0] == "target" else None) for k in flat},
    sep="/",
  )
  args = ocp.args.Composite(state=ocp.args.PyTreeSave(state_dict, save_args=save_args))
  manager.save(step, args=args, force=True)
  manager.wait_until_finished()
  manager.close()
  return os.path.join(model_dir, f"checkpoint_{step}")
