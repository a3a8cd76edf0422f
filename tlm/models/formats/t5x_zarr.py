"""The zarr arrays of a T5X legacy checkpoint, read as hostile input and written as T5X does.

T5X's `Checkpointer` writes every partitioned array (all parameters of a T5X model, and the
full second moments of Adafactor) with TensorStore's zarr driver into a directory beside the
msgpack file, named by the array's path with "." (`target.encoder.layers_0.attention.query.
kernel`), and puts the JSON of its `ts.Spec` into the msgpack in its place (t5x/checkpoints.py
`_get_spec`, `_write_state_to_tensorstore`):

  {"driver": "zarr", "dtype": "float32",
   "kvstore": {"driver": "file", "path": "target.encoder.x/"},       # local checkpoints
   "metadata": {"chunks": [...], "compressor": {"id": "gzip", "level": 1}, "shape": [...]}}

The path is relative to the checkpoint directory; a checkpoint written to `gs://` has
`{"driver": "gcs", "bucket": "t5x-dummy-bucket", "path": ...}` instead, the dummy bucket
standing for the checkpoint's own (T5X substitutes it when reading, `_read_ts`): tlm reads
every kind from the checkpoint's own directory, whatever bucket a spec names. TensorStore
before 0.1.14 put `path` beside `kvstore`. The directory holds `.zarray` (zarr v2 metadata:
shape, chunks, dtype `<f4` or `bfloat16`, compressor) and one file per chunk, named by its
chunk indices joined with "." (or "/"), edge chunks stored at full size.

`read` decodes that without TensorStore, through `tlm.storage` (local or `gs://`): the spec's
path must stay inside the checkpoint directory, `.zarray` must agree with the spec, every chunk
file must be present, the bytes an array declares are checked against the bytes its chunk
files hold (gzip expands at most 1032:1) before anything is allocated, and each chunk is
inflated with a bounded `zlib.decompressobj`, so a chunk that inflates to more (or less) than
its declared shape is an error, not an allocation. `write` writes one array with TensorStore,
exactly as T5X does.

TensorStore is not the reader because its file kvstore opens a chunk file that is a link out
of the array's directory, and reads a missing chunk as the fill value (zeros) without a word
(tests/test_t5x_hostile.py shows both); checking the directory first and letting it read
afterwards would leave both open to a change in between, and it cannot read every store
`tlm.storage` can (`az://`, `hf://`). It does refuse `..` in a path and stops inflating a
chunk at its declared size (0.1.86).
"""

import os
import zlib

import ml_dtypes
import numpy as np

from tlm import safe_read, storage
from tlm.errors import CheckpointError
from tlm.files import tensorstore_status
from tlm.models.formats import guards
from tlm.safe_read import shown

# DEFLATE cannot expand more than 1032:1 (a 258-byte match per 2 bits); gzip's header and
# trailer add a few bytes.
MAX_INFLATION = 1032
_SLACK = 64
# Nor can it shrink much: incompressible data is stored in blocks of at most 64 KiB with 5
# bytes each (zlib's `compressBound`: n + n/4096 + n/16384 + n/2**25 + 13), plus gzip's
# 18-byte wrapper and the optional header fields TensorStore never writes (bounded here by
# 64 KiB).
_HEADER_SLACK = 1 << 16
_MAX_ZARRAY = 1 << 20
# T5X's chunks are up to 64 MiB: an 11B model's largest array has a few hundred.
_MAX_CHUNKS = 1 << 20
# zarr v2 dtype strings T5X writes (numpy's `str` of little-endian dtypes, TensorStore's
# `bfloat16`), and the other numeric ones a checkpoint may hold.
_DTYPES = {
  "bfloat16": np.dtype(ml_dtypes.bfloat16),
  **{
    np.dtype(c).str: np.dtype(c)
    for c in ("<f2", "<f4", "<f8", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "|b1")
  },
}
# The names TensorStore's spec `dtype` uses for the same.
_SPEC_DTYPES = {d.name: d for d in _DTYPES.values()}
_COMPRESSORS = {"gzip": 31, "zlib": 15}  # zlib wbits: a gzip member, a zlib stream


def _dims(value, what: str, source: str, positive: bool) -> tuple[int, ...]:
  if not isinstance(value, list) or len(value) > 32:
    raise CheckpointError(f"{source}: {what} {shown(value)} is not a list of dimensions")
  for d in value:
    if not isinstance(d, int) or isinstance(d, bool) or d < (1 if positive else 0):
      raise CheckpointError(f"{source}: {what} {shown(value)} has an invalid dimension")
  return tuple(value)


def is_spec(value) -> bool:
  """Whether a msgpack leaf is a serialized `ts.Spec` (T5X's own test, `_contains_ts_spec`)."""
  return isinstance(value, dict) and value.keys() >= {"driver", "kvstore", "metadata"}


def spec_path(spec: dict, source: str) -> str:
  """The array directory a T5X spec names, relative to the checkpoint directory."""
  if spec.get("driver") != "zarr":
    raise CheckpointError(f"{source}: TensorStore driver {shown(spec.get('driver'))} is not zarr")
  kvstore = spec.get("kvstore")
  if not isinstance(kvstore, dict):
    raise CheckpointError(f"{source}: spec's kvstore is not a map")
  if kvstore.get("driver") not in ("file", "gfile", "gcs"):
    raise CheckpointError(
      f"{source}: kvstore driver {shown(kvstore.get('driver'))} is not file, gfile or gcs"
    )
  path = kvstore.get("path", spec.get("path"))  # TensorStore < 0.1.14: beside kvstore
  if not isinstance(path, str) or not path.strip("/"):
    raise CheckpointError(f"{source}: spec without a kvstore path")
  return path.rstrip("/")


def _zarray(directory: str, source: str) -> dict:
  meta_path = safe_read.confined_path(directory, ".zarray", source)  # no link out of it
  if not storage.isfile(meta_path):
    raise CheckpointError(f"{meta_path}: no such file (the zarr metadata {source} names)")
  meta = guards.parse_json(guards.read_bounded(meta_path, _MAX_ZARRAY, "zarr metadata"), meta_path)
  if not isinstance(meta, dict) or meta.get("zarr_format") != 2:
    raise CheckpointError(f"{meta_path}: not zarr v2 metadata")
  return meta


def read(spec: dict, checkpoint_dir: str, source: str) -> np.ndarray:
  """Reads the array a T5X tensorstore spec names.

  Args:
    spec: the spec's JSON, as found in the msgpack file.
    checkpoint_dir: the `checkpoint_STEP` directory (local or remote) its path is relative to.
    source: the msgpack file and the array's name, for errors.

  Returns:
    The array, in its stored dtype (bfloat16 as `ml_dtypes.bfloat16`).

  Raises:
    CheckpointError: one line naming the file at fault.
  """
  relative = spec_path(spec, source)
  directory = safe_read.confined_path(checkpoint_dir, relative, source)
  meta = _zarray(directory, source)
  meta_path = storage.join(directory, ".zarray")
  shape = _dims(meta.get("shape"), "shape", meta_path, positive=False)
  chunks = _dims(meta.get("chunks"), "chunks", meta_path, positive=True)
  if len(chunks) != len(shape):
    raise CheckpointError(f"{meta_path}: chunks {list(chunks)} do not match shape {list(shape)}")
  declared = spec["metadata"].get("shape") if isinstance(spec["metadata"], dict) else None
  if declared is not None and list(shape) != declared:
    raise CheckpointError(
      f"{meta_path}: shape {list(shape)} is not the {shown(declared)} of the spec in {source}"
    )
  dtype = _DTYPES.get(meta.get("dtype")) if isinstance(meta.get("dtype"), str) else None
  if dtype is None:
    raise CheckpointError(f"{meta_path}: dtype {shown(meta.get('dtype'))} is not supported")
  if dtype == np.uint16 and spec.get("dtype") in (None, "uint16"):
    # T5X checkpoints before version 3 stored bfloat16 as uint16; T5X refuses them too.
    raise CheckpointError(f"{meta_path}: uint16 array (bfloat16 of a T5X checkpoint < v3)")
  if "dtype" in spec and _SPEC_DTYPES.get(spec["dtype"]) != dtype:
    raise CheckpointError(
      f"{meta_path}: dtype {meta['dtype']} is not the {shown(spec['dtype'])} of the spec in "
      f"{source}"
    )
  if meta.get("filters") not in (None, []):
    raise CheckpointError(f"{meta_path}: zarr filters are not supported")
  order = meta.get("order", "C")
  if order not in ("C", "F"):
    raise CheckpointError(f"{meta_path}: order {shown(order)} is not C or F")
  compressor = meta.get("compressor")
  cid = compressor.get("id") if isinstance(compressor, dict) else compressor
  if cid is not None and cid not in _COMPRESSORS:
    raise CheckpointError(
      f"{meta_path}: compressor {shown(cid)} is not supported (gzip, zlib or none)"
    )
  separator = meta.get("dimension_separator", ".")
  if separator not in (".", "/"):
    raise CheckpointError(f"{meta_path}: dimension_separator {shown(separator)}")
  return _read_chunks(directory, shape, chunks, dtype, order, cid, separator)


def max_chunk_file_bytes(chunk_bytes: int, compressed: bool) -> int:
  """The most bytes a chunk of `chunk_bytes` can take in its file: exactly that uncompressed,
  deflate's worst case (stored blocks) and a header compressed."""
  if not compressed:
    return chunk_bytes
  n = chunk_bytes
  return n + (n >> 12) + (n >> 14) + (n >> 25) + 13 + _HEADER_SLACK


def _read_chunks(directory, shape, chunks, dtype, order, cid, separator) -> np.ndarray:
  grid = [-(-s // c) for s, c in zip(shape, chunks)]  # chunks along each dim (0 if empty)
  count = int(np.prod(grid, dtype=object))
  chunk_bytes = int(np.prod(chunks, dtype=object)) * dtype.itemsize
  if count > _MAX_CHUNKS:
    raise CheckpointError(f"{directory}: {count} chunks (at most {_MAX_CHUNKS})")
  keys = [separator.join(map(str, idx)) for idx in np.ndindex(*grid)] if shape else ["0"]
  bound = max_chunk_file_bytes(chunk_bytes, cid is not None)
  paths = {}
  for key in keys:  # every chunk present, and sized, before anything is allocated
    # A chunk file may not be a link out of the array's directory (to a file whose bytes
    # would become parameters).
    path = paths[key] = safe_read.confined_path(directory, key, storage.join(directory, ".zarray"))
    if not storage.isfile(path):
      raise CheckpointError(f"{path}: chunk missing (zarr array of shape {list(shape)})")
    size = storage.getsize(path)
    if cid is None and size != chunk_bytes:
      raise CheckpointError(f"{path}: chunk of {size} bytes, expected {chunk_bytes}")
    if cid is not None and chunk_bytes > MAX_INFLATION * size + _SLACK:
      raise CheckpointError(
        f"{path}: chunk declares {chunk_bytes} bytes but holds {size} compressed bytes "
        f"(more than gzip's {MAX_INFLATION}:1)"
      )
    if size > bound:
      raise CheckpointError(
        f"{path}: chunk file of {size} bytes, more than a chunk of {chunk_bytes} bytes can take "
        f"({bound})"
      )
  out = np.empty(shape, dtype)
  for key, idx in zip(keys, np.ndindex(*grid) if shape else [()]):
    path = paths[key]
    # Bounded by the format, not by the size seen above (the file may have grown since).
    raw = guards.read_bounded(path, bound, "a zarr chunk")
    if cid is not None:
      raw = _inflate(raw, _COMPRESSORS[cid], chunk_bytes, path)
    chunk = np.frombuffer(raw, dtype).reshape(chunks, order=order)
    where = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, chunks, shape))
    out[where] = chunk[tuple(slice(0, w.stop - w.start) for w in where)]
  return out


def _inflate(raw: bytes, wbits: int, expected: int, path: str) -> bytes:
  inflater = zlib.decompressobj(wbits)
  try:
    data = inflater.decompress(raw, expected + 1)  # never more than one byte too many
  except zlib.error as e:
    raise CheckpointError(f"{path}: corrupt compressed chunk ({e})") from None
  if len(data) > expected or inflater.unconsumed_tail:
    raise CheckpointError(f"{path}: chunk decompresses to more than its declared {expected} bytes")
  if not inflater.eof or len(data) != expected:
    raise CheckpointError(
      f"{path}: chunk decompresses to {len(data)} bytes, not its declared {expected}"
    )
  return data


def choose_chunk_shape(shape: tuple[int, ...], target_elements: int) -> list[int]:
  """T5X's chunk shape (`_choose_chunk_shape`): divisors of each dim, the largest dim halved
  down to its next divisor until the chunk holds at most `target_elements`."""
  divisors = [[d for d in range(1, size + 1) if size % d == 0] for size in shape]
  while int(np.prod([f[-1] for f in divisors], dtype=object)) > target_elements:
    largest = max(range(len(shape)), key=lambda i: (divisors[i][-1], -i))
    divisors[largest].pop()
  return [f[-1] for f in divisors]


# T5X's target: chunks of at most 64 MiB.
CHUNK_BYTES = 64 << 20


def spec_for(name: str, array: np.ndarray) -> dict:
  """The spec T5X stores for array `name` ("target/encoder/...") written to a local directory
  (`_get_spec` + `to_json`). tlm writes this `file` kind on GCS too: T5X turns it into a `gcs`
  spec when it reads from GCS, in every version since its first release, while the `gcs` kind
  T5X writes there (path inside `kvstore`) is read only by T5X from 2022-05-17 on."""
  chunks = choose_chunk_shape(array.shape, max(1, CHUNK_BYTES // array.dtype.itemsize))
  return {
    "driver": "zarr",
    "dtype": array.dtype.name,
    "kvstore": {"driver": "file", "path": name.replace("/", ".") + "/"},
    "metadata": {
      "chunks": chunks,
      "compressor": {"id": "gzip", "level": 1},
      "shape": list(array.shape),
    },
  }


def write(spec: dict, local_dir: str, array: np.ndarray) -> None:
  """Writes `array` with TensorStore where `spec` (from `spec_for`) points in `local_dir`."""
  import tensorstore as ts

  path = f"{local_dir}/{spec_path(spec, '')}"
  opened = dict(spec, kvstore={"driver": "file", "path": f"{path}/"})
  try:
    store = ts.open(opened, create=True, open=True).result()
    store.write(array).result()
  except ValueError as e:
    # A failed file write (a full disk, permissions) as the OSError it is, naming the
    # array's directory, so that the atomic output directory being written reports it as the
    # output's one line.
    status = tensorstore_status(e)
    if status is None or status[1] is None:
      raise
    raise OSError(status[1], os.strerror(status[1]), path) from None
