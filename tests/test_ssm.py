"""Salient span masking: sentence splitting, spans, examples, and the build_ssm mode."""

import json
import os
import random
import re

import numpy as np
import pytest

from tests.helpers import run_tlm
from tlm import configs
from tlm.data import salient_spans, ssm
from tlm.data.formatting import SENTINEL, SPLITS
from tlm.data.salient_spans import Gazetteer, Span, find_spans, split_sentences
from tlm.errors import DataError
from tlm.store import store
from tlm.store.build_ssm import build_ssm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize(
  "text, sentences",
  [
    (
      "Mr. Smith went to Washington. He arrived on Jan. 5 at 3 p.m. and left.",
      ["Mr. Smith went to Washington.", "He arrived on Jan. 5 at 3 p.m. and left."],
    ),
    (
      "The U.S. economy grew 2.5 percent in 2014. Analysts expected more.",
      ["The U.S. economy grew 2.5 percent in 2014.", "Analysts expected more."],
    ),
    # An initialism ends the sentence when a common opener follows, not before a name.
    (
      "She moved to Washington, D.C. The city welcomed her. The U.S. Senate agreed.",
      ["She moved to Washington, D.C.", "The city welcomed her.", "The U.S. Senate agreed."],
    ),
    (
      "John F. Kennedy was born in 1917. He became president in 1961!",
      ["John F. Kennedy was born in 1917.", "He became president in 1961!"],
    ),
    (
      '"We won," he said. "It was hard." Then he left.',
      ['"We won," he said.', '"It was hard."', "Then he left."],
    ),
    ("Is it over? Yes it is... Maybe not.", ["Is it over?", "Yes it is...", "Maybe not."]),
    (
      "Dr. Jones met Gov. Brown at St. Mary's Hospital.\nSecond paragraph. Another one.",
      ["Dr. Jones met Gov. Brown at St. Mary's Hospital.", "Second paragraph.", "Another one."],
    ),
    (
      "Prices fell to $3.50 on average. Sales rose 4.2% in No. 3 markets.",
      ["Prices fell to $3.50 on average.", "Sales rose 4.2% in No. 3 markets."],
    ),
    (
      "The event is on Sept. 12. It starts at noon.",
      ["The event is on Sept. 12.", "It starts at noon."],
    ),
    (
      "Apple Inc. said it would. Shares of Acme Corp. Ltd. rose.",
      ["Apple Inc. said it would.", "Shares of Acme Corp. Ltd. rose."],
    ),
    ("lower case after a period. stays together", ["lower case after a period. stays together"]),
    ("", []),
  ],
)
def test_split_sentences(text, sentences):
  assert split_sentences(text) == sentences


@pytest.mark.parametrize(
  "sentence, spans",
  [
    (
      "On May 3, 2014, President Barack Obama met Angela Merkel in Berlin.",
      [
        ("May 3, 2014", "date"),
        ("Barack Obama", "entity"),
        ("Angela Merkel", "entity"),
        ("Berlin", "entity"),
      ],
    ),
    (
      "The Bank of America said profits rose 3.5 percent in March 2014.",
      [("Bank of America", "entity"), ("March 2014", "date")],
    ),
    (
      "Leonardo da Vinci painted the Mona Lisa; in the 2000s it toured.",
      [("Leonardo da Vinci", "entity"), ("Mona Lisa", "entity"), ("2000s", "date")],
    ),
    (
      "Procter & Gamble's shares fell on 3 May 2014 after the 1990s boom.",
      [("Procter & Gamble", "entity"), ("3 May 2014", "date"), ("1990s", "date")],
    ),
    # Amounts are not years; ISO dates are dates.
    (
      "He was born in 1985 and paid $2014 for 2,014 items worth 2014.5 on 2014-05-03.",
      [("1985", "date"), ("2014-05-03", "date")],
    ),
    (
      "In 2019, Liverpool F.C. won the UEFA Champions League!",
      [("2019", "date"), ("Liverpool F.C.", "entity"), ("UEFA Champions League", "entity")],
    ),
    # A single capitalised opener is not an entity; a two-word one is.
    (
      "Obama said the University of the West Indies is great.",
      [("University of the West Indies", "entity")],
    ),
    (
      "Theresa May became Prime Minister in July 2016.",
      [("Theresa May", "entity"), ("July 2016", "date")],
    ),
    # Titles are dropped; "St." belongs to the name; a lone month is not an entity.
    (
      "Dr. Jones met Gov. Brown at St. Mary's Hospital in May.",
      [("Jones", "entity"), ("Brown", "entity"), ("St. Mary's Hospital", "entity")],
    ),
    (
      "The talks on Monday lasted until Jan. 5 and then 12 June.",
      [("Jan. 5", "date"), ("12 June", "date")],
    ),
    (
      'He said: "The Beatles were the best band of the 1960s."',
      [("Beatles", "entity"), ("1960s", "date")],
    ),
    ("Microsoft and Apple compete.", [("Apple", "entity")]),
    ("Shares of Microsoft and Apple rose.", [("Microsoft", "entity"), ("Apple", "entity")]),
    ("Bank of America rose.", [("America", "entity")]),  # the cost of the rule above
    ("nothing salient here at all.", []),
  ],
)
def test_find_spans(sentence, spans):
  got = find_spans(sentence)
  assert [(s.text, s.kind) for s in got] == spans
  for s in got:
    assert sentence[s.start : s.end] == s.text


def test_gazetteer_longest_first_and_beyond_capitalisation():
  names = Gazetteer(["Washington, D.C.", "Washington", "eBay", "Liverpool", "the", "Red Sox"])
  assert len(names) == 5  # "the" has no capital letter: not a name
  sentence = "She moved to Washington, D.C. last year."
  assert [s.text for s in find_spans(sentence)] == ["Washington", "D.C."]
  assert [s.text for s in find_spans(sentence, names)] == ["Washington, D.C."]
  # Known single-word names count even at the start of a sentence or without a leading capital.
  assert [s.text for s in find_spans("Liverpool won the league.", names)] == ["Liverpool"]
  assert find_spans("Liverpool won the league.") == []
  assert [s.text for s in find_spans("He sold it on eBay in 2019.", names)] == ["eBay", "2019"]
  # A longer heuristic name beats a shorter gazetteer name inside it.
  assert [s.text for s in find_spans("He joined the Boston Red Sox.", names)] == ["Boston Red Sox"]


def test_gazetteer_from_entities_tsv_and_name_list(tmp_path):
  tsv = tmp_path / "entities.tsv"
  tsv.write_text("Q1\tRed FC\t50\nQ2\tBlue United\t40\n")
  assert [s.text for s in find_spans("Red FC lost.", Gazetteer.from_file(str(tsv)))] == ["Red FC"]
  plain = tmp_path / "names.txt"
  plain.write_text("Red FC\n\nBlue United\n")
  assert len(Gazetteer.from_file(str(plain))) == 2


def test_mask_examples():
  sentence = "Alice Adams joined Red FC in 2014."
  examples = ssm.mask_examples(sentence, find_spans(sentence), "2014-05-03", 2014)
  assert examples == [
    {
      "inputs": "<extra_id_0> joined Red FC in 2014.",
      "targets": "Alice Adams",
      "date": "2014-05-03",
      "year": 2014,
    },
    {
      "inputs": "Alice Adams joined <extra_id_0> in 2014.",
      "targets": "Red FC",
      "date": "2014-05-03",
      "year": 2014,
    },
    {
      "inputs": "Alice Adams joined Red FC in <extra_id_0>.",
      "targets": "2014",
      "date": "2014-05-03",
      "year": 2014,
    },
  ]


@pytest.mark.parametrize("n, k", [(1, 0), (4, 0), (5, 1), (10, 1), (14, 1), (15, 2), (30000, 2000)])
def test_heldout_count(n, k):
  assert ssm.heldout_count(n) == k


def _write_news(path, rows):
  with open(path, "w", encoding="utf-8") as f:
    for row in rows:
      f.write(json.dumps(row) + "\n")


def _read_table(out, split, year):
  """(inputs, targets) of one table of a built store."""
  table = store.Store(str(out)).table(split, year)
  return table.texts(np.arange(len(table))) if len(table) else []


def test_build_ssm_exact_small_corpus(tmp_path):
  news = tmp_path / "news.jsonl"
  _write_news(
    news,
    [
      {"date": "2014-05-03", "text": "Alice Adams joined Red FC in 2014. She left in May 2016."},
      {"date": "2015", "text": "Nothing happened. Bob Brown coached Blue United in 2013."},
    ],
  )
  out = tmp_path / "ssm"
  stats = build_ssm(str(news), str(out))
  assert sorted(os.listdir(out)) == ["manifest.json", "stats.json", "test", "train", "val"]
  for split in ("val", "test"):
    assert sorted(os.listdir(out / split)) == [
      f"{y}.text.{ext}" for y in (2014, 2015) for ext in ("bin", "idx")
    ]
    assert _read_table(out, split, 2014) == []  # 1 article: nothing held out
  assert _read_table(out, "train", 2014) == [
    ("<extra_id_0> joined Red FC in 2014.", "Alice Adams"),
    ("Alice Adams joined <extra_id_0> in 2014.", "Red FC"),
    ("Alice Adams joined Red FC in <extra_id_0>.", "2014"),
    ("She left in <extra_id_0>.", "May 2016"),
  ]
  assert [t for _, t in _read_table(out, "train", 2015)] == ["Bob Brown", "Blue United", "2013"]
  assert store.Store(str(out)).table("train", 2015)[0].year == 2015
  # 4 sentences, 7 spans; 3 mention a year, 1 its publication year (2014 in 2014).
  assert stats["totals"] == {
    "articles": 2,
    "sentences": 4,
    "examples": 7,
    "date_spans": 3,
    "entity_spans": 4,
  }
  assert stats["spans_per_sentence"] == 7 / 4
  assert stats["share_sentences_mentioning_a_year"] == 3 / 4
  assert stats["share_sentences_mentioning_publication_year"] == 1 / 4
  assert stats["examples"]["train"] == {"2014": 4, "2015": 3}
  assert stats["by_year"]["2015"]["share_sentences_mentioning_a_year"] == 1 / 2
  with open(out / "stats.json") as f:
    assert json.load(f) == stats


def test_build_ssm_heldout_split_by_article(tmp_path):
  news = tmp_path / "news.jsonl"
  rows = [
    {"date": f"2012-01-{d:02d}", "text": f"Person Number{d} met Team Number{d}."}
    for d in range(1, 21)
  ]
  rows += [{"date": "2013-06", "text": f"Person Other{d} met Team Other{d}."} for d in range(4)]
  _write_news(news, rows)
  stats = build_ssm(str(news), str(tmp_path / "a"), seed=3)
  # 2012: 20 articles -> round(2.0) = 2 each for val and test; 2013: 4 -> none held out.
  assert stats["articles"] == {
    "train": {"2012": 16, "2013": 4},
    "val": {"2012": 2, "2013": 0},
    "test": {"2012": 2, "2013": 0},
  }
  by_article = {}
  for split in SPLITS:
    for inputs, targets in _read_table(tmp_path / "a", split, 2012):
      article = re.search(r"Number(\d+)", inputs + targets).group(1)  # one article per number
      by_article.setdefault(article, set()).add(split)
  assert len(by_article) == 20 and all(len(s) == 1 for s in by_article.values())
  # Deterministic under the seed; another seed holds out other articles.
  build_ssm(str(news), str(tmp_path / "b"), seed=3)
  build_ssm(str(news), str(tmp_path / "c"), seed=4)
  for name in os.listdir(tmp_path / "a" / "val"):
    a = (tmp_path / "a" / "val" / name).read_bytes()
    assert a == (tmp_path / "b" / "val" / name).read_bytes()
  assert _read_table(tmp_path / "a", "val", 2012) != _read_table(tmp_path / "c", "val", 2012)


def test_parse_news_date():
  assert ssm.parse_news_date("2014-05-03", "f", 1) == 2014
  assert ssm.parse_news_date("2014-05", "f", 1) == 2014
  assert ssm.parse_news_date("2014", "f", 1) == 2014
  for bad in ("2014-02-30", "2014-13", "14-05-03", "May 2014", 2014, None):
    with pytest.raises(DataError, match="^f:7: unparsable date"):
      ssm.parse_news_date(bad, "f", 7)


def _run(*args):
  return run_tlm(*args, cwd=ROOT, timeout=120)


def test_cli_build_ssm(tmp_path):
  news = tmp_path / "news.jsonl"
  _write_news(news, [{"date": "2014-05-03", "text": "Alice Adams joined Red FC in 2014."}])
  entities = tmp_path / "entities.tsv"
  entities.write_text("Q1\tAlice\t1\n")
  proc = _run(
    "--mode=build_ssm",
    f"--news={news}",
    f"--output_dir={tmp_path / 'out'}",
    f"--entities={entities}",
  )
  assert proc.returncode == 0, proc.stderr
  assert "3 examples (1 dates, 2 entities) from 1 sentences of 1 articles" in proc.stdout
  assert (
    "inputs capped at 128 words (1280 characters) of context around the span: 0 examples cut"
    in (proc.stdout)
  )


@pytest.mark.parametrize(
  "lines, line, message",
  [
    (['{"date": "2014", "text": "A."}', '{"date": "2014", "text": '], 2, "malformed JSON"),
    (['{"date": "2014", "text": "A."}', "", '{"date": "2014"}'], 3, "missing field(s) 'text'"),
    (['{"date": "2014-13-01", "text": "A."}'], 1, "unparsable date '2014-13-01'"),
    (['{"date": "2014", "text": ["A."]}'], 1, "'text' must be a string"),
    (["[1, 2]"], 1, "expected a JSON object"),
  ],
)
def test_cli_bad_news(tmp_path, lines, line, message):
  news = tmp_path / "news.jsonl"
  news.write_text("\n".join(lines) + "\n")
  out = tmp_path / "out"
  proc = _run("--mode=build_ssm", f"--news={news}", f"--output_dir={out}")
  assert proc.returncode != 0
  err = proc.stderr.strip().splitlines()
  assert len(err) == 1, proc.stderr
  assert err[0].startswith(f"error: {news}:{line}: {message}"), err[0]
  assert sorted(os.listdir(tmp_path)) == ["news.jsonl"]  # no output, no temporaries


# --- Long text: linear-time helpers, examples capped around their span ------------------------


def test_linear_helpers_equal_the_slicing_originals():
  # The sentence splitter scans back for the word before a period instead of slicing the text
  # before it, and starts _BREAK matches only at the first mark of a run: same results.
  old_break = re.compile(r"[.!?]+[\"”’')\]]*\s+")
  rng = random.Random(0)
  for _ in range(3000):
    text = "".join(rng.choice("ab A.!?\"' \t\u00a0") for _ in range(rng.randrange(1, 30)))
    end = rng.randrange(len(text) + 1)
    before = text[:end]
    want = before.rsplit(None, 1)[-1] if before.strip() else ""
    assert salient_spans._word_before(text, end) == want, (text, end)
    assert [m.span() for m in salient_spans._BREAK.finditer(text)] == [
      m.span() for m in old_break.finditer(text)
    ], text


def _span(sentence, text):
  start = sentence.index(text)
  return Span(start, start + len(text), text, "entity")


@pytest.mark.parametrize(
  "sentence, target, want",
  [
    ("a b c Red FC d e f g", "Red FC", "b c <extra_id_0> d e"),
    # A short side leaves its share to the other.
    ("Red FC a b c d e f", "Red FC", "<extra_id_0> a b c d"),
    ("a b c d e f Red FC.", "Red FC", "c d e f <extra_id_0>."),  # "." is of the span's word
    ("a b c Obama's d e f g", "Obama", "b c <extra_id_0>'s d e"),
    # At most 4 words of context: this sentence is kept whole.
    ("a b Red FC c d", "Red FC", "a b <extra_id_0> c d"),
    # 10 characters per word: long words are cut too (here to 40 characters of context).
    ("x" * 30 + " 2014 " + "y" * 40, "2014", "x" * 19 + " <extra_id_0> " + "y" * 19),
    ("x" * 30 + " 2014", "2014", "x" * 30 + " <extra_id_0>"),
    ("x" * 50 + " 2014.", "2014", "x" * 38 + " <extra_id_0>."),  # 39 + 1
  ],
)
def test_mask_examples_window(sentence, target, want):
  example = ssm.mask_examples(sentence, [_span(sentence, target)], "2014", 2014, 4)[0]
  assert example["inputs"] == want
  assert example["targets"] == target


def test_cap_is_the_configured_input_length():
  assert ssm.MAX_CONTEXT_WORDS == configs.DataConfig.input_length


def test_build_ssm_caps_a_long_sentence(tmp_path):
  # One 6 KB "sentence" with 1000 year mentions and a normal sentence after it.
  years = ", ".join(str(1900 + i % 200) for i in range(1000))
  text = f"Red FC won in {years} and more. Alice Adams joined Red FC in 2014."
  news = tmp_path / "news.jsonl"
  news.write_text(json.dumps({"date": "2014-05-03", "text": text}) + "\n")
  stats = build_ssm(str(news), str(tmp_path / "out"))
  rows = [{"inputs": i, "targets": t} for i, t in _read_table(tmp_path / "out", "train", 2014)]
  assert stats["totals"]["examples"] == len(rows) == 1001 + 3
  for row in rows:
    assert len(row["inputs"].split()) <= 129  # 128 words of context and the sentinel
    assert len(row["inputs"]) <= 1280 + len(SENTINEL)
  assert sum(len(json.dumps(r)) for r in rows) < 1_000_000  # uncapped: 6 MB
  assert stats["context_cap"] == {"words": 128, "chars": 1280, "examples_cut": 1001}
  whole = ssm.mask_examples(
    "Alice Adams joined Red FC in 2014.",
    find_spans("Alice Adams joined Red FC in 2014."),
    "2014-05-03",
    2014,
  )
  assert rows[-3:] == [{"inputs": e["inputs"], "targets": e["targets"]} for e in whole]
  assert rows[-3]["inputs"] == "<extra_id_0> joined Red FC in 2014."  # short: whole
  # The spans keep their context on both sides: the year 600 mentions in.
  middle = next(r for r in rows if r["targets"] == "1999" and "2000" in r["inputs"])
  before, after = middle["inputs"].split("<extra_id_0>")
  assert 60 <= len(before.split()) <= 68 and 60 <= len(after.split()) <= 68
