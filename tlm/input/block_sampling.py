"""The block sampler: a step's draws of one slice are consecutive examples of its table.

`MixtureSampler` draws each example uniformly within its (source, year) slice: on an object
store that is one request per example (~10K GETs per step across a pod). Here a row has a
fixed number of candidate draws, `per_row`, whose sources and years are exactly
`MixtureSampler.slots` (today's mixture, draw by draw); what changes is which example of the
slice a candidate reads. At step s the candidates of the whole global batch that fall in slice
j are numbered in row-major order (their rank: a pure function of (seed, s), computed by every
host from hashes alone), and rank q reads example `start(j, s) + q` of the table: the
candidates of a host's rows, which are contiguous rows, read one run of consecutive examples
per slice (two requests: `tlm.store.store.Table.token_run`), whatever the number of rows.

Where the run lies (Megatron's and MaxText's epoch-shuffled index, at the granularity of a
step): each slice's table is cut into windows of `allot(j)` examples, `allot` being a bound on
the candidates a step draws from it (the mean plus six standard deviations); pass p of the
table visits its windows in a permutation seeded with (seed, j, p), one per step, with the
window boundaries shifted by a (seed, j, p)-seeded offset, so that over passes every example
is drawn. Within a pass no example is read twice; a pass trains on the candidates that fit
(the packer keeps, as before, each row's draws up to the first that does not fit), about half
the window. A rank beyond `allot` (probability below 1e-9 per step and slice) wraps within the
window. A table smaller than a window is read cyclically.

The batch of a step is a pure function of (seed, step), on any number of hosts; resuming needs
the step alone. The examples within a window keep the store's order. A store built with
`--shuffle_seed` holds each table sorted by a seeded hash (`tlm.store.store_shuffle`), so a
window is a uniform sample of its year; in corpus order (the default build, and every store
built before) a step's examples of a year come from a few hundred consecutive articles, not
from the whole year (docs/paper_scale.md), and `corpus_order_warning` says so.
"""

import numpy as np

from tlm.input.sampling import MixtureSampler

SIGMAS = 6.0  # the allotment's margin over the mean candidates per slice and step
# Candidates a row gets beyond the examples of mean length it holds (rounded up): every
# candidate is read, and a row stops at its last one. Measured on the synthetic world at
# 128 + 32 tokens (5.9 such examples, 5.2 placed a row): 7 candidates, 4% of the rows stop at
# the 7th where the per-example sampler would place an 8th, packing efficiency 0.853 against
# 0.854, the candidates' data 1.33x the examples placed.
EXTRA_DRAWS = 1
DEFAULT_DRAWS = 8  # without a tokenized table to size examples by


def draws_per_row(tables, input_length: int, target_length: int, prefix_ids: int = 0) -> int:
  """Candidate draws per row: the examples of the tables' mean lengths (from a sample of each
  table's first examples: `Table.mean_lengths`; EOS and the time prefix's `prefix_ids` added)
  that a row holds, the tighter of the encoder and the decoder, rounded up, plus
  `EXTRA_DRAWS`; within [2, 64]. Every host reads the same samples, so every host derives the
  same number."""
  sized = [t for t in tables if t.has_tokens and len(t)]
  if not sized:
    return DEFAULT_DRAWS
  means = [t.mean_lengths() for t in sized]
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
  """

  def __init__(self, sampler: MixtureSampler, rows: int, per_row: int):
    if rows < 1 or per_row < 1:
      raise ValueError(f"rows and per_row must be >= 1, got {rows} and {per_row}")
    self.sampler, self.rows, self.per_row = sampler, rows, per_row
    n = rows * per_row
    p = sampler.slot_probs()
    mean = n * p
    self.allot = np.where(
      p > 0, np.ceil(mean + SIGMAS * np.sqrt(mean * (1 - p))).astype(np.int64) + 1, 0
    )
    self.sizes = np.array([len(s) for s in sampler.slices], np.int64)
    self._windows: dict[int, tuple[int, np.ndarray, int]] = {}  # slot -> (pass, order, shift)

  def _window(self, slot: int, step: int) -> tuple[int, int]:
    """(first example, length) of the window that slice `slot` reads at `step`."""
    allot, size = int(self.allot[slot]), int(self.sizes[slot])
    count = size // allot
    pass_, within = divmod(step, count)
    cached = self._windows.get(slot)
    if cached is None or cached[0] != pass_:
      rng = np.random.default_rng([self.sampler.key, slot, pass_])
      cached = (pass_, rng.permutation(count), int(rng.integers(allot)))
      self._windows[slot] = cached  # one pass per slot: a few KB (thread-safe: one store)
    _, order, shift = cached
    return int(order[within]) * allot + shift, allot

  def draws(self, step: int) -> tuple[np.ndarray, np.ndarray]:
    """The slice and the example index of every candidate of the global batch at `step`.

    Returns:
      (slot, index), each int64 `[rows, per_row]`: the candidate reads example `index` of
      `sampler.slices[slot]`.
    """
    shape = (self.rows, self.per_row)
    slot = self.sampler.slots(step, np.arange(self.rows)[:, None], np.arange(self.per_row)[None, :])
    flat = slot.ravel().astype(np.int64)
    order = np.argsort(flat, kind="stable")  # by slice, row-major within it
    grouped = flat[order]
    rank = np.empty_like(flat)
    rank[order] = np.arange(flat.size) - np.searchsorted(grouped, grouped, side="left")
    index = np.empty_like(flat)
    for j in np.unique(flat).tolist():
      sel = flat == j
      allot, size = int(self.allot[j]), int(self.sizes[j])
      q = rank[sel] % allot
      if size >= allot:
        start, _ = self._window(j, step)
        index[sel] = (start + q) % size
      else:  # a table smaller than a step's window: read cyclically
        index[sel] = (step * allot + q) % size
    return slot.astype(np.int64).reshape(shape), index.reshape(shape)


def corpus_order_warning(slices) -> str:
  """One line naming the stores in corpus order among `slices` ("" if none): their windows
  are runs of consecutive articles, and a rebuild with `--shuffle_seed` would fix that."""
  paths = sorted({t.path for t in slices if t.order == "corpus"})
  if not paths:
    return ""
  return (
    f"{', '.join(paths)}: example store in corpus order, so the block sampler reads each "
    "step's examples of a year from a few hundred consecutive articles; rebuild it with "
    "--mode=build_ssm --shuffle_seed=0 for windows that sample the whole year"
  )


def runs(index: np.ndarray, max_gap: int) -> list[tuple[int, int]]:
  """Sorted unique example indices as [lo, hi) runs, bridging gaps of up to `max_gap`
  (reading a few unneeded examples costs less than another request)."""
  index = np.unique(index)
  if not index.size:
    return []
  cut = np.flatnonzero(np.diff(index) > max_gap + 1) + 1
  return [(int(part[0]), int(part[-1]) + 1) for part in np.split(index, cut)]
