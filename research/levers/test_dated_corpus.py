"""The lever study's dated start corpus (research/levers/dated_corpus.py)."""

import json
import os

import pytest

from research.levers.dated_corpus import dated_generic_texts
from tests.helpers import TEMPLAMA, read_facts
from tlm import synthetic
from tlm.data.salient_spans import split_sentences


@pytest.fixture(scope="module")
def full(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("full") / "world")
  return path, synthetic.build_world(path, seed=0, scale=1.0, version=3)  # the lever read v3


def _news_sentences(path):
  with open(os.path.join(path, "news.jsonl"), encoding="utf-8") as f:
    return [s for line in f for s in split_sentences(json.loads(line)["text"])]


def read_entities(path):
  with open(path, encoding="utf-8") as f:
    return dict(line.rstrip("\n").split("\t")[:2] for line in f)


def test_dated_generic_corpus_adds_ordered_years_and_nothing_else(full):
  """The lever corpus (research/levers): the generic documents, each with a year of origin and two
  consecutive years, plus calendar documents; no news sentence, no time-varying fact; every
  year 2000-2035 next to its neighbour; a pure function of (world, seed)."""
  from tlm.synthetic.facts import generate_world
  from tlm.synthetic.settings import WORLD

  path, _ = full
  world = generate_world(WORLD, 0, 1.0)
  texts = dated_generic_texts(world, 0)
  assert texts == dated_generic_texts(generate_world(WORLD, 0, 1.0), 0)
  assert texts != dated_generic_texts(world, 1)
  with open(os.path.join(path, "pretrain", "generic.jsonl"), encoding="utf-8") as f:
    generic = [json.loads(line)["text"] for line in f]
  assert len(texts) == len(generic) + 36  # one calendar document per year 2000-2035
  for doc in generic:  # each generic document is the start of one dated document
    assert sum(t.startswith(doc + " ") for t in texts) == 1
  sentences = [s for t in texts for s in split_sentences(t)]
  assert not set(sentences) & set(_news_sentences(path))
  names = read_entities(os.path.join(path, "entities.tsv"))
  facts = read_facts(os.path.join(path, "facts.tsv"))
  pairs = {(names[f["s"]], names[f["o"]]) for f in facts if f["rel"] in TEMPLAMA}
  assert not [s for s in sentences for a, b in pairs if a in s and b in s][:1]
  joined = " ".join(texts)
  for year in range(2000, 2036):
    assert f"{year} came after {year - 1}" in joined
  assert "2019 came after 2018" in joined and "2018-2019 season" in joined
