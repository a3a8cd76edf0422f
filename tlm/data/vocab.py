"""SentencePiece vocabulary with the T5 conventions, and training of a small model from text.

T5 conventions (as in the public `spiece.model` files and seqio's SentencePieceVocabulary):
pad = 0, eos = 1, unk = 2, no bos; 100 sentinel ids `<extra_id_0>`..`<extra_id_99>` appended
after the SentencePiece pieces, counted downwards from the top: `<extra_id_i>` has id
`sp_size + 100 - 1 - i`. The model's embedding table may be larger (t5 pads 32100 to 32128);
ids beyond `vocab_size` are never produced by `encode`.

`encode` turns the literal text `<extra_id_N>` into sentinel N, so that salient-span-masked
inputs can be written as plain strings ("... won the <extra_id_0> in 2014.").
"""

import io
import re
from collections.abc import Iterable, Sequence

import sentencepiece as spm

from tlm import safe_read, storage
from tlm.errors import DataError
from tlm.token_ids import EOS_ID, PAD_ID, UNK_ID

NUM_EXTRA_IDS = 100
_SENTINEL = re.compile(r"<extra_id_(\d+)>")
# The largest SentencePiece model read (t5's spiece.model: 0.8 MB, mT5's: 4.3 MB, 250k-piece
# models: under 20 MB): a path naming /dev/zero or a huge file is refused, not read whole.
MAX_MODEL_BYTES = 256 << 20


class Vocabulary:
  """Text <-> ids with T5's special ids and sentinels.

  Args:
    model: path to a SentencePiece model file, or its serialized bytes.
    extra_ids: number of sentinels appended after the pieces (T5: 100).
  """

  def __init__(self, model: str | bytes, extra_ids: int = NUM_EXTRA_IDS):
    path = model if isinstance(model, str) else None  # named in errors
    if path is not None:
      try:
        model = safe_read.read_bounded(path, MAX_MODEL_BYTES)
      except OSError as e:  # missing, a FIFO or device (never opened), too large
        raise DataError(f"cannot read SentencePiece model ({e.strerror or e})", path) from None
    self._proto = model
    self._sp = spm.SentencePieceProcessor()
    try:
      self._sp.LoadFromSerializedProto(model)
    except Exception as e:  # sentencepiece raises RuntimeError/OSError with C++ messages
      detail = " ".join(str(e).split())[:200]
      raise DataError(f"not a SentencePiece model ({detail})", path) from None
    self.extra_ids = extra_ids
    if (self._sp.pad_id(), self._sp.eos_id(), self._sp.unk_id()) != (PAD_ID, EOS_ID, UNK_ID):
      raise DataError(
        "SentencePiece model does not use T5 ids (pad 0, eos 1, unk 2): got "
        f"pad {self._sp.pad_id()}, eos {self._sp.eos_id()}, unk {self._sp.unk_id()}",
        path,
      )

  @property
  def sp_size(self) -> int:
    """Number of SentencePiece pieces (without sentinels)."""
    return self._sp.get_piece_size()

  @property
  def vocab_size(self) -> int:
    """Pieces plus sentinels: every id `encode` can produce is below this."""
    return self.sp_size + self.extra_ids

  @property
  def serialized_model(self) -> bytes:
    return self._proto

  pad_id = PAD_ID
  eos_id = EOS_ID
  unk_id = UNK_ID

  def sentinel_id(self, i: int) -> int:
    """Id of `<extra_id_i>`."""
    if not 0 <= i < self.extra_ids:
      raise ValueError(f"sentinel {i} out of range [0, {self.extra_ids})")
    return self.vocab_size - 1 - i

  def _sentinel_of_text(self, m: re.Match) -> int:
    i = int(m.group(1))
    if i >= self.extra_ids:
      # Text is user input (a predict/score file, a data set): a DataError, which callers
      # that know the file and line re-raise with them.
      have = f"<extra_id_0>..<extra_id_{self.extra_ids - 1}>" if self.extra_ids else "none"
      raise DataError(f"{m.group(0)} is out of range: the vocabulary's sentinels are {have}")
    return self.sentinel_id(i)

  def encode(self, text: str) -> list[int]:
    """Token ids of `text`, without EOS; `<extra_id_N>` becomes sentinel N.

    Raises:
      DataError: for a sentinel `<extra_id_N>` with N >= `extra_ids`.
    """
    ids: list[int] = []
    pos = 0
    for m in _SENTINEL.finditer(text):
      chunk = text[pos : m.start()]
      if chunk.strip():
        ids.extend(self._sp.EncodeAsIds(chunk.strip()))
      ids.append(self._sentinel_of_text(m))
      pos = m.end()
    rest = text[pos:]
    if rest.strip() or not ids:
      ids.extend(self._sp.EncodeAsIds(rest.strip()))
    return ids

  def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
    return [self.encode(t) for t in texts]

  def decode(self, ids: Iterable[int]) -> str:
    """Text of `ids`, stopping at the first EOS; pad and ids past the vocabulary are dropped.

    Sentinels are separated from the text around them by one space ("<extra_id_0> Red FC"):
    `encode` strips the text beside a sentinel, so ids do not say whether a space was there,
    and `encode(decode(ids)) == ids` either way. (transformers' T5 tokenizer encodes to the
    same ids but decodes "for<extra_id_0> .".)
    """
    pieces: list[str] = []
    run: list[int] = []
    for i in ids:
      i = int(i)
      if i == EOS_ID:
        break
      if i == PAD_ID or i >= self.vocab_size:
        continue
      if i >= self.sp_size:  # a sentinel
        if run:
          pieces.append(self._sp.DecodeIds(run))
          run = []
        pieces.append(f"<extra_id_{self.vocab_size - 1 - i}>")
      else:
        run.append(i)
    if run:
      pieces.append(self._sp.DecodeIds(run))
    return " ".join(p for p in pieces if p)


def find_spiece_model(checkpoint: str) -> str | None:
  """The `spiece.model` stored with a checkpoint, or None.

  Looked for in the checkpoint directory (HF directory, tlm model directory, training
  workdir), beside a Mesh-TF prefix or a file, and in the workdir of `WORKDIR/checkpoints/STEP`.
  """
  path = storage.abspath(checkpoint)
  parent = storage.dirname(path)
  candidates = [path, parent]
  if parent.rstrip("/").endswith("/checkpoints"):
    candidates.append(storage.dirname(parent))
  for directory in candidates:
    candidate = storage.join(directory, "spiece.model")
    if storage.isfile(candidate):
      return candidate
  return None


def train_sentencepiece(
  texts: Iterable[str],
  vocab_size: int,
  model_type: str = "unigram",
  user_defined_symbols: Sequence[str] = (),
) -> bytes:
  """Trains a SentencePiece model with T5's special ids; returns the serialized model.

  Deterministic for the same texts and settings (one thread, no input shuffling), so the
  synthetic world's vocabulary is byte-identical across runs.

  Args:
    texts: training sentences.
    vocab_size: number of pieces (sentinels come on top).
    model_type: "unigram" (T5's) or "bpe".
    user_defined_symbols: pieces that must never be split.
  """
  writer = io.BytesIO()
  spm.SentencePieceTrainer.train(
    sentence_iterator=iter(texts),
    model_writer=writer,
    vocab_size=vocab_size,
    model_type=model_type,
    pad_id=PAD_ID,
    eos_id=EOS_ID,
    unk_id=UNK_ID,
    bos_id=-1,
    character_coverage=1.0,
    num_threads=1,
    shuffle_input_sentence=False,
    input_sentence_size=0,
    user_defined_symbols=list(user_defined_symbols),
    minloglevel=2,
  )
  return writer.getvalue()
