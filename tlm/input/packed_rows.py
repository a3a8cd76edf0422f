"""The T5X packed feature layout: (inputs, targets) token sequences placed in `[rows, length]`.

Mirrors the packed feature layout of T5X / seqio (`seqio.utils.trim_and_pack_dataset` and
`t5x.models.EncoderDecoderModel`): each example's inputs and targets get EOS appended and are
trimmed to the feature lengths (the EOS kept); several examples share a row, told apart by
segment ids (1, 2, ... in row order; 0 is padding) with positions restarting at 0 in each
segment; `decoder_input_tokens` are the targets shifted right by one within each segment, with
0 at each segment start; `decoder_loss_weights` are 1 on real target tokens. Which examples go
in which row is `tlm.input.packing.Batcher`'s.
"""

from collections.abc import Sequence

import numpy as np

from tlm.token_ids import EOS_ID, PAD_ID

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


def pack_flat(
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
  return pack_flat(
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
