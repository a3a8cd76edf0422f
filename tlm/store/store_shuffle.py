"""The store's shuffled order: each table sorted by a seeded hash of its examples' positions.

The block sampler (`tlm.input.block_sampling`) reads a step's examples of a year as runs of
consecutive examples; in corpus order they come from a few hundred consecutive articles. A
shuffled table holds the corpus-order table's examples sorted by `keys`: a counter-based hash
(`tlm.counter_hash.chain`) of (seed, split, year, the example's position in the corpus-order
table). That position is known to a build (its parts, concatenated in chunk order, are the
corpus-order table) and to a store already written in corpus order, so `build_ssm
--shuffle_seed=N` and `--mode=shuffle_store` (`tlm.store.store_reorder`) write the same bytes,
for any chunking, number of workers or engine. The keys of one table are distinct (the hash
is a bijection of the position), so no tie is broken by the sort; a window of the table is a
uniform sample of its year. The manifest says `"order": {"kind": "shuffled", "seed": N,
"version": 2}`; stores shuffled before this key existed (no "version": 1) sorted by a hash of
each example's article and place in it, which a store does not record.

The sort never holds a table in memory (the paper's years are ~40M examples, GBs), in two
stages, each only reading its inputs and writing through `StagedFile` (a unit run twice, or
again after a failure, writes the same files):
1. `key_runs`: the corpus-order table, given as runs (a build's parts, or the table of a
   store), is cut into slices of about `SLICE_BYTES`; each slice is read, sorted by key in
   memory and written as a keyed part (`<prefix>.bin`, `.len`, `.key`: data, lengths and keys
   in key order; `.key` last, so that a part whose `.key` exists is whole and is not redone).
2. `merge_shuffled`: B buckets, bucket b holding the keys in [b, b+1) * 2^64 / B, with B from
   the table's size so that a bucket holds about `BUCKET_BYTES` of data. Bucket by bucket,
   each part's slice of it (its keys, lengths and data: three byte ranges) is read, every
   range of the bucket at once through the ranged reader (`tlm.store.ranged`: concurrent on an
   object store), the next bucket's reads in flight while this one is sorted and written.
   Concatenating the sorted buckets is the whole table sorted by key, whatever B.
Memory: a slice in stage 1; two buckets' data and ~105 bytes per example of them in stage 2.
"""

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tlm import storage
from tlm.counter_hash import chain
from tlm.data.formatting import SPLITS
from tlm.errors import DataError
from tlm.store.ranged import RangeReader
from tlm.store.store import OFFSET_DTYPE, ORDER_VERSION, file_name
from tlm.store.store_files import HashedFile, StagedFile

KEY_DTYPE = np.dtype("<u8")
# Data of a table gathered in memory at once by a shuffled merge (a bucket; two are held: the
# one being written and the next one being read), whatever the table's size.
BUCKET_BYTES = 64 << 20
# Data of a corpus-order slice sorted in memory at once into a keyed part.
SLICE_BYTES = 64 << 20
# Ranged reads in flight at once (an object store's requests mostly wait; gcsfs keeps 100
# connections per process).
READ_THREADS = 32
_WRITE_BYTES = 1 << 22
_WRITE_EXAMPLES = 1 << 14


def order_entry(seed: int | None) -> dict | None:
  """The manifest's "order" of a build: None (no entry: corpus order, as stores always were)
  or {"kind": "shuffled", "seed": seed, "version": ORDER_VERSION}."""
  if seed is None:
    return None
  return {"kind": "shuffled", "seed": int(seed), "version": ORDER_VERSION}


def keys(seed: int, split: str, year: int, first: int, count: int) -> np.ndarray:
  """The sort keys (uint64) of examples first..first+count-1 of the corpus-order table
  (split, year): distinct within a table, a pure function of the seed and the positions."""
  positions = np.arange(first, first + count, dtype=np.uint64)
  return chain(np.uint64(int(seed) % 2**64), SPLITS.index(split), int(year), positions)


# ---- stage 1: corpus-order runs into keyed parts ------------------------------------------


def _read_range(path: str, start: int, stop: int) -> bytes:
  """Bytes [start, stop) of a file, local or remote (`RangeReader`: retried remotely)."""
  if stop <= start:
    return b""
  reader = RangeReader(path)
  try:
    data = reader.read([start], [stop])[0]
  finally:
    reader.close()
  if len(data) != stop - start:
    raise OSError(f"{path}: short read of bytes [{start}, {stop})")
  return data


def _cuts(count: int, data_bytes: int, slice_bytes: int) -> list[tuple[int, int]]:
  """[lo, hi) example ranges of about `slice_bytes` of data each (by the mean size)."""
  pieces = max(1, min(count, math.ceil(data_bytes / max(1, slice_bytes))))
  bounds = [count * i // pieces for i in range(pieces + 1)]
  return [(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]


class PartRun:
  """A build's part (`tlm.store.store_write`): `<prefix>.bin` and its lengths `<prefix>.len`."""

  def __init__(self, prefix: str):
    self.prefix = prefix
    self.count = storage.getsize(prefix + ".len") // 16
    self.data_bytes = storage.getsize(prefix + ".bin")

  def slices(self, itemsize: int, slice_bytes: int) -> Iterator[tuple[int, int, np.ndarray, bytes]]:
    """(lo, hi, lengths [n, 2], data) of each slice, in order."""
    at = 0
    for lo, hi in _cuts(self.count, self.data_bytes, slice_bytes):
      raw = _read_range(self.prefix + ".len", 16 * lo, 16 * hi)
      lens = np.frombuffer(raw, OFFSET_DTYPE).reshape(-1, 2).astype(np.int64)
      size = int(lens.sum()) * itemsize
      yield lo, hi, lens, _read_range(self.prefix + ".bin", at, at + size)
      at += size
    if at != self.data_bytes:
      raise OSError(f"{self.prefix}.bin holds {self.data_bytes} bytes, its lengths say {at}")


class TableRun:
  """One field of a table of a store in corpus order: its `.bin` and `.idx` (read as hostile:
  the offsets of each slice are checked before its data is read)."""

  def __init__(self, bin_path: str, idx_path: str, count: int, data_bytes: int):
    self.bin_path, self.idx_path = bin_path, idx_path
    self.count, self.data_bytes = count, data_bytes

  def slices(self, itemsize: int, slice_bytes: int) -> Iterator[tuple[int, int, np.ndarray, bytes]]:
    last = 0
    for lo, hi in _cuts(self.count, self.data_bytes, slice_bytes):
      raw = _read_range(self.idx_path, 16 * lo, 16 * hi + 8)
      o = np.frombuffer(raw, OFFSET_DTYPE).astype(np.int64)
      end = self.data_bytes // itemsize
      if (
        o[0] != last or np.any(np.diff(o) < 0) or o[-1] > end or (hi == self.count and o[-1] != end)
      ):
        raise DataError(
          f"corrupt index: offsets of examples [{lo}, {hi}) decrease or leave the data",
          self.idx_path,
        )
      last = int(o[-1])
      lens = np.stack([o[1::2] - o[0:-1:2], o[2::2] - o[1::2]], axis=1)
      yield lo, hi, lens, _read_range(self.bin_path, int(o[0]) * itemsize, int(o[-1]) * itemsize)


def _write_sorted(path: str, data, firsts: np.ndarray, ends: np.ndarray, order, out=None) -> None:
  """Examples `order` of `data` (byte spans [firsts, ends)) to a StagedFile `path` (or `out`),
  in groups, so that the slices in flight stay small beside the data."""
  f = out if out is not None else StagedFile(path)
  try:
    for g in range(0, len(order), _WRITE_EXAMPLES):
      group = order[g : g + _WRITE_EXAMPLES]
      f.write(b"".join(data[a:z] for a, z in zip(firsts[group].tolist(), ends[group].tolist())))
  except BaseException:
    if out is None:
      f.abort()
    raise
  if out is None:
    f.close()


def _write_keyed(prefix: str, slice_keys: np.ndarray, lens: np.ndarray, data, itemsize: int):
  """A keyed part: the slice's examples, lengths and keys in key order (`.key` last)."""
  order = np.argsort(slice_keys, kind="stable")
  ends = np.cumsum(lens.sum(axis=1) * itemsize)
  _write_sorted(prefix + ".bin", memoryview(data), ends - lens.sum(axis=1) * itemsize, ends, order)
  with StagedFile(prefix + ".len") as f:
    f.write(lens[order].astype(OFFSET_DTYPE).tobytes())
  with StagedFile(prefix + ".key") as f:
    f.write(slice_keys[order].astype(KEY_DTYPE).tobytes())


def key_runs(
  runs: list,
  seed: int,
  split: str,
  year: int,
  itemsize: int,
  scratch: str,
  slice_bytes: int | None = None,
) -> list[str]:
  """Stage 1: the corpus-order table given by `runs` (`PartRun`s in chunk order, or one
  `TableRun`) as keyed parts under `scratch`; returns their prefixes. A part whose `.key`
  exists (written by an earlier, interrupted run with the same inputs) is kept. Slices hold
  about `slice_bytes` (default `SLICE_BYTES`) of data; the table written is the same for any."""
  slice_bytes = slice_bytes or SLICE_BYTES
  prefixes, first = [], 0
  for r, run in enumerate(runs):
    for s, (lo, hi, lens, data) in enumerate(run.slices(itemsize, slice_bytes)):
      prefix = storage.join(scratch, f"{r:06d}-{s:06d}")
      prefixes.append(prefix)
      if not storage.exists(prefix + ".key"):
        _write_keyed(prefix, keys(seed, split, year, first + lo, hi - lo), lens, data, itemsize)
    first += run.count
  return prefixes


# ---- stage 2: keyed parts merged in buckets ----------------------------------------------


def bucket_count(table_bytes: int, bucket_bytes: int) -> int:
  return max(1, math.ceil(table_bytes / max(1, bucket_bytes)))


def bucket_bounds(buckets: int) -> np.ndarray:
  """The first key of buckets 1..B-1 (bucket b holds keys in [b, b+1) * 2^64 / B)."""
  return np.array([-(-(b << 64) // buckets) for b in range(1, buckets)], KEY_DTYPE)


def _part_cuts(prefix: str, size: int, itemsize: int, bounds: np.ndarray):
  """Where each bucket starts in a keyed part: (examples, elements), B + 1 of each."""
  keys_ = np.frombuffer(storage.read_bytes(prefix + ".key"), KEY_DTYPE)
  lens = np.frombuffer(storage.read_bytes(prefix + ".len"), OFFSET_DTYPE).reshape(-1, 2)
  if len(keys_) != len(lens) or np.any(keys_[1:] < keys_[:-1]):
    raise OSError(f"{prefix}.key: not the sorted keys of its {len(lens)} examples")
  if int(lens.sum()) * itemsize != size:
    raise OSError(f"{prefix}.bin holds {size} bytes, its lengths say {lens.sum()} items")
  cut = np.concatenate([[0], np.searchsorted(keys_, bounds, side="left"), [len(keys_)]])
  elements = np.concatenate([[0], np.cumsum(lens.sum(axis=1))])
  return cut, elements[cut]


def merge_shuffled(
  out_dir: str,
  split: str,
  year: int,
  field: str,
  itemsize: int,
  prefixes: list[str],
  bucket_bytes: int = BUCKET_BYTES,
) -> dict:
  """Stage 2: `tlm.store.store_write.merge_table` for keyed parts: the table in key order.

  Returns:
    As `merge_table`, and "buckets": how many the table was gathered in.
  """
  bin_name = file_name(split, year, field, "bin")
  idx_name = file_name(split, year, field, "idx")
  with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="tlm-merge") as pool:
    sizes = list(pool.map(lambda p: storage.getsize(p + ".bin"), prefixes))
    buckets = bucket_count(sum(sizes), bucket_bytes)
    bounds = bucket_bounds(buckets)
    starts = list(pool.map(lambda a: _part_cuts(*a, itemsize, bounds), zip(prefixes, sizes)))

    def fetch(b: int) -> list:
      """The reads of bucket b, submitted: per part with examples in it, three futures."""
      out = []
      for prefix, (cut, elements) in zip(prefixes, starts):
        e0, e1 = int(cut[b]), int(cut[b + 1])
        if e0 < e1:
          x0, x1 = int(elements[b]) * itemsize, int(elements[b + 1]) * itemsize
          reads = ((".key", 8 * e0, 8 * e1), (".len", 16 * e0, 16 * e1), (".bin", x0, x1))
          out.append([pool.submit(_read_range, prefix + ext, a, z) for ext, a, z in reads])
      return out

    data = HashedFile(storage.join(out_dir, bin_name))
    index = HashedFile(storage.join(out_dir, idx_name))
    try:
      index.write(np.zeros(1, OFFSET_DTYPE).tobytes())
      base, examples = 0, 0
      pending = fetch(0)
      for b in range(buckets):
        got = [[f.result() for f in part] for part in pending]
        pending = fetch(b + 1) if b + 1 < buckets else []  # in flight while this one is sorted
        if not got:
          continue
        bucket_keys = np.concatenate([np.frombuffer(k, KEY_DTYPE) for k, _, _ in got])
        bucket_lens = np.concatenate(
          [np.frombuffer(n, OFFSET_DTYPE).reshape(-1, 2) for _, n, _ in got]
        )
        # One buffer, each part's bytes dropped once copied (no second copy of the bucket).
        blob, at = bytearray(sum(len(part[2]) for part in got)), 0
        for part in got:
          blob[at : at + len(part[2])] = part[2]
          at += len(part[2])
          part[2] = None
        del got
        ends = np.cumsum(bucket_lens.sum(axis=1) * itemsize)
        firsts = ends - bucket_lens.sum(axis=1) * itemsize
        order = np.argsort(bucket_keys, kind="stable")
        _write_sorted("", memoryview(blob), firsts, ends, order, out=data)
        del blob
        offsets = base + np.cumsum(bucket_lens[order].ravel())
        index.write(offsets.astype(OFFSET_DTYPE).tobytes())
        base = int(offsets[-1])
        examples += len(order)
    except BaseException:
      for part in pending:
        for f in part:
          f.cancel()
      data.abort()
      index.abort()
      raise
  files = {bin_name: data.close(), idx_name: index.close()}
  return {"examples": examples, "files": files, "buckets": buckets}


def shuffle_table(
  out_dir: str,
  split: str,
  year: int,
  field: str,
  itemsize: int,
  runs: list,
  seed: int,
  scratch: str,
  bucket_bytes: int = BUCKET_BYTES,
) -> dict:
  """One table field written in shuffled order from its corpus-order `runs`: stage 1 into
  keyed parts under `scratch`, then stage 2 into `out_dir` (`merge_shuffled`'s result)."""
  prefixes = key_runs(runs, seed, split, year, itemsize, scratch)
  return merge_shuffled(out_dir, split, year, field, itemsize, prefixes, bucket_bytes)
