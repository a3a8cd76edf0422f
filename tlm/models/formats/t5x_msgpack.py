"""The msgpack file of a T5X legacy checkpoint (`checkpoint_STEP/checkpoint`), decoded as
hostile input.

T5X's `Checkpointer.save` (t5x/checkpoints.py) writes it on host 0 with
`flax.serialization.to_bytes({"version": VERSION, "optimizer": state_dict})`, where the state
dict is the train state's `{"target": params, "state": {"step": ..., "param_states": ...}}`.
Its leaves are flax's msgpack encodings:

- arrays as msgpack ext records: code 1 (ndarray) or 3 (numpy scalar), whose payload is itself
  msgpack of `(shape, dtype name, C-order bytes)`; `bfloat16` by name;
- arrays above 2**30 bytes split by flax into `{"__msgpack_chunked_array__": True, "shape":
  {"0": ...}, "chunks": {"0": array, ...}}`;
- for every array written to TensorStore instead (every partitioned one: all parameters of a
  T5X model), the JSON of its `ts.Spec`, a dict with `driver`, `kvstore` and `metadata`;
  `tlm.models.formats.t5x_zarr` reads those.

The msgpack itself is parsed by the `msgpack` library, given limits: declared lengths are
bounded by the bytes present and by `MAX_ENTRIES` per container, nesting by `MAX_DEPTH`. flax's
layer above it, the ext records and the chunked arrays, is decoded here rather than by
`flax.serialization.msgpack_restore`, which passes msgpack no limits, makes an array of any
dtype name a file holds (text, bytes, void) and joins chunks of mixed dtypes by promoting them
(an int8 chunk beside a float64 one: 8 bytes allocated per byte present); here array payloads
must hold exactly `shape x itemsize` bytes, only numeric dtypes are accepted and a chunked
array's chunks must share theirs (tests/test_t5x_hostile.py shows flax's behaviour). Any
problem is one `CheckpointError` naming the file. tlm writes the file with flax
(`tlm.models.formats.t5x.write`), as T5X does.
"""

import ml_dtypes
import msgpack
import numpy as np

from tlm.errors import CheckpointError
from tlm.safe_read import shown

# A T5X state dict nests about 8 levels deep (optimizer/state/param_states/decoder/layers_0/
# mlp/wi_0/kernel/v_row); a ts.Spec adds 3.
MAX_DEPTH = 64
# Entries of one map or list: a stack has at most a few hundred `layers_N`.
MAX_ENTRIES = 1 << 16
# Keys and strings (names, dtype names, kvstore paths) are short.
MAX_STR = 1 << 16
# The whole file. T5X writes every partitioned array (every parameter of a T5X model, and
# Adafactor's partitioned slots) to TensorStore and keeps only their specs (a few hundred bytes
# each) and the small unpartitioned arrays (the step, placeholder slots) here: kilobytes to a
# few megabytes. 1 GiB still holds a small model written without partitioning inline (T5
# base in float32 is 0.9 GB); a larger file is refused by its size before it is read.
MAX_FILE_BYTES = 1 << 30

_EXT_NDARRAY, _EXT_COMPLEX, _EXT_NPSCALAR = 1, 2, 3
_CHUNKED = "__msgpack_chunked_array__"
# flax writes `arr.dtype.name`; these are the numeric ones a checkpoint holds.
DTYPES = {
  name: np.dtype(name)
  for name in (
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
  )
}
DTYPES["bfloat16"] = np.dtype(ml_dtypes.bfloat16)


class _Bad(Exception):
  """A problem found inside an ext record (re-raised with the file's name)."""


def _shape(value, what: str) -> tuple[int, ...]:
  if not isinstance(value, (list, tuple)) or len(value) > 32:
    raise _Bad(f"{what}: shape {shown(value)} is not a list of at most 32 dimensions")
  for d in value:
    if not isinstance(d, int) or isinstance(d, bool) or d < 0:
      raise _Bad(f"{what}: shape {shown(value)} has a dimension that is not a size")
  return tuple(value)


def _ndarray(payload: bytes) -> np.ndarray:
  try:
    decoded = msgpack.unpackb(
      payload, raw=True, max_str_len=MAX_STR, max_array_len=64, max_map_len=0
    )
  except (ValueError, msgpack.UnpackException) as e:
    raise _Bad(f"array record is not msgpack ({type(e).__name__})") from None
  if not isinstance(decoded, (list, tuple)) or len(decoded) != 3:
    raise _Bad("array record is not (shape, dtype, bytes)")
  shape, dtype_name, buffer = decoded
  shape = _shape(shape, "array record")
  if not isinstance(dtype_name, bytes) or dtype_name.decode("latin-1") not in DTYPES:
    raise _Bad(f"array record has dtype {shown(dtype_name)}, not a numeric dtype")
  if not isinstance(buffer, bytes):
    raise _Bad("array record's data is not bytes")
  dtype = DTYPES[dtype_name.decode("latin-1")]
  expected = int(np.prod(shape, dtype=object)) * dtype.itemsize  # Python ints: no overflow
  if expected != len(buffer):
    raise _Bad(
      f"array record of shape {list(shape)} {dtype_name.decode('latin-1')} needs {expected} "
      f"bytes, holds {len(buffer)}"
    )
  return np.frombuffer(buffer, dtype=dtype).reshape(shape)


def _ext_hook(code: int, payload: bytes):
  if code == _EXT_NDARRAY:
    return _ndarray(payload)
  if code == _EXT_NPSCALAR:
    return _ndarray(payload)[()]
  raise _Bad(f"msgpack ext type {code} is not an array (T5X writes 1 and 3)")


def _depth_and_chunks(tree, path: str):
  """Checks the nesting depth (iteratively) and joins flax's chunked arrays, in place."""
  stack = [(tree, 1)]
  while stack:
    node, depth = stack.pop()
    if depth > MAX_DEPTH:
      raise CheckpointError(f"{path}: msgpack nested more than {MAX_DEPTH} levels deep")
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in list(items):
      if isinstance(value, dict) and value.get(_CHUNKED) is True:
        node[key] = _unchunk(value, path)
      elif isinstance(value, (dict, list)):
        stack.append((value, depth + 1))


def _unchunk(record: dict, path: str) -> np.ndarray:
  shape, chunks = record.get("shape"), record.get("chunks")
  if not isinstance(shape, dict) or not isinstance(chunks, dict):
    raise CheckpointError(f"{path}: chunked array without 'shape' and 'chunks' maps")
  try:
    shape = _shape([shape[str(i)] for i in range(len(shape))], "chunked array")
    parts = [chunks[str(i)] for i in range(len(chunks))]
  except KeyError as e:
    raise CheckpointError(f"{path}: chunked array lacks entry {e.args[0]!r}") from None
  except _Bad as e:
    raise CheckpointError(f"{path}: {e}") from None
  if not parts or not all(isinstance(p, np.ndarray) and p.ndim == 1 for p in parts):
    raise CheckpointError(f"{path}: chunked array whose chunks are not flat arrays")
  if len({p.dtype for p in parts}) != 1:
    raise CheckpointError(f"{path}: chunked array whose chunks differ in dtype")
  total = sum(p.size for p in parts)
  if total != int(np.prod(shape, dtype=object)):
    raise CheckpointError(f"{path}: chunked array of shape {list(shape)} holds {total} elements")
  return np.concatenate(parts).reshape(shape)


def decode(data: bytes, path: str):
  """The tree of a T5X `checkpoint` msgpack file's bytes.

  Args:
    data: the file's contents.
    path: the file, named in errors.

  Returns:
    Nested dicts (str keys) whose leaves are numpy arrays (read-only views of `data`),
    numpy scalars, Python scalars, strings, None, or lists (a ts.Spec's JSON).

  Raises:
    CheckpointError: `path: ...` in one line for anything that is not such a file.
  """
  try:
    tree = msgpack.unpackb(
      data,
      raw=False,
      strict_map_key=False,
      ext_hook=_ext_hook,
      max_str_len=MAX_STR,
      max_bin_len=len(data),
      max_ext_len=len(data),
      max_array_len=MAX_ENTRIES,
      max_map_len=MAX_ENTRIES,
    )
  except _Bad as e:
    raise CheckpointError(f"{path}: {e}") from None
  except msgpack.StackError:
    raise CheckpointError(f"{path}: msgpack nested more than {MAX_DEPTH} levels deep") from None
  except (ValueError, msgpack.UnpackException, UnicodeDecodeError, TypeError) as e:
    detail = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
    raise CheckpointError(f"{path}: not a T5X msgpack checkpoint ({detail})") from None
  if not isinstance(tree, dict):
    raise CheckpointError(f"{path}: not a T5X checkpoint (a {type(tree).__name__}, not a map)")
  _depth_and_chunks(tree, path)
  return tree
