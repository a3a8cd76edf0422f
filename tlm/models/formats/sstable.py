"""TensorFlow's SSTable (LevelDB's table format), the container of a checkpoint's `.index`.

Mirrors `tensorflow/core/lib/io/format.cc`, `block.cc` and `table.cc`: data blocks of
prefix-compressed keys with restart points, an index block of block handles, a 48-byte footer
ending in a magic number; every block carries a type byte (0 raw, 1 snappy; TensorFlow writes
raw blocks, snappy is decoded for completeness) and a masked CRC32C, which is verified. The
file may be hostile: every offset and length is checked against the bytes present, and any
problem is one `CheckpointError` naming the file.
"""

import struct

from tlm import storage
from tlm.errors import CheckpointError
from tlm.models.formats.crc32c import crc32c, unmask_crc
from tlm.models.formats.protowire import varint

_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_SIZE = 48
_BLOCK_TRAILER_SIZE = 5  # 1 byte compression type + 4 bytes masked crc32c


def _snappy_decompress(buf: bytes) -> bytes:
  """Decodes one raw snappy block (github.com/google/snappy/format_description.txt)."""
  size, pos = varint(buf, 0)
  out = bytearray()
  while pos < len(buf):
    tag = buf[pos]
    pos += 1
    kind = tag & 3
    if kind == 0:  # literal
      length = tag >> 2
      if length >= 60:
        extra = length - 59
        length = int.from_bytes(buf[pos : pos + extra], "little")
        pos += extra
      length += 1
      if pos + length > len(buf):
        raise ValueError("snappy literal past the end")
      out += buf[pos : pos + length]
      pos += length
      continue
    if kind == 1:
      length, offset = 4 + ((tag >> 2) & 7), ((tag >> 5) << 8) | buf[pos]
      pos += 1
    else:
      nbytes = 2 if kind == 2 else 4
      length, offset = 1 + (tag >> 2), int.from_bytes(buf[pos : pos + nbytes], "little")
      pos += nbytes
    if offset == 0 or offset > len(out):
      raise ValueError("snappy copy offset out of range")
    if len(out) + length > size:
      raise ValueError("snappy block decodes past its declared size")
    for _ in range(length):  # byte by byte: a copy may overlap its own output
      out.append(out[-offset])
  if len(out) != size:
    raise ValueError(f"snappy block decodes to {len(out)} bytes, header says {size}")
  return bytes(out)


def _read_block(data: bytes, offset: int, size: int, path: str) -> bytes:
  end = offset + size + _BLOCK_TRAILER_SIZE
  if offset < 0 or end > len(data):
    raise CheckpointError(f"{path}: truncated or corrupt index (block at {offset} past the end)")
  contents = data[offset : offset + size + 1]  # the crc covers the type byte too
  (masked,) = struct.unpack_from("<I", data, offset + size + 1)
  if crc32c(contents) != unmask_crc(masked):
    raise CheckpointError(f"{path}: corrupt index (checksum mismatch in block at {offset})")
  kind = data[offset + size]
  if kind == 0:
    return contents[:-1]
  if kind == 1:
    try:
      return _snappy_decompress(contents[:-1])
    except (ValueError, IndexError) as e:
      raise CheckpointError(f"{path}: corrupt snappy block at {offset} ({e})") from None
  raise CheckpointError(f"{path}: unknown block compression type {kind} at {offset}")


def _block_entries(block: bytes, path: str) -> list[tuple[bytes, bytes]]:
  if len(block) < 4:
    raise CheckpointError(f"{path}: corrupt index (block of {len(block)} bytes)")
  (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
  limit = len(block) - 4 - 4 * num_restarts
  if limit < 0:
    raise CheckpointError(f"{path}: corrupt index (bad restart count {num_restarts})")
  entries, key, pos = [], b"", 0
  try:
    while pos < limit:
      shared, pos = varint(block, pos, limit)
      unshared, pos = varint(block, pos, limit)
      value_size, pos = varint(block, pos, limit)
      if shared > len(key) or pos + unshared + value_size > limit:
        raise ValueError("entry past the end of its block")
      key = key[:shared] + block[pos : pos + unshared]
      pos += unshared
      entries.append((key, block[pos : pos + value_size]))
      pos += value_size
  except ValueError as e:
    raise CheckpointError(f"{path}: corrupt index ({e})") from None
  return entries


def read_table(path: str) -> list[tuple[bytes, bytes]]:
  """Every (key, value) of a TensorFlow/LevelDB SSTable file, in key order.

  Raises:
    CheckpointError: naming the file, if it is missing, truncated or fails a checksum.
  """
  try:
    with storage.open_file(path, "rb") as f:
      data = f.read()
  except OSError as e:
    raise CheckpointError(f"{path}: cannot read checkpoint index ({e.strerror or e})") from None
  if len(data) < _FOOTER_SIZE:
    raise CheckpointError(f"{path}: truncated checkpoint index ({len(data)} bytes)")
  footer = data[-_FOOTER_SIZE:]
  if struct.unpack_from("<Q", footer, 40)[0] != _TABLE_MAGIC:
    raise CheckpointError(f"{path}: not a TensorFlow checkpoint index (bad magic; truncated?)")
  try:
    _, pos = varint(footer, 0, 40)  # metaindex offset and size: no filters in TF bundles
    _, pos = varint(footer, pos, 40)
    index_offset, pos = varint(footer, pos, 40)
    index_size, pos = varint(footer, pos, 40)
  except ValueError:
    raise CheckpointError(f"{path}: corrupt checkpoint index footer") from None
  entries = []
  for _, handle in _block_entries(_read_block(data, index_offset, index_size, path), path):
    try:
      offset, pos = varint(handle, 0)
      size, _ = varint(handle, pos)
    except ValueError:
      raise CheckpointError(f"{path}: corrupt block handle in the index") from None
    entries.extend(_block_entries(_read_block(data, offset, size, path), path))
  return entries
