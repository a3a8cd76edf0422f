"""`--mode=predict` and `--mode=score`: a checkpoint applied to a JSON-lines file.

  python run.py --mode=predict --checkpoint=C --input_file=IN --output_file=OUT \
      [--batch_size=32 --max_decode_length=32 --beam_size=1 --vocab=spiece.model]
  python run.py --mode=score --checkpoint=C --input_file=IN --output_file=OUT

`predict` reads `{"input": str}` per line and writes the same objects with `"prediction"`
added, in input order: greedy decoding (the paper's closed-book QA decoding, section 2) or,
with `--beam_size` > 1, beam search. `score` reads `{"input", "target"}` and adds
`"log_likelihood"` (natural log of p(target | input), summed over the target tokens including
EOS, as in the paper's section 3.2 analyses) and `"num_tokens"`. Inputs and targets are
tokenized T5-style: SentencePiece ids followed by EOS.

`--checkpoint` is anything `tlm.models.checkpoints.load_checkpoint` reads (HF directory,
Mesh-TF prefix, tlm model directory, training workdir). The vocabulary is `--vocab`, else the
`spiece.model` beside the checkpoint. Examples are sorted by length and padded to power-of-two
lengths and a fixed number of rows, so jit compiles once per length bucket, not per batch; the
output is restored to input order. The input file and vocabulary are checked before jax is
imported, so bad input fails fast; the output file is written atomically, at the end.
"""

import os
import sys
import time

import numpy as np

from tlm.data.vocab import EOS_ID, Vocabulary
from tlm.errors import ConfigError, DataError
from tlm.files import read_jsonl, write_jsonl

_MIN_LENGTH_BUCKET = 8


def require_flags(flags, mode: str, *names: str) -> None:
  """Raises ConfigError naming the first missing flag."""
  for name in names:
    if getattr(flags, name) in (None, ""):
      raise ConfigError(f"--{name} is required for --mode={mode}")


def find_vocabulary(flags) -> str | None:
  """`--vocab`, else the first `spiece.model` beside the checkpoint, else None.

  Looked for in the checkpoint directory (HF, tlm model dir, workdir), the directory of a
  Mesh-TF prefix or of a file, and the workdir of `WORKDIR/checkpoints/<step>`.
  """
  if flags.vocab:
    return flags.vocab
  path = os.path.abspath(flags.checkpoint)
  parent = os.path.dirname(path)
  candidates = [path, parent]
  if os.path.basename(parent) == "checkpoints":
    candidates.append(os.path.dirname(parent))
  for directory in candidates:
    candidate = os.path.join(directory, "spiece.model")
    if os.path.isfile(candidate):
      return candidate
  return None


def load_vocabulary(flags) -> Vocabulary:
  """The vocabulary for `flags.checkpoint`; ConfigError if there is none."""
  path = find_vocabulary(flags)
  if path is None:
    raise ConfigError(
      f"no vocabulary for {flags.checkpoint}: pass --vocab=spiece.model "
      "or put spiece.model beside the checkpoint"
    )
  return Vocabulary(path)


def _read_examples(path: str, fields: tuple[str, ...]) -> list[dict]:
  rows = read_jsonl(path, required=fields)
  # read_jsonl skips blank lines: recover each row's line number for type errors.
  with open(path, encoding="utf-8") as f:
    line_numbers = [n for n, line in enumerate(f, start=1) if line.strip()]
  for row, line in zip(rows, line_numbers):
    for field in fields:
      if not isinstance(row[field], str):
        raise DataError(f"field '{field}' must be a string", path, line)
  return rows


def _bucket(n: int, minimum: int = 1) -> int:
  """Smallest power of two >= max(n, minimum)."""
  return 1 << (max(n, minimum) - 1).bit_length()


def _pad(sequences: list[list[int]], rows: int, length: int) -> np.ndarray:
  out = np.zeros((rows, length), np.int32)
  for i, ids in enumerate(sequences):
    out[i, : len(ids)] = ids
  return out


def _batches(keys: list, batch_size: int) -> list[list[int]]:
  """Indices grouped into batches of similar `keys` (sorted), each at most batch_size long."""
  order = sorted(range(len(keys)), key=lambda i: keys[i])
  return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


class _Progress:
  """Examples done, rate and ETA on stderr, about once a second."""

  def __init__(self, mode: str, total: int):
    self.mode, self.total, self.done = mode, total, 0
    self.start = self.last = time.time()

  def update(self, n: int) -> None:
    self.done += n
    now = time.time()
    if now - self.last < 1.0 and self.done < self.total:
      return
    self.last = now
    rate = self.done / max(now - self.start, 1e-9)
    eta = (self.total - self.done) / rate if rate > 0 else 0.0
    print(
      f"{self.mode}: {self.done}/{self.total} examples, {rate:.1f}/s, ETA {eta:.0f}s",
      file=sys.stderr,
      flush=True,
    )


def _load_model(flags, vocab: Vocabulary):
  # jax and the model are imported only once the inputs have been checked.
  import jax

  from tlm.models.checkpoints import load_checkpoint

  config, params = load_checkpoint(flags.checkpoint)
  if vocab.vocab_size > config.vocab_size:
    raise ConfigError(
      f"the vocabulary has {vocab.vocab_size} ids but the model {flags.checkpoint} embeds only "
      f"{config.vocab_size}: wrong --vocab?"
    )
  return config, jax.device_put(params)


def predict(flags) -> None:
  """--mode=predict: decodes every input of --input_file into --output_file."""
  require_flags(flags, "predict", "checkpoint", "input_file", "output_file")
  for name in ("batch_size", "max_decode_length", "beam_size"):
    if getattr(flags, name) < 1:
      raise ConfigError(f"--{name} must be >= 1, got {getattr(flags, name)}")
  rows = _read_examples(flags.input_file, ("input",))
  vocab = load_vocabulary(flags)
  inputs = [vocab.encode(row["input"]) + [EOS_ID] for row in rows]
  config, params = _load_model(flags, vocab)

  from tlm.models import decoding

  rows_per_batch = min(flags.batch_size, _bucket(len(rows)))
  predictions: list[str | None] = [None] * len(rows)
  progress = _Progress("predict", len(rows))
  for batch in _batches([len(x) for x in inputs], rows_per_batch):
    length = _bucket(max(len(inputs[i]) for i in batch), _MIN_LENGTH_BUCKET)
    tokens = _pad([inputs[i] for i in batch], rows_per_batch, length)
    if flags.beam_size == 1:
      out = decoding.greedy_decode(config, params, tokens, flags.max_decode_length)
    else:
      out = decoding.beam_search(
        config, params, tokens, flags.max_decode_length, beam_size=flags.beam_size
      )[0][:, 0]
    out = np.asarray(out)
    for row, i in enumerate(batch):  # padding rows beyond len(batch) are dropped
      predictions[i] = vocab.decode(out[row])  # stops at EOS, drops pad
    progress.update(len(batch))
  write_jsonl(
    flags.output_file, [dict(row, prediction=p) for row, p in zip(rows, predictions, strict=True)]
  )


def score(flags) -> None:
  """--mode=score: log p(target | input) of every line of --input_file into --output_file."""
  require_flags(flags, "score", "checkpoint", "input_file", "output_file")
  if flags.batch_size < 1:
    raise ConfigError(f"--batch_size must be >= 1, got {flags.batch_size}")
  rows = _read_examples(flags.input_file, ("input", "target"))
  vocab = load_vocabulary(flags)
  inputs = [vocab.encode(row["input"]) + [EOS_ID] for row in rows]
  targets = [vocab.encode(row["target"]) + [EOS_ID] for row in rows]
  config, params = _load_model(flags, vocab)

  from tlm.models import decoding

  rows_per_batch = min(flags.batch_size, _bucket(len(rows)))
  scores: list[float | None] = [None] * len(rows)
  progress = _Progress("score", len(rows))
  keys = [(len(x), len(y)) for x, y in zip(inputs, targets)]
  for batch in _batches(keys, rows_per_batch):
    in_len = _bucket(max(len(inputs[i]) for i in batch), _MIN_LENGTH_BUCKET)
    out_len = _bucket(max(len(targets[i]) for i in batch), _MIN_LENGTH_BUCKET)
    log_likelihood, _ = decoding.score(
      config,
      params,
      _pad([inputs[i] for i in batch], rows_per_batch, in_len),
      _pad([targets[i] for i in batch], rows_per_batch, out_len),
    )
    log_likelihood = np.asarray(log_likelihood, np.float64)
    for row, i in enumerate(batch):
      scores[i] = float(log_likelihood[row])
    progress.update(len(batch))
  write_jsonl(
    flags.output_file,
    [
      dict(row, log_likelihood=s, num_tokens=len(t))
      for row, s, t in zip(rows, scores, targets, strict=True)
    ],
  )
