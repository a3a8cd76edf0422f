"""The block sampler: each host reads a year's examples as one run of consecutive examples of
its table, and an example's batch-mates are drawn again every pass.

`MixtureSampler` draws each example uniformly within its (source, year) slice: on an object
store that is one request per example (~10K GETs per step across a pod). Here a row has a
fixed number of candidate draws, `per_row`, whose sources and years are exactly
`MixtureSampler.slots` (today's mixture, draw by draw); what changes is which example of the
slice a candidate reads.

Blocks of `BLOCK_STEPS` consecutive steps share their reads. In block b, the candidates of the
whole global batch over its steps that fall in slice j are numbered: row by row (rows are
contiguous per host), and within a row in an order hashed from (seed, b, row, step, k); rank q
reads example `start(j, b) + q` of the table. So the candidates of a host's rows over the
block's steps are one run of consecutive examples per slice (two requests:
`tlm.store.store.Table.token_block`), read once for the block, whatever the number of rows
(`tlm.input.packing.Batcher` keeps the runs for the block's other steps), and a step's
candidates of a year are spread over its block's window, one in `BLOCK_STEPS`. Everything is
a pure function of (seed, step) computed by every host from hashes, on any number of hosts.

Where the window lies (Megatron's and MaxText's epoch-shuffled index, at the granularity of a
block): each slice's table is cut into windows of `allot(j)` examples, `allot` being a bound on
the candidates a block draws from it (the mean plus six standard deviations); pass p of the
table visits its windows in a permutation of (seed, j, p), one per block, with the window
boundaries shifted by a (seed, j, p)-hashed offset, so that over passes every example is
drawn. The permutation and the shift are counter-based (`tlm.counter_hash`: the same numbers
on every NumPy release), never a `np.random.Generator` stream. Within a pass no example is
read twice; a pass trains on the candidates that fit (the packer keeps, as before, each row's
draws up to the first that does not fit), about half the window. A rank beyond `allot`
(probability below 1e-9 per block and slice) wraps within the window. A table smaller than a
window is read cyclically.

Batch-mates between passes: two examples of a year drawn at the same step of one pass were in
one block window (of ~`BLOCK_STEPS` steps' candidates); in the next pass they fall in one
window again about as often as before (the windows are contiguous runs, shifted), but at the
same step of it only one time in `BLOCK_STEPS`, since each row's order within the block is
drawn again: the share of batch-mates kept from pass to pass is about 1 / `BLOCK_STEPS` of a
sampler whose steps read contiguous windows (measured: benchmarks/batch_mates.py,
docs/benchmarks.md).

The examples within a window keep the store's order. A store shuffled at build time
(`--shuffle_seed`) or afterwards (`--mode=shuffle_store`: `tlm.store.store_shuffle`) holds
each table in a seeded order, so a window is a uniform sample of its year; in corpus order (the
default build, and every store built before the option) a window is a few hundred consecutive
articles, which `tlm.input.mixture` refuses (`MixtureSampler.corpus_order_stores`) unless
`data.allow_corpus_order` is set.
"""

import threading
from collections import OrderedDict

import numpy as np

from tlm.counter_hash import chain, permutation
from tlm.input.sampling import MixtureSampler

SIGMAS = 6.0  # the allotment's margin over the mean candidates per slice and block
# Steps whose candidates share one read per slice and host: the batch-mates a step keeps from
# one pass to the next are ~1 / BLOCK_STEPS of a per-step window's (<= 10% asks for >= 10),
# and a host holds a block's runs (at the paper's batch on 4 hosts, 16 steps: ~3.4 MB read of
# the synthetic world's short examples, a few times that of news).
BLOCK_STEPS = 16
# Candidates a row gets beyond the examples of mean length it holds (rounded up): every
# candidate is read, and a row stops at its last one. Measured on the synthetic world at
# 128 + 32 tokens (5.9 such examples, 5.2 placed a row): 7 candidates, 4% of the rows stop at
# the 7th where the per-example sampler would place an 8th, packing efficiency 0.853 against
# 0.854, the candidates' data 1.33x the examples placed.
EXTRA_DRAWS = 1
DEFAULT_DRAWS = 8  # without a tokenized table to size examples by
VERSION = 2  # the draws' definition, recorded in a checkpoint (1: per-step windows, NumPy's)
# Lanes of the counter-based hashes (independent numbers from one key).
_LANE_ORDER, _LANE_WINDOWS, _LANE_SHIFT = 11, 12, 13
_CACHED_BLOCKS = 4  # a prefetcher builds steps of at most two blocks at once


def draws_per_row(means, input_length: int, target_length: int, prefix_ids: int = 0) -> int:
  """Candidate draws per row: the examples of the tokenized slices' mean lengths (`means`:
  (mean input ids, mean target ids, examples sampled) of each, from a sample of its first
  examples: `MixtureSampler.mean_lengths`; EOS and the time prefix's `prefix_ids` added) that
  a row holds, the tighter of the encoder and the decoder, rounded up, plus `EXTRA_DRAWS`;
  within [2, 64] (`DEFAULT_DRAWS` without a tokenized slice). Every host reads the same
  samples, so every host derives the same number."""
  if not means:
    return DEFAULT_DRAWS
  n = sum(m[2] for m in means)
  mean_in = sum(m[0] * m[2] for m in means) / n + 1 + prefix_ids
  mean_tg = sum(m[1] * m[2] for m in means) / n + 1
  per_row = min(input_length / mean_in, target_length / mean_tg)
  return int(min(64, max(2, np.ceil(per_row) + EXTRA_DRAWS)))


class BlockSampler:
  """Which example each candidate draw (step, row, k < per_row) reads.

  Args:
    sampler: the mixture (its sources, years, seed and slices).
    rows: rows of the global batch.
    per_row: candidate draws per row.
    steps: steps per block (`BLOCK_STEPS`).
  """

  def __init__(self, sampler: MixtureSampler, rows: int, per_row: int, steps: int = BLOCK_STEPS):
    if rows < 1 or per_row < 1 or steps < 1:
      raise ValueError(f"rows, per_row and steps must be >= 1, got {rows}, {per_row}, {steps}")
    self.sampler, self.rows, self.per_row, self.steps = sampler, rows, per_row, steps
    n = rows * per_row * steps
    p = sampler.slot_probs()
    mean = n * p
    self.allot = np.where(
      p > 0, np.ceil(mean + SIGMAS * np.sqrt(mean * (1 - p))).astype(np.int64) + 1, 0
    )
    self.sizes = sampler.slice_sizes()
    self._lock = threading.Lock()  # batches of several steps are built at once
    self._blocks: OrderedDict = OrderedDict()  # block -> (slot, index), [steps, rows, per_row]
    self._windows: dict[int, tuple[int, np.ndarray, int]] = {}  # slot -> (pass, order, shift)

  def record(self) -> dict:
    """What a checkpoint records of the draws' derived parameters (`tlm.train.data_state`)."""
    return {
      "version": VERSION,
      "block_draws": self.per_row,
      "block_steps": self.steps,
      "allot": self.allot.tolist(),
      "sizes": self.sizes.tolist(),
    }

  def pass_steps(self, slot: int) -> int:
    """Steps of one pass over slice `slot`'s table (a table smaller than a window: 0)."""
    allot, size = int(self.allot[slot]), int(self.sizes[slot])
    return (size // allot) * self.steps if allot else 0

  def _window(self, slot: int, block: int) -> int:
    """The first example of the window that slice `slot` reads in `block`."""
    allot, size = int(self.allot[slot]), int(self.sizes[slot])
    count = size // allot
    pass_, within = divmod(block, count)
    cached = self._windows.get(slot)
    if cached is None or cached[0] != pass_:
      key = self.sampler.key
      order = permutation(chain(key, _LANE_WINDOWS, slot, pass_), count)
      shift = int(chain(key, _LANE_SHIFT, slot, pass_) % np.uint64(allot))
      cached = self._windows[slot] = (pass_, order, shift)  # one pass per slot: a few KB
    _, order, shift = cached
    return int(order[within]) * allot + shift

  def _layout(self, block: int) -> tuple[np.ndarray, np.ndarray]:
    """(slot, index) of every candidate of `block`, each [steps, rows, per_row]."""
    t = np.arange(self.steps)[:, None, None]
    rows = np.arange(self.rows)[None, :, None]
    ks = np.arange(self.per_row)[None, None, :]
    slot = self.sampler.slots(block * self.steps + t, rows, ks).astype(np.int64)
    h = chain(self.sampler.key, _LANE_ORDER, block, rows, t, ks)
    shape = slot.shape
    rows, flat, h = np.broadcast_to(rows, shape).ravel(), slot.ravel(), h.ravel()
    # By slice, then row (a host's rows are contiguous), then the hashed order within the row.
    order = np.lexsort((h, rows, flat))
    grouped = flat[order]
    rank = np.empty_like(flat)
    rank[order] = np.arange(flat.size) - np.searchsorted(grouped, grouped, side="left")
    index = np.empty_like(flat)
    for j in np.unique(flat).tolist():
      sel = flat == j
      allot, size = int(self.allot[j]), int(self.sizes[j])
      q = rank[sel] % allot
      if size >= allot:
        index[sel] = (self._window(j, block) + q) % size
      else:  # a table smaller than a block's window: read cyclically
        index[sel] = (block * allot + q) % size
    return slot, index.reshape(shape)

  def _block(self, block: int) -> tuple[np.ndarray, np.ndarray]:
    with self._lock:  # one layout per block, whichever thread asks first computes it
      got = self._blocks.get(block)
      if got is None:
        got = self._blocks[block] = self._layout(block)
        while len(self._blocks) > _CACHED_BLOCKS:
          self._blocks.popitem(last=False)
      return got

  def draws(self, step: int) -> tuple[np.ndarray, np.ndarray]:
    """The slice and the example index of every candidate of the global batch at `step`.

    Returns:
      (slot, index), each int64 `[rows, per_row]`: the candidate reads example `index` of the
      sampler's slice `slot`.
    """
    block, t = divmod(int(step), self.steps)
    slot, index = self._block(block)
    return slot[t], index[t]

  def block_indices(self, step: int, rows: np.ndarray) -> dict[int, np.ndarray]:
    """Per slice, the sorted example indices that `rows` draw over the block of `step`: what
    a host reads once for the block's steps (one run per slice, bar a wrap at the table's
    end)."""
    slot, index = self._block(int(step) // self.steps)
    slot, index = slot[:, rows].ravel(), index[:, rows].ravel()
    order = np.lexsort((index, slot))
    slot, index = slot[order], index[order]
    cut = np.flatnonzero(np.diff(slot)) + 1
    return {
      int(s[0]): np.unique(i) for s, i in zip(np.split(slot, cut), np.split(index, cut)) if s.size
    }


def runs(index: np.ndarray, max_gap: int) -> list[tuple[int, int]]:
  """Sorted unique example indices as [lo, hi) runs, bridging gaps of up to `max_gap`
  (reading a few unneeded examples costs less than another request)."""
  index = np.unique(index)
  if not index.size:
    return []
  cut = np.flatnonzero(np.diff(index) > max_gap + 1) + 1
  return [(int(part[0]), int(part[-1]) + 1) for part in np.split(index, cut)]
