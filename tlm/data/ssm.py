"""Salient span masking (SSM) of a news corpus into per-year train / val / test examples.

Mirrors Sec. 2.1 of the paper: articles are split into sentences and each salient span (named
entity or date, found by `tlm.data.salient_spans`) gives one example: inputs = the sentence
with that span replaced by `<extra_id_0>`, targets = the span, stored per split and year (the
year of the article's `date`, for the time prefix) in the example store (`tlm.store.store`),
built by `tlm.store.store_build` with any number of processes or, beyond one machine, by
Apache Beam (`tlm.store.ssm_beam`). Sentences without a salient span give no example.

Splits are by article, per year: min(2000, 10%) of a year's articles each for validation and
test (the paper holds out 2000 articles per year from 1M; the 10% keeps small corpora mostly
for training), chosen by a permutation seeded with (seed, year). `stats.json` reports examples
per year and split, spans per sentence, and the shares of sentences that mention a year and
that mention the publication year (3.9% and 2.1% on CustomNews, paper Sec. 5).

An example keeps at most `MAX_CONTEXT_WORDS` words of its sentence around the span (split
evenly before and after it, a short side's share going to the other), and at most
`CHARS_PER_WORD` times as many characters, so that a run without spaces is cut too. 128 is
the configs' `data.input_length` (encoder tokens); a word is at least one token, so the window
holds all the context a training row can use, and news sentences are almost never cut. Without
the cap an overlong "sentence" (a table, a list of dates) repeats whole in each of its examples
(a 21 KB one with 1000 years gave 21 MB). `stats.json` states the cap and how many were cut.
"""

import bisect
import collections
import dataclasses
import datetime
import math
import re

from tlm.data.formatting import SENTINEL, SPLITS
from tlm.data.salient_spans import Gazetteer, Span, find_spans, split_sentences, years_mentioned
from tlm.errors import DataError, UserError

__all__ = [
  "BuildSettings",
  "Gazetteer",
  "Span",
  "find_spans",
  "mask_examples",
  "split_sentences",
]

_NEWS_DATE = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?$")


# The configs' default `data.input_length` (tlm/data does not import tlm.configs; a test keeps
# the two equal).
MAX_CONTEXT_WORDS = 128
CHARS_PER_WORD = 10
_WORD = re.compile(r"\S+")


def _split_budget(before: int, after: int, budget: int) -> tuple[int, int]:
  """How much of `before` and `after` to keep within `budget`: half each, and a side that
  needs less than half leaves the rest to the other."""
  left = min(before, max(budget // 2, budget - after))
  return left, min(after, budget - left)


def mask_examples(
  sentence: str,
  spans: list[Span],
  date: str,
  year: int,
  max_context_words: int = MAX_CONTEXT_WORDS,
) -> list[dict]:
  """One SSM example per span: the sentence with that span replaced by `<extra_id_0>`.

  The inputs keep at most `max_context_words` words of the sentence around the span and
  `CHARS_PER_WORD * max_context_words` characters (module docstring); shorter sentences
  are kept whole.
  """
  max_chars = CHARS_PER_WORD * max_context_words
  words = []  # (start, end) of the sentence's words, needed only if it is long
  n = len(sentence)
  if n > max_chars or (n > max_context_words and len(sentence.split()) > max_context_words):
    words = [m.span() for m in _WORD.finditer(sentence)]  # \S+: the words of str.split()
  starts, ends = [w[0] for w in words], [w[1] for w in words]
  examples = []
  for s in spans:
    lo, hi = 0, len(sentence)
    if words:  # a long sentence: cut a window of words, then of characters, around the span
      before = bisect.bisect_right(ends, s.start)  # words wholly before the span
      first_after = bisect.bisect_left(starts, s.end)
      left, right = _split_budget(before, len(words) - first_after, max_context_words)
      if left < before:
        lo = starts[before - left]
      if right < len(words) - first_after:
        hi = ends[first_after + right - 1]  # right == 0: the end of the span's last word
      left, right = _split_budget(s.start - lo, hi - s.end, max_chars)
      lo, hi = s.start - left, s.end + right
    inputs = sentence[lo : s.start] + SENTINEL + sentence[s.end : hi]
    if lo > 0 or hi < len(sentence):
      inputs = inputs.strip()
    examples.append({"inputs": inputs, "targets": s.text, "date": date, "year": year})
  return examples


def parse_news_date(date, path: str, line: int) -> int:
  """The year of a news date "YYYY-MM-DD", "YYYY-MM" or "YYYY" (DataError if unparsable)."""
  m = _NEWS_DATE.match(date) if isinstance(date, str) else None
  if m:
    try:
      datetime.date(int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 1))
      return int(m.group(1))
    except ValueError:
      pass
  raise DataError(f"unparsable date {date!r} (expected YYYY-MM-DD, YYYY-MM or YYYY)", path, line)


def heldout_count(num_articles: int, max_articles: int = 2000, fraction: float = 0.1) -> int:
  """Articles held out per year for each of val and test: min(max, round(fraction * n))."""
  return min(max_articles, math.floor(fraction * num_articles + 0.5))


@dataclasses.dataclass(frozen=True)
class BuildSettings:
  """What a store build depends on besides its input and output: the arguments of `build_ssm`
  (which documents them and holds their defaults), taken by the local builder
  (`tlm.store.store_build`) and the Beam pipeline (`tlm.store.ssm_beam`). Checked on creation:
  UserError on a value out of range, before anything is read or written."""

  gazetteer: str | None
  seed: int
  heldout_articles: int
  heldout_fraction: float
  max_context_words: int
  vocab: str | None
  shuffle_seed: int | None = None  # None: corpus order

  def __post_init__(self):
    if self.shuffle_seed is not None and self.shuffle_seed < 0:
      raise UserError(f"shuffle_seed must be >= 0 (or None: corpus order), got {self.shuffle_seed}")
    if self.heldout_articles < 0 or not 0 <= self.heldout_fraction < 0.5:
      raise UserError("heldout_articles must be >= 0 and heldout_fraction in [0, 0.5)")
    if self.max_context_words < 1:
      raise UserError(f"max_context_words must be >= 1, got {self.max_context_words}")


class Stats:
  """Counts for stats.json: per (split, year) articles, sentences, examples and year mentions."""

  def __init__(self, max_context_words: int):
    self.max_context_words = max_context_words
    self.cut = 0  # examples whose sentence was cut to the context window
    self.articles = collections.Counter()
    self.sentences = collections.Counter()
    self.examples = collections.Counter()
    self.date_spans = collections.Counter()
    self.with_year = collections.Counter()
    self.with_pub_year = collections.Counter()

  def merge(self, other: "Stats") -> None:
    """Adds another chunk's counts."""
    self.cut += other.cut
    for name in ("articles", "sentences", "examples", "date_spans", "with_year", "with_pub_year"):
      getattr(self, name).update(getattr(other, name))

  def add_sentence(self, split: str, year: int, spans: list[Span]) -> None:
    key = (split, year)
    self.sentences[key] += 1
    self.examples[key] += len(spans)
    self.date_spans[key] += sum(s.kind == "date" for s in spans)
    years = years_mentioned(spans)
    self.with_year[key] += bool(years)
    self.with_pub_year[key] += year in years

  def summary(self, years: list[int], gazetteer: Gazetteer | None) -> dict:
    def total(counter, split=None, year=None):
      return sum(
        v
        for (s, y), v in counter.items()
        if (split is None or s == split) and (year is None or y == year)
      )

    def share(num, den):
      return num / den if den else 0.0

    sentences = total(self.sentences)
    return {
      "years": years,
      "gazetteer_names": len(gazetteer) if gazetteer is not None else 0,
      "articles": {s: {str(y): self.articles[s, y] for y in years} for s in SPLITS},
      "sentences": {s: {str(y): self.sentences[s, y] for y in years} for s in SPLITS},
      "examples": {s: {str(y): self.examples[s, y] for y in years} for s in SPLITS},
      "totals": {
        "articles": total(self.articles),
        "sentences": sentences,
        "examples": total(self.examples),
        "date_spans": total(self.date_spans),
        "entity_spans": total(self.examples) - total(self.date_spans),
      },
      "context_cap": {
        "words": self.max_context_words,
        "chars": CHARS_PER_WORD * self.max_context_words,
        "examples_cut": self.cut,
      },
      "spans_per_sentence": share(total(self.examples), sentences),
      "share_sentences_mentioning_a_year": share(total(self.with_year), sentences),
      "share_sentences_mentioning_publication_year": share(total(self.with_pub_year), sentences),
      "by_year": {
        str(y): {
          "spans_per_sentence": share(total(self.examples, year=y), total(self.sentences, year=y)),
          "share_sentences_mentioning_a_year": share(
            total(self.with_year, year=y), total(self.sentences, year=y)
          ),
          "share_sentences_mentioning_publication_year": share(
            total(self.with_pub_year, year=y), total(self.sentences, year=y)
          ),
        }
        for y in years
      },
    }
