"""The gazetteer's trie matcher (`tlm.data.salient_spans.Gazetteer`) against the scan it
replaced, kept here as the reference: the same spans on the world's news, on names cut from
that news at every token boundary (long names, names inside names, lower-case ones), on
hand-made overlapping names, and on random texts built from the tokenizer's edge cases."""

import bisect
import collections
import json
import os
import random
import re
import subprocess
import sys

import pytest

from tlm.data import salient_spans
from tlm.data.salient_spans import Gazetteer, find_spans, split_sentences
from tlm.store.build_ssm import build_ssm

STORE_FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "data", "store")
NEWS = os.path.join(STORE_FIXTURES, "news_sample.jsonl")  # every 40th article of the world's news
ENTITIES = os.path.join(STORE_FIXTURES, "entities_sample.tsv")  # the world's 520 entities


class ScanGazetteer:
  """The matcher before the trie, unchanged: every name sharing a token's first word is tried,
  longest (in tokens) first, then in reverse name order; the first that spells the text wins."""

  def __init__(self, names):
    self._by_first = collections.defaultdict(set)
    for name in names:
      name = name.strip()
      words = [m.group(0) for m in salient_spans._TOKEN.finditer(name)]
      if words and any(ch.isupper() for ch in name):
        self._by_first[words[0]].add((len(words), name))
    self._by_first = {k: sorted(v, reverse=True) for k, v in self._by_first.items()}

  def __len__(self):
    return sum(map(len, self._by_first.values()))

  def find(self, sentence, tokens):
    spans = []
    for i, tok in enumerate(tokens):
      for length, name in self._by_first.get(tok.group(0), ()):
        if i + length <= len(tokens):
          end = tokens[i + length - 1].end()
          if end - tok.start() == len(name) and sentence[tok.start() : end] == name:
            spans.append(salient_spans.Span(tok.start(), end, name, "entity"))
            break
    return spans


def _sentences(path=NEWS):
  with open(path, encoding="utf-8") as f:
    return [s for line in f for s in split_sentences(json.loads(line)["text"])]


def _names(path=ENTITIES):
  with open(path, encoding="utf-8") as f:
    return [line.split("\t")[1] for line in f if line.strip()]


def _same(names, sentences):
  """Asserts equal matches and spans of both matchers; returns how many names were found."""
  new, old = Gazetteer(names), ScanGazetteer(names)
  assert len(new) == len(old)
  found = 0
  for sentence in sentences:
    tokens = list(salient_spans._TOKEN.finditer(sentence))
    want = old.find(sentence, tokens)
    assert new.find(sentence, tokens) == want, sentence
    assert find_spans(sentence, new) == find_spans(sentence, old), sentence
    found += len(want)
  return found


def test_same_spans_on_the_worlds_news_and_entities():
  sentences = _sentences()
  assert len(sentences) > 1000
  assert _same(_names(), sentences) > 1000


def test_same_spans_with_names_cut_from_the_news_at_every_token_boundary():
  """Names that start and end at any of the news' tokens (up to six), with the text between
  as written: names inside names and beside them, several per token, lower-case first words."""
  sentences = _sentences()[::3]
  rng = random.Random(0)
  names = _names()
  for sentence in sentences:
    tokens = list(salient_spans._TOKEN.finditer(sentence))
    for _ in range(4):
      i = rng.randrange(len(tokens))
      j = min(len(tokens), i + rng.randint(1, 6))
      names.append(sentence[tokens[i].start() : tokens[j - 1].end()])
  assert _same(names, sentences) > 1500


HAND_MADE = [
  "Bank of America",
  "Bank of America Corp.",
  "Bank",
  "America",
  "of America",
  "The Bank",
  "Washington, D.C.",
  "Washington",
  "D.C.",
  "St. Louis",
  "St",
  "John F. Kennedy",
  "F. Kennedy",
  "John F.",
  "A. B.",
  "B.",
  "B",
  "Procter & Gamble",
  "Procter &",
  "& Gamble",
  "AT&T",
  "AT",
  "Coca-Cola",
  "Coca",
  "Smith's",
  "Smith",
  "O'Neill",
  "eBay",
  "the",
  "  Padded Name  ",
  "Red Sox",
  "Red Sox Red",
  "Sox Red Sox",
  "(Acme) Ltd",
  "Acme Ltd.",
  "Acme Ltd",
]


@pytest.mark.parametrize(
  "sentence",
  [
    "Shares of Bank of America Corp. rose in Washington, D.C. on Monday.",
    "The Bank of America and the bank of America met in St. Louis.",
    "John F. Kennedy and F. Kennedy and John F. and A. B. Smith and B. Jones and B.",
    "Procter & Gamble sold AT&T and Coca-Cola to Smith's friend O'Neill on eBay.",
    "Red Sox Red Sox Red Sox Red, Padded Name, (Acme) Ltd and Acme Ltd. or Acme Ltd",
  ],
)
def test_same_spans_on_hand_made_overlapping_names(sentence):
  _same(HAND_MADE, [sentence])


def test_same_spans_on_random_texts_of_the_tokenizers_edge_cases():
  """Tokens whose extent depends on what follows them ("F." before a capital, "Co." before a
  space, "A.B." initialisms, "&" inside and between words), names cut from such texts at any
  character (so that some end inside a token or on punctuation), and whole random strings."""
  rng = random.Random(1)
  pieces = ["A", "B", "F.", "St.", "Co.", "A.B.", "&", "x", "Ab", "'s", "-", ".", ",", "Z"]
  pieces += ["\u00c9cole", "\u01c5", "\u24b6", "\u00bd", "\u0661", "stra\u00dfe", "_"]
  seps = [" ", "  ", "", ", ", ". ", " & ", "-", "\u00a0", "\t"]
  texts = []
  for _ in range(400):
    parts = [rng.choice(pieces) + rng.choice(seps) for _ in range(rng.randint(1, 8))]
    texts.append("".join(parts).strip())
  names = [t[rng.randrange(len(t)) :][: rng.randint(1, 12)] for t in texts if t] + HAND_MADE
  names += [rng.choice(texts) for _ in range(100)]
  assert _same(names, texts) > 300


def test_work_per_token_does_not_grow_with_names_sharing_a_first_word(monkeypatch):
  """The same binary searches with 100K names starting with "The" as with two: a walk stops
  where no name continues the text (counted, not timed; the scan tried every such name)."""
  sentence = "The Real Thing met The Nameless and The Name000042 today."
  tokens = list(salient_spans._TOKEN.finditer(sentence))
  real, calls = bisect.bisect_left, []

  def counting(*args):
    calls.append(1)
    return real(*args)

  monkeypatch.setattr(salient_spans.bisect, "bisect_left", counting)
  counts = []
  for extra in (["The Name000042"], [f"The Name{i:06d}" for i in range(100_000)]):
    calls.clear()
    spans = Gazetteer(extra + ["The Real Thing"]).find(sentence, tokens)
    assert [s.text for s in spans] == ["The Real Thing", "The Name000042"]
    counts.append(len(calls))
  assert 0 < counts[0] == counts[1] <= 2 * len(tokens)


def test_names_counted_once_and_lower_case_ones_ignored():
  g = Gazetteer(["Red FC", " Red FC ", "red fc", "Red FC", "...", ""])
  assert len(g) == len(ScanGazetteer(["Red FC", " Red FC ", "red fc", "Red FC", "...", ""])) == 1
  assert g.nbytes() > 0


def test_the_run_of_a_first_word_is_every_name_starting_with_it():
  names = ["Ab", "Ab Cd", "Ab\uffff", "Ab\U0010ffff Z", "Aa Zz", "Ac", "Abc", "B", "A\U0010ffff"]
  gazetteer = Gazetteer(names)
  for word in ["Ab", "A", "Abc", "B", "Zed", "A\U0010ffff", "\U0010ffff"]:
    lo, hi = gazetteer._run(word)
    assert gazetteer._names[lo:hi] == sorted(n for n in names if n.startswith(word)), word


def test_build_ssm_reports_the_names_loaded_and_their_memory(tmp_path, capsys):
  """The command line prints one line (names, load time, memory); a library call is quiet
  unless given `progress`."""

  lines = []
  build_ssm(NEWS, str(tmp_path / "a"), gazetteer=ENTITIES, progress=lines.append)
  assert capsys.readouterr().out == ""
  assert len(lines) == 1
  assert re.fullmatch(
    rf"gazetteer {re.escape(ENTITIES)}: 520 names loaded in \d+\.\ds, \d+\.\d MB in memory "
    r"\(per process\)",
    lines[0],
  )
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run(
    [sys.executable, "run.py", "--mode=build_ssm", f"--news={NEWS}", f"--entities={ENTITIES}"]
    + [f"--output_dir={tmp_path / 'b'}"],
    cwd=root,
    capture_output=True,
    text=True,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  assert f"gazetteer {ENTITIES}: 520 names loaded in " in proc.stdout
