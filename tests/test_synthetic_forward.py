"""Forward-looking sentences in the synthetic world (`tlm.synthetic.forward`): off
by default (the default world is unchanged), added at their share after fact sentences
they extend, the undated control differing from the dated sentences only in the year's phrase,
the no-leak rule on hand-made facts, the count of later answers they state on a hand-made
world, and the config keys that switch them on."""

import collections
import datetime
import json
import re

import pytest

from tlm import configs, synthetic
from tlm.configs.years import FUTURE_YEARS, TRAIN_YEARS
from tlm.errors import ConfigError, DataError
from tlm.input import datasets
from tlm.input.locations import synthetic_cache_dir
from tlm.synthetic import forward
from tlm.synthetic.news import Document, Sentence
from tlm.synthetic.world_records import Entity, Fact, World, day, stream, year_of

SCALE = 0.2
FOUR_DIGITS = re.compile(r"\b\d{4}\b")
# What `forward.stated_answers` reads of a TempLAMA query (`tlm.data.templama.TempLamaExample`).
Query = collections.namedtuple("Query", "subject relation year answer_ids")


@pytest.fixture(scope="module")
def worlds():
  """The default, dated and undated news of one small world."""
  out = {"off": synthetic.generate(1, SCALE)}
  for mode in forward.MODES:
    out[mode] = synthetic.generate(1, SCALE, synthetic.ForwardSettings(mode, 0.005))
  return out


def _without_forward(docs):
  return [(d.date, d.topic, [s for s in d.sentences if s.kind != forward.KIND]) for d in docs]


def test_the_default_news_is_untouched_and_the_sentences_only_added(worlds):
  (w0, off), (w1, dated) = worlds["off"], worlds["dated"]
  assert not any(s.kind == forward.KIND for d in off for s in d.sentences)
  assert w0.facts == w1.facts and w0.entities == w1.entities
  assert _without_forward(dated) == _without_forward(off)
  assert _without_forward(worlds["undated"][1]) == _without_forward(off)


def test_each_sentence_extends_the_fact_before_it_with_its_planned_end(worlds):
  world, docs = worlds["dated"]
  n = 0
  for doc in docs:
    for j, s in enumerate(doc.sentences):
      if s.kind != forward.KIND:
        continue
      n += 1
      before = doc.sentences[j - 1]
      assert before.kind == "fact" and before.fact == s.fact
      assert s.fact.relation in forward.PLANNED and not s.fact.secondary
      assert s.fact.valid_on(doc.date) and s.until > year_of(doc.date)
      assert s.until == forward.planned_end(world, s.fact, doc.date) == s.year
      assert str(s.until) in s.text and world.entities[s.fact.subject].name in s.text
      if forward.PLANNED[s.fact.relation] == "end":  # the fact's own end
        assert year_of(s.fact.end) == s.until
  assert n > 20


def test_the_share_per_year(worlds):
  _, docs = worlds["dated"]
  per_year: dict[int, list[int]] = {}
  for doc in docs:
    counts = per_year.setdefault(year_of(doc.date), [0, 0])
    counts[0] += sum(s.kind == forward.KIND for s in doc.sentences)
    counts[1] += len(doc.sentences)
  for year, (added, total) in per_year.items():
    assert added == round((total - added) * 0.005 / 0.995), year  # enough candidates each year
    assert 0.003 < added / total < 0.007


def test_the_control_removes_exactly_the_years(worlds):
  dated = [s for d in worlds["dated"][1] for s in d.sentences if s.kind == forward.KIND]
  undated = [s for d in worlds["undated"][1] for s in d.sentences if s.kind == forward.KIND]
  assert len(dated) == len(undated) > 20
  for a, b in zip(dated, undated):
    assert (a.fact, a.until, a.template) == (b.fact, b.until, b.template)
    assert b.year is None and not FOUR_DIGITS.search(b.text)
    assert FOUR_DIGITS.findall(a.text) == [str(a.until)]
    _, dated_phrase, undated_phrase = forward.TEMPLATES[a.fact.relation][int(a.template[-1])]
    assert a.text.replace(dated_phrase.format(E=a.until), undated_phrase) == b.text


def test_same_inputs_same_sentences():
  a = synthetic.generate(2, 0.1, synthetic.ForwardSettings("dated", 0.01))[1]
  b = synthetic.generate(2, 0.1, synthetic.ForwardSettings("dated", 0.01))[1]
  assert [d.text for d in a] == [d.text for d in b]


def test_bad_settings():
  with pytest.raises(ValueError, match="mode"):
    forward.ForwardSettings("sometimes", 0.01)
  with pytest.raises(ValueError, match="share"):
    forward.ForwardSettings("dated", 0.0)


# --- a hand-made world -------------------------------------------------------------------------


def _hand_made() -> tuple[World, list[Document]]:
  """Facts whose planned ends a newspaper could know, and some it could not.

  A plays for T1 on a contract to mid-2019 (then T2); P is minister (office M) of C, whose
  elections fall in 2011, 2015 and 2019, re-elected in 2019; student S's degree ends in 2021;
  team T1's coach K leaves in 2021 (a sacking: unplanned); the mayor L of X, elected 2014 and
  up for election in 2020, is only written about in 2019, after the training years.
  """
  e = lambda q, kind, role="", country="": Entity(q, q.title(), kind, 10, 1.0, False, role, country)  # noqa: E731
  entities = {
    q: e(q, k, r, c)
    for q, k, r, c in [
      ("c", "country", "", ""),
      ("x", "city", "", "c"),
      ("m", "position", "single", "c"),
      ("t1", "team", "", ""),
      ("t2", "team", "", ""),
      ("u", "university", "", ""),
      ("a", "person", "player:striker", ""),
      ("p", "person", "politician", "c"),
      ("s", "person", "student", ""),
      ("k", "person", "coach", ""),
      ("l", "person", "leader:city", ""),
    ]
  }
  facts = [
    Fact("P54", "a", "t1", day(2016), day(2019, 6, 30)),
    Fact("P54", "a", "t2", day(2019, 7, 1), None),
    Fact("P39", "p", "m", day(2011, 5, 1), None),
    Fact("P69", "s", "u", day(2017, 9, 1), day(2021, 6, 30)),
    Fact("P286", "t1", "k", day(2015), day(2021, 3, 1)),
    Fact("P6", "x", "l", day(2014, 9, 1), None),
  ]
  elections = {
    "P39": {"c": [day(2011, 5, 1), day(2015, 5, 1), day(2019, 5, 1)]},
    "P6": {"x": [day(2014, 9, 1), day(2020, 9, 1)]},
  }
  world = World(0, 1.0, entities, facts, {}, {}, elections)
  dates = {"a": day(2017, 3, 1), "p": day(2016, 6, 1), "s": day(2018, 2, 1), "t1": day(2018, 5, 1)}
  dates["x"] = day(2019, 2, 1)
  docs = [
    Document(dates[f.subject], f.subject, [Sentence(f"{f.subject} fact.", "fact", "t", f)])
    for f in facts
    if f.valid_on(dates[f.subject])
  ]
  return world, sorted(docs, key=lambda d: d.date)


def _queries(world) -> list:
  """Every (subject, relation) of 2019 and 2020 with its true answers."""
  out = []
  for year in FUTURE_YEARS:
    first, last = day(year), day(year, 12, 31)
    by_pair: dict = {}
    for f in world.facts:
      if f.overlap(first, last):
        by_pair.setdefault((f.subject, f.relation), []).append(f.obj)
    out += [Query(s, r, year, tuple(objs)) for (s, r), objs in by_pair.items()]
  return out


def test_the_planned_end_rule_on_hand_made_facts():
  world, _ = _hand_made()
  by = {(f.subject, f.obj): f for f in world.facts}
  assert forward.planned_end(world, by["a", "t1"], day(2017, 3, 1)) == 2019  # the contract
  assert forward.planned_end(world, by["a", "t2"], day(2020)) is None  # no end in the world
  assert forward.planned_end(world, by["a", "t1"], day(2020)) is None  # not current then
  assert forward.planned_end(world, by["p", "m"], day(2016, 6, 1)) == 2019  # next election
  assert forward.planned_end(world, by["p", "m"], day(2012)) == 2015  # not the fact's end
  assert forward.planned_end(world, by["p", "m"], day(2020)) is None  # no election scheduled
  assert forward.planned_end(world, by["s", "u"], day(2018)) == 2021
  assert forward.planned_end(world, by["t1", "k"], day(2018)) is None  # a sacking
  assert forward.planned_end(world, by["x", "l"], day(2019, 2, 1)) == 2020
  loan = Fact("P54", "a", "t2", day(2017), day(2017, 9, 1), secondary=True)
  assert forward.planned_end(world, loan, day(2017, 2, 1)) is None


def test_the_count_of_later_answers_stated_on_a_hand_made_world(tmp_path):
  world, docs = _hand_made()
  added = forward.add_forward(
    world, docs, forward.ForwardSettings("dated", 0.9), stream(0, "forward")
  )
  assert added["sentences"] == 4  # a, p, s, x; not the coach
  told = forward.records(docs)
  assert sorted((r.subject, r.until, r.news_year) for r in told) == [
    ("a", 2019, 2017),
    ("p", 2019, 2016),
    ("s", 2021, 2018),
    ("x", 2020, 2019),
  ]
  # Stated in 2010-18: a's 2019 answer (T1, one of two), p's 2019 one (not 2020: the term
  # ends with the 2019 election), s's 2019 and 2020 ones; x's only in 2019's news.
  queries = _queries(world)
  assert len(queries) == 10
  got = forward.stated_answers(told, queries, FUTURE_YEARS, TRAIN_YEARS)
  assert got["queries"] == 10 and got["stated"] == 4
  assert got["stated_per_year"] == {"2019": 3, "2020": 1}
  assert got["pairs"] == 3 and got["sentences"] == 3 and got["sentences_stating"] == 3
  assert forward.stated_answers(told, queries, FUTURE_YEARS, range(2010, 2020))["stated"] == 6
  # The control states none of them with a year; it would cover the same four.
  world, docs = _hand_made()
  forward.add_forward(world, docs, forward.ForwardSettings("undated", 0.9), stream(0, "forward"))
  control = forward.stated_answers(forward.records(docs), queries, FUTURE_YEARS, TRAIN_YEARS)
  assert control["stated"] == 0 and control["undated_covering"] == 4
  # Read back from the file build_world writes, the same.
  path = tmp_path / "forward.jsonl"
  path.write_text("".join(json.dumps(r.as_json()) + "\n" for r in told))
  assert forward.read_records(str(path)) == told


@pytest.mark.parametrize(
  "line, why",
  [
    ("{", "malformed JSON"),
    ('{"date": "2017-01-01"}', "missing"),
    (
      '{"date": "2017", "subject": "a", "relation": "P54", "object": "t", "until": 2019, '
      '"year": 2019, "text": "t"}',
      "YYYY-MM-DD",
    ),
    (
      '{"date": "2017-01-01", "subject": "a", "relation": "P54", "object": "t", '
      '"until": "2019", "year": null, "text": "t"}',
      "integer year",
    ),
    (
      '{"date": "2017-01-01", "subject": "a", "relation": "P54", "object": "t", '
      '"until": 2019, "year": 2020, "text": "t"}',
      "equal to it",
    ),
  ],
)
def test_a_bad_forward_file_names_its_line(tmp_path, line, why):
  path = tmp_path / "forward.jsonl"
  path.write_text("\n" + line + "\n")
  with pytest.raises(DataError, match=f"forward.jsonl:2: .*{why}"):
    forward.read_records(str(path))


# --- the files and the config keys -------------------------------------------------------------


def _files(root):
  return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_build_world_changes_only_the_news(tmp_path):
  synthetic.build_world(str(tmp_path / "off"), seed=3, scale=0.1)
  counts = synthetic.build_world(
    str(tmp_path / "on"), seed=3, scale=0.1, forward=synthetic.ForwardSettings("dated", 0.005)
  )
  off, on = _files(tmp_path / "off"), _files(tmp_path / "on")
  assert set(on) - set(off) == {"forward.jsonl"} and set(off) <= set(on)
  differ = sorted(name for name in off if off[name] != on[name])
  assert differ == ["news.jsonl", "stats.json"]  # the vocabulary and corpora are the default's
  assert "forward" not in json.loads(off["stats.json"]) and counts["forward"]["sentences"] > 0
  told = forward.read_records(str(tmp_path / "on" / "forward.jsonl"))
  news = (tmp_path / "on" / "news.jsonl").read_text()
  assert len(told) == counts["forward"]["sentences"] and all(r.text in news for r in told)


def test_the_config_keys_switch_it_on_in_a_world_of_its_own(tmp_path):
  base = configs.get("tiny_temporal")
  assert (base.data.forward_looking, base.data.forward_share) == ("off", 0.005)
  assert base.data.forward_share == synthetic.FORWARD_SHARE
  default = synthetic_cache_dir(base.data)
  assert default.endswith("world-v4-s0-x1")  # the default world's cache is unchanged
  on = configs.override(base, ["data.forward_looking=undated", "data.forward_share=0.01"])
  assert synthetic_cache_dir(on.data).endswith("world-v4-s0-x1-fwd-undated-0.01")
  v3 = configs.override(base, ["data.world_version=3"])
  assert synthetic_cache_dir(v3.data).endswith("world-v3-s0-x1")
  for bad, why in (
    ("data.forward_looking=yes", "must be one of off, dated, undated"),
    ("data.forward_share=0", r"must be in \(0, 0.1\]"),
    ("data.forward_share=0.5", r"must be in \(0, 0.1\]"),
  ):
    with pytest.raises(ConfigError, match=f"^config key '{bad.split('=')[0]}' {why}"):
      configs.override(base, [bad])
  # A cache directory holds one world: another forward setting is refused, not mixed in.
  cache = str(tmp_path / "cache")
  paths = datasets.ensure_synthetic_data(cache, seed=4, scale=0.1, forward=("dated", 0.005))
  with open(f"{paths.world_dir}/stats.json") as f:
    assert json.load(f)["forward"]["mode"] == "dated"
  with pytest.raises(ConfigError, match="holds a synthetic world with"):
    datasets.ensure_synthetic_data(cache, seed=4, scale=0.1)


def test_dates_are_iso(worlds):
  for r in forward.records(worlds["dated"][1]):
    datetime.date.fromisoformat(r.date)
