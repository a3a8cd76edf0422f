"""T5X-style packing of (inputs, targets) token sequences into fixed `[rows, length]` batches.

Mirrors the packed feature layout of T5X / seqio (`seqio.utils.trim_and_pack_dataset` and
`t5x.models.EncoderDecoderModel`): each example's inputs and targets get EOS appended and are
trimmed to the feature lengths (the EOS kept); several examples share a row, told apart by
segment ids (1, 2, ... in row order; 0 is padding) with positions restarting at 0 in each
segment; `decoder_input_tokens` are the targets shifted right by one within each segment, with
0 at each segment start; `decoder_loss_weights` are 1 on real target tokens.

Unlike seqio's streaming packer, which carries an example that does not fit over to the next
row, `Batcher` fills each row from that row's own deterministic example stream (see
`tlm.data.sampling`) and drops the first example that does not fit: rows are then independent,
a process builds only its slice of the global batch, and resuming needs only the step. The
cost is a mild bias towards shorter examples among those trained on.
"""

import dataclasses
from collections.abc import Sequence

import numpy as np

from tlm.data.sampling import MixtureSampler
from tlm.data.vocab import EOS_ID, PAD_ID
from tlm.errors import ConfigError

FEATURES = (
  "encoder_input_tokens",
  "decoder_target_tokens",
  "decoder_input_tokens",
  "decoder_loss_weights",
  "encoder_segment_ids",
  "decoder_segment_ids",
  "encoder_positions",
  "decoder_positions",
)


def with_eos(ids: Sequence[int], length: int) -> tuple[np.ndarray, bool]:
  """Appends EOS and trims to `length`, keeping the EOS last.

  Args:
    ids: token ids without EOS.
    length: the feature length (>= 1).

  Returns:
    (int32 array of at most `length` ids ending in EOS, whether anything was cut).
  """
  ids = np.asarray(ids, dtype=np.int32)
  if ids.size + 1 <= length:
    return np.append(ids, np.int32(EOS_ID)), False
  return np.append(ids[: length - 1], np.int32(EOS_ID)), True


def _place(
  flat: np.ndarray, lens: np.ndarray, row_of: np.ndarray, num_rows: int, length: int, name: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Lays sequences (concatenated in `flat`) end to end within their rows.

  Returns:
    tokens, segment ids and positions `[num_rows, length]`, and per flat token its index into
    the raveled arrays and its position in its sequence.
  """
  n = lens.size
  tokens = np.zeros(num_rows * length, np.int32)
  segments = np.zeros(num_rows * length, np.int32)
  positions = np.zeros(num_rows * length, np.int32)
  dest = pos = np.zeros(0, np.int64)
  if n:
    # Index of the first example of each example's row (row_of is non-decreasing).
    first = np.searchsorted(row_of, row_of, side="left")
    ends = np.cumsum(lens)
    starts = ends - lens
    col0 = starts - starts[first]  # column where each example begins in its row
    if np.any(col0 + lens > length):
      raise ValueError(f"{name}: packed examples exceed the row length {length}")
    pos = np.arange(ends[-1]) - np.repeat(starts, lens)
    dest = np.repeat(row_of * length + col0, lens) + pos
    tokens[dest] = flat
    segments[dest] = np.repeat(np.arange(n) - first + 1, lens)
    positions[dest] = pos
  shape = (num_rows, length)
  return tokens.reshape(shape), segments.reshape(shape), positions.reshape(shape), dest, pos


def _pack_flat(
  in_flat: np.ndarray,
  in_lens: np.ndarray,
  tg_flat: np.ndarray,
  tg_lens: np.ndarray,
  row_of: np.ndarray,
  num_rows: int,
  input_length: int,
  target_length: int,
) -> dict[str, np.ndarray]:
  """`pack` on sequences given concatenated, with their lengths."""
  enc, enc_seg, enc_pos, _, _ = _place(in_flat, in_lens, row_of, num_rows, input_length, "inputs")
  dec, dec_seg, dec_pos, dest, pos = _place(
    tg_flat, tg_lens, row_of, num_rows, target_length, "targets"
  )
  dec_in = np.zeros(num_rows * target_length, np.int32)
  if dest.size:
    shifted = np.empty_like(tg_flat, dtype=np.int32)
    shifted[0] = PAD_ID
    shifted[1:] = tg_flat[:-1]
    shifted[pos == 0] = PAD_ID  # each segment's first decoder input
    dec_in[dest] = shifted
  return {
    "encoder_input_tokens": enc,
    "decoder_target_tokens": dec,
    "decoder_input_tokens": dec_in.reshape(dec.shape),
    "decoder_loss_weights": (dec_seg > 0).astype(np.float32),
    "encoder_segment_ids": enc_seg,
    "decoder_segment_ids": dec_seg,
    "encoder_positions": enc_pos,
    "decoder_positions": dec_pos,
  }


def pack(
  inputs: Sequence[np.ndarray],
  targets: Sequence[np.ndarray],
  row_of: Sequence[int],
  num_rows: int,
  input_length: int,
  target_length: int,
) -> dict[str, np.ndarray]:
  """Packs examples (already EOS-terminated and trimmed) into T5X features.

  Args:
    inputs: per example, its input ids ending in EOS.
    targets: per example, its target ids ending in EOS.
    row_of: per example, its row; non-decreasing (examples in row order).
    num_rows: rows of the batch.
    input_length: encoder length.
    target_length: decoder length.

  Returns:
    The eight features (FEATURES), `[num_rows, input_length]` for the encoder and
    `[num_rows, target_length]` for the decoder, int32 (loss weights float32).

  Raises:
    ValueError: if a row's examples do not fit, or `row_of` is not sorted.
  """
  row_of = np.asarray(row_of, dtype=np.int64)
  if row_of.size and (np.any(np.diff(row_of) < 0) or row_of[0] < 0 or row_of[-1] >= num_rows):
    raise ValueError("row_of must be sorted and within [0, num_rows)")
  if len(inputs) != row_of.size or len(targets) != row_of.size:
    raise ValueError("inputs, targets and row_of must have one entry per example")
  flat = lambda seqs: np.concatenate([np.asarray(x, np.int32) for x in seqs] or [np.zeros(0)])
  lens = lambda seqs: np.array([len(x) for x in seqs], dtype=np.int64)
  return _pack_flat(
    flat(inputs).astype(np.int32),
    lens(inputs),
    flat(targets).astype(np.int32),
    lens(targets),
    row_of,
    num_rows,
    input_length,
    target_length,
  )


def unpack(batch: dict[str, np.ndarray]) -> list[list[tuple[list[int], list[int]]]]:
  """Inverse of `pack`: per row, the (input ids, target ids) of each segment, EOS included."""
  rows = []
  for r in range(batch["encoder_input_tokens"].shape[0]):
    enc_seg, dec_seg = batch["encoder_segment_ids"][r], batch["decoder_segment_ids"][r]
    examples = []
    for s in range(1, int(max(enc_seg.max(initial=0), dec_seg.max(initial=0))) + 1):
      examples.append(
        (
          batch["encoder_input_tokens"][r][enc_seg == s].tolist(),
          batch["decoder_target_tokens"][r][dec_seg == s].tolist(),
        )
      )
    rows.append(examples)
  return rows


def pad_examples(
  pairs: Sequence[tuple[Sequence[int], Sequence[int]]], input_length: int, target_length: int
) -> tuple[dict[str, np.ndarray], int]:
  """Unpacked batch: one example per row, EOS appended, trimmed and padded (for evaluation).

  Args:
    pairs: per row, (input ids, target ids) without EOS.
    input_length: encoder length.
    target_length: decoder length.

  Returns:
    (the eight features with segment id 1 on real tokens, number of examples trimmed).
  """
  ins, tgs, cut = [], [], 0
  for i, t in pairs:
    i, ci = with_eos(i, input_length)
    t, ct = with_eos(t, target_length)
    ins.append(i)
    tgs.append(t)
    cut += ci or ct
  return pack(ins, tgs, np.arange(len(pairs)), len(pairs), input_length, target_length), cut


class _Pool:
  """A growable int32 buffer of token sequences laid end to end."""

  def __init__(self):
    self._buf = np.zeros(1024, np.int32)
    self._size = 0

  def extend(self, seqs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Appends sequences; returns their start offsets and lengths."""
    lens = np.array([s.size for s in seqs], dtype=np.int64)
    flat = np.concatenate(seqs)
    need = self._size + flat.size
    if need > self._buf.size:
      grown = np.zeros(max(need, 2 * self._buf.size), np.int32)
      grown[: self._size] = self._buf[: self._size]
      self._buf = grown
    self._buf[self._size : need] = flat
    starts = self._size + np.cumsum(lens) - lens
    self._size = need
    return starts, lens

  def gather(self, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The sequences at `starts` with `lens`, concatenated."""
    if not lens.size:
      return np.zeros(0, np.int32)
    ends = np.cumsum(lens)
    return self._buf[np.repeat(starts - (ends - lens), lens) + np.arange(ends[-1])]


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
  does not fit (packed), or draw (s, r, 0) alone (unpacked). Tokenisation is cached per
  unique text and per example, so after warm-up a batch costs a few vectorised numpy ops.

  Args:
    sampler: the example source.
    vocab: anything with `encode(text) -> list[int]` (tlm.data.vocab.Vocabulary).
    rows: rows of the global batch.
    input_length: encoder length.
    target_length: decoder length.
    packed: pack several examples per row (training) or one per row (the baseline).
  """

  def __init__(
    self,
    sampler: MixtureSampler,
    vocab,
    *,
    rows: int,
    input_length: int,
    target_length: int,
    packed: bool = True,
  ):
    if rows < 1 or input_length < 1 or target_length < 1:
      raise ConfigError(
        f"rows, input_length and target_length must be >= 1, got {rows}, {input_length}, "
        f"{target_length}"
      )
    self.sampler = sampler
    self.vocab = vocab
    self.rows = rows
    self.input_length = input_length
    self.target_length = target_length
    self.packed = packed
    n = len(sampler)
    # Per flat example: where its EOS-terminated, trimmed ids lie in the token pools, and their
    # lengths (-1: not yet encoded). Pools let a batch be gathered without a Python loop.
    self._in_pool = _Pool()
    self._tg_pool = _Pool()
    self._in_start = np.zeros(n, np.int64)
    self._tg_start = np.zeros(n, np.int64)
    self._in_len = np.full(n, -1, np.int64)
    self._tg_len = np.full(n, -1, np.int64)
    self._cut = np.zeros(n, bool)
    self._text_cache: dict[str, list[int]] = {}
    self._mean_per_row = 2.0  # guides only how many draws to hash at once; never the result

  def _encode(self, text: str) -> list[int]:
    ids = self._text_cache.get(text)
    if ids is None:
      ids = self._text_cache[text] = list(self.vocab.encode(text))
    return ids

  def _ensure_encoded(self, flat_ids: np.ndarray) -> None:
    todo = np.unique(flat_ids[self._in_len[flat_ids] < 0])
    if not todo.size:
      return
    ins, tgs = [], []
    for f in todo.tolist():
      d = self.sampler.example(f)
      i, ci = with_eos(self._encode(d.inputs), self.input_length)
      t, ct = with_eos(self._encode(d.targets), self.target_length)
      ins.append(i)
      tgs.append(t)
      self._cut[f] = ci or ct
    self._in_start[todo], self._in_len[todo] = self._in_pool.extend(ins)
    self._tg_start[todo], self._tg_len[todo] = self._tg_pool.extend(tgs)

  def select(self, step: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The examples that `rows` (global row indices) hold at `step`.

    Returns:
      (flat ids into the sampler's table, index into `rows` of each), in row order and, within
      a row, in stream order.
    """
    rows = np.asarray(rows, dtype=np.int64)
    if not self.packed:
      ids = self.sampler.flat_ids(step, rows, 0)
      self._ensure_encoded(ids)
      return ids, np.arange(rows.size)
    sel_row, sel_k, sel_id = [], [], []
    used_in = np.zeros(rows.size, np.int64)
    used_tg = np.zeros(rows.size, np.int64)
    active = np.arange(rows.size)
    k0 = 0
    chunk = max(2, int(np.ceil(self._mean_per_row)) + 2)
    while active.size:
      ks = np.arange(k0, k0 + chunk)
      ids = self.sampler.flat_ids(step, rows[active, None], ks[None, :])
      self._ensure_encoded(ids.ravel())
      cum_in = used_in[active, None] + np.cumsum(self._in_len[ids], axis=1)
      cum_tg = used_tg[active, None] + np.cumsum(self._tg_len[ids], axis=1)
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
    return ids[order], row_of[order]

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
    ids, row_of = self.select(step, rows)
    in_lens, tg_lens = self._in_len[ids], self._tg_len[ids]
    batch = _pack_flat(
      self._in_pool.gather(self._in_start[ids], in_lens),
      in_lens,
      self._tg_pool.gather(self._tg_start[ids], tg_lens),
      tg_lens,
      row_of,
      rows.size,
      self.input_length,
      self.target_length,
    )
    stats = BatchStats(
      examples=int(ids.size),
      truncated=int(self._cut[ids].sum()),
      encoder_tokens=int(in_lens.sum()),
      decoder_tokens=int(tg_lens.sum()),
      encoder_capacity=rows.size * self.input_length,
      decoder_capacity=rows.size * self.target_length,
    )
    return batch, stats

  def batch(self, step: int, process_index: int = 0, process_count: int = 1) -> dict:
    """This process's rows of the global batch at `step` (see `batch_with_stats`)."""
    return self.batch_with_stats(step, process_index, process_count)[0]
