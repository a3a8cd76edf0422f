"""T5X-style packing of (inputs, targets) token sequences into fixed `[rows, length]` batches.

The examples a step's rows hold, read from their sources and laid out in T5X / seqio's packed
feature layout (`tlm.input.packed_rows`: EOS appended, trimmed, several examples a row told
apart by segment ids).

Unlike seqio's streaming packer, which carries an example that does not fit over to the next
row, `Batcher` fills each row from that row's own deterministic example stream (see
`tlm.input.sampling`) and drops the first example that does not fit: rows are then independent,
a process builds only its slice of the global batch, and resuming needs only the step. The
cost is a mild bias towards shorter examples among those trained on.
"""

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np

from tlm.data.conditioning import check_conditioning, format_input, prefix_ids
from tlm.errors import ConfigError
from tlm.input.block_sampling import BlockSampler, runs
from tlm.input.caches import LRU, RunCache
from tlm.input.packed_rows import pack_flat
from tlm.input.sampling import MixtureSampler
from tlm.token_ids import EOS_ID

# Reads of several slices at once, for several steps at once (object-store requests are mostly
# waiting; 8 steps of 9 years, two requests each, within gcsfs's 100 connections), shared by
# every batcher of the process; and the gap between needed examples that one run bridges.
_READS = ThreadPoolExecutor(72, thread_name_prefix="tlm-reads")
_RUN_GAP = 64


class _Drawn:
  """The examples one batch draws, each fetched once: their ids (untrimmed, without EOS)."""

  def __init__(self, fetch, input_length: int, target_length: int):
    self._fetch = fetch
    self._lengths = (input_length, target_length)
    self._known = np.zeros(0, np.int64)  # flat ids in fetch order
    self._raw: tuple[list, list] = ([], [])
    self._raw_len = (np.zeros(0, np.int64), np.zeros(0, np.int64))

  def _positions(self, ids: np.ndarray) -> np.ndarray:
    """Where each of `ids` is among the fetched examples (fetching the new ones)."""
    uniq, inverse = np.unique(ids.ravel(), return_inverse=True)
    pos = np.full(uniq.size, -1, np.int64)
    if self._known.size:
      order = np.argsort(self._known)
      at = np.minimum(np.searchsorted(self._known[order], uniq), order.size - 1)
      found = self._known[order][at] == uniq
      pos[found] = order[at[found]]
    new = uniq[pos < 0]
    if new.size:
      pos[pos < 0] = self._known.size + np.arange(new.size)
      pairs = self._fetch(new)
      for k in (0, 1):
        seqs = [pair[k] for pair in pairs]
        self._raw[k].extend(seqs)
        lens = np.array([s.size for s in seqs], np.int64)
        self._raw_len = tuple(
          np.concatenate([old, lens]) if i == k else old for i, old in enumerate(self._raw_len)
        )
      self._known = np.concatenate([self._known, new])
    return pos[inverse].reshape(ids.shape)

  def lengths(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lengths of the examples' inputs and targets once EOS is added and they are trimmed."""
    pos = self._positions(ids)
    return tuple(np.minimum(n[pos] + 1, length) for n, length in zip(self._raw_len, self._lengths))

  def gather(self, ids: np.ndarray):
    """(inputs concatenated, their lengths, targets concatenated, their lengths, examples cut):
    `with_eos` of each, vectorised."""
    pos = self._positions(ids)
    out, cut = [], np.zeros(pos.size, bool)
    for k, length in enumerate(self._lengths):
      raw = [self._raw[k][p] for p in pos.tolist()]
      flat = np.concatenate(raw).astype(np.int32) if raw else np.zeros(0, np.int32)
      n = self._raw_len[k][pos]
      keep = np.minimum(n, length - 1)  # ids kept; EOS ends each
      cut |= n > keep
      within = np.arange(int(keep.sum())) - np.repeat(np.cumsum(keep) - keep, keep)
      final = keep + 1
      result = np.full(int(final.sum()), EOS_ID, np.int32)
      result[np.repeat(np.cumsum(final) - final, keep) + within] = flat[
        np.repeat(np.cumsum(n) - n, keep) + within
      ]
      out += [result, final]
    return out[0], out[1], out[2], out[3], int(cut.sum())


@dataclasses.dataclass(frozen=True)
class BatchStats:
  """What went into one (local) batch.

  Attributes:
    examples: examples placed in the rows.
    truncated: examples whose inputs or targets were trimmed to the feature length.
    encoder_tokens: non-pad encoder tokens.
    decoder_tokens: non-pad decoder tokens.
    encoder_capacity: rows * input_length.
    decoder_capacity: rows * target_length.
  """

  examples: int
  truncated: int
  encoder_tokens: int
  decoder_tokens: int
  encoder_capacity: int
  decoder_capacity: int

  @property
  def encoder_efficiency(self) -> float:
    """Non-pad encoder tokens / encoder capacity."""
    return self.encoder_tokens / self.encoder_capacity

  @property
  def decoder_efficiency(self) -> float:
    """Non-pad decoder tokens / decoder capacity."""
    return self.decoder_tokens / self.decoder_capacity

  @property
  def efficiency(self) -> float:
    """Packing efficiency: non-pad tokens / capacity, encoder and decoder together."""
    return (self.encoder_tokens + self.decoder_tokens) / (
      self.encoder_capacity + self.decoder_capacity
    )


class Batcher:
  """Turns a sampler's per-row example streams into packed (or unpacked) token batches.

  Row r of step s holds draws (s, r, 0), (s, r, 1), ... up to, not including, the first that
  does not fit (packed), or draw (s, r, 0) alone (unpacked). A batch reads only the examples
  it draws, asking the sampler for them (`MixtureSampler.read`): from a tokenized table of the
  example store their ids, otherwise their text, tokenized through a cache of at most
  `cache_size` texts (least recently used out), and the ids of the last `cache_size` text
  examples drawn. The time prefix goes before every input in one function, `_input_ids`.
  Nothing else is kept between batches, so memory does not grow with the corpus or the steps.

  Args:
    sampler: the example source.
    vocab: anything with `encode(text) -> list[int]` (tlm.data.vocab.Vocabulary); a
      Vocabulary whose fingerprint matches, for tokenized tables.
    conditioning: the time input before every example ("temporal", "none", "in_text":
      `tlm.data.conditioning`).
    rows: rows of the global batch.
    input_length: encoder length.
    target_length: decoder length.
    packed: pack several examples per row (training) or one per row (the baseline).
    cache_size: texts, and examples, whose ids are cached.
    block_draws: 0 draws each example uniformly within its slice (`MixtureSampler`: one read
      per example); n > 0 gives each packed row n candidate draws read as runs of consecutive
      examples (`tlm.input.block_sampling`: two requests per slice per block of steps,
      whatever the rows; a block's runs are kept for its steps), a row holding at most n
      examples.

  Raises:
    DataError: a tokenized table of another vocabulary (naming its store's manifest).
  """

  def __init__(
    self,
    sampler: MixtureSampler,
    vocab,
    *,
    rows: int,
    input_length: int,
    target_length: int,
    conditioning: str = "temporal",
    packed: bool = True,
    cache_size: int = 1 << 17,
    block_draws: int = 0,
  ):
    if rows < 1 or input_length < 1 or target_length < 1:
      raise ConfigError(
        f"rows, input_length and target_length must be >= 1, got {rows}, {input_length}, "
        f"{target_length}"
      )
    self.sampler = sampler
    self.vocab = vocab
    self.conditioning = check_conditioning(conditioning)
    self.rows = rows
    self.input_length = input_length
    self.target_length = target_length
    self.packed = packed
    self._text_cache = LRU(cache_size)
    self._example_cache = LRU(cache_size)  # flat id -> (input ids, target ids)
    self._prefix_ids: dict[int, np.ndarray] = {}
    self._mean_per_row = 2.0  # guides only how many draws to hash at once; never the result
    self._blocks = BlockSampler(sampler, rows, block_draws) if block_draws and packed else None
    # A block's runs, for its steps (a run per slice, two where it wraps at a table's end): the
    # prefetcher builds steps of two blocks at once; four blocks' worth are kept. And which
    # runs a block's steps read, per block and set of rows.
    self._runs = RunCache(4 * sampler.slice_count)
    self._block_runs = LRU(16)
    sampler.check_vocabulary(vocab)

  def record(self) -> dict:
    """The sampler and its derived parameters, as a checkpoint records them."""
    if self._blocks is None:
      return {"kind": "example"}
    return {"kind": "block", **self._blocks.record()}

  def _encode(self, text: str) -> np.ndarray:
    ids = self._text_cache.get(text)
    if ids is None:
      ids = np.asarray(self.vocab.encode(text), np.int32)
      self._text_cache.put(text, ids)
    return ids

  def _input_ids(self, year: int, inputs: str | np.ndarray) -> np.ndarray:
    """The ids a model reads for an example's input of `year`: the time prefix before it, the
    one place it is applied. A text is formatted (`format_input`) and tokenized; stored ids
    get the prefix's ids in front (`prefix_ids`, tokenized once per year: the same ids, as
    `tlm.data.conditioning` says)."""
    if isinstance(inputs, str):
      return self._encode(format_input(inputs, year, self.conditioning))
    if year not in self._prefix_ids:
      self._prefix_ids[year] = prefix_ids(self.vocab, year, self.conditioning)
    prefix = self._prefix_ids[year]
    return np.concatenate([prefix, inputs]) if prefix.size else inputs

  def _fetch(self, flat_ids: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per flat id: its input ids (time prefix included) and target ids, untrimmed."""
    get = self._example_cache.get
    out: list = [get(f) for f in flat_ids.tolist()]
    missing = np.array([i for i, pair in enumerate(out) if pair is None], np.int64)
    if missing.size:
      for i, (pair, tokenized) in zip(missing.tolist(), self._read(flat_ids[missing])):
        out[i] = pair
        if not tokenized:  # stored ids cost two reads; only tokenizing is worth memory
          self._example_cache.put(int(flat_ids[i]), pair)
    return out

  def _read(self, flat_ids: np.ndarray) -> list[tuple[tuple[np.ndarray, np.ndarray], bool]]:
    """`_fetch` from the sampler (`MixtureSampler.read`), and whether each came tokenized from
    a store."""
    out: list = [None] * flat_ids.size
    sampler = self.sampler
    slots, index = sampler.locate(flat_ids)
    unique = np.unique(slots).tolist()
    raw = {}
    remote = [s for s in unique if sampler.is_remote(s)]
    if len(remote) > 1:  # the years' requests go out together
      reads = {s: _READS.submit(sampler.read, s, index[slots == s], self.vocab) for s in remote}
      raw = {s: f.result() for s, f in reads.items()}
    for slot in unique:
      sel = np.flatnonzero(slots == slot)
      got = raw[slot] if slot in raw else sampler.read(slot, index[sel], self.vocab)
      year, tokenized = sampler.slice_year(slot), sampler.is_tokenized(slot)
      for j, inputs, targets in zip(sel.tolist(), *got):
        ids = (self._input_ids(year, inputs), targets if tokenized else self._encode(targets))
        out[j] = (ids, tokenized)
    return out

  def _run(self, slot: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Examples lo..hi-1 of a tokenized slice, read as one run (two requests) once for the
    steps of a block and checked against the vocabulary: their ids end to end and offsets
    (`MixtureSampler.read_run`), divided into examples only as steps draw them."""
    return self._runs.get((slot, lo, hi), partial(self.sampler.read_run, slot, lo, hi, self.vocab))

  def _block_tokens(self, slot: int, index: np.ndarray, block: list[tuple[int, int]]):
    """Ids of examples `index` of a tokenized slice from the runs of its block."""
    got = [self._run(slot, lo, hi) for lo, hi in block]
    los = np.array([lo for lo, _ in block], np.int64)
    his = np.array([hi for _, hi in block], np.int64)
    at = np.searchsorted(los, index, side="right") - 1
    if index.size and (np.any(at < 0) or np.any(index >= his[at])):
      raise AssertionError("a candidate outside its block's runs")  # block_indices disagrees
    inputs, targets = [None] * index.size, [None] * index.size
    for a, (data, off) in enumerate(got):
      where = np.flatnonzero(at == a)
      for j, (start, mid, end) in zip(where.tolist(), off[index[where] - los[a]].tolist()):
        inputs[j], targets[j] = data[start:mid], data[mid:end]
    return inputs, targets

  def _fetch_runs(self, flat_ids: np.ndarray, block: dict) -> list[tuple[np.ndarray, np.ndarray]]:
    """`_fetch` for the block sampler: tokenized slices from the runs of the block (`block`:
    slot -> runs), all slices at once."""
    out: list = [None] * flat_ids.size
    slots, index = self.sampler.locate(flat_ids)
    stored, other = [], []
    for slot in np.unique(slots).tolist():
      (stored if self.sampler.is_tokenized(slot) else other).append(slot)
    reads = {s: _READS.submit(self._block_tokens, s, index[slots == s], block[s]) for s in stored}
    for slot in other:
      sel = np.flatnonzero(slots == slot)
      for j, pair in zip(sel.tolist(), self._fetch(flat_ids[sel])):
        out[j] = pair
    for slot, future in reads.items():
      inputs, targets = future.result()
      year = self.sampler.slice_year(slot)
      for j, i, t in zip(np.flatnonzero(slots == slot).tolist(), inputs, targets):
        out[j] = (self._input_ids(year, i), t)
    return out

  def _select_blocks(self, step: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, _Drawn]:
    """`_select` with the block sampler: each row keeps its candidates up to the first that
    does not fit."""
    slot, index = self._blocks.draws(step)
    ids = self.sampler.flat_of(slot[rows], index[rows])
    key = (step // self._blocks.steps, rows.tobytes())
    block = self._block_runs.get(key)
    if block is None:  # once per block and host: the runs its steps share
      block = {
        j: runs(idx, _RUN_GAP)
        for j, idx in self._blocks.block_indices(step, rows).items()
        if self.sampler.is_tokenized(j)
      }
      self._block_runs.put(key, block)
    drawn = _Drawn(lambda f: self._fetch_runs(f, block), self.input_length, self.target_length)
    in_len, tg_len = drawn.lengths(ids)
    fits = (np.cumsum(in_len, axis=1) <= self.input_length) & (
      np.cumsum(tg_len, axis=1) <= self.target_length
    )
    row_of = np.broadcast_to(np.arange(rows.size)[:, None], ids.shape)
    return ids[fits], row_of[fits], drawn

  def select(self, step: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The examples that `rows` (global row indices) hold at `step`.

    Returns:
      (flat ids into the sampler's table, index into `rows` of each), in row order and, within
      a row, in stream order.
    """
    ids, row_of, _ = self._select(step, rows)
    return ids, row_of

  def _select(self, step: int, rows) -> tuple[np.ndarray, np.ndarray, _Drawn]:
    rows = np.asarray(rows, dtype=np.int64)
    if self._blocks is not None:
      return self._select_blocks(step, rows)
    drawn = _Drawn(self._fetch, self.input_length, self.target_length)
    if not self.packed:
      ids = self.sampler.flat_ids(step, rows, 0)
      return ids, np.arange(rows.size), drawn
    sel_row, sel_k, sel_id = [], [], []
    used_in = np.zeros(rows.size, np.int64)
    used_tg = np.zeros(rows.size, np.int64)
    active = np.arange(rows.size)
    k0 = 0
    chunk = max(2, int(np.ceil(self._mean_per_row)) + 2)
    while active.size:
      ks = np.arange(k0, k0 + chunk)
      ids = self.sampler.flat_ids(step, rows[active, None], ks[None, :])
      in_len, tg_len = drawn.lengths(ids)
      cum_in = used_in[active, None] + np.cumsum(in_len, axis=1)
      cum_tg = used_tg[active, None] + np.cumsum(tg_len, axis=1)
      fits = (cum_in <= self.input_length) & (cum_tg <= self.target_length)
      # Lengths are >= 1, so the fitting draws form a prefix of the chunk; the row's first
      # draw always fits because every example is trimmed to the feature lengths.
      n_fit = fits.sum(axis=1)
      sel_row.append(np.broadcast_to(active[:, None], ids.shape)[fits])
      sel_k.append(np.broadcast_to(ks[None, :], ids.shape)[fits])
      sel_id.append(ids[fits])
      has = np.nonzero(n_fit)[0]
      used_in[active[has]] = cum_in[has, n_fit[has] - 1]
      used_tg[active[has]] = cum_tg[has, n_fit[has] - 1]
      active = active[n_fit == chunk]
      k0 += chunk
      chunk *= 2
    row_of, ks, ids = (np.concatenate(x) for x in (sel_row, sel_k, sel_id))
    order = np.lexsort((ks, row_of))
    self._mean_per_row = 0.9 * self._mean_per_row + 0.1 * ids.size / max(rows.size, 1)
    return ids[order], row_of[order], drawn

  def local_rows(self, process_index: int, process_count: int) -> np.ndarray:
    """The contiguous slice of global rows that process `process_index` materialises."""
    if process_count < 1 or not 0 <= process_index < process_count:
      raise ConfigError(f"bad process index {process_index} of {process_count}")
    if self.rows % process_count:
      raise ConfigError(f"batch rows {self.rows} not divisible by {process_count} processes")
    per = self.rows // process_count
    return np.arange(process_index * per, (process_index + 1) * per)

  def batch_with_stats(
    self, step: int, process_index: int = 0, process_count: int = 1
  ) -> tuple[dict[str, np.ndarray], BatchStats]:
    """This process's rows of the global batch at `step`, and what went into them."""
    rows = self.local_rows(process_index, process_count)
    ids, row_of, drawn = self._select(step, rows)
    in_flat, in_lens, tg_flat, tg_lens, cut = drawn.gather(ids)
    batch = pack_flat(
      in_flat, in_lens, tg_flat, tg_lens, row_of, rows.size, self.input_length, self.target_length
    )
    stats = BatchStats(
      examples=int(ids.size),
      truncated=int(cut),
      encoder_tokens=int(in_lens.sum()),
      decoder_tokens=int(tg_lens.sum()),
      encoder_capacity=rows.size * self.input_length,
      decoder_capacity=rows.size * self.target_length,
    )
    return batch, stats

  def batch(self, step: int, process_index: int = 0, process_count: int = 1) -> dict:
    """This process's rows of the global batch at `step` (see `batch_with_stats`)."""
    return self.batch_with_stats(step, process_index, process_count)[0]
