"""Future-relations query sets: the shipped real-data sets and the loader's checks."""

import collections
import json
import re

import pytest

from tlm.data import future_relations
from tlm.errors import DataError


def test_shipped_sets():
  fr = future_relations.load_future_relations()
  assert len(fr.queries) == 86  # as many as the paper's Appendix B
  sizes = collections.Counter(q.set for q in fr.queries)
  assert sizes == {"frequent": 30, "rare": 28, "never": 28}
  assert len({q.id for q in fr.queries}) == 86
  # No year in the text: the time conditioning adds it.
  year = re.compile(r"\b(19|20)\d\d\b")
  assert all(q.query.count("_X_") == 1 and not year.search(q.query) for q in fr.queries)
  cities, countries = fr.candidates["us_cities"], fr.candidates["countries"]
  assert len(cities) == 200 and len(countries) == 249
  assert cities[:5] == ["New York", "Los Angeles", "Chicago", "Houston", "Phoenix"]
  # Every landmark city of the "never" set is a candidate.
  for city in (
    "Seattle",
    "San Francisco",
    "St. Louis",
    "San Antonio",
    "Philadelphia",
    "Washington",
    "Boston",
    "New Orleans",
    "Cleveland",
    "Memphis",
    "Nashville",
    "Anaheim",
    "Atlanta",
  ):
    assert city in cities
  for country in ("United States", "United Kingdom", "France", "China", "Peru", "Tanzania"):
    assert country in countries
  by_set = {q.id: q for q in fr.queries}
  assert by_set["never_01"].query == "The Space Needle is in _X_."
  assert by_set["never_01"].candidates == "us_cities"


def _write(directory, rows, candidates=None):
  (directory / "candidates").mkdir(parents=True)
  with open(directory / "queries.jsonl", "w") as f:
    for row in rows:
      f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
  for name, names in (candidates or {"cities": ["Springfield", "Shelbyville"]}).items():
    (directory / "candidates" / f"{name}.txt").write_text("\n".join(names) + "\n")


GOOD = {"id": "q1", "set": "never", "query": "The Tower is in _X_.", "candidates": "cities"}


def test_loads_a_world_directory(tmp_path):
  _write(tmp_path, [GOOD, {**GOOD, "id": "q2", "set": "frequent"}])
  fr = future_relations.load_future_relations(str(tmp_path))
  assert [q.id for q in fr.queries] == ["q1", "q2"]
  assert fr.candidates == {"cities": ["Springfield", "Shelbyville"]}


@pytest.mark.parametrize(
  "rows, candidates, message",
  [
    ([GOOD, {**GOOD, "id": "q2", "set": "sometimes"}], None, ":2: unknown set 'sometimes'"),
    ([GOOD, GOOD], None, ":2: duplicate id 'q1'"),
    ([{**GOOD, "query": "no blank"}], None, ":1: 'query' must contain _X_"),
    ([{**GOOD, "candidates": "towns"}], None, ":1: candidate set 'towns' has no file"),
    ([GOOD, "", '{"id": "q3"}'], None, ":3: missing field(s)"),
    ([GOOD], {"cities": ["Springfield", "Springfield"]}, "cities.txt:2: duplicate candidate"),
  ],
)
def test_bad_sets(tmp_path, rows, candidates, message):
  _write(tmp_path, rows, candidates)
  with pytest.raises(DataError, match=re.escape(message)):
    future_relations.load_future_relations(str(tmp_path))
