"""Tests for tlm/input/packing.py: T5X packed features, the per-row batcher, sharding, speed."""

import zlib

import numpy as np
import pytest

from tests.helpers import SamplerFace
from tlm.data.conditioning import format_input
from tlm.data.formatting import TextExample
from tlm.data.vocab import Vocabulary, train_sentencepiece
from tlm.errors import ConfigError
from tlm.input.packed_rows import FEATURES, pack, pad_examples, unpack, with_eos
from tlm.input.packing import Batcher
from tlm.input.sampling import MixtureSampler

YEARS = tuple(range(2010, 2019))


class WordVocab:
  """A word-level stand-in for Vocabulary: a fixed id per word (a hash), independent of order."""

  def __init__(self):
    self.calls = 0

  def encode(self, text):
    self.calls += 1
    return [3 + zlib.crc32(w.encode()) % 5000 for w in text.split()]


def _sources(seed=0, max_words=30):
  rng = np.random.default_rng(seed)
  words = [f"w{i}" for i in range(300)]
  sent = lambda n: " ".join(rng.choice(words, n))
  news = {
    y: [
      TextExample(sent(rng.integers(2, max_words)) + " <extra_id_0> .", sent(rng.integers(1, 4)), y)
      for _ in range(40 + 5 * i)
    ]
    for i, y in enumerate(YEARS)
  }
  templama = {
    y: [TextExample(f"q{i} plays for <extra_id_0> .", f"team{i}", y) for i in range(8)]
    for y in YEARS
  }
  return {"news_ssm": news, "templama": templama}


def _sampler(seed=0, **kw):
  kw.setdefault("source_weights", {"news_ssm": 20, "templama": 1})
  return MixtureSampler(_sources(), seed=seed, years=YEARS, **kw)


def _batcher(rows=16, input_length=48, target_length=12, vocab=None, **kw):
  return Batcher(
    _sampler(**kw),
    vocab or WordVocab(),
    rows=rows,
    input_length=input_length,
    target_length=target_length,
  )


# --- the packed layout --------------------------------------------------------------------


def test_with_eos_keeps_eos_when_trimming():
  np.testing.assert_array_equal(with_eos([], 4)[0], [1])
  ids, cut = with_eos([3, 4, 5, 6], 5)
  np.testing.assert_array_equal(ids, [3, 4, 5, 6, 1])
  assert not cut and ids.dtype == np.int32
  ids, cut = with_eos([3, 4, 5, 6], 4)
  np.testing.assert_array_equal(ids, [3, 4, 5, 1])
  assert cut
  ids, cut = with_eos([3, 4, 5, 6], 1)
  np.testing.assert_array_equal(ids, [1])
  assert cut


def test_pack_three_examples_golden():
  # Example A (row 0): inputs 11 12 | targets 21;  B (row 0): inputs 13 14 15 | targets 22 23;
  # C (row 1): inputs 16 | targets 24 25 26 -- each with EOS (1) appended.
  ins = [with_eos(x, 8)[0] for x in ([11, 12], [13, 14, 15], [16])]
  tgs = [with_eos(x, 6)[0] for x in ([21], [22, 23], [24, 25, 26])]
  batch = pack(ins, tgs, [0, 0, 1], num_rows=3, input_length=8, target_length=6)
  expected = {
    "encoder_input_tokens": [[11, 12, 1, 13, 14, 15, 1, 0], [16, 1, 0, 0, 0, 0, 0, 0], [0] * 8],
    "encoder_segment_ids": [[1, 1, 1, 2, 2, 2, 2, 0], [1, 1, 0, 0, 0, 0, 0, 0], [0] * 8],
    "encoder_positions": [[0, 1, 2, 0, 1, 2, 3, 0], [0, 1, 0, 0, 0, 0, 0, 0], [0] * 8],
    "decoder_target_tokens": [[21, 1, 22, 23, 1, 0], [24, 25, 26, 1, 0, 0], [0] * 6],
    "decoder_input_tokens": [[0, 21, 0, 22, 23, 0], [0, 24, 25, 26, 0, 0], [0] * 6],
    "decoder_segment_ids": [[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 0, 0], [0] * 6],
    "decoder_positions": [[0, 1, 0, 1, 2, 0], [0, 1, 2, 3, 0, 0], [0] * 6],
    "decoder_loss_weights": [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0], [0] * 6],
  }
  assert set(batch) == set(FEATURES) == set(expected)
  for name, want in expected.items():
    want_dtype = np.float32 if name == "decoder_loss_weights" else np.int32
    assert batch[name].dtype == want_dtype, name
    np.testing.assert_array_equal(batch[name], np.array(want, dtype=want_dtype), err_msg=name)
  assert unpack(batch) == [
    [([11, 12, 1], [21, 1]), ([13, 14, 15, 1], [22, 23, 1])],
    [([16, 1], [24, 25, 26, 1])],
    [],
  ]


def test_pack_rejects_overfull_rows():
  with pytest.raises(ValueError, match="exceed the row length 4"):
    pack([np.array([5, 6, 1]), np.array([7, 1])], [np.array([1])] * 2, [0, 0], 1, 4, 4)
  with pytest.raises(ValueError, match="sorted"):
    pack([np.array([1])] * 2, [np.array([1])] * 2, [1, 0], 2, 4, 4)


def test_pad_examples_one_per_row():
  batch, cut = pad_examples([([5, 6, 7, 8], [9]), ([10], [])], input_length=4, target_length=3)
  assert cut == 1
  np.testing.assert_array_equal(batch["encoder_input_tokens"], [[5, 6, 7, 1], [10, 1, 0, 0]])
  np.testing.assert_array_equal(batch["encoder_segment_ids"], [[1, 1, 1, 1], [1, 1, 0, 0]])
  np.testing.assert_array_equal(batch["decoder_target_tokens"], [[9, 1, 0], [1, 0, 0]])
  np.testing.assert_array_equal(batch["decoder_input_tokens"], [[0, 9, 0], [0, 0, 0]])
  np.testing.assert_array_equal(batch["decoder_loss_weights"], [[1, 1, 0], [1, 0, 0]])


# --- the batcher --------------------------------------------------------------------------


def _reference_rows(sampler, vocab, step, rows, input_length, target_length, cond="temporal"):
  """Row filling written out draw by draw: the specification the batcher must match."""
  out = []
  for r in rows:
    examples, used_in, used_tg, k = [], 0, 0, 0
    while True:
      d = sampler.draw(step, r, k)
      i = with_eos(vocab.encode(format_input(d.inputs, d.year, cond)), input_length)[0].tolist()
      t = with_eos(vocab.encode(d.targets), target_length)[0].tolist()
      if used_in + len(i) > input_length or used_tg + len(t) > target_length:
        break
      examples.append((i, t))
      used_in, used_tg, k = used_in + len(i), used_tg + len(t), k + 1
    out.append(examples)
  return out


def _shifted_reference(batch):
  """decoder_input_tokens computed row by row from targets and segment ids."""
  dec, seg = batch["decoder_target_tokens"], batch["decoder_segment_ids"]
  out = np.zeros_like(dec)
  for r in range(dec.shape[0]):
    for c in range(1, dec.shape[1]):
      if seg[r, c] and seg[r, c] == seg[r, c - 1]:
        out[r, c] = dec[r, c - 1]
  return out


def test_batcher_rows_follow_their_streams_and_round_trip():
  b = _batcher(rows=32)
  for step in (0, 3):
    batch, stats = b.batch_with_stats(step)
    want = _reference_rows(b.sampler, b.vocab, step, range(32), 48, 12)
    assert unpack(batch) == want
    np.testing.assert_array_equal(batch["decoder_input_tokens"], _shifted_reference(batch))
    for name in ("encoder", "decoder"):
      np.testing.assert_array_equal(
        batch[f"{name}_positions"][batch[f"{name}_segment_ids"] == 0], 0
      )
    assert stats.examples == sum(map(len, want)) > 32  # several examples per row
    assert stats.encoder_tokens == np.count_nonzero(batch["encoder_input_tokens"])
    assert stats.decoder_tokens == np.count_nonzero(batch["decoder_target_tokens"])
    np.testing.assert_allclose(
      stats.efficiency, (stats.encoder_tokens + stats.decoder_tokens) / (32 * (48 + 12)), rtol=0
    )


def test_same_step_same_batch_any_call_order_and_shards():
  single = _batcher(rows=16).batch(5)
  used = _batcher(rows=16)
  for step in (9, 2, 5, 0, 7):
    used.batch(step)
  for name, value in used.batch(5).items():
    np.testing.assert_array_equal(value, single[name], err_msg=name)
  for count in (2, 4):
    fresh = _batcher(rows=16)
    shards = [fresh.batch(5, process_index=p, process_count=count) for p in reversed(range(count))]
    for name in FEATURES:
      assert shards[0][name].shape[0] == 16 // count
      union = np.concatenate([s[name] for s in reversed(shards)])
      np.testing.assert_array_equal(union, single[name], err_msg=f"{count} processes: {name}")
  other = used.batch(6)["encoder_input_tokens"]
  assert np.mean(other == single["encoder_input_tokens"]) < 0.5
  with pytest.raises(ConfigError, match="not divisible by 3"):
    used.batch(0, process_index=0, process_count=3)
  with pytest.raises(ConfigError, match="bad process index 2 of 2"):
    used.batch(0, process_index=2, process_count=2)


def test_long_examples_are_trimmed_keeping_eos_and_counted():
  long = {
    y: [TextExample(" ".join(["x"] * 40) + " <extra_id_0>", "a b c d e f g", y)] for y in YEARS
  }
  sampler = MixtureSampler({"news_ssm": long}, seed=0, years=YEARS, source_weights={"news_ssm": 1})
  b = Batcher(sampler, WordVocab(), rows=4, input_length=16, target_length=5)
  batch, stats = b.batch_with_stats(0)
  assert stats.examples == 4 and stats.truncated == 4
  for row in unpack(batch):
    assert len(row) == 1  # a full-length example leaves no room for the next draw
    inputs, targets = row[0]
    assert len(inputs) == 16 and inputs[-1] == 1 and len(targets) == 5 and targets[-1] == 1


def test_the_batcher_applies_the_time_conditioning_it_is_given():
  sampler = _sampler()
  b = Batcher(sampler, WordVocab(), conditioning="none", rows=8, input_length=48, target_length=12)
  want = _reference_rows(sampler, b.vocab, 4, range(8), 48, 12, cond="none")
  assert unpack(b.batch(4)) == want
  assert want != _reference_rows(sampler, b.vocab, 4, range(8), 48, 12)  # "year: 2014 ..."
  with pytest.raises(ConfigError, match="unknown time conditioning 'Temporal'"):
    Batcher(
      sampler, WordVocab(), conditioning="Temporal", rows=8, input_length=48, target_length=12
    )


def test_the_batcher_asks_the_sampler_through_its_public_methods():
  """A batcher whose sampler shows only its public methods builds the same batches (text
  slices: lists; tests/test_remote_input.py has a tokenized store, per block too)."""
  direct = _batcher(rows=16)
  faced = Batcher(
    SamplerFace(direct.sampler), WordVocab(), rows=16, input_length=48, target_length=12
  )
  for step in (0, 5):
    for key, value in direct.batch(step).items():
      np.testing.assert_array_equal(faced.batch(step)[key], value, key)


def test_unpacked_mode_is_draw_zero_of_each_row():
  sampler = _sampler()
  b = Batcher(sampler, WordVocab(), rows=8, input_length=48, target_length=12, packed=False)
  batch, stats = b.batch_with_stats(2)
  assert stats.examples == 8
  want = _reference_rows(sampler, b.vocab, 2, range(8), 48, 12)
  assert unpack(batch) == [row[:1] for row in want]


def test_tokenisation_cached_per_text():
  vocab = WordVocab()
  b = _batcher(vocab=vocab)
  for step in range(30):
    b.batch(step)
  calls = vocab.calls
  for step in range(30):
    b.batch(step)
  assert vocab.calls == calls  # everything seen is cached
  # One encode per unique text: targets repeat across examples (TempLAMA names) and are shared.
  assert calls == len(b._text_cache)


def test_real_sentencepiece_vocabulary_round_trip():
  sources = _sources(max_words=8)
  examples = [e for by_year in sources.values() for slice_ in by_year.values() for e in slice_]
  texts = [e.inputs.replace(" <extra_id_0>", "") + " " + e.targets for e in examples]
  vocab = Vocabulary(train_sentencepiece(texts + ["year: 2010 2011 2012"], vocab_size=40))
  sampler = MixtureSampler(
    sources, seed=0, years=YEARS, source_weights={"news_ssm": 5, "templama": 1}
  )
  b = Batcher(sampler, vocab, rows=8, input_length=64, target_length=16)
  batch = b.batch(1)
  ids, _ = b.select(1, np.arange(8))
  rows = unpack(batch)
  flat = [ex for row in rows for ex in row]
  assert len(flat) == ids.size
  for (inputs, targets), f in zip(flat, ids.tolist()):
    draw = sampler.example(f)
    assert inputs[-1] == 1 and vocab.sentinel_id(0) in inputs
    assert vocab.decode(inputs) == format_input(draw.inputs, draw.year, "temporal")
    assert vocab.decode(targets) == draw.targets
