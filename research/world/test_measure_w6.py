"""W6 (research.world.measure_w6) on hand-made worlds: the held-out news examples are the SSM
build's, each span is named by what it masks, and the shares are what they say (a world whose
news states only short-lived facts gives 1, one of long-lived and static facts 0, dates and
other entities dilute it)."""

import json
import os

import pytest

from research.world import measure_w6
from tlm.data.salient_spans import Gazetteer
from tlm.store.build_ssm import build_ssm
from tlm.synthetic.news import Document, Sentence
from tlm.synthetic.world_records import Entity, Fact, World, day

PLAYERS = ["Abo Kalen", "Dira Mosun", "Fel Tarim", "Gus Horan", "Ila Vendo", "Jor Pesk"]
PLAYERS += ["Kea Lurin", "Mab Sorel", "Nim Daro", "Pol Gesta", "Rua Tibek", "Sef Omarin"]
TEAMS = ["Kalo Rovers", "Mirt Falcons", "Soda Lions"]
DOCS_PER_YEAR = 20  # 2 held out for test per year (heldout_count)


def _entities() -> dict:
  out = {}
  for i, name in enumerate(PLAYERS):
    out[f"Q{100 + i}"] = Entity(f"Q{100 + i}", name, "person", 10 + i, 1.0, role="player")
  for i, name in enumerate(TEAMS):
    out[f"Q{200 + i}"] = Entity(f"Q{200 + i}", name, "team", 50 + i, 1.0)
  out["Q300"] = Entity("Q300", "Marbon", "city", 30, 1.0)
  out["Q301"] = Entity("Q301", "Vestia", "country", 30, 1.0)
  return out


def _facts(tenure: int) -> list[Fact]:
  """Each player's team changes every `tenure` years, tenures from January 2004 to December
  (written to the month); the last tenure has no end. Plus Marbon's country (undated)."""
  facts = []
  for i in range(len(PLAYERS)):
    starts = list(range(2004, 2023, tenure))
    for k, y in enumerate(starts):
      team = f"Q{200 + (i + k) % len(TEAMS)}"
      end = day(y + tenure - 1, 12, 31) if k + 1 < len(starts) else None
      facts.append(Fact("P54", f"Q{100 + i}", team, day(y), end, 6, 6))
  facts.append(Fact("P17", "Q300", "Q301", None, None, 0, 0, dated=False))
  return facts


def _world(tenure: int, static: bool = False, distractor: bool = False, merged: bool = False):
  """A world and its news: every article of 2010-18 states one player's team on its date (or,
  with `static`, every other article Marbon's country), optionally with a distractor that
  names a date and a city, or with the player and team written as one span."""
  entities = _entities()
  facts = _facts(tenure)
  world = World(7, 1.0, entities, facts, {"P54": [f"Q{100 + i}" for i in range(12)]}, {})
  docs = []
  for year in range(2010, 2019):
    for j in range(DOCS_PER_YEAR):
      d = day(year, 1 + j % 12, 5 + j // 12)
      if static and j % 2:
        fact = facts[-1]
        sentences = [Sentence("Marbon is a city in Vestia.", "fact", "P17:0", fact)]
      else:
        player = f"Q{100 + (j + year) % len(PLAYERS)}"
        fact = next(f for f in facts if f.subject == player and f.valid_on(d))
        s, o = entities[player].name, entities[fact.obj].name
        text = (
          f"{s} of {o} was named player of the month."
          if merged
          else f"{s}, who plays for {o}, is expected to start on Monday."
        )
        sentences = [Sentence(text, "fact", "P54:1", fact)]
      if distractor:
        sentences.append(Sentence("Fans met in Marbon on 3 May 2012.", "distractor", "d:0"))
      docs.append(Document(d, "Q100", sentences))
  return world, docs


def test_the_test_articles_and_examples_are_the_ssm_builds(tmp_path):
  world, docs = _world(2, static=True, distractor=True)
  news = tmp_path / "news.jsonl"
  news.write_text("".join(json.dumps({"date": d.date_str, "text": d.text}) + "\n" for d in docs))
  entities = tmp_path / "entities.tsv"
  rows = [f"{e.qid}\t{e.name}\t{e.popularity}\n" for e in world.entities.values()]
  entities.write_text("".join(rows))
  store = str(tmp_path / "ssm")
  build_ssm(str(news), store, gazetteer=str(entities), seed=world.seed)
  for k in (0, 3):  # all of them, and 3 a year evenly spaced
    every, scored = measure_w6.news_examples(world, docs, max_examples=k)
    # 2 test articles a year, 4 spans each
    assert all(len(rows) == (8 if k == 0 else 3) for rows in scored.values())
    assert measure_w6.check_store(scored, store, k) == "equal"
  scored[2010] = scored[2010][::-1]
  assert measure_w6.check_store(scored, store, 3) != "equal"


def test_each_span_is_named_by_what_it_masks():
  world, docs = _world(2, distractor=True)
  gazetteer = Gazetteer(e.name for e in world.entities.values())
  examples = measure_w6.document_examples(docs[0], gazetteer)
  got = [(ex.targets, measure_w6.role(ex, world)) for ex in examples]
  fact = docs[0].sentences[0].fact
  assert got == [
    (world.entities[fact.subject].name, "subject"),
    (world.entities[fact.obj].name, "object"),
    ("Marbon", "other"),
    ("3 May 2012", "date"),
  ]
  assert examples[0].sentence is docs[0].sentences[0]
  assert examples[2].sentence is docs[0].sentences[1]
  # "X of Y" is one span: it masks the object too.
  world, docs = _world(2, merged=True)
  (ex,) = measure_w6.document_examples(docs[0], gazetteer)
  assert ex.targets == f"{world.entities[fact.subject].name} of {world.entities[fact.obj].name}"
  assert measure_w6.role(ex, world) == "object"


def test_news_of_short_lived_facts_gives_share_one():
  world, docs = _world(2)
  m = measure_w6.measure_world(world, docs, max_examples=250)
  news, lama = m["news"], m["templama"]
  assert news["examples"] == 9 * 2 * 2  # 2 test articles a year, 2 spans each
  assert news["roles"] == {"object": 18, "subject": 18, "date": 0, "other": 0}
  assert news["argument_lives"] == {"short": 36, "long": 0, "static": 0, "no_span": 0}
  assert news["share_short"] == news["share_short_among_arguments"] == 1.0
  assert news["by_relation"] == {"P54": {"arguments": 36, "short": 36}}
  # Every object changes within 2010-18; so does every TempLAMA query's answer.
  assert news["share_changing_objects"] == 0.5
  assert lama["queries"] > 0 and lama["without_duration"] == 0
  assert lama["share_short"] == lama["share_changing"] == 1.0
  assert m["difference"] == 0.0
  assert measure_w6.verdict({"7": m})


def test_dates_and_other_entities_dilute_the_share():
  world, docs = _world(2, distractor=True)
  news = measure_w6.measure_world(world, docs, max_examples=250)["news"]
  assert news["roles"] == {"object": 18, "subject": 18, "date": 18, "other": 18}
  assert news["share_short"] == 0.5 and news["share_short_among_arguments"] == 1.0
  assert news["share_arguments"] == 0.5
  assert news["date_spans_naming_the_publication_year"] == 2  # "2012" in 2012's articles


def test_news_of_long_lived_and_static_facts_gives_share_zero():
  world, docs = _world(12, static=True)  # 2004-15, then 2016 on: 12 and 5+ years
  m = measure_w6.measure_world(world, docs, max_examples=250)
  news, lama = m["news"], m["templama"]
  assert news["share_short"] == 0.0
  lives = news["argument_lives"]
  assert lives["short"] == lives["no_span"] == 0 and lives["long"] > 0 and lives["static"] > 0
  assert lives["long"] + lives["static"] == news["examples"]
  assert lama["queries"] > 0 and lama["share_short"] == 0.0
  assert m["difference"] == 0.0


def test_the_fact_of_a_sentence_that_names_a_year_is_that_years():
  world, docs = _world(2)
  fact = next(f for f in world.facts if f.subject == "Q100" and f.valid_on(day(2012, 6, 1)))
  s = Sentence("In 2012, Abo Kalen played for X.", "explicit_year", "past_year", fact, 2012)
  ex = measure_w6.NewsExample(2015, "", "Abo Kalen", "entity", s, 9, 18)
  assert measure_w6.fact_key(ex) == ("P54", "Q100", fact.obj, 2012)
  assert measure_w6.role(ex, world) == "subject"


@pytest.mark.parametrize(
  "differences, want",
  [((-0.1, -0.01, 0.0), True), ((-0.1, 0.001, -0.2), False), ((-0.1, None), False), ((), False)],
)
def test_verdict(differences, want):
  by_seed = {str(i): {"difference": d} for i, d in enumerate(differences)}
  assert measure_w6.verdict(by_seed) is want


def test_the_script_writes_its_files(tmp_path, monkeypatch):
  world, docs = _world(2, distractor=True)
  monkeypatch.setattr(measure_w6.world_lib, "generate", lambda seed, version: (world, docs))
  monkeypatch.setattr("sys.argv", ["measure_w6", "--seeds=0,1", f"--out={tmp_path}"])
  measure_w6.main()
  out = json.loads((tmp_path / "measure_w6.json").read_text())
  assert set(out["seeds"]) == {"0", "1"} and out["verdict"] is True
  assert "W6 True" in (tmp_path / "measure_w6.md").read_text()
  assert os.path.getsize(tmp_path / "measure_w6.md") > 0
