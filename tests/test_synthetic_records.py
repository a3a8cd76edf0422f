"""Tests of the synthetic world's generators on their in-memory records (tlm/synthetic/).

The change processes on a scale-5 world without news (enough subjects to measure rates
tightly; its facts go through facts.tsv and the independent reader of tests/helpers.py), and
the news sentences of a scale-0.2 world: what each one states, paraphrases, popularity.
"""

import math

import numpy as np
import pytest

from tests.helpers import TEMPLAMA, WINDOW, group, primaries, read_facts
from tlm import synthetic
from tlm.synthetic.facts import generate_world
from tlm.synthetic.news import news_interval

# --- change processes ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_world():
  """A scale-5 world without news: enough subjects to measure rates tightly."""
  return generate_world(synthetic.WORLD, 0, 5.0)


@pytest.fixture(scope="module")
def big_facts(big_world, tmp_path_factory):
  """The scale-5 world's facts, written as facts.tsv lines and read back."""
  path = tmp_path_factory.mktemp("big") / "facts.tsv"
  path.write_text("".join(synthetic.format_fact(f) + "\n" for f in big_world.facts))
  return read_facts(str(path))


@pytest.mark.parametrize(
  "rel", ["P54", "P39", "P108", "P102", "P286", "P488", "P6", "P127", "P159"]
)
def test_mean_tenure_matches_the_configured_rate(big_facts, rel):
  """Changes per subject-year inside 2004-2022 = 1 / mean tenure for a stationary process."""
  spec = synthetic.WORLD.relations[rel]
  subjects = group(big_facts, rel)
  changes = 0
  for facts in subjects.values():
    changes += sum(
      1 for f in primaries(facts) if f["start"] and WINDOW[0] <= f["start"] <= WINDOW[1]
    )
  movers = len(subjects) - round(len(subjects) * spec.loyal_share)
  years = (WINDOW[1] - WINDOW[0]).days / 365.25
  measured = movers * years / changes
  # Relative spread of a renewal count: sqrt(cv^2 / events); elections: Bernoulli changes.
  cv2 = 1.0 / spec.shape if spec.dynamics == "renewal" else 1.0 - spec.change_prob
  tolerance = 4 * math.sqrt(cv2 / changes) + 0.03
  expected = spec.expected_tenure_years
  assert abs(measured / expected - 1) < tolerance, (rel, measured, expected, tolerance)


def test_degree_lengths_match_the_configured_mean(big_facts):
  spec = synthetic.WORLD.relations["P69"]
  lengths = []
  for facts in group(big_facts, "P69").values():
    for f in primaries(facts):
      if f["start"] and f["end"]:
        lengths.append((f["end"] - f["start"]).days / 365.25)
  sd = spec.mean_years / math.sqrt(spec.shape)
  assert abs(np.mean(lengths) - spec.mean_years) < 4 * sd / math.sqrt(len(lengths))
  # Studies end: nobody holds a P69 object for more than three degrees.
  assert max(len(primaries(f)) for f in group(big_facts, "P69").values()) <= 3


def test_change_rates_order_as_configured(big_facts):
  """Head coaches change most often, party membership least (docs/reproduction.md,
  The synthetic world)."""
  changes = {}
  for rel in ("P54", "P39", "P108", "P102", "P286", "P488", "P6", "P127"):
    subjects = group(big_facts, rel)
    changes[rel] = sum(len(primaries(f)) - 1 for f in subjects.values()) / len(subjects)
  assert max(changes, key=changes.get) == "P286", changes
  assert min(changes, key=changes.get) == "P102", changes


def test_single_holder_positions_and_coaches_never_overlap(big_world):
  """A ministry or a speakership has one holder at a time; a coach coaches one team."""
  held = {}
  for f in big_world.facts:
    single = f.relation == "P39" and big_world.entities[f.obj].role == "single"
    if (single or f.relation == "P286") and not f.secondary:
      held.setdefault(f.obj, []).append((f.start or 0, f.end or 10**7))
  assert len(held) > 50
  for spans in held.values():
    spans.sort()
    for (_, end), (start, _) in zip(spans, spans[1:]):
      assert start >= end  # handing over on the same day is allowed


# --- news sentences --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def records():
  return synthetic.generate(0, 0.2)


def test_fact_sentences_hold_on_the_document_date(records):
  world, docs = records
  kinds = {}
  for doc in docs:
    for s in doc.sentences:
      kinds[s.kind] = kinds.get(s.kind, 0) + 1
      if s.kind == "fact":
        assert news_interval(s.fact, doc.date, doc.date) is not None, (doc.date_str, s)
        assert world.entities[s.fact.subject].name in s.text
        assert world.entities[s.fact.obj].name in s.text
  total = sum(kinds.values())
  assert 0.5 < kinds["fact"] / total < 0.7
  assert 0.25 < kinds["distractor"] / total < 0.45
  assert 0.02 < kinds["past_future"] / total < 0.04


def test_several_paraphrases_per_relation(records):
  _, docs = records
  templates = {}
  for doc in docs:
    for s in doc.sentences:
      if s.kind == "fact":
        templates.setdefault(s.fact.relation, []).append(s.template)
  for rel in TEMPLAMA:
    used = templates[rel]
    assert len(set(used)) >= 4, rel
    share = used.count(f"{rel}:templama") / len(used)
    assert share < 0.05, (rel, share)


def test_popular_subjects_are_mentioned_more(records):
  world, docs = records
  mentions = {}
  for doc in docs:
    for s in doc.sentences:
      if s.kind == "fact" and s.fact.relation in TEMPLAMA:
        mentions[s.fact.subject] = mentions.get(s.fact.subject, 0) + 1
  pops = np.array([world.entities[q].popularity for q in mentions], dtype=float)
  counts = np.array(list(mentions.values()), dtype=float)
  assert np.corrcoef(np.log(pops), np.log(counts))[0, 1] > 0.3
