"""One field of one table of the example store (`tlm.store.store`): its .bin data and .idx
offsets, read and checked.

The reads and the checks of a field apart from the store's layout and manifest: a file is
checked against the manifest's size at open; a small index whole at open, a large one by its
ends at open and by each run of offsets as it is read (so that start-up does not grow with the
corpus); the data in single examples (`read`) or runs of consecutive examples (`read_run`:
two requests, whatever the run's length), through `tlm.store.ranged` (retries on an object
store).
"""

import posixpath
from collections.abc import Iterable

import numpy as np

from tlm import safe_read, storage
from tlm.errors import DataError
from tlm.store import store_check
from tlm.store.ranged import RangeReader

OFFSET_DTYPE = np.dtype("<i8")
_CHUNK = 1 << 18  # offsets per read when checking an index (2 MB)
# An index up to this size (65,535 examples) is read whole and checked at open; a larger one
# by its ends at open and block by block as it is read (start-up then does not grow with it).
SMALL_INDEX_BYTES = 1 << 20


def _check_offsets(chunks: Iterable[np.ndarray], count: int, total: int, path: str) -> None:
  """Checks an index streamed in chunks: `count` offsets, 0 first, never decreasing, `total`
  last."""
  seen, last = 0, 0
  for chunk in chunks:
    if not chunk.size:
      continue
    if seen == 0 and chunk[0] != 0:
      raise DataError(f"corrupt index: first offset is {int(chunk[0])}, not 0", path)
    steps = np.diff(chunk, prepend=last)
    bad = np.flatnonzero(steps < 0)
    if bad.size:
      i = seen + int(bad[0])
      raise DataError(f"corrupt index: offset {i} decreases ({int(chunk[bad[0]])})", path)
    seen += chunk.size
    last = chunk[-1]
  if seen != count:
    raise DataError(f"truncated index: {seen} offsets, expected {count}", path)
  if last != total:
    raise DataError(
      f"corrupt index: last offset {int(last)} but the data file holds {total} elements", path
    )


class Field:
  """One field (text or tokens) of one table: its .bin data and .idx offsets."""

  def __init__(
    self,
    bin_path: str,
    idx_path: str,
    bin_bytes: int,
    idx_bytes: int,
    dtype,
    count: int,
    manifest_path: str,
  ):
    self.dtype = np.dtype(dtype).newbyteorder("<")
    self.bin_path, self.idx_path = bin_path, idx_path
    for path, want in ((bin_path, bin_bytes), (idx_path, idx_bytes)):
      try:
        have = safe_read.regular_size(path)
      except safe_read.NotARegularFile as e:
        raise DataError(f"{e.strerror} (listed in manifest.json)", path) from None
      except (FileNotFoundError, OSError):
        raise DataError("missing store file (listed in manifest.json)", path) from None
      if have != want:
        what = "truncated" if have < want else "longer than the manifest says"
        raise DataError(f"{what}: {have} bytes, manifest.json says {want}", path)
      store_check.check_inside(posixpath.dirname(manifest_path), path, manifest_path)
    if bin_bytes % self.dtype.itemsize:
      raise DataError(
        f"size {bin_bytes} is not a whole number of {self.dtype} elements", self.bin_path
      )
    if idx_bytes != 8 * (2 * count + 1):
      raise DataError(
        f"manifest: {count} examples need {8 * (2 * count + 1)} bytes of offsets", manifest_path
      )
    self.count = count
    self.total = bin_bytes // self.dtype.itemsize
    self._memory: np.ndarray | None = None  # a small remote index, held once checked
    self._index = RangeReader(self.idx_path)
    try:
      self._data = RangeReader(self.bin_path)
      self._check_at_open()
    except BaseException:
      self.close()
      raise

  def _check_at_open(self) -> None:
    """A small index whole (as `check_all`); a large one by its first and last offsets, the
    rest block by block as it is read, so that opening costs the same at any size."""
    n = 2 * self.count + 1
    if 8 * n > SMALL_INDEX_BYTES:
      first, last = (
        int(np.frombuffer(b, OFFSET_DTYPE)[0])
        for b in self._index.read([0, 8 * (n - 1)], [8, 8 * n])
      )
      if first != 0:
        raise DataError(f"corrupt index: first offset is {first}, not 0", self.idx_path)
      if last != self.total:
        raise DataError(
          f"corrupt index: last offset {last} but the data file holds {self.total} elements",
          self.idx_path,
        )
    elif self._index.remote:
      offsets = np.frombuffer(self._index.read([0], [8 * n])[0], OFFSET_DTYPE)
      _check_offsets([offsets], n, self.total, self.idx_path)
      self._memory = offsets
    else:
      self.check_all()

  def check_all(self) -> None:
    """Checks every offset, streamed in chunks (`--mode=check_store`; a small index at open)."""
    n = 2 * self.count + 1
    if not self._index.remote:
      with open(storage.local(self.idx_path), "rb") as f:
        _check_offsets(_read_chunks(f), n, self.total, self.idx_path)
      return
    step = 8 * _CHUNK
    chunks = (
      np.frombuffer(self._index.read([s], [min(s + step, 8 * n)])[0], OFFSET_DTYPE)
      for s in range(0, 8 * n, step)
    )
    _check_offsets(chunks, n, self.total, self.idx_path)

  def offsets_between(self, lo: int, hi: int) -> np.ndarray:
    """Offsets lo..hi-1 (int64): from the checked copy of a small remote index, or read."""
    if self._memory is not None:
      return self._memory[lo:hi].astype(np.int64)
    raw = self._index.read([8 * lo], [8 * hi])[0]
    if len(raw) != 8 * (hi - lo):
      raise DataError("index shorter than at open (changed while in use)", self.idx_path)
    return np.frombuffer(raw, OFFSET_DTYPE).astype(np.int64)

  def offsets(self, ids: np.ndarray) -> np.ndarray:
    """[len(ids), 3] offsets (inputs start, targets start, end) of examples `ids`."""
    ids = np.asarray(ids, np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= self.count):
      raise IndexError(f"example index out of range [0, {self.count})")
    if self._memory is not None:
      out = self._memory[2 * ids[:, None] + np.arange(3)].astype(np.int64)
    else:
      raw = self._index.read((16 * ids).tolist(), (16 * ids + 24).tolist())
      out = np.frombuffer(b"".join(raw), OFFSET_DTYPE).reshape(-1, 3).astype(np.int64)
    if out.shape[0] != ids.size:
      raise DataError("index shorter than at open (changed while in use)", self.idx_path)
    bad = (out[:, 0] > out[:, 1]) | (out[:, 1] > out[:, 2]) | (out[:, 0] < 0)
    if ids.size and (bad.any() or out[:, 2].max() > self.total):
      raise DataError(
        "corrupt index: an example's offsets decrease or leave the data file", self.idx_path
      )
    return out

  def read(self, ids: np.ndarray) -> tuple[list[bytes], np.ndarray]:
    """The raw bytes of examples `ids` (inputs then targets) and their offsets."""
    off = self.offsets(ids)
    size = self.dtype.itemsize
    raw = self._data.read((off[:, 0] * size).tolist(), (off[:, 2] * size).tolist())
    if any(len(r) != (e - s) * size for r, s, e in zip(raw, off[:, 0], off[:, 2])):
      raise DataError("data file shorter than at open (changed while in use)", self.bin_path)
    return raw, off

  def read_run(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Examples lo..hi-1 with two requests: their offsets (2(hi-lo)+1 of them, checked here:
    never decreasing, within the data file, 0 first and the data's length last at the
    table's ends) and their data as one range.

    Returns:
      (the data as an array of the field's dtype, [hi-lo, 3] offsets into it).
    """
    if not 0 <= lo < hi <= self.count:
      raise IndexError(f"examples [{lo}, {hi}) out of range [0, {self.count})")
    o = self.offsets_between(2 * lo, 2 * hi + 1)
    if (
      np.any(np.diff(o) < 0)
      or o[0] < 0
      or o[-1] > self.total
      or (lo == 0 and o[0] != 0)
      or (hi == self.count and o[-1] != self.total)
    ):
      raise DataError(
        f"corrupt index: offsets of examples [{lo}, {hi}) decrease or leave the data",
        self.idx_path,
      )
    size = self.dtype.itemsize
    raw = self._data.read([int(o[0]) * size], [int(o[-1]) * size])[0]
    if len(raw) != (o[-1] - o[0]) * size:
      raise DataError("data file shorter than at open (changed while in use)", self.bin_path)
    off = np.stack([o[0:-1:2], o[1::2], o[2::2]], axis=1) - o[0]
    return np.frombuffer(raw, self.dtype), off

  def close(self) -> None:
    for reader in ("_index", "_data"):
      if getattr(self, reader, None) is not None:
        getattr(self, reader).close()


def _read_chunks(f) -> Iterable[np.ndarray]:
  """A local index in chunks of `_CHUNK` offsets (a trailing partial offset is dropped: the
  count check then fails)."""
  while True:
    chunk = np.fromfile(f, OFFSET_DTYPE, _CHUNK)
    if not chunk.size:
      return
    yield chunk
