"""The time prefix (tlm/data/conditioning.py): one text definition, and the token prefix that a
tokenized example store puts in front of its stored ids is that text tokenized, for every year."""

import numpy as np
import pytest

from tests.helpers import DATA
from tlm.data.conditioning import CONDITIONINGS, format_input, prefix_ids, prefix_text
from tlm.data.vocab import Vocabulary
from tlm.errors import ConfigError
from tlm.store import store_write

VOCAB = f"{DATA}/spiece.model"
# Every year a model may be asked about: the synthetic world's facts (2004-2022), the training
# and held-out slices, and the future probes up to 2029; and a sub-year bucket key.
YEARS = tuple(range(2000, 2036)) + ("2014-Q2", "2014-05")
TEXTS = (
  "Lionel Messi plays for <extra_id_0>.",
  "<extra_id_0> won the cup in 2014.",
  "won by <extra_id_0>",
  "Caf\u00e9 \u00dcber-na\u00efve  spaced ",
  "x",
)


def test_prefix_text_is_the_papers_string():
  assert prefix_text(2014, "temporal") == "year: 2014"
  assert prefix_text(2019, "in_text") == "In 2019,"
  assert prefix_text(2014, "none") == ""
  with pytest.raises(ConfigError, match="unknown time conditioning 'yearly'"):
    prefix_text(2014, "yearly")


@pytest.mark.parametrize("conditioning", CONDITIONINGS)
def test_format_input_is_prefix_space_input(conditioning):
  for year in YEARS:
    prefix = prefix_text(year, conditioning)
    for text in TEXTS:
      want = f"{prefix} {text}" if prefix else text
      assert format_input(text, year, conditioning) == want


@pytest.mark.parametrize("conditioning", CONDITIONINGS)
def test_token_prefix_is_the_tokenized_text_prefix_for_every_year(conditioning):
  vocab = Vocabulary(VOCAB)
  for year in YEARS:
    ids = prefix_ids(vocab, year, conditioning)
    assert ids.dtype == np.int32
    np.testing.assert_array_equal(ids, np.asarray(vocab.encode(prefix_text(year, conditioning))))
    # What a tokenized store's reader builds (prefix ids + stored ids) is what the text path
    # reads (the formatted text tokenized).
    for text in TEXTS:
      stored = np.concatenate([ids, np.asarray(vocab.encode(text), np.int32)])
      np.testing.assert_array_equal(
        stored, vocab.encode(format_input(text, year, conditioning)), f"{year} {text!r}"
      )


def test_store_vets_a_vocabulary_on_these_prefixes():
  """The store's check of a vocabulary tokenizes this module's prefixes, not a copy of them."""
  asked = []

  class WordVocab:  # splits at whitespace: additive, so the check passes
    serialized_model = b""

    def encode(self, text):
      asked.append(text)
      return [hash(word) % 1000 for word in text.split()]

  assert store_write.prefix_problem(WordVocab()) == ""
  assert prefix_text(2014, "temporal") in asked and prefix_text(2014, "in_text") in asked
