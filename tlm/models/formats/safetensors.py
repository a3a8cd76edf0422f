"""The safetensors file format, read and written with numpy only.

Mirrors the format of huggingface/safetensors (README "Format"): an 8-byte little-endian
unsigned header length N, N bytes of UTF-8 JSON
`{"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
"__metadata__": {str: str}}` (padded with spaces to a multiple of 8), then one byte buffer
holding every tensor, C-ordered and little-endian, at those offsets (relative to the buffer).
HF writes `model.safetensors` this way. bfloat16 and float8 come from ml_dtypes (a jax
dependency). The `safetensors` package is the tests' independent reference, not the reader:
`read` takes a file a tensor at a time, straight into each array, so its peak memory is the
tensors' bytes, where every API of the package holds twice that (README.md here has the
measurement and what the package can and cannot do; tests/test_formats.py pins it).
"""

import json
import math
import struct

import ml_dtypes
import numpy as np

from tlm import storage
from tlm.errors import CheckpointError
from tlm.files import atomic_output_file
from tlm.models.formats.guards import parse_json
from tlm.safe_read import open_regular, open_size, shown

_DTYPES = {
  "BOOL": np.dtype("?"),
  "U8": np.dtype("u1"),
  "I8": np.dtype("i1"),
  "U16": np.dtype("<u2"),
  "I16": np.dtype("<i2"),
  "U32": np.dtype("<u4"),
  "I32": np.dtype("<i4"),
  "U64": np.dtype("<u8"),
  "I64": np.dtype("<i8"),
  "F16": np.dtype("<f2"),
  "BF16": np.dtype(ml_dtypes.bfloat16),
  "F32": np.dtype("<f4"),
  "F64": np.dtype("<f8"),
  "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
  "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
}
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}
# A header larger than this is not a safetensors file (the reference implementation's limit).
_MAX_HEADER = 100_000_000
# numpy's limit on the number of dimensions.
_MAX_RANK = 64


def _error(path: str, message: str, name: str | None = None) -> CheckpointError:
  where = f"{path}: tensor {shown(name)}" if name is not None else path
  return CheckpointError(f"{where}: {message}")


def _is_int(x) -> bool:
  return isinstance(x, int) and not isinstance(x, bool)


def _open(path: str):
  """The file, opened once for its header and its tensors alike: a regular file only (a FIFO
  swapped in is refused, not waited on), a local path or an object store's (ranged reads)."""
  try:
    return open_regular(path)
  except OSError as e:
    raise _error(path, f"cannot read ({e.strerror or e})") from None


def _parse_header(f, path: str) -> tuple[dict, dict, int]:
  """`read_header` of the open file `f`."""
  try:
    file_size = open_size(f)
    if file_size is None:
      file_size = storage.getsize(path)
    prefix = f.read(8)
    if len(prefix) < 8:
      raise _error(path, f"truncated safetensors file ({file_size} bytes)")
    (header_size,) = struct.unpack("<Q", prefix)
    if header_size > min(_MAX_HEADER, file_size - 8):
      raise _error(path, f"truncated or corrupt safetensors header (length {header_size})")
    raw = f.read(header_size)
  except OSError as e:
    raise _error(path, f"cannot read ({e.strerror or e})") from None
  header = parse_json(raw, f"{path}: corrupt safetensors header")
  if not isinstance(header, dict):
    raise _error(path, "corrupt safetensors header (not a JSON object)")
  metadata = header.pop("__metadata__", None) or {}
  if not isinstance(metadata, dict) or not all(
    isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
  ):
    raise _error(path, "corrupt safetensors header (__metadata__ must map str to str)")
  data_size = file_size - 8 - header_size
  entries = {}
  for name, info in header.items():
    try:
      dtype = _DTYPES[info["dtype"]]
      shape = tuple(info["shape"])
      begin, end = info["data_offsets"]
    except (KeyError, TypeError, ValueError):
      raise _error(path, f"malformed header entry {shown(info)}", name) from None
    if (
      len(shape) > _MAX_RANK
      or not all(_is_int(d) and d >= 0 for d in shape)
      or not all(_is_int(o) for o in (begin, end))
    ):
      raise _error(path, f"malformed header entry {shown(info)}", name)
    # Python integers: a shape such as [2**32, 2**32] must not wrap around to 0 elements.
    expected = math.prod(shape) * dtype.itemsize
    if not 0 <= begin <= end:
      raise _error(path, f"bad data offsets [{begin}, {end}]", name)
    if end - begin != expected:
      raise _error(path, f"{end - begin} bytes for shape {list(shape)} {info['dtype']}", name)
    if end > data_size:
      raise _error(
        path, f"truncated file (needs data up to byte {end}, file has {data_size})", name
      )
    entries[name] = (dtype, shape, begin, end)
  spans = sorted((b, e, n) for n, (_, _, b, e) in entries.items() if e > b)
  for (_, end0, name0), (begin1, _, name1) in zip(spans, spans[1:]):
    if begin1 < end0:
      raise _error(path, f"data overlaps tensor {shown(name0)}", name1)
  return entries, metadata, 8 + header_size


def read_header(path: str) -> tuple[dict, dict, int]:
  """Reads and validates the header of a safetensors file.

  Args:
    path: the file.

  Returns:
    (entries, metadata, data_start): entries maps each tensor name to (dtype, shape, begin,
    end) with offsets relative to data_start; metadata is the `__metadata__` dict (or {}).

  Every tensor's bytes are checked to lie within the file, without overlapping another's, so
  reading them allocates no more than the file holds.

  Raises:
    CheckpointError: naming the file (and tensor) if the file is truncated or corrupt.
  """
  with _open(path) as f:
    return _parse_header(f, path)


def read(path: str) -> dict[str, np.ndarray]:
  """Reads every tensor of a safetensors file.

  Args:
    path: e.g. `model.safetensors`.

  Returns:
    {name: array} in the file's header order, native byte order (bfloat16 as
    ml_dtypes.bfloat16).

  Raises:
    CheckpointError: naming the file and tensor if the file is missing, truncated or corrupt.
  """
  tensors = {}
  with _open(path) as f:
    entries, _, data_start = _parse_header(f, path)
    for name, (dtype, shape, begin, end) in entries.items():
      array = np.empty(shape, dtype)
      try:
        f.seek(data_start + begin)
        count = f.readinto(array.reshape(-1).view(np.uint8))
      except OSError as e:
        raise _error(path, f"cannot read ({e.strerror or e})", name) from None
      if count != end - begin:
        raise _error(path, "truncated file", name)
      tensors[name] = array
  return tensors


def read_metadata(path: str) -> dict[str, str]:
  """The `__metadata__` of a safetensors file ({} when absent)."""
  return read_header(path)[1]


def write(path: str, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None):
  """Writes tensors to a safetensors file, atomically.

  Args:
    path: the output file.
    tensors: {name: array}; any layout (written C-ordered, little-endian).
    metadata: optional {str: str}, stored as `__metadata__` (HF writes {"format": "pt"}).

  Raises:
    CheckpointError: for an unsupported dtype or a non-string name or metadata.
  """
  header: dict = {}
  if metadata:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
      raise _error(path, "metadata must map str to str")
    header["__metadata__"] = dict(metadata)
  arrays, offset = [], 0
  for name, value in tensors.items():
    if not isinstance(name, str) or name == "__metadata__":
      raise _error(path, "tensor names must be strings other than __metadata__", name)
    array = np.asarray(value)
    dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    code = _NAMES.get(dtype)
    if code is None:
      raise _error(path, f"unsupported dtype {array.dtype}", name)
    array = np.asarray(array, dtype=_DTYPES[code], order="C")  # keeps 0-d arrays 0-d
    header[name] = {
      "dtype": code,
      "shape": list(array.shape),
      "data_offsets": [offset, offset + array.nbytes],
    }
    arrays.append(array)
    offset += array.nbytes
  raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
  raw += b" " * (-len(raw) % 8)  # the reference writer aligns the data buffer to 8 bytes
  with atomic_output_file(path, "wb") as f:
    f.write(struct.pack("<Q", len(raw)))
    f.write(raw)
    for array in arrays:
      f.write(array.reshape(-1).view(np.uint8).data)
