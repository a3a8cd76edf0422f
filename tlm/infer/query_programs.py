"""The Predictor's programs, defined once: the `Predictor` runs them, the dry run lowers them.

So that `--dry_run` sizes exactly what inference compiles (`tlm.infer.eval_dry_run`): the same
decoding (greedy, beam search or sampling) and scoring functions, the same row count
(`padded_rows`: the batch rounded up to the mesh's data axis) and the same length buckets
(`bucket`: powers of two, so that jit compiles once per bucket rather than once per batch).
"""

import dataclasses
from collections.abc import Callable

import numpy as np

MIN_LENGTH = 8


def bucket(n: int) -> int:
  """Smallest power of two >= max(n, MIN_LENGTH): the padded length of a batch."""
  return 1 << (max(n, MIN_LENGTH) - 1).bit_length()


def padded_rows(batch_size: int, mesh) -> int:
  """Rows per batch: `batch_size` rounded up to a multiple of the mesh's data axis."""
  from tlm.sharding import partitioning

  data = mesh.shape[partitioning.DATA_AXIS]
  return -(-batch_size // data) * data


@dataclasses.dataclass(frozen=True)
class Decoding:
  """The Predictor's decoding settings (checked by the `Predictor`)."""

  max_decode_length: int
  beam_size: int = 1
  temperature: float = 0.0
  top_k: int = 0
  top_p: float = 1.0
  seed: int = 0

  @property
  def sampled(self) -> bool:
    """Whether `predict` samples (temperature above T5X's MIN_TEMPERATURE)."""
    from tlm.models import decoding

    return self.temperature > decoding.MIN_TEMPERATURE


def decode_program(t5, d: Decoding) -> Callable:
  """`(params, tokens[, example_ids]) -> [rows, max_decode_length]` ids: sampled (each row's key
  from `example_ids`), greedy (beam_size 1) or the best beam."""
  from tlm.models import decoding

  def decode(params, tokens, example_ids=None):
    if d.sampled:
      return decoding.temperature_sample(
        t5,
        params,
        tokens,
        d.max_decode_length,
        example_ids=example_ids,
        temperature=d.temperature,
        top_k=d.top_k,
        top_p=d.top_p,
        seed=d.seed,
      )
    if d.beam_size == 1:
      return decoding.greedy_decode(t5, params, tokens, d.max_decode_length)
    out, _ = decoding.beam_search(t5, params, tokens, d.max_decode_length, beam_size=d.beam_size)
    return out[:, 0]

  return decode


def score_program(t5) -> Callable:
  """`(params, inputs, targets) -> [rows]` summed natural-log p(target | input)."""
  from tlm.models import decoding

  def summed(params, inputs, targets):
    return decoding.score(t5, params, inputs, targets)[0]

  return summed


def rank_program(t5, candidates: np.ndarray, per_step: int) -> Callable:
  """`(params, tokens) -> [rows, candidates]` log p(candidate | input), `per_step` inputs at a
  time against the padded candidate ids `candidates`."""
  from tlm.models import decoding

  def ranked(params, tokens):
    return decoding.rank_candidates(t5, params, tokens, candidates, per_step)

  return ranked
