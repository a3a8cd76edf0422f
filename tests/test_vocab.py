"""Vocabulary: T5's special ids and sentinels, against transformers' T5 tokenizer."""

import os

import pytest

from tlm.data import vocab as vocab_module
from tlm.data.vocab import (
  EOS_ID,
  PAD_ID,
  UNK_ID,
  Vocabulary,
  find_spiece_model,
  train_sentencepiece,
)
from tlm.errors import DataError

_TEXTS = [
  "Alice Adams plays for Red FC.",
  "year: 2014 Bob Brown is the head coach of Blue United.",
  "The mayor of Springfield met the president of Shelbyville in May 2014.",
  "In 2019, Carol Clark works for Green Industries.",
] * 20


@pytest.fixture(scope="module")
def model_bytes():
  return train_sentencepiece(_TEXTS, vocab_size=60)


def test_t5_special_ids_and_sentinels_at_the_top(model_bytes):
  vocab = Vocabulary(model_bytes)
  assert (vocab.pad_id, vocab.eos_id, vocab.unk_id) == (PAD_ID, EOS_ID, UNK_ID) == (0, 1, 2)
  assert vocab.sp_size == 60 and vocab.vocab_size == 160
  assert vocab.sentinel_id(0) == 159 and vocab.sentinel_id(99) == 60
  with pytest.raises(ValueError):
    vocab.sentinel_id(100)


def test_training_is_deterministic(model_bytes):
  assert train_sentencepiece(_TEXTS, vocab_size=60) == model_bytes


def test_encode_decode_round_trip_with_sentinels(model_bytes):
  vocab = Vocabulary(model_bytes)
  text = "Alice Adams plays for <extra_id_0> in 2014 <extra_id_1> is a coach"
  ids = vocab.encode(text)
  assert ids.count(vocab.sentinel_id(0)) == 1 and ids.count(vocab.sentinel_id(1)) == 1
  assert vocab.decode(ids) == text
  # Ids do not record whether a space touched a sentinel ("<extra_id_0>." and "<extra_id_0> ."
  # encode alike): decode separates sentinels by a space, and re-encodes to the same ids.
  tight = vocab.encode("plays for <extra_id_0>.<extra_id_1>")
  assert vocab.decode(tight) == "plays for <extra_id_0> . <extra_id_1>"
  assert vocab.encode(vocab.decode(tight)) == tight
  # Decoding stops at EOS and drops padding and ids past the vocabulary.
  assert vocab.decode(ids + [EOS_ID] + ids) == text
  assert vocab.decode([PAD_ID] + ids + [PAD_ID, 10_000]) == text
  assert vocab.encode("") == []


def test_ids_match_transformers_t5_tokenizer(model_bytes, tmp_path):
  """The same spiece.model through transformers' T5Tokenizer (100 extra ids) gives our ids."""
  transformers = pytest.importorskip("transformers")
  path = tmp_path / "spiece.model"
  path.write_bytes(model_bytes)
  hf = transformers.T5Tokenizer.from_pretrained(str(tmp_path))  # 100 extra ids by default
  vocab = Vocabulary(str(path))
  assert len(hf) == vocab.vocab_size
  assert hf.convert_tokens_to_ids("<extra_id_0>") == vocab.sentinel_id(0)
  assert hf.convert_tokens_to_ids("<extra_id_99>") == vocab.sentinel_id(99)
  for text in [
    "Alice Adams plays for <extra_id_0>.",
    "year: 2014 <extra_id_0> is the head coach of Blue United.",
    "In 2019, Carol Clark works for Green Industries.",
    "Springfield",
    "<extra_id_0> Red FC <extra_id_1>",
  ]:
    assert vocab.encode(text) + [EOS_ID] == hf(text)["input_ids"], text


def test_bad_model_files(tmp_path):
  with pytest.raises(DataError, match="cannot read SentencePiece model"):
    Vocabulary(str(tmp_path / "missing.model"))
  with pytest.raises(DataError, match="not a SentencePiece model"):
    Vocabulary(b"not a model")


def test_model_path_naming_a_device_fifo_or_huge_file_is_refused_unread(tmp_path, monkeypatch):
  # data.vocab=/dev/zero was read whole until the kernel's OOM killer ended the run.
  fifo = tmp_path / "v.model"
  os.mkfifo(fifo)
  for path, why in [
    ("/dev/zero", "character device"),
    (str(fifo), "FIFO"),
    (str(tmp_path), "directory"),
  ]:
    with pytest.raises(DataError, match=f"^{path}: cannot read SentencePiece model .*{why}"):
      Vocabulary(path)
  monkeypatch.setattr(vocab_module, "MAX_MODEL_BYTES", 10)
  (tmp_path / "big.model").write_bytes(b"x" * 11)
  with pytest.raises(DataError, match="larger than 10 bytes"):
    Vocabulary(str(tmp_path / "big.model"))


def test_find_spiece_model(tmp_path, model_bytes):
  work = tmp_path / "work"
  step = work / "checkpoints" / "400"
  step.mkdir(parents=True)
  assert find_spiece_model(str(step)) is None
  (work / "spiece.model").write_bytes(model_bytes)
  expected = os.path.join(str(work), "spiece.model")
  assert find_spiece_model(str(work)) == expected  # a workdir
  assert find_spiece_model(str(step)) == expected  # one of its checkpoints
  assert find_spiece_model(str(work / "model.ckpt-1000")) == expected  # a Mesh-TF prefix
