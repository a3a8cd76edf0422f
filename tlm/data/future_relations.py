"""Future-relations query sets with fixed candidate answers (paper Sec. 2.2 and Figure 4).

The paper probes calibration about the future with 86 hand-written queries in three sets —
answers that change frequently (an awards show's host city), rarely (the city an athlete plays
in) or never (a landmark's city) — whose answers are always one of the 200 largest US cities
or one of the 249 countries, so that entropy over a fixed candidate set can be measured. Its
Appendix B is not in our copy; `tlm/data/resources/future_relations/` holds our own 86 queries
written from public facts in the same spirit, with the candidate lists:

- `candidates/us_cities.txt`: the 200 largest US cities by 2020 census population, one distinct
  name per line (cities sharing a name, e.g. Kansas City MO/KS, appear once).
- `candidates/countries.txt`: the 249 ISO 3166-1 entries under common English short names
  ("Russia", "South Korea", "United Kingdom", "Ivory Coast").

Layout (docs/ARCHITECTURE.md): `queries.jsonl`, one object per line
`{"id", "set": "frequent"|"rare"|"never", "query" (with _X_, no year), "candidates"}` naming a
file `candidates/<name>.txt`. The synthetic world writes the same layout.
"""

import dataclasses
import os

from tlm.errors import DataError
from tlm.line_files import read_jsonl

SETS = ("frequent", "rare", "never")
RESOURCES = os.path.join(os.path.dirname(__file__), "resources", "future_relations")


@dataclasses.dataclass(frozen=True)
class FutureQuery:
  """One future-relations query: `query` contains `_X_`; `candidates` names a candidate set."""

  id: str
  set: str
  query: str
  candidates: str


@dataclasses.dataclass(frozen=True)
class FutureRelations:
  """The queries and every candidate set they name (`{name: [candidate, ...]}`)."""

  queries: list
  candidates: dict


def _read_candidates(path: str) -> list[str]:
  names, seen = [], {}
  with open(path, encoding="utf-8") as f:
    for line_no, line in enumerate(f, start=1):
      name = line.strip()
      if not name:
        continue
      if name in seen:
        raise DataError(f"duplicate candidate {name!r} (first on line {seen[name]})", path, line_no)
      seen[name] = line_no
      names.append(name)
  if not names:
    raise DataError("no candidates", path)
  return names


def load_future_relations(directory: str = RESOURCES) -> FutureRelations:
  """Loads `queries.jsonl` and the candidate sets it names from a future_relations directory.

  Args:
    directory: default: the real-data sets shipped in tlm/data/resources/future_relations.

  Returns:
    The queries in file order and their candidate sets.

  Raises:
    DataError: naming the file and line of a bad query or a missing candidate file.
  """
  path = os.path.join(directory, "queries.jsonl")
  rows = read_jsonl(path, required=("id", "set", "query", "candidates"))
  queries, candidates, ids = [], {}, set()
  # read_jsonl skips blank lines, so recover line numbers for the messages.
  with open(path, encoding="utf-8") as f:
    line_numbers = [i for i, line in enumerate(f, start=1) if line.strip()]
  for row, line_no in zip(rows, line_numbers):
    if row["set"] not in SETS:
      raise DataError(
        f"unknown set {row['set']!r} (expected one of {', '.join(SETS)})", path, line_no
      )
    if not isinstance(row["query"], str) or row["query"].count("_X_") != 1:
      raise DataError("'query' must contain _X_ exactly once", path, line_no)
    if row["id"] in ids:
      raise DataError(f"duplicate id {row['id']!r}", path, line_no)
    ids.add(row["id"])
    name = row["candidates"]
    if not isinstance(name, str) or not name or os.sep in name or name.startswith("."):
      raise DataError(f"bad candidate set name {name!r}", path, line_no)
    if name not in candidates:
      cand_path = os.path.join(directory, "candidates", f"{name}.txt")
      if not os.path.isfile(cand_path):
        raise DataError(f"candidate set {name!r} has no file {cand_path}", path, line_no)
      candidates[name] = _read_candidates(cand_path)
    queries.append(FutureQuery(str(row["id"]), row["set"], row["query"], name))
  return FutureRelations(queries, candidates)
