"""Wikidata-style facts for building TempLAMA without SLING: the two TSV inputs and time spans.

Formats (docs/ARCHITECTURE.md, On-disk formats): facts
`relation<TAB>subject<TAB>object<TAB>qualifier...` with qualifiers
`P580=YYYY[MM[DD]]` (start time) and `P582=...` (end time), like the `kb.cfacts` file of the
public `sling2facts.py` (google-research/language, language/templama); entities
`qid<TAB>name<TAB>popularity`, where popularity stands in for the public script's number of
SLING facts of an entity.

Times are month ordinals `year * 12 + month - 1`. A date with year precision covers that whole
year: as a start it means January, as an end December, so that the public script's inclusive
year arithmetic carries over to quarter and month buckets.
"""

import collections
import dataclasses
import datetime
import math
import re

from tlm.errors import DataError
from tlm.line_files import iter_tsv

# A missing end: valid on (to max_year in the buckets, and beyond for the object count).
OPEN_END = 10**9
_PROPERTY = re.compile(r"^P\d+$")
_ENTITY = re.compile(r"^Q\d+$")


def qid_order(qid: str):
  """Natural order of Wikidata ids (Q9 before Q10); other strings after, lexicographically."""
  return (0, int(qid[1:]), "") if _ENTITY.match(qid) else (1, 0, qid)


def read_entities(path: str) -> dict[str, tuple[str, float]]:
  """Reads the entities TSV `qid<TAB>name<TAB>popularity` (further columns are ignored).

  Returns:
    `{qid: (name, popularity)}`.

  Raises:
    DataError: naming the file and line of a malformed line or a duplicate id.
  """
  entities = {}
  for line_no, cols in iter_tsv(path):
    if len(cols) < 3 or not cols[0] or not cols[1].strip():
      raise DataError("expected qid<TAB>name<TAB>popularity", path, line_no)
    try:
      popularity = float(cols[2])
    except ValueError:
      raise DataError(f"popularity {cols[2]!r} is not a number", path, line_no) from None
    if not math.isfinite(popularity):  # NaN would make the popularity order undefined
      raise DataError(f"popularity {cols[2]!r} is not a finite number", path, line_no)
    if cols[0] in entities:
      raise DataError(f"duplicate entity {cols[0]}", path, line_no)
    entities[cols[0]] = (cols[1].strip(), popularity)
  return entities


@dataclasses.dataclass
class Span:
  obj: str
  start: int  # month ordinal year * 12 + month - 1, inclusive
  end: int


def _parse_wikidata_date(text: str, path: str, line: int) -> tuple[int, int | None]:
  """`YYYY`, `YYYYMM`, `YYYYMMDD` (or with dashes) -> (year, month or None); 00 = unknown."""
  digits = text.replace("-", "")
  # ASCII only: str.isdigit() also accepts "²" and the like, which int() cannot read.
  if not (digits.isascii() and digits.isdigit()) or len(digits) not in (4, 6, 8):
    raise DataError(f"unparsable date {text!r} (expected YYYY, YYYYMM or YYYYMMDD)", path, line)
  year = int(digits[:4])
  month = int(digits[4:6]) if len(digits) >= 6 else 0
  day = int(digits[6:8]) if len(digits) == 8 else 0
  try:
    datetime.date(year, month or 1, day or 1)
  except ValueError:
    raise DataError(f"unparsable date {text!r} (no such day)", path, line) from None
  return year, (month or None)


def read_facts(
  path: str, templates: dict[str, str], entities: dict, min_year: int
) -> tuple[list[tuple[str, str, Span]], dict]:
  """Reads the facts TSV and keeps the facts TempLAMA can use.

  Args:
    path: the facts TSV.
    templates: relation -> template; facts of other (well-formed) properties are skipped.
    entities: from `read_entities`; facts with an unknown subject or object are skipped, as the
      public script skips entities without a Wikipedia page.
    min_year: facts need a start or an end at or after it; a missing start means from it. A
      missing end is `OPEN_END`: facts that start after the queried years are kept, since they
      still count as another object of their subject (as in the public script).

  Returns:
    `([(relation, subject, span)], counts of kept and skipped facts)`.

  Raises:
    DataError: a malformed line, a relation that is not a property id, an unparsable date.
  """
  counts = collections.Counter()
  facts = []
  for line_no, cols in iter_tsv(path):
    if len(cols) < 3 or not all(cols[:3]):
      raise DataError("expected relation<TAB>subject<TAB>object<TAB>qualifier...", path, line_no)
    relation, subject, obj = cols[:3]
    if not _PROPERTY.match(relation):
      raise DataError(
        f"unknown relation {relation!r} (expected a property id like P54)", path, line_no
      )
    start, end = _validity(cols[3:], path, line_no)
    counts["read"] += 1
    if relation not in templates:
      counts["skipped_no_template"] += 1
    elif not (_ENTITY.match(subject) and _ENTITY.match(obj)):
      counts["skipped_not_an_entity"] += 1
    elif subject not in entities or obj not in entities:
      counts["skipped_unknown_entity"] += 1
    elif start is None and end is None:
      counts["skipped_no_date"] += 1
    elif (start is None or start[0] < min_year) and (end is None or end[0] < min_year):
      counts["skipped_before_min_year"] += 1
    else:
      s = _month_key_start(start) if start else min_year * 12
      e = _month_key_end(end) if end else OPEN_END
      if e < s:  # both given: a default never precedes the other end here
        counts["skipped_end_before_start"] += 1
      else:
        facts.append((relation, subject, Span(obj, s, e)))
        counts["kept"] += 1
  return facts, dict(counts)


def _validity(qualifiers: list[str], path: str, line_no: int) -> tuple:
  """(start, end) dates of a fact from its P580 / P582 qualifiers (None where absent).

  Several values of one qualifier: the widest validity is kept. Qualifiers inherited from the
  entity (`P580*=`) are skipped, as in the public script.
  """
  start = end = None
  for qual in qualifiers:
    if not qual:
      continue
    key, sep, value = qual.partition("=")
    if not sep:
      raise DataError(f"malformed qualifier {qual!r} (expected P580=YYYYMMDD)", path, line_no)
    if key.endswith("*") or key not in ("P580", "P582"):
      continue
    date = _parse_wikidata_date(value, path, line_no)
    if key == "P580":
      start = date if start is None else min(start, date, key=_month_key_start)
    else:
      end = date if end is None else max(end, date, key=_month_key_end)
  return start, end


def _month_key_start(date: tuple[int, int | None]) -> int:
  return date[0] * 12 + ((date[1] or 1) - 1)


def _month_key_end(date: tuple[int, int | None]) -> int:
  return date[0] * 12 + ((date[1] or 12) - 1)


def merge_spans(spans: list[Span]) -> list[Span]:
  """Merges overlapping or touching spans of the same object; sorted by (start, end, object)."""
  by_obj = collections.defaultdict(list)
  for s in spans:
    by_obj[s.obj].append(s)
  merged = []
  for obj, group in by_obj.items():
    group = sorted(group, key=lambda s: (s.start, s.end))
    cur = Span(obj, group[0].start, group[0].end)
    for s in group[1:]:
      if s.start <= cur.end + 1:
        cur.end = max(cur.end, s.end)
      else:
        merged.append(cur)
        cur = Span(obj, s.start, s.end)
    merged.append(cur)
  return sorted(merged, key=lambda s: (s.start, s.end, s.obj))
