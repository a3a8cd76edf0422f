"""TempLAMA: the released-format loader and the builder, against queries written by hand."""

import json
import os

import pytest

from tests.helpers import run_tlm
from tlm.data import fact_durations, templama
from tlm.data.formatting import SPLITS, TextExample, templama_text
from tlm.data.wikidata_facts import Span, merge_spans
from tlm.errors import DataError, UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "data")
FACTS = os.path.join(FIXTURES, "templama_facts.tsv")
ENTITIES = os.path.join(FIXTURES, "templama_entities.tsv")

NAMES = {
  "Q10": "Red FC",
  "Q11": "Blue United",
  "Q12": "Green Town",
  "Q13": "Gold City",
  "Q20": "Zed Zulu",
  "Q21": "Yan Young",
  "Q30": "Acme",
  "Q31": "Beta Corp",
}


def _expected_fixture_queries():
  """The queries of templama_facts.tsv for 2010-2015 and 3 subjects per relation, by hand.

  Alice (Q1) P54: Red FC 2008-2011, Blue United 2011-2013 and 2014-01..2016 (touching: merged);
    2011 has both, Red FC (more popular) first. Most frequent: Blue United (first in 4 years).
  Bob (Q2) P54: Green Town with no start (from 2010) to 2012, Gold City from 2013 with no end
    (to 2015). Most frequent: a 3-3 tie, Green Town is first earlier.
  Carol (Q3) P54: Red FC 2012, Blue United 2014-2015; no query for 2010, 2011, 2013.
  Dan (Q4) P54: only Red FC (two spans) -> dropped. Eve (Q5) P54: least popular of four
    subjects -> cut. Old Timer (Q6): facts before 2010 -> skipped.
  Red FC (Q10) P286: Zed Zulu 2009-2012, Yan Young 2012-; 2012 has both.
  Alice (Q1) P108: Acme 2010-03-15..2012, Beta Corp 2013-.
  """
  spec = [
    (
      "Q1",
      "P54",
      "Alice Adams plays for _X_.",
      "Q11",
      "Q11",
      {
        2010: ["Q10"],
        2011: ["Q10", "Q11"],
        2012: ["Q11"],
        2013: ["Q11"],
        2014: ["Q11"],
        2015: ["Q11"],
      },
    ),
    (
      "Q2",
      "P54",
      "Bob Brown plays for _X_.",
      "Q12",
      "Q13",
      {2010: ["Q12"], 2011: ["Q12"], 2012: ["Q12"], 2013: ["Q13"], 2014: ["Q13"], 2015: ["Q13"]},
    ),
    (
      "Q3",
      "P54",
      "Carol Clark plays for _X_.",
      "Q11",
      "Q11",
      {2012: ["Q10"], 2014: ["Q11"], 2015: ["Q11"]},
    ),
    (
      "Q10",
      "P286",
      "_X_ is the head coach of Red FC.",
      "Q20",
      "Q21",
      {
        2010: ["Q20"],
        2011: ["Q20"],
        2012: ["Q20", "Q21"],
        2013: ["Q21"],
        2014: ["Q21"],
        2015: ["Q21"],
      },
    ),
    (
      "Q1",
      "P108",
      "Alice Adams works for _X_.",
      "Q30",
      "Q31",
      {2010: ["Q30"], 2011: ["Q30"], 2012: ["Q30"], 2013: ["Q31"], 2014: ["Q31"], 2015: ["Q31"]},
    ),
  ]
  out = {}
  for subject, relation, query, frequent, recent, years in spec:
    for year, answers in years.items():
      id_ = f"{subject}_{relation}_{year}"
      out[id_] = {
        "query": query,
        "answer": [{"wikidata_id": a, "name": NAMES[a]} for a in answers],
        "date": str(year),
        "id": id_,
        "most_frequent_answer": {"wikidata_id": frequent, "name": NAMES[frequent]},
        "most_recent_answer": {"wikidata_id": recent, "name": NAMES[recent]},
        "relation": relation,
      }
  return out


def _read_rows(directory):
  rows = {}
  for split in SPLITS:
    with open(os.path.join(directory, f"{split}.json"), encoding="utf-8") as f:
      rows[split] = [json.loads(line) for line in f]
  return rows


def _build(tmp_path, name="out", **kwargs):
  kwargs.setdefault("max_year", 2015)
  kwargs.setdefault("max_subjects_per_relation", 3)
  out = str(tmp_path / name)
  counts = templama.build_templama(FACTS, ENTITIES, out, **kwargs)
  return out, counts


def test_builder_matches_hand_written_queries(tmp_path):
  out, counts = _build(tmp_path)
  rows = _read_rows(out)
  got = {r["id"]: r for split in rows.values() for r in split}
  assert sum(map(len, rows.values())) == len(got)  # no duplicates across splits
  assert got == _expected_fixture_queries()
  assert counts["queries"]["total"] == 27
  assert counts["queries_with_several_answers"] == 2
  assert counts["facts"] == {
    "read": 21,
    "kept": 15,
    "skipped_before_min_year": 2,
    "skipped_no_template": 1,
    "skipped_unknown_entity": 1,
    "skipped_not_an_entity": 1,
    "skipped_no_date": 1,
  }
  by_year = {y: sum(v.values()) for y, v in counts["by_year"].items()}
  assert by_year == {"2010": 4, "2011": 4, "2012": 5, "2013": 4, "2014": 5, "2015": 5}
  assert {r: sum(v.values()) for r, v in counts["by_relation"].items()} == {
    "P54": 15,
    "P286": 6,
    "P108": 6,
  }


def test_builder_splits_are_subject_disjoint_and_deterministic(tmp_path):
  out, counts = _build(tmp_path)
  rows = _read_rows(out)
  split_of = {}
  for split, split_rows in rows.items():
    for r in split_rows:
      subject = r["id"].split("_")[0]
      assert split_of.setdefault(subject, split) == split, subject
  # Alice is the subject of two relations and sits in one split with both.
  assert {r["relation"] for s in rows.values() for r in s if r["id"].startswith("Q1_")} == {
    "P54",
    "P108",
  }
  assert sorted(split_of) == ["Q1", "Q10", "Q2", "Q3"]
  # 4 subjects: round(0.8) = 1 train, round(0.4) = 0 val, 3 test.
  assert counts["subjects"] == {"train": 1, "val": 0, "test": 3}
  again, _ = _build(tmp_path, "again")
  for name in ("train.json", "val.json", "test.json"):
    with open(os.path.join(out, name), "rb") as a, open(os.path.join(again, name), "rb") as b:
      assert a.read() == b.read()


def test_split_subjects_fractions_and_seed():
  subjects = [f"Q{i}" for i in range(1, 101)]
  split = templama.split_subjects(subjects, seed=0)
  assert sorted(split) == sorted(subjects)
  assert [list(split.values()).count(s) for s in SPLITS] == [20, 10, 70]
  assert templama.split_subjects(list(reversed(subjects)), seed=0) == split
  assert templama.split_subjects(subjects, seed=1) != split


def test_popularity_cut(tmp_path):
  out, counts = _build(tmp_path, max_subjects_per_relation=4)
  # Eve (Q5) is now kept: Red FC 2010-2011, Gold City 2012-2015 (6 more P54 queries).
  rows = [r for split in _read_rows(out).values() for r in split]
  eve = {r["date"]: [a["wikidata_id"] for a in r["answer"]] for r in rows if r["id"][:3] == "Q5_"}
  assert eve == {
    "2010": ["Q10"],
    "2011": ["Q10"],
    "2012": ["Q13"],
    "2013": ["Q13"],
    "2014": ["Q13"],
    "2015": ["Q13"],
  }
  assert sum(counts["by_relation"]["P54"].values()) == 21
  # Dan (Q4) has two objects-spans but a single object: never kept.
  assert not any(r["id"].startswith("Q4_") for r in rows)
  _, counts = _build(tmp_path, "one", max_subjects_per_relation=1)
  assert sum(counts["by_relation"]["P54"].values()) == 6  # Alice only


def test_merge_spans():
  spans = [
    Span("A", 10, 20),
    Span("A", 21, 30),  # touching -> merged
    Span("A", 40, 50),
    Span("A", 45, 48),  # overlapping and nested -> merged
    Span("B", 15, 25),
    Span("A", 32, 35),  # a gap of one month -> kept apart
  ]
  got = [(s.obj, s.start, s.end) for s in merge_spans(spans)]
  assert got == [("A", 10, 30), ("B", 15, 25), ("A", 32, 35), ("A", 40, 50)]


MONTH_ENTITIES = "Q1\tSam Smith\t10\nQ2\tTom Tail\t9\nQ3\tUma Upton\t8\nQ7\tAlpha\t5\nQ8\tBeta\t3\n"
MONTH_FACTS = (
  "P54\tQ1\tQ7\tP582=201403\n"  # no start: from 2014-01
  "P54\tQ1\tQ8\tP580=20140315\tP582=201405\n"
  "P54\tQ1\tQ7\tP580=201406\tP582=201407\n"
  "P54\tQ1\tQ7\tP580=201408\n"  # touches the previous span; no end: to 2014-12
  # Tom: the 2012-2013 fact ends before min_year and is not read: one object left, dropped.
  "P54\tQ2\tQ7\tP580=2012\tP582=2013\n"
  "P54\tQ2\tQ8\tP580=2014\n"
  # Uma: her second object starts after max_year; she is kept, with one answer in 2014.
  "P54\tQ3\tQ7\tP580=201402\tP582=201411\n"
  "P54\tQ3\tQ8\tP580=2015\n"
)


def _month_world(tmp_path):
  facts, entities = tmp_path / "facts.tsv", tmp_path / "entities.tsv"
  facts.write_text(MONTH_FACTS)
  entities.write_text(MONTH_ENTITIES)
  return str(facts), str(entities)


def _answers_by_id(out):
  rows = [r for split in _read_rows(out).values() for r in split]
  return rows, {r["id"]: [a["name"] for a in r["answer"]] for r in rows}


def test_month_granularity(tmp_path):
  facts, entities = _month_world(tmp_path)
  out = str(tmp_path / "month")
  counts = templama.build_templama(
    facts, entities, out, min_year=2014, max_year=2014, granularity="month"
  )
  rows, got = _answers_by_id(out)
  expected = {f"Q1_P54_2014-{m:02d}": ["Alpha"] for m in range(1, 13)}
  expected.update(
    {"Q1_P54_2014-03": ["Alpha", "Beta"], "Q1_P54_2014-04": ["Beta"], "Q1_P54_2014-05": ["Beta"]}
  )
  expected.update({f"Q3_P54_2014-{m:02d}": ["Alpha"] for m in range(2, 12)})
  assert got == expected
  assert counts["facts"]["skipped_before_min_year"] == 1
  sam = [r for r in rows if r["id"].startswith("Q1_")]
  assert {r["most_frequent_answer"]["name"] for r in sam} == {"Alpha"}
  assert {r["most_recent_answer"]["name"] for r in sam} == {"Alpha"}
  examples = [e for split in templama.load_templama_splits(out).values() for e in split]
  assert {(e.date, e.year) for e in examples} == {(f"2014-{m:02d}", 2014) for m in range(1, 13)}


def test_quarter_granularity(tmp_path):
  facts, entities = _month_world(tmp_path)
  out = str(tmp_path / "quarter")
  templama.build_templama(facts, entities, out, min_year=2014, max_year=2014, granularity="quarter")
  _, got = _answers_by_id(out)
  assert got == {
    "Q1_P54_2014-Q1": ["Alpha", "Beta"],
    "Q1_P54_2014-Q2": ["Alpha", "Beta"],
    "Q1_P54_2014-Q3": ["Alpha"],
    "Q1_P54_2014-Q4": ["Alpha"],
    "Q3_P54_2014-Q1": ["Alpha"],
    "Q3_P54_2014-Q2": ["Alpha"],
    "Q3_P54_2014-Q3": ["Alpha"],
    "Q3_P54_2014-Q4": ["Alpha"],
  }


def test_loader_released_format():
  path = os.path.join(FIXTURES, "templama_released.json")
  examples = templama.load_templama(path)
  assert len(examples) == 3  # the blank line is skipped
  first, coach, quarter = examples
  assert first.id == "Q184488_P54_2010" and first.subject == "Q184488"
  assert first.answers == [["Chelsea F.C."]] and first.answer_ids == ["Q9617"]
  assert (first.year, first.date, first.relation) == (2010, "2010", "P54")
  assert first.most_frequent_answer == "Chelsea F.C."
  assert first.most_recent_answer == "Mumbai City FC"
  assert coach.answers == [["Carlo Ancelotti", "Ancelotti"], ["Zinedine Zidane"]]
  assert coach.most_frequent_answer == "Carlo Ancelotti"
  assert templama_text(coach) == TextExample(
    "<extra_id_0> is the head coach of Real Madrid CF.", "Carlo Ancelotti", 2016
  )
  assert (quarter.date, quarter.year, quarter.subject) == ("2014-Q2", 2014, "Q7631017")


def test_loader_reads_what_the_builder_writes(tmp_path):
  out, _ = _build(tmp_path)
  splits = templama.load_templama_splits(out)
  examples = [e for split in splits.values() for e in split]
  by_id = {e.id: e for e in examples}
  alice = by_id["Q1_P54_2011"]
  assert alice.answers == [["Red FC"], ["Blue United"]]
  assert alice.subject == "Q1" and alice.year == 2011
  assert templama_text(alice) == TextExample("Alice Adams plays for <extra_id_0>.", "Red FC", 2011)
  durations = fact_durations.durations_from_buckets(examples)
  # Alice/P54: Red FC first in 2010-2011 (valid 2010-2011), Blue United 2012-2015 but valid
  # from 2011: the run of years in which the first answer is correct.
  assert durations["Q1_P54_2010"] == 2 and durations["Q1_P54_2011"] == 2
  assert durations["Q1_P54_2012"] == 5
  # Carol: 2012 alone, then 2014-2015 (2013 has no query, so the runs are apart).
  assert (durations["Q3_P54_2012"], durations["Q3_P54_2014"]) == (1, 2)


@pytest.mark.parametrize(
  "line, message",
  [
    ("{not json", ":1: malformed JSON"),
    ('{"query": "x _X_"}', ":1: missing field(s) 'answer'"),
    (
      '{"query": "x _X_", "answer": [{"name": "a"}], "date": "2014-13", "id": "a", '
      '"relation": "P54", "most_frequent_answer": {"name": "a"}, '
      '"most_recent_answer": {"name": "a"}}',
      ":1: unparsable date '2014-13'",
    ),
    (
      '{"query": "x _X_", "answer": [{"name": 3}], "date": "2014", "id": "a", '
      '"relation": "P54", "most_frequent_answer": {"name": "a"}, '
      '"most_recent_answer": {"name": "a"}}',
      ":1: an answer needs a 'name'",
    ),
  ],
)
def test_loader_errors_name_file_and_line(tmp_path, line, message):
  path = tmp_path / "bad.json"
  path.write_text(line + "\n")
  with pytest.raises(DataError) as e:
    templama.load_templama(str(path))
  assert str(e.value).startswith(str(path) + message)


def test_builder_refuses_foreign_output_dir(tmp_path):
  out = tmp_path / "world"
  out.mkdir()
  (out / "news.jsonl").write_text("{}\n")
  with pytest.raises(UserError, match="holds other files"):
    templama.build_templama(FACTS, ENTITIES, str(out))
  assert os.listdir(out) == ["news.jsonl"]


def _run(*args):
  return run_tlm(*args, cwd=ROOT, timeout=120)


def test_cli_prints_counts(tmp_path):
  out = tmp_path / "cli"
  proc = _run(
    "--mode=build_templama",
    f"--facts={FACTS}",
    f"--entities={ENTITIES}",
    f"--output_dir={out}",
    "--max_year=2015",
    "--max_subjects_per_relation=3",
  )
  assert proc.returncode == 0, proc.stderr
  assert "27 queries" in proc.stdout and "queries by relation" in proc.stdout
  assert sorted(os.listdir(out)) == ["test.json", "train.json", "val.json"]


@pytest.mark.parametrize(
  "facts, entities, bad, line, message",
  [
    ("P54\tQ1\tQ10\tP580=2010\nP54\tQ1\n", None, "facts", 2, "expected relation<TAB>subject"),
    ("member_of\tQ1\tQ10\tP580=2010\n", None, "facts", 1, "unknown relation 'member_of'"),
    (
      "P54\tQ1\tQ10\tP580=2010\n\nP54\tQ1\tQ11\tP580=2014ab\n",
      None,
      "facts",
      3,
      "unparsable date '2014ab'",
    ),
    ("P54\tQ1\tQ10\tP580=20140231\n", None, "facts", 1, "unparsable date '20140231'"),
    ("P54\tQ1\tQ10\tP580\n", None, "facts", 1, "malformed qualifier 'P580'"),
    (None, "Q1\tAlice\t1\nQ2\tBob\tmany\n", "entities", 2, "popularity 'many' is not a number"),
    (None, "Q1\tAlice\t1\nQ1\tAlicia\t2\n", "entities", 2, "duplicate entity Q1"),
  ],
)
def test_cli_bad_input(tmp_path, facts, entities, bad, line, message):
  paths = {"facts": FACTS, "entities": ENTITIES}
  for name, text in (("facts", facts), ("entities", entities)):
    if text is not None:
      paths[name] = str(tmp_path / f"{name}.tsv")
      with open(paths[name], "w") as f:
        f.write(text)
  out = tmp_path / "out"
  proc = _run(
    "--mode=build_templama",
    f"--facts={paths['facts']}",
    f"--entities={paths['entities']}",
    f"--output_dir={out}",
  )
  assert proc.returncode != 0
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1, proc.stderr
  assert lines[0].startswith(f"error: {paths[bad]}:{line}: {message}"), lines[0]
  assert not out.exists()
  assert os.listdir(tmp_path) == [n for n in os.listdir(tmp_path) if not n.startswith(".out")]


def test_cli_missing_flag():
  proc = _run("--mode=build_templama", f"--facts={FACTS}")
  assert proc.returncode != 0
  assert proc.stderr.strip() == "error: --mode=build_templama needs --entities, --output_dir"
