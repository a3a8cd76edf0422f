"""The store's optional shuffled order (`--shuffle_seed`): each table sorted by a 64-bit hash.

The block sampler (`tlm.input.block_sampling`) reads a step's examples of a year as one window
of consecutive examples; in corpus order they come from a few hundred consecutive articles.
A build with a shuffle seed writes every table in the order of its examples' keys: `key`, a
64-bit BLAKE2b of (seed, year, the article's rank within its year, the example's place in its
article). These inputs do not depend on how the corpus was cut into chunks, so the order is the
same for the local builder with any number of workers and for the Beam pipeline; a window of
the table is a uniform sample of the year.

The sort never holds a table in one worker's memory (the paper's years are ~40M examples,
GBs), in two passes:
1. `KeyedPart` (a chunk's part): the chunk's examples sorted by key (its data staged in an
   unnamed local temporary file, its lengths and keys in memory: 32 bytes per example of the
   chunk), written with a `.key` file of the sorted keys (uint64).
2. `merge_shuffled` (a table): B buckets, bucket b holding the keys in [b, b+1) * 2^64 / B,
   with B from the table's size so that a bucket holds about `BUCKET_BYTES` of data. Bucket by
   bucket, each part's slice of it (three ranged reads: its lengths, keys and data) is
   gathered and sorted by key in memory. Concatenating the sorted buckets is the whole table
   sorted by key, whatever B: B bounds memory and never changes the bytes. Equal keys
   (probability ~n^2 / 2^65) keep corpus order: parts are gathered in chunk order and sorted
   stably.
Both only read their inputs and write through `StagedFile`, so a unit run twice, or again
after a failure, writes the same files.
"""

import array
import hashlib
import math
import mmap
import struct
import tempfile

import numpy as np

from tlm import storage
from tlm.store.store import OFFSET_DTYPE, file_name
from tlm.store.store_files import HashedFile, StagedFile

KEY_DTYPE = np.dtype("<u8")
# Data of a table gathered in memory at once by a shuffled merge: the merge holds about this
# (the bucket as read; it is written out in order in small groups), whatever the table's size.
BUCKET_BYTES = 64 << 20
_WRITE_BYTES = 1 << 22
_WRITE_EXAMPLES = 1 << 14


def order_entry(seed: int | None) -> dict | None:
  """The manifest's "order" of a build: None (no entry: corpus order, as stores always were)
  or {"kind": "shuffled", "seed": seed}."""
  return None if seed is None else {"kind": "shuffled", "seed": int(seed)}


def key(seed: int, year: int, article: int, example: int) -> int:
  """The sort key of an example: its article's rank within its year and its place among the
  article's examples (a stable identity, whatever the chunking), hashed with the seed."""
  data = struct.pack("<qqqq", seed, year, article, example)
  return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class KeyedPart:
  """A part (`tlm.store.store_write._Part`) written in the order of its examples' keys, with a
  `<prefix>.key` of the sorted keys. Its data is staged locally until `close` sorts it."""

  def __init__(self, prefix: str):
    self.prefix = prefix
    self._tmp = tempfile.TemporaryFile()  # unnamed: gone with the process, whatever happens
    # 32 bytes per example of the chunk (typed arrays, not lists of Python ints: ~5x less).
    self._sizes = array.array("q")  # bytes per example
    self._lens = array.array("q")
    self._keys = array.array("Q")

  def add(self, inputs: bytes, targets: bytes, n_in: int, n_tg: int, key: int) -> None:
    self._tmp.write(inputs)
    self._tmp.write(targets)
    self._sizes.append(len(inputs) + len(targets))
    self._lens.append(n_in)
    self._lens.append(n_tg)
    self._keys.append(key)

  def close(self) -> None:
    keys = np.frombuffer(self._keys, np.uint64).astype(KEY_DTYPE)
    order = np.argsort(keys, kind="stable")
    sizes = np.frombuffer(self._sizes, np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    self._tmp.flush()
    files = [StagedFile(self.prefix + ext) for ext in (".bin", ".len", ".key")]
    try:
      total = int(sizes.sum())
      view = mmap.mmap(self._tmp.fileno(), total, access=mmap.ACCESS_READ) if total else b""
      try:
        pending, size = [], 0
        for i in order.tolist():
          pending.append(view[starts[i] : starts[i] + sizes[i]])
          size += int(sizes[i])
          if size >= _WRITE_BYTES:
            files[0].write(b"".join(pending))
            pending, size = [], 0
        files[0].write(b"".join(pending))
      finally:
        if total:
          view.close()
      lens = np.frombuffer(self._lens, np.int64).reshape(-1, 2)[order]
      files[1].write(lens.astype(OFFSET_DTYPE).tobytes())
      files[2].write(keys[order].tobytes())
    except BaseException:
      for f in files:
        f.abort()
      raise
    finally:
      self._tmp.close()
    for f in files:
      f.close()

  def abort(self) -> None:
    self._tmp.close()


def _read_range(path: str, start: int, stop: int) -> bytes:
  if stop <= start:
    return b""
  with storage.open_file(path, "rb") as f:
    f.seek(start)
    data = f.read(stop - start)
  if len(data) != stop - start:
    raise OSError(f"{path}: short read of bytes [{start}, {stop})")
  return data


def bucket_count(table_bytes: int, bucket_bytes: int) -> int:
  return max(1, math.ceil(table_bytes / max(1, bucket_bytes)))


def bucket_bounds(buckets: int) -> np.ndarray:
  """The first key of buckets 1..B-1 (bucket b holds keys in [b, b+1) * 2^64 / B)."""
  return np.array([-(-(b << 64) // buckets) for b in range(1, buckets)], KEY_DTYPE)


def merge_shuffled(
  out_dir: str,
  split: str,
  year: int,
  field: str,
  itemsize: int,
  prefixes: list[str],
  bucket_bytes: int = BUCKET_BYTES,
) -> dict:
  """`tlm.store.store_write.merge_table` for keyed parts: the table in key order.

  Returns:
    As `merge_table`, and "buckets": how many the table was gathered in.
  """
  sizes = [storage.getsize(p + ".bin") for p in prefixes]
  buckets = bucket_count(sum(sizes), bucket_bytes)
  bounds = bucket_bounds(buckets)
  # Per part: where each bucket starts, in examples and in elements (B + 1 of each).
  starts = []
  for prefix, size in zip(prefixes, sizes):
    keys = np.frombuffer(storage.read_bytes(prefix + ".key"), KEY_DTYPE)
    lens = np.frombuffer(storage.read_bytes(prefix + ".len"), OFFSET_DTYPE).reshape(-1, 2)
    if len(keys) != len(lens) or np.any(keys[1:] < keys[:-1]):
      raise OSError(f"{prefix}.key: not the sorted keys of its {len(lens)} examples")
    if int(lens.sum()) * itemsize != size:
      raise OSError(f"{prefix}.bin holds {size} bytes, its lengths say {lens.sum()} items")
    cut = np.concatenate([[0], np.searchsorted(keys, bounds, side="left"), [len(keys)]])
    elements = np.concatenate([[0], np.cumsum(lens.sum(axis=1))])
    starts.append((cut, elements[cut]))
  bin_name = file_name(split, year, field, "bin")
  idx_name = file_name(split, year, field, "idx")
  data = HashedFile(storage.join(out_dir, bin_name))
  index = HashedFile(storage.join(out_dir, idx_name))
  try:
    index.write(np.zeros(1, OFFSET_DTYPE).tobytes())
    base, examples = 0, 0
    for b in range(buckets):
      keys, lens, ranges = [], [], []
      for prefix, (cut, elements) in zip(prefixes, starts):
        e0, e1 = int(cut[b]), int(cut[b + 1])
        if e0 == e1:
          continue
        keys.append(np.frombuffer(_read_range(prefix + ".key", 8 * e0, 8 * e1), KEY_DTYPE))
        part_lens = _read_range(prefix + ".len", 16 * e0, 16 * e1)
        lens.append(np.frombuffer(part_lens, OFFSET_DTYPE).reshape(-1, 2))
        ranges.append(
          (prefix + ".bin", int(elements[b]) * itemsize, int(elements[b + 1]) * itemsize)
        )
      if not keys:
        continue
      bucket_keys, bucket_lens = np.concatenate(keys), np.concatenate(lens)
      # The bucket's data read straight into one buffer (no second copy while it is joined).
      blob = memoryview(bytearray(sum(x1 - x0 for _, x0, x1 in ranges)))
      at = 0
      for path, x0, x1 in ranges:
        blob[at : at + x1 - x0] = _read_range(path, x0, x1)
        at += x1 - x0
      ends = np.cumsum(bucket_lens.sum(axis=1) * itemsize)
      firsts = ends - bucket_lens.sum(axis=1) * itemsize
      order = np.argsort(bucket_keys, kind="stable")
      # Written in groups, so that the slices in flight stay small beside the bucket.
      for g in range(0, len(order), _WRITE_EXAMPLES):
        group = order[g : g + _WRITE_EXAMPLES]
        spans = zip(firsts[group].tolist(), ends[group].tolist())
        data.write(b"".join(blob[a:z] for a, z in spans))
      del blob
      offsets = base + np.cumsum(bucket_lens[order].ravel())
      index.write(offsets.astype(OFFSET_DTYPE).tobytes())
      base = int(offsets[-1])
      examples += len(order)
  except BaseException:
    data.abort()
    index.abort()
    raise
  files = {bin_name: data.close(), idx_name: index.close()}
  return {"examples": examples, "files": files, "buckets": buckets}
