"""TensorFlow checkpoints (TensorBundle V2) read with numpy only, no TensorFlow.

This is the format of the original Mesh-TF T5 checkpoints and of the paper's T5-CBQA / SSM
baselines (`model.ckpt-1000000.index` + `model.ckpt-1000000.data-00000-of-00016`). It mirrors
TensorFlow's `tensorflow/core/util/tensor_bundle/tensor_bundle.{h,cc,proto}`:

- `PREFIX.index` is a TensorFlow SSTable (LevelDB's table format, read by sstable.py) whose
  values are `BundleEntryProto`s (dtype, shape, shard_id, offset, size, masked crc32c, slices)
  keyed by variable name, decoded here from the protobuf wire format (protowire.py); the key
  "" holds the `BundleHeaderProto` (num_shards, endianness, version).
- `PREFIX.data-SSSSS-of-NNNNN` hold the raw little-endian tensor bytes at those offsets. A
  partitioned variable (saved by `tf.compat.v1.train.Saver` from a `partitioner=`) has a full
  entry listing its slices, each slice stored under an OrderedCode-encoded key
  (`checkpoint::EncodeTensorNameSlice`); they are reassembled into the full tensor.

Every variable is returned, optimizer slots and `global_step` included: deciding what to keep
is the checkpoint maps' job (tlm/models/param_map.py).

The files may be hostile: before anything is allocated, every entry is checked to name bytes
that lie in its data file (sizes in Python integers, so no shape wraps around), the byte
ranges of different entries may not overlap, and the slices of a partitioned variable must
fit its shape and add up to it exactly. What is allocated is then bounded by the bytes of the
data files.
"""

import math
import struct

import ml_dtypes
import numpy as np

from tlm import storage
from tlm.errors import CheckpointError
from tlm.models.formats.crc32c import crc32c, unmask_crc
from tlm.models.formats.protowire import int64, proto_fields, singular, varint
from tlm.models.formats.sstable import read_table
from tlm.safe_read import shown

# tensorflow/core/framework/types.proto DataType -> numpy dtype (little-endian).
_DTYPES = {
  1: np.dtype("<f4"),  # DT_FLOAT
  2: np.dtype("<f8"),  # DT_DOUBLE
  3: np.dtype("<i4"),  # DT_INT32
  4: np.dtype("u1"),  # DT_UINT8
  5: np.dtype("<i2"),  # DT_INT16
  6: np.dtype("i1"),  # DT_INT8
  9: np.dtype("<i8"),  # DT_INT64
  10: np.dtype("?"),  # DT_BOOL
  14: np.dtype(ml_dtypes.bfloat16),  # DT_BFLOAT16
  17: np.dtype("<u2"),  # DT_UINT16
  19: np.dtype("<f2"),  # DT_HALF
  22: np.dtype("<u4"),  # DT_UINT32
  23: np.dtype("<u8"),  # DT_UINT64
}
_DT_STRING = 7

# numpy's limit on the number of dimensions.
_MAX_RANK = 64


def _shape(buf: bytes) -> tuple[int, ...]:
  fields = proto_fields(buf)
  if singular(fields, 3):
    raise ValueError("unknown rank")
  if len(fields.get(2, [])) > _MAX_RANK:
    raise ValueError(f"rank {len(fields[2])} above {_MAX_RANK}")
  dims = tuple(int64(singular(proto_fields(d), 1)) for d in fields.get(2, []))
  if any(d < 0 for d in dims):
    raise ValueError(f"unknown dimension in shape {dims}")
  return dims


def _entry(buf: bytes) -> dict:
  f = proto_fields(buf)
  slices = []
  for s in f.get(7, []):
    extents = []
    for e in proto_fields(s).get(1, []):
      ef = proto_fields(e)
      # No length means the whole dimension (TensorSlice's kFullExtent, -1).
      extents.append((int64(singular(ef, 1)), int64(ef[2][-1]) if 2 in ef else -1))
    slices.append(extents)
  return {
    "dtype": singular(f, 1),
    "shape": _shape(singular(f, 2, b"")),
    "shard_id": singular(f, 3),
    "offset": int64(singular(f, 4)),
    "size": int64(singular(f, 5)),
    "crc32c": singular(f, 6, None),
    "slices": slices,
  }


def _ordered_signed(value: int) -> bytes:
  """OrderedCode::WriteSignedNumIncreasing (tensorflow/core/lib/strings/ordered_code.cc)."""
  x = ~value if value < 0 else value
  if x < 64:
    return bytes([(0x80 ^ value) & 0xFF])
  length = x.bit_length() // 7 + 1
  buf = bytearray((value % (1 << 80)).to_bytes(10, "big")[10 - length :])
  header = [0, 0x80, 0xC0, 0xE0, 0xF0, 0xF8, 0xFC, 0xFE, 0xFF, 0xFF, 0xFF][length]
  buf[0] ^= header
  buf[1] ^= {9: 0x80, 10: 0xC0}.get(length, 0)
  return bytes(buf)


def slice_key(name: str, extents: list[tuple[int, int]]) -> bytes:
  """The table key of one saved slice (checkpoint::EncodeTensorNameSlice)."""
  escaped = name.encode().replace(b"\x00", b"\x00\xff").replace(b"\xff", b"\xff\x00")
  rank = len(extents).to_bytes(8, "big").lstrip(b"\x00")
  key = b"\x00" + escaped + b"\x00\x01" + bytes([len(rank)]) + rank
  return key + b"".join(_ordered_signed(s) + _ordered_signed(n) for s, n in extents)


class _Bundle:
  """Opens the data shards lazily and reads entries from them."""

  def __init__(self, prefix: str, num_shards: int, big_endian: bool, verify: bool):
    self.prefix, self.num_shards = prefix, num_shards
    self.big_endian, self.verify = big_endian, verify
    self._sizes: dict[int, int] = {}

  def data_path(self, shard: int) -> str:
    return f"{self.prefix}.data-{shard:05d}-of-{self.num_shards:05d}"

  def locate(self, name: str, entry: dict) -> str:
    """The data file of an entry, checked to hold its bytes (read nothing, allocate nothing).

    Also checks that the size is the one its shape and dtype need.
    """
    shard, code = entry["shard_id"], entry["dtype"]
    if code != _DT_STRING:
      if code not in _DTYPES:
        raise CheckpointError(
          f"{self.prefix}.index: variable {shown(name)} has unsupported TensorFlow dtype {code}"
        )
      # Python integers: a shape such as [2**32, 2**32] must not wrap around to 0 bytes.
      expected = math.prod(entry["shape"]) * _DTYPES[code].itemsize
      if entry["size"] != expected:
        raise CheckpointError(
          f"{self.prefix}.index: variable {shown(name)} has {entry['size']} bytes, its shape "
          f"{list(entry['shape'])} and dtype need {expected}"
        )
    if not 0 <= shard < self.num_shards:
      raise CheckpointError(
        f"{self.prefix}.index: variable {shown(name)} is in shard {shard} of {self.num_shards}"
      )
    path = self.data_path(shard)
    if shard not in self._sizes:
      try:
        self._sizes[shard] = storage.getsize(path)
      except OSError as e:
        raise CheckpointError(f"{path}: cannot read checkpoint data ({e.strerror or e})") from None
    offset, size = entry["offset"], entry["size"]
    if offset < 0 or size < 0 or offset + size > self._sizes[shard]:
      raise CheckpointError(
        f"{path}: truncated checkpoint data (variable {shown(name)} needs bytes {offset}.."
        f"{offset + size}, file has {self._sizes[shard]})"
      )
    return path

  def _read_bytes(self, name: str, entry: dict, out: np.ndarray | None = None):
    path = self.locate(name, entry)
    size = entry["size"]
    buf = out.reshape(-1).view(np.uint8) if out is not None else np.empty(size, np.uint8)
    with storage.open_file(path, "rb") as f:
      f.seek(entry["offset"])
      if f.readinto(buf) != size:
        raise CheckpointError(f"{path}: truncated checkpoint data (variable {shown(name)})")
    return buf, path

  def _check_crc(self, name, entry, data, path):
    if self.verify and entry["crc32c"] is not None:
      if crc32c(data) != unmask_crc(entry["crc32c"]):
        raise CheckpointError(
          f"{path}: corrupt checkpoint data (checksum of variable {shown(name)})"
        )

  def read(self, name: str, entry: dict) -> np.ndarray:
    if entry["dtype"] == _DT_STRING:
      return self._read_strings(name, entry)
    self.locate(name, entry)  # before allocating: the bytes are in the file
    dtype = _DTYPES[entry["dtype"]]
    array = np.empty(entry["shape"], dtype)
    _, path = self._read_bytes(name, entry, array)
    self._check_crc(name, entry, array, path)
    if self.big_endian and dtype.itemsize > 1:
      array = array.view(dtype.newbyteorder(">")).astype(dtype)
    return array

  def _read_strings(self, name: str, entry: dict) -> np.ndarray:
    # [varint64 length]*n, [masked crc32c of the lengths as uint32], [bytes]*n.
    count = math.prod(entry["shape"])
    buf, path = self._read_bytes(name, entry)
    buf = buf.tobytes()
    try:
      pos, lengths = 0, []
      for _ in range(count):  # each length takes a byte at least: ends with the buffer
        n, pos = varint(buf, pos)
        lengths.append(n)
      (masked,) = struct.unpack_from("<I", buf, pos)
    except (ValueError, struct.error):
      raise CheckpointError(f"{path}: corrupt string variable {shown(name)}") from None
    # The checksum covers each length as a uint32 (a uint64 when it does not fit).
    length_bytes = b"".join(struct.pack("<I" if n <= 0xFFFFFFFF else "<Q", n) for n in lengths)
    if self.verify and crc32c(length_bytes) != unmask_crc(masked):
      raise CheckpointError(f"{path}: corrupt checkpoint data (lengths of variable {shown(name)})")
    pos += 4
    if pos + sum(lengths) != len(buf):
      raise CheckpointError(f"{path}: corrupt string variable {shown(name)} (sizes do not add up)")
    values = np.empty(count, object)
    for i, n in enumerate(lengths):
      values[i], pos = buf[pos : pos + n], pos + n
    if self.verify and entry["crc32c"] is not None:
      crc = crc32c(length_bytes)
      crc = crc32c(struct.pack("<I", masked), crc)
      crc = crc32c(buf[len(buf) - sum(lengths) :], crc)
      if crc != unmask_crc(entry["crc32c"]):
        raise CheckpointError(
          f"{path}: corrupt checkpoint data (checksum of variable {shown(name)})"
        )
    return values.reshape(entry["shape"])


def _slices(bundle: _Bundle, name: str, entry: dict, entries: dict[bytes, bytes]) -> list:
  """[(index, part name, part entry)] of a partitioned variable, checked to tile its shape.

  Nothing is allocated: each slice must lie inside the shape, be stored with the full
  variable's dtype at the size its extent needs, in bytes present in its data file, and the
  slices' volumes must add up to the shape's (overlaps are caught when they are placed).
  """
  where = f"{bundle.prefix}.index: partitioned variable {shown(name)}"
  shape = entry["shape"]
  if entry["dtype"] not in _DTYPES:
    raise CheckpointError(f"{where} has unsupported dtype {entry['dtype']}")
  parts, volume = [], 0
  for extents in entry["slices"]:
    if len(extents) != len(shape):
      raise CheckpointError(f"{where}: slice {extents} has the wrong rank")
    bounds = [(0, dim) if n == -1 else (s, s + n) for (s, n), dim in zip(extents, shape)]
    if any(not 0 <= lo <= hi <= dim for (lo, hi), dim in zip(bounds, shape)):
      raise CheckpointError(f"{where}: slice {extents} lies outside its shape {list(shape)}")
    value = entries.get(slice_key(name, extents))
    if value is None:
      raise CheckpointError(f"{where}: missing slice {extents}")
    try:
      part = _entry(value)
    except (ValueError, IndexError, TypeError, struct.error):
      raise CheckpointError(f"{where}: corrupt entry of slice {extents}") from None
    part_shape = tuple(hi - lo for lo, hi in bounds)
    if part["dtype"] != entry["dtype"] or part["shape"] != part_shape or part["slices"]:
      raise CheckpointError(f"{where}: slice {extents} is stored with another shape or dtype")
    part_name = f"{name}{extents}"
    bundle.locate(part_name, part)
    parts.append((tuple(slice(lo, hi) for lo, hi in bounds), part_name, part))
    volume += math.prod(part_shape)
  if volume != math.prod(shape):
    raise CheckpointError(
      f"{where}: its slices hold {volume} elements, its shape {list(shape)} needs "
      f"{math.prod(shape)}"
    )
  return parts


def _assemble(bundle: _Bundle, name: str, entry: dict, parts: list) -> np.ndarray:
  """Reassembles a partitioned variable from its slices (checked by `_slices`)."""
  full = np.empty(entry["shape"], _DTYPES[entry["dtype"]])
  covered = np.zeros(entry["shape"], bool)
  for index, part_name, part_entry in parts:
    if covered[index].any():
      raise CheckpointError(
        f"{bundle.prefix}.index: slices of {shown(name)} overlap at {shown(part_name)}"
      )
    full[index] = bundle.read(part_name, part_entry)
    covered[index] = True
  return full  # the volumes add up and nothing overlaps: every element is covered


def _check_disjoint(bundle: _Bundle, spans: list[tuple[int, int, int, str]]) -> None:
  """No two entries share bytes of a data file (each is read, and allocated, once)."""
  spans = sorted(s for s in spans if s[2] > 0)  # (shard, offset, size, name)
  for (shard0, offset0, size0, name0), (shard1, offset1, _, name1) in zip(spans, spans[1:]):
    if shard0 == shard1 and offset1 < offset0 + size0:
      raise CheckpointError(
        f"{bundle.data_path(shard1)}: variable {shown(name1)} overlaps the bytes of {shown(name0)}"
      )


def read(prefix: str, verify_checksums: bool = True) -> dict[str, np.ndarray]:
  """Reads every variable of a TensorFlow checkpoint.

  Args:
    prefix: the checkpoint prefix, e.g. `.../model.ckpt-1000000` (a path ending in `.index`
      is accepted too).
    verify_checksums: also check each tensor's CRC32C (the index blocks are always checked).

  Returns:
    {variable name: array} in name order; bfloat16 as ml_dtypes.bfloat16, strings as object
    arrays of bytes, partitioned variables reassembled.

  Raises:
    CheckpointError: naming the file (and variable) for a missing, truncated or corrupt file.
  """
  if prefix.endswith(".index"):
    prefix = prefix[: -len(".index")]
  index_path = prefix + ".index"
  table = read_table(index_path)
  entries = dict(table)
  if not table or table[0][0] != b"":
    raise CheckpointError(f"{index_path}: no bundle header (not a TensorBundle checkpoint?)")
  try:
    header = proto_fields(table[0][1])
    version = proto_fields(singular(header, 3, b""))
    singular(header, 1), singular(header, 2)  # the types are checked here
    min_consumer = singular(version, 2)
  except (ValueError, TypeError, struct.error):
    raise CheckpointError(f"{index_path}: corrupt bundle header") from None
  if min_consumer > 1:
    raise CheckpointError(f"{index_path}: written by a newer TensorFlow (min_consumer too high)")
  bundle = _Bundle(prefix, singular(header, 1), singular(header, 2) == 1, verify_checksums)
  # Every entry is checked before any is read: see the module docstring.
  plan, spans = [], []
  for key, value in table[1:]:
    if key.startswith(b"\x00"):
      continue  # one slice of a partitioned variable, read through its full entry
    try:
      name = key.decode("utf-8")
      entry = _entry(value)
    except (UnicodeDecodeError, ValueError, IndexError, TypeError, struct.error):
      raise CheckpointError(f"{index_path}: corrupt entry for key {shown(key)}") from None
    if entry["slices"]:
      parts = _slices(bundle, name, entry, entries)
      spans.extend((p["shard_id"], p["offset"], p["size"], n) for _, n, p in parts)
    else:
      bundle.locate(name, entry)
      parts = None
      spans.append((entry["shard_id"], entry["offset"], entry["size"], name))
    plan.append((name, entry, parts))
  _check_disjoint(bundle, spans)
  result = {}
  for name, entry, parts in plan:
    if parts is not None:
      result[name] = _assemble(bundle, name, entry, parts)
    else:
      result[name] = bundle.read(name, entry)
  return result
