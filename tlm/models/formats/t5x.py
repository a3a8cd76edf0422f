"""T5X checkpoint directories: the step a path names, the legacy layout (msgpack + zarr) and
the Orbax layout read as flat `{name: np.ndarray}`, and the legacy layout written.

T5X (google-research/t5x, t5x/checkpoints.py) keeps a run's checkpoints in its model directory
as `checkpoint_STEP` directories (`checkpoints_utils.all_steps`: names matching
`checkpoint_(\\d+)$`; the newest step is the one restored), in one of two layouts:

- legacy (`Checkpointer`): `checkpoint_STEP/checkpoint`, a msgpack file of `{"version": 3,
  "optimizer": {"target": params, "state": {"step", "param_states"}}}` whose partitioned
  arrays are TensorStore zarr directories beside it (formats/t5x_msgpack.py,
  formats/t5x_zarr.py). Versions 2 and 3 are restored (T5X refuses < 2; 3, current since
  2021-06-10, stores bfloat16 natively where 2 used uint16);
- Orbax (`OrbaxCheckpointManagerInterface`, what current T5X writes): `checkpoint_STEP/state/`,
  an Orbax PyTree checkpoint (OCDBT) of the same state dict.

Names are the state dict's paths joined with "/" below `target` (the parameters, T5X's own
names, which tlm uses) or `state` (`step`; Adafactor's `param_states/<param>/{v_row, v_col,
v, m}`). `write` writes the legacy layout as T5X's `Checkpointer.save` does: parameters to zarr,
the Adafactor state as T5X's `Adafactor.init_state` makes it (unpartitioned slots inline).
"""

import concurrent.futures
import contextlib
import logging
import os
import re

import numpy as np

from tlm import storage
from tlm.errors import CheckpointError
from tlm.files import tensorstore_one_line
from tlm.models.formats import guards, t5x_msgpack, t5x_zarr
from tlm.safe_read import shown

# `version` of the msgpack file: what T5X restores, and what it writes (t5x/checkpoints.py
# VERSION, unchanged since T5X's first public release).
READ_VERSIONS = (2, 3)
WRITE_VERSION = 3
STEP_DIR = re.compile(r"^checkpoint_(\d+)$")
# Arrays read at once.
READ_THREADS = 8
# The Orbax item holding the train state (t5x/checkpoints.py `_STATE_KEY`).
ORBAX_ITEM = "state"
# Orbax's tree metadata file, JSON (T5X's `_contains_orbax_metadata` looks for it).
_ORBAX_METADATA = "_METADATA"
# Orbax checkpoints hold compressed zarr (zstd, no fixed bound like gzip's): the parameters'
# declared bytes may exceed the bytes on disk by this factor at most. Trained weights barely
# compress; a file claiming more is refused before Orbax allocates anything.
MAX_ORBAX_INFLATION = 64
_ORBAX_SLACK = 1 << 20


def _is_t5x_msgpack(path: str) -> bool:
  """Whether `path` is a msgpack `checkpoint` file (not TF's text `checkpoint` state file)."""
  try:
    with storage.open_file(path, "rb") as f:
      head = f.read(21)
  except OSError:
    return False
  # T5X's own test (`detect_checkpoint_type`): TF's file starts "model_checkpoint_path";
  # the msgpack file starts with a map header.
  return head[:1] != b"" and (0x80 <= head[0] <= 0x8F or head[0] in (0xDE, 0xDF))


def _step_kind(step_dir: str) -> str | None:
  if storage.isfile(storage.join(step_dir, "checkpoint")) and _is_t5x_msgpack(
    storage.join(step_dir, "checkpoint")
  ):
    return "legacy"
  if storage.isdir(storage.join(step_dir, ORBAX_ITEM)):
    return "orbax"
  return None


def find(path: str) -> tuple[str, str] | None:
  """The T5X checkpoint at `path`, or None if it is not one.

  Args:
    path: a T5X model directory (its newest complete `checkpoint_STEP`), one
      `checkpoint_STEP` directory, or the legacy `checkpoint` file itself.

  Returns:
    (the `checkpoint_STEP` directory, "legacy" or "orbax").
  """
  if storage.isfile(path):
    if os.path.basename(path.rstrip("/")) == "checkpoint" and _is_t5x_msgpack(path):
      return storage.dirname(path), "legacy"
    return None
  if not storage.isdir(path):
    return None
  kind = _step_kind(path)
  if kind is not None:
    return path, kind
  steps = sorted(
    (int(m.group(1)) for name in storage.listdir(path) if (m := STEP_DIR.match(name))),
    reverse=True,
  )
  skipped = []
  for step in steps:
    step_dir = storage.join(path, f"checkpoint_{step}")
    kind = _step_kind(step_dir)
    if kind is not None:
      if skipped:
        logging.warning(
          "%s: newer checkpoint directories without a checkpoint file or state/ skipped: %s",
          path,
          ", ".join(skipped),
        )
      return step_dir, kind
    skipped.append(f"checkpoint_{step}")
  if steps:
    raise CheckpointError(
      f"{path}: T5X model directory whose checkpoint_STEP directories hold neither a "
      f"'checkpoint' file nor a 'state' directory ({', '.join(skipped[:3])})"
    )
  return None


def step_of(step_dir: str) -> int | None:
  """The step in a `checkpoint_STEP` directory's name."""
  match = STEP_DIR.match(os.path.basename(step_dir.rstrip("/")))
  return int(match.group(1)) if match else None


# ---------------------------------------------------------------------------------------------
# Legacy layout


def read_contents(step_dir: str) -> tuple[dict, str]:
  """The decoded msgpack of a legacy checkpoint and the file's path; the version checked."""
  path = storage.join(step_dir, "checkpoint")
  raw = guards.read_bounded(path, t5x_msgpack.MAX_FILE_BYTES, "a T5X checkpoint")
  contents = t5x_msgpack.decode(raw, path)
  version = contents.get("version", 0)
  if version not in READ_VERSIONS or "optimizer" not in contents:
    version = version if isinstance(version, int) else shown(version)
    raise CheckpointError(
      f"{path}: T5X checkpoint version {version} is not supported (T5X restores versions "
      "2 and 3, with an 'optimizer' map)"
    )
  if not isinstance(contents["optimizer"], dict):
    raise CheckpointError(f"{path}: 'optimizer' is not a map")
  return contents, path


def _walk(tree, prefix: str, source: str):
  """(name, leaf) of a state dict's leaves; empty maps and None (unused states) skipped."""
  stack = [(prefix, tree)]
  while stack:
    name, node = stack.pop()
    if isinstance(node, dict) and not t5x_zarr.is_spec(node):
      for key, value in node.items():
        if not isinstance(key, str) or not key or "/" in key:
          raise CheckpointError(f"{source}: key {shown(key)} under {shown(name)} is not a name")
        stack.append((f"{name}/{key}" if name else key, value))
    elif node is not None:
      yield name, node


def read_legacy(step_dir: str, subtree: str = "target") -> dict[str, np.ndarray]:
  """The arrays below `subtree` ("target", "state") of a legacy checkpoint, by name.

  Raises:
    CheckpointError: naming the file at fault (msgpack, `.zarray` or chunk).
  """
  contents, path = read_contents(step_dir)
  tree = contents["optimizer"].get(subtree)
  if not isinstance(tree, dict):
    raise CheckpointError(f"{path}: no '{subtree}' map in 'optimizer'")
  out, specs = {}, []
  for name, leaf in sorted(_walk(tree, "", path), key=lambda item: item[0]):
    source = f"{path} ({subtree}/{name})"
    if t5x_zarr.is_spec(leaf):
      specs.append((name, leaf, source))
    elif isinstance(leaf, (np.ndarray, np.generic)) or (
      isinstance(leaf, (int, float)) and not isinstance(leaf, bool)
    ):
      out[name] = np.asarray(leaf)
    else:
      raise CheckpointError(f"{source}: a {type(leaf).__name__}, not an array")
  # Arrays are read and inflated in threads (zlib and file reads release the GIL; on an
  # object store the requests overlap), as TensorStore does for T5X. The first error in name
  # order is the one raised.
  with concurrent.futures.ThreadPoolExecutor(READ_THREADS) as pool:
    futures = [(name, pool.submit(t5x_zarr.read, spec, step_dir, src)) for name, spec, src in specs]
    try:
      for name, future in futures:
        out[name] = future.result()
    finally:
      for _, future in futures:
        future.cancel()
  return out


# ---------------------------------------------------------------------------------------------
# Orbax layout


def _orbax_arrays(meta_tree, prefix: str = ""):
  if isinstance(meta_tree, dict):
    for key, value in meta_tree.items():
      yield from _orbax_arrays(value, f"{prefix}/{key}" if prefix else str(key))
  elif hasattr(meta_tree, "shape") and hasattr(meta_tree, "dtype"):
    yield prefix, meta_tree


def _held_bytes(path: str) -> int:
  """The bytes a file holds: locally its allocated blocks where fewer than its size, so that a
  sparse file (gigabytes of nothing) does not vouch for arrays it cannot hold."""
  if storage.is_remote(path):
    return storage.getsize(path)
  st = os.stat(storage.local(path))
  blocks = getattr(st, "st_blocks", None)
  return st.st_size if blocks is None else min(st.st_size, 512 * blocks)


def _tree_bytes(directory: str) -> int:
  return sum(_held_bytes(storage.join(directory, rel)) for rel in storage.walk_files(directory))


def read_orbax(step_dir: str, subtree: str = "target") -> dict[str, np.ndarray]:
  """The arrays below `subtree` of an Orbax T5X checkpoint (`checkpoint_STEP/state`).

  Orbax and TensorStore decode the files; before they do, the tree metadata must be bounded
  JSON and the arrays' declared bytes must be within `MAX_ORBAX_INFLATION` of the bytes present.

  Raises:
    CheckpointError: naming the directory.
  """
  import jax
  import orbax.checkpoint as ocp

  from tlm.models.formats import orbax_failures, tensorstore_gcs

  # A failed read leaves TensorStore reads of the other arrays in flight; their callbacks,
  # reaching the event loop Orbax has closed, would print tracebacks after tlm's one line.
  orbax_failures.install()
  tensorstore_gcs.install()
  # Absolute: Orbax resolves a relative directory elsewhere and finds no tree in it.
  directory = storage.abspath(storage.join(step_dir, ORBAX_ITEM))
  meta_file = storage.join(directory, _ORBAX_METADATA)
  if not storage.isfile(meta_file):
    raise CheckpointError(f"{directory}: Orbax checkpoint without {_ORBAX_METADATA}")
  guards.load_json(meta_file)  # bounded size and depth, before Orbax parses it
  try:
    with _quiet_orbax():
      meta = ocp.PyTreeCheckpointer().metadata(directory)
  except Exception as e:  # orbax raises many types
    raise CheckpointError(
      f"{directory}: not an Orbax checkpoint ({tensorstore_one_line(e)})"
    ) from None
  tree = getattr(meta, "item_metadata", meta)
  tree = getattr(tree, "tree", tree)
  if not isinstance(tree, dict) or not isinstance(tree.get(subtree), dict):
    raise CheckpointError(f"{directory}: no '{subtree}' in the saved train state")
  arrays = dict(_orbax_arrays(tree[subtree]))
  declared = sum(
    int(np.prod(m.shape, dtype=object)) * np.dtype(m.dtype).itemsize for m in arrays.values()
  )
  present = _tree_bytes(directory)
  if declared > MAX_ORBAX_INFLATION * present + _ORBAX_SLACK:
    raise CheckpointError(
      f"{directory}: arrays declare {declared} bytes but the checkpoint holds {present}"
    )
  item = {subtree: tree[subtree]}
  args = jax.tree.map(
    lambda m: ocp.RestoreArgs(restore_type=np.ndarray, dtype=m.dtype),
    item,
    is_leaf=lambda x: hasattr(x, "shape") and hasattr(x, "dtype"),
  )
  try:
    with _quiet_orbax():
      restored = ocp.PyTreeCheckpointer().restore(
        directory,
        args=ocp.args.PyTreeRestore(item=item, restore_args=args, partial_restore=True),
      )
  except Exception as e:
    orbax_failures.settle_callbacks()
    raise CheckpointError(
      f"{directory}: cannot restore '{subtree}' ({tensorstore_one_line(e)})"
    ) from None
  return {name: np.asarray(value) for name, value in _orbax_values(restored[subtree])}


def _orbax_values(tree, prefix: str = ""):
  if isinstance(tree, dict):
    for key, value in tree.items():
      yield from _orbax_values(value, f"{prefix}/{key}" if prefix else str(key))
  elif tree is not None:
    yield prefix, tree


@contextlib.contextmanager
def _quiet_orbax():
  """Orbax warns about the `_CHECKPOINT_METADATA` it keeps one level up, at the step."""
  absl = logging.getLogger("absl")
  level = absl.level
  absl.setLevel(logging.ERROR)
  try:
    yield
  finally:
    absl.setLevel(level)


def read(step_dir: str, kind: str, subtree: str = "target") -> dict[str, np.ndarray]:
  """The arrays below `subtree` of the checkpoint `find` found."""
  return read_legacy(step_dir, subtree) if kind == "legacy" else read_orbax(step_dir, subtree)


# ---------------------------------------------------------------------------------------------
# Writing the legacy layout


def factored_dims(shape: tuple[int, ...], min_dim_size_to_factor: int = 128):
  """T5X Adafactor's heuristic (`_factored_dims`): (second largest, largest) dim of a matrix
  whose second largest dim is at least `min_dim_size_to_factor`, else None."""
  if len(shape) < 2:
    return None
  order = np.argsort(shape)
  if shape[order[-2]] < min_dim_size_to_factor:
    return None
  return int(order[-2]), int(order[-1])


def initial_adafactor_state(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """`param_states` as T5X's `Adafactor.init_state` makes them (factored, no momentum):
  `{"<param>/v_row" ...}` zeros, unused slots a one-element placeholder."""
  out = {}
  for name, value in params.items():
    slots = {k: np.zeros((1,), np.float32) for k in ("v_row", "v_col", "v", "m")}
    dims = factored_dims(value.shape)
    if dims is None:
      slots["v"] = np.zeros(value.shape, np.float32)
    else:
      second, largest = dims
      slots["v_row"] = np.zeros(np.delete(value.shape, largest), np.float32)
      slots["v_col"] = np.zeros(np.delete(value.shape, second), np.float32)
    out.update({f"{name}/{slot}": array for slot, array in slots.items()})
  return out


def _nest(flat: dict) -> dict:
  tree: dict = {}
  for name, value in flat.items():
    *parents, leaf = name.split("/")
    node = tree
    for part in parents:
      node = node.setdefault(part, {})
    node[leaf] = value
  return tree


def write(local_dir: str, params: dict[str, np.ndarray], step: int) -> str:
  """Writes `checkpoint_STEP` of a T5X model directory, as T5X's `Checkpointer.save` does.

  Every parameter goes to a zarr directory (`target.<name>`, gzip chunks of at most 64 MiB,
  its dtype kept); the Adafactor state is T5X's initial one at `step` (its full second
  moments to zarr, the factored and placeholder slots inline, as their partitioning in T5X
  makes them); the msgpack file `checkpoint` holds `{"version": 3, "optimizer": ...}`.

  Args:
    local_dir: the model directory (local: a remote one is staged by the caller).
    params: `{T5X name: array}` (tlm's parameter names are T5X's).
    step: the step number of the directory and of `state/step`.

  Returns:
    The `checkpoint_STEP` directory written.
  """
  step_dir = os.path.join(local_dir, f"checkpoint_{step}")
  os.makedirs(step_dir)
  target = {}
  for name, value in params.items():
    spec = t5x_zarr.spec_for(f"target/{name}", value)
    t5x_zarr.write(spec, step_dir, value)
    target[name] = spec
  states = {}
  for name, value in initial_adafactor_state(params).items():
    if name.endswith("/v") and value.shape != (1,):  # partitioned like its parameter
      spec = t5x_zarr.spec_for(f"state/param_states/{name}", value)
      t5x_zarr.write(spec, step_dir, value)
      states[name] = spec
    else:
      states[name] = value
  optimizer = {
    "target": _nest(target),
    "state": {"step": np.asarray(step, np.int32), "param_states": _nest(states)},
  }
  # flax's msgpack, as T5X writes it (`flax.serialization.to_bytes` of the state dict).
  from flax import serialization

  data = serialization.msgpack_serialize({"version": WRITE_VERSION, "optimizer": optimizer})
  with open(os.path.join(step_dir, "checkpoint"), "wb") as f:
    f.write(data)
  return step_dir
