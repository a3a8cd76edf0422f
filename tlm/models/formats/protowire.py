"""The protobuf wire format, decoded by hand: varints and a message's fields by number.

Enough of https://protobuf.dev/programming-guides/encoding/ for the few small messages a
TensorFlow checkpoint index holds (`BundleHeaderProto`, `BundleEntryProto`,
`TensorShapeProto`, `TensorSliceProto`), without the protobuf package. The varint is also
LevelDB's (sstable.py). Malformed input raises ValueError; the caller names the file.
"""

import struct


def varint(buf: bytes, pos: int, limit: int | None = None) -> tuple[int, int]:
  """(value, position after it) of the base-128 varint at `buf[pos]`, read before `limit`."""
  limit = len(buf) if limit is None else limit
  result = shift = 0
  while True:
    if pos >= limit or shift > 63:
      raise ValueError("truncated varint")
    byte = buf[pos]
    pos += 1
    result |= (byte & 0x7F) << shift
    if not byte & 0x80:
      return result, pos
    shift += 7


def int64(x: int) -> int:
  """An `int64` field's value (a varint holds its two's complement as 64 unsigned bits)."""
  return x - (1 << 64) if x >= 1 << 63 else x


def proto_fields(buf: bytes) -> dict[int, list]:
  """Decodes a protobuf message into {field number: [values]} (varints as int, others bytes)."""
  fields: dict[int, list] = {}
  pos = 0
  while pos < len(buf):
    tag, pos = varint(buf, pos)
    number, wire = tag >> 3, tag & 7
    if wire == 0:
      value, pos = varint(buf, pos)
    elif wire == 1:
      value, pos = struct.unpack_from("<Q", buf, pos)[0], pos + 8
    elif wire == 2:
      size, pos = varint(buf, pos)
      value, pos = buf[pos : pos + size], pos + size
    elif wire == 5:
      value, pos = struct.unpack_from("<I", buf, pos)[0], pos + 4
    else:
      raise ValueError(f"unsupported wire type {wire}")
    if pos > len(buf):
      raise ValueError("truncated field")
    fields.setdefault(number, []).append(value)
  return fields


def singular(fields: dict, number: int, default=0):
  """A singular field's value: the last one given (protobuf's rule), of the default's type (an
  int when the default is None); the default when the field is absent."""
  if number not in fields:
    return default
  value = fields[number][-1]
  if not isinstance(value, int if default is None else type(default)):
    raise ValueError(f"field {number} has the wrong wire type")
  return value
