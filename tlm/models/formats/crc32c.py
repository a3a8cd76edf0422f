"""CRC32C (Castagnoli), as in TensorFlow's tensorflow/core/lib/hash/crc32c.h.

TensorFlow checksums every block of a checkpoint index and every tensor of its data files
with it (see tensorbundle.py), masked as `crc32c::Mask` does. Pure numpy: small inputs go
byte by byte through a table, large ones are cut into lanes advanced in lockstep and combined
with the CRC's linearity.
"""

import numpy as np


def _make_crc_table() -> np.ndarray:
  table = np.arange(256, dtype=np.uint32)
  for _ in range(8):
    table = np.where(table & 1, (table >> 1) ^ np.uint32(0x82F63B78), table >> 1)
  return table.astype(np.uint32)


_CRC_TABLE = _make_crc_table()
_CRC_TABLE_LIST = [int(x) for x in _CRC_TABLE]
_MASK_DELTA = 0xA282EAD8


def _raw_crc_small(data, reg: int = 0) -> int:
  """The CRC register after feeding `data` (no pre/post inversion)."""
  table = _CRC_TABLE_LIST
  for byte in data:
    reg = table[(reg ^ byte) & 0xFF] ^ (reg >> 8)
  return reg


_BYTE_BITS = (np.arange(256)[:, None] >> np.arange(8)) & 1  # [byte value, bit]


class _Gf2Operator:
  """A linear map on 32-bit CRC registers, applied to numpy arrays through byte tables."""

  def __init__(self, columns: np.ndarray):
    self.columns = np.asarray(columns, np.uint32)  # columns[j] = image of 1 << j
    # tables[k][b] = image of (b << 8k): the xor of the columns of b's set bits.
    self._tables = [
      np.bitwise_xor.reduce(
        np.where(_BYTE_BITS, self.columns[8 * k : 8 * k + 8], 0), axis=1
      ).astype(np.uint32)
      for k in range(4)
    ]

  def __call__(self, v):
    v = np.asarray(v, np.uint32)
    t = self._tables
    return t[0][v & 0xFF] ^ t[1][(v >> 8) & 0xFF] ^ t[2][(v >> 16) & 0xFF] ^ t[3][v >> 24]

  def then(self, other: "_Gf2Operator") -> "_Gf2Operator":
    """The map `other(self(x))`."""
    return _Gf2Operator(other(self.columns))


_UNIT = np.uint32(1) << np.arange(32, dtype=np.uint32)
# _ZERO_POWERS[k] feeds 2**k zero bytes; grown on demand.
_ZERO_POWERS = [_Gf2Operator(_CRC_TABLE[_UNIT & 0xFF] ^ (_UNIT >> 8))]


def _zero_bytes_operator(n: int) -> _Gf2Operator:
  """The map reg -> register after feeding `n` zero bytes (linear in reg)."""
  result = _Gf2Operator(_UNIT)
  k = 0
  while n:
    if k == len(_ZERO_POWERS):
      _ZERO_POWERS.append(_ZERO_POWERS[-1].then(_ZERO_POWERS[-1]))
    if n & 1:
      result = result.then(_ZERO_POWERS[k])
    n >>= 1
    k += 1
  return result


def _slice_by_4_tables() -> list[np.ndarray]:
  # tables[k][b]: register after byte b followed by k zero bytes.
  tables = [_CRC_TABLE]
  for _ in range(3):
    tables.append((tables[-1] >> 8) ^ _CRC_TABLE[tables[-1] & 0xFF])
  return tables


_CRC_TABLES_4 = _slice_by_4_tables()


def _raw_crc(data: np.ndarray) -> int:
  """Register after feeding `data` (uint8) into a zero register; vectorized over lanes.

  The CRC is linear, so the bytes are cut into equal lanes that advance in lockstep (table
  lookups on one little-endian word of every lane at a time, "slicing by 4"), and the lane
  registers are combined pairwise: raw(A + B) = Z_|B|(raw(A)) ^ raw(B), with Z_n "feed n zero
  bytes".
  """
  n = data.size
  if n < (1 << 16):
    return _raw_crc_small(data.tobytes())
  lanes = min(1 << 13, 1 << (n // 64).bit_length() - 1)
  length = n // lanes // 4 * 4
  words = data[: lanes * length].reshape(lanes, length).view("<u4")
  t0, t1, t2, t3 = _CRC_TABLES_4
  reg = np.zeros(lanes, np.uint32)
  for start in range(0, words.shape[1], 64):
    # A contiguous copy of a band of columns keeps the per-step gathers cache friendly.
    for word in np.ascontiguousarray(words[:, start : start + 64].T):
      reg ^= word
      nxt = t3[reg & 0xFF]
      nxt ^= t2[(reg >> 8) & 0xFF]
      nxt ^= t1[(reg >> 16) & 0xFF]
      nxt ^= t0[reg >> 24]
      reg = nxt
  span = length
  while reg.size > 1:
    reg = _zero_bytes_operator(span)(reg[0::2]) ^ reg[1::2]
    span *= 2
  tail = data[lanes * length :]
  return int(_zero_bytes_operator(tail.size)(reg)[0]) ^ _raw_crc(tail)


def crc32c(data, crc: int = 0) -> int:
  """CRC32C of `data` (bytes or a uint8 array), extending `crc` like TF's crc32c::Extend."""
  data = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
  data = data.reshape(-1).view(np.uint8)
  start = (crc ^ 0xFFFFFFFF) & 0xFFFFFFFF
  if data.size < (1 << 16):
    return _raw_crc_small(data.tobytes(), start) ^ 0xFFFFFFFF
  reg = int(_zero_bytes_operator(data.size)(np.uint32(start))) ^ _raw_crc(data)
  return reg ^ 0xFFFFFFFF


def unmask_crc(masked: int) -> int:
  """Inverse of TF's crc32c::Mask (rotate right by 15 bits, plus a constant)."""
  rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
  return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF
