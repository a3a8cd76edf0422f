"""How long each TempLAMA query's answer holds, from its fact's own start and end dates.

Figure 2 (right) of the paper groups the 2010-18 TempLAMA queries "by the number of years for
which their answer is valid ... for multiple answers we pick the duration of the first one.
This is computed from the duration of their corresponding facts in Wikidata." So the duration
is that of the fact (relation, subject, first answer) whose time span contains the query's
date bucket, from the fact's start (P580) to its end (P582) in the facts TSV
(`tlm.data.wikidata_facts` describes the format) — not the part of it inside the queried
2010-2020 window: a player who joined a club in 2005 and left in 2012 has a 7-year answer in
2011, though TempLAMA holds only 2010-2012 of it.

Conventions, in month ordinals `year * 12 + month - 1` (both ends inclusive):
- a date with year precision covers that whole year (a start in January, an end in December),
  as in the TempLAMA builder;
- spans of the same (relation, subject, object) that overlap or touch are merged first, as the
  TempLAMA builder merges them (a loan and a return are separate spans, a renewal is one);
- a missing start means the earliest date recorded anywhere in the file; a missing end (a
  current fact) means the snapshot: the latest date recorded in the file or the end of the
  last queried bucket, whichever is later (TempLAMA, too, holds a current fact to its last
  year). The durations of such facts are lower bounds: a long-lived fact stays long;
- the duration is the number of calendar years the span touches (a fact from March 2005 to
  June 2012 holds in 8 years), the unit of the fallback below and of the paper's buckets.

`durations_from_buckets` is the fallback when no facts file is at hand (e.g. the
released TempLAMA alone): it counts the years of the run of buckets with the same first answer,
which is clipped to the queried years.
"""

import collections
import dataclasses
import re

from tlm.data.templama import DATE_KEY, TempLamaExample
from tlm.data.wikidata_facts import OPEN_END, Span, merge_spans
from tlm.errors import DataError
from tlm.line_files import iter_tsv

_DATE = re.compile(r"^(\d{4})-?(\d{2})?-?(\d{2})?$")
_BUCKET = re.compile(r"^(\d{4})(?:-Q([1-4])|-(0[1-9]|1[0-2]))?$")


def _month(text: str, is_end: bool, path: str, line: int) -> int:
  m = _DATE.match(text)
  if not m:
    raise DataError(f"unparsable date {text!r} (expected YYYY, YYYYMM or YYYYMMDD)", path, line)
  year, month = int(m.group(1)), int(m.group(2) or 0)
  if month > 12:
    raise DataError(f"unparsable date {text!r} (no such month)", path, line)
  if not month:  # year precision (or an unknown month, "00"): the whole year
    month = 12 if is_end else 1
  return year * 12 + month - 1


@dataclasses.dataclass(frozen=True)
class FactSpans:
  """The dated facts of a facts TSV.

  Attributes:
    spans: `{(relation, subject, object): [(start, end) month ordinals, merged]}`; a missing
      end is `OPEN_END`.
    last: the latest start or end of the facts (the snapshot, for open ends).
  """

  spans: dict
  last: int


def read_fact_spans(path: str) -> FactSpans:
  """The dated facts of a facts TSV (facts without any date have no duration: skipped).

  A missing start is the earliest date recorded in the file; a missing end stays open.

  Raises:
    DataError: naming the file and line of a malformed line or date.
  """
  raw = []
  for line_no, cols in iter_tsv(path):
    if len(cols) < 3 or not all(cols[:3]):
      raise DataError("expected relation<TAB>subject<TAB>object<TAB>qualifier...", path, line_no)
    start = end = None
    for qual in cols[3:]:
      key, _, value = qual.partition("=")
      # Several values: the widest validity, as the TempLAMA builder keeps.
      if key == "P580":
        month = _month(value, False, path, line_no)
        start = month if start is None else min(start, month)
      elif key == "P582":
        month = _month(value, True, path, line_no)
        end = month if end is None else max(end, month)
    if start is not None or end is not None:
      raw.append((tuple(cols[:3]), start, end))
  known = [m for _, s, e in raw for m in (s, e) if m is not None]
  if not known:
    return FactSpans({}, 0)
  first = min(known)
  spans = collections.defaultdict(list)
  for key, start, end in raw:
    spans[key].append(Span(key[2], first if start is None else start, end or OPEN_END))
  merged = {key: [(s.start, s.end) for s in merge_spans(group)] for key, group in spans.items()}
  return FactSpans(merged, max(known))


def bucket_months(date_key: str) -> tuple[int, int]:
  """First and last month ordinal of a TempLAMA bucket "2014", "2014-Q2" or "2014-05"."""
  m = _BUCKET.match(date_key)
  if not m:
    raise ValueError(f"bad date key {date_key!r} (expected 2014, 2014-Q2 or 2014-05)")
  year = int(m.group(1))
  if m.group(2):
    lo = year * 12 + (int(m.group(2)) - 1) * 3
    return lo, lo + 2
  if m.group(3):
    lo = year * 12 + int(m.group(3)) - 1
    return lo, lo
  return year * 12, year * 12 + 11


def durations_from_facts(facts: FactSpans, examples: list[TempLamaExample]) -> dict[str, int]:
  """Years the first answer's fact lasts, `{example id: years}`, for the examples it can find.

  Args:
    facts: `read_fact_spans` of the facts TempLAMA was built from.
    examples: TempLAMA examples; the first answer's Wikidata id names the fact.

  Returns:
    The calendar years touched by the span of (relation, subject, first answer) that overlaps
    the example's bucket (the longest, if several do). Examples whose fact is not in
    `spans` (no Wikidata id, or another facts file) are left out.
  """
  buckets = {ex.id: bucket_months(ex.date) for ex in examples}
  snapshot = max([facts.last] + [hi for _, hi in buckets.values()])
  out = {}
  for ex in examples:
    obj = ex.answer_ids[0] if ex.answer_ids else ""
    lo, hi = buckets[ex.id]
    spans = [(s, min(e, snapshot)) for s, e in facts.spans.get((ex.relation, ex.subject, obj), ())]
    overlapping = [(s, e) for s, e in spans if s <= hi and e >= lo]
    if overlapping:
      out[ex.id] = max(e // 12 - s // 12 + 1 for s, e in overlapping)
  return out


def durations_from_buckets(examples: list[TempLamaExample]) -> dict[str, int]:
  """Years the first answer of each example is valid (Figure 2, right).

  The paper groups queries "by the number of years for which their answer is valid ... for
  multiple answers we pick the duration of the first one". From a TempLAMA file alone this is
  the number of distinct years of the longest run of consecutive buckets of the same subject and
  relation, containing the example's bucket, in which that answer is correct.

  Args:
    examples: examples of one or more splits (a subject's buckets are all in one split).

  Returns:
    `{example id: years}`.
  """
  by_pair = collections.defaultdict(list)
  for ex in examples:
    by_pair[(ex.subject, ex.relation)].append(ex)
  out = {}
  for exs in by_pair.values():
    exs.sort(key=lambda e: _bucket_order(e.date))
    answer_sets = [{a[0] for a in e.answers} for e in exs]
    for i, ex in enumerate(exs):
      name = ex.answers[0][0]
      lo = i
      while lo > 0 and _consecutive(exs[lo - 1].date, exs[lo].date) and name in answer_sets[lo - 1]:
        lo -= 1
      hi = i
      while (
        hi + 1 < len(exs)
        and _consecutive(exs[hi].date, exs[hi + 1].date)
        and name in answer_sets[hi + 1]
      ):
        hi += 1
      out[ex.id] = len({e.year for e in exs[lo : hi + 1]})
  return out


def _bucket_order(date_key: str) -> int:
  """Month ordinal of the start of a bucket, for sorting and adjacency."""
  m = DATE_KEY.match(date_key)
  year, quarter, month = int(m.group(1)), m.group(2), m.group(3)
  if quarter:
    return year * 12 + (int(quarter) - 1) * 3
  return year * 12 + (int(month) - 1 if month else 0)


def _consecutive(a: str, b: str) -> bool:
  if "-Q" in a:
    step = 3
  elif "-" in a:
    step = 1
  else:
    step = 12
  return _bucket_order(b) - _bucket_order(a) == step
