"""TempLAMA: the released JSON-lines format, its loader, and the builder from Wikidata facts.

Mirrors Sec. 2.1 of the paper and the public construction script
(google-research/language, `language/templama/templama.py` with `templates.csv`), without SLING:
facts come from a TSV `relation<TAB>subject<TAB>object<TAB>qualifier...` with qualifiers
`P580=YYYY[MM[DD]]` (start time) and `P582=...` (end time), and names and popularity from an
entities TSV `qid<TAB>name<TAB>popularity` (the public code uses the number of SLING facts of an
entity as its popularity). The released format, one JSON object per line:

  {"query": "Nicolas Anelka plays for _X_.", "answer": [{"wikidata_id": "Q...", "name": "..."}],
   "date": "2014", "id": "<subject>_<relation>_<date>", "relation": "P54",
   "most_frequent_answer": {"wikidata_id": ..., "name": ...}, "most_recent_answer": {...}}

where `name` may also be a list of aliases (first = canonical name).

Construction, as in the public script unless noted:
- Facts are kept if their relation has a template, subject and object are known entities, they
  have a start or an end, and the start or the end is at or after `min_year`.
- A missing start means valid from `min_year`, a missing end valid to `max_year`; a date with
  year precision covers that whole year (start in January, end in December).
- Spans of the same object that overlap or touch are merged (the public script merges facts that
  are adjacent in start order, which can also bridge gaps; we merge only contiguous spans).
- Per relation, subjects with more than one distinct object among the kept facts, and some
  object valid inside [min_year, max_year], are kept (the public script counts merged facts);
  the other objects may lie outside the queried years, so a subject can have a single answer
  over 2010-2020 (the "Single" group of the paper's Figure 3). The
  `max_subjects_per_relation` most popular subjects are kept per relation.
- One query per (subject, relation, date bucket) in which some object is valid; every object
  valid in the bucket is a correct answer (the paper: "when intervals overlap, we add all of
  them"). Answers are ordered by popularity, so the first answer is the object the public
  script keeps ("keep the more popular object").
- `most_frequent_answer`: the object that is the first answer in the most buckets (ties: the
  one that is first answer earliest); `most_recent_answer`: the first answer of the last bucket.
- Subjects, not queries, are split train 20% / val 10% / test 70% by a seeded permutation, so
  no subject appears in two splits even across relations (the public script draws one split per
  (relation, subject), which can put a subject in two splits).
- Beyond the paper: date buckets of a year ("2014"), a quarter ("2014-Q2") or a month
  ("2014-05").
"""

import collections
import csv
import dataclasses
import json
import math
import os
import re

import numpy as np

from tlm.data.formatting import SPLITS
from tlm.data.wikidata_facts import merge_spans, qid_order, read_entities, read_facts
from tlm.errors import DataError, UserError
from tlm.files import atomic_output_dir, check_replaceable
from tlm.limits import MAX_SEED, MAX_YEAR, MIN_YEAR
from tlm.line_files import iter_jsonl

Y_TOKEN = "_X_"
SPLIT_FRACTIONS = (0.2, 0.1, 0.7)
GRANULARITIES = ("year", "quarter", "month")
TEMPLATES_CSV = os.path.join(os.path.dirname(__file__), "resources", "templama_templates.csv")

DATE_KEY = re.compile(r"^(\d{4})(?:-Q([1-4])|-(0[1-9]|1[0-2]))?$")
_MONTHS_PER_BUCKET = {"year": 12, "quarter": 3, "month": 1}
_REQUIRED = (
  "query",
  "answer",
  "date",
  "id",
  "relation",
  "most_frequent_answer",
  "most_recent_answer",
)


@dataclasses.dataclass(frozen=True)
class TempLamaExample:
  """One TempLAMA query.

  Attributes:
    id: `<subject>_<relation>_<date>`.
    query: the cloze query containing `_X_`.
    answers: every correct answer, each a list of alias strings whose first item is the name.
    answer_ids: the Wikidata ids of `answers`, in the same order ("" where absent).
    date: the bucket key, "2014", "2014-Q2" or "2014-05".
    year: the year of `date`.
    relation: the Wikidata property, e.g. "P54".
    subject: the subject's Wikidata id (from `id`).
    most_frequent_answer: name of the answer most often first over the subject's buckets.
    most_recent_answer: name of the first answer in the subject's last bucket.
  """

  id: str
  query: str
  answers: list
  answer_ids: list
  date: str
  year: int
  relation: str
  subject: str
  most_frequent_answer: str
  most_recent_answer: str


def year_of(date_key: str) -> int:
  """The year of a bucket key "2014", "2014-Q2" or "2014-05" (ValueError if malformed)."""
  m = DATE_KEY.match(date_key)
  if not m:
    raise ValueError(f"bad date key {date_key!r} (expected 2014, 2014-Q2 or 2014-05)")
  return int(m.group(1))


def _aliases(obj, path: str, line: int) -> list[str]:
  name = obj.get("name") if isinstance(obj, dict) else None
  if isinstance(name, str) and name:
    return [name]
  if isinstance(name, list) and name and all(isinstance(n, str) and n for n in name):
    return list(name)
  raise DataError("an answer needs a 'name' (a string or a non-empty list of strings)", path, line)


def load_templama(path: str) -> list[TempLamaExample]:
  """Reads a TempLAMA file in the released JSON-lines format (train.json, val.json, test.json).

  Args:
    path: the file.

  Returns:
    The examples in file order.

  Raises:
    DataError: naming the file and line of a malformed line, a missing field or a bad value.
  """
  examples = []
  for line_no, obj in iter_jsonl(path, required=_REQUIRED):
    query, date, id_, relation = obj["query"], obj["date"], obj["id"], obj["relation"]
    if not isinstance(query, str) or Y_TOKEN not in query:
      raise DataError(f"'query' must be a string containing {Y_TOKEN}", path, line_no)
    if not isinstance(date, str) or not DATE_KEY.match(date):
      raise DataError(
        f"unparsable date {date!r} (expected 2014, 2014-Q2 or 2014-05)", path, line_no
      )
    if not isinstance(id_, str) or not isinstance(relation, str) or not relation:
      raise DataError("'id' and 'relation' must be strings", path, line_no)
    answer = obj["answer"]
    if isinstance(answer, dict):  # the public tf.Example export has a single answer
      answer = [answer]
    if not isinstance(answer, list) or not answer:
      raise DataError("'answer' must be a non-empty list of {wikidata_id, name}", path, line_no)
    suffix = f"_{relation}_{date}"
    examples.append(
      TempLamaExample(
        id=id_,
        query=query,
        answers=[_aliases(a, path, line_no) for a in answer],
        answer_ids=[str(a.get("wikidata_id", "")) for a in answer],
        date=date,
        year=year_of(date),
        relation=relation,
        subject=id_[: -len(suffix)] if id_.endswith(suffix) else id_,
        most_frequent_answer=_aliases(obj["most_frequent_answer"], path, line_no)[0],
        most_recent_answer=_aliases(obj["most_recent_answer"], path, line_no)[0],
      )
    )
  return examples


def load_templama_splits(directory: str) -> dict[str, list[TempLamaExample]]:
  """Loads `train.json`, `val.json` and `test.json` from a directory."""
  return {s: load_templama(os.path.join(directory, f"{s}.json")) for s in SPLITS}


# ---------------------------------------------------------------------------------------------
# Building TempLAMA from facts.


def read_templates(path: str = TEMPLATES_CSV) -> dict[str, str]:
  """Relation id -> template with `<subject>` and `<object>` (the public templates.csv)."""
  if not os.path.isfile(path):
    raise DataError("no such file", path)
  with open(path, encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f))
  header = rows[0] if rows else []
  if "Wikidata ID" not in header or "Template" not in header:
    raise DataError("expected a header with 'Wikidata ID' and 'Template'", path, 1)
  rel_col, tmpl_col = header.index("Wikidata ID"), header.index("Template")
  templates = {}
  for line_no, row in enumerate(rows[1:], start=2):
    if not row:
      continue
    if len(row) != len(header) or "<object>" not in row[tmpl_col]:
      raise DataError("malformed template row", path, line_no)
    templates[row[rel_col]] = row[tmpl_col]
  return templates


def _bucket_key(bucket: int, granularity: str) -> str:
  month0 = bucket * _MONTHS_PER_BUCKET[granularity]
  year, month = divmod(month0, 12)
  if granularity == "year":
    return str(year)
  if granularity == "quarter":
    return f"{year}-Q{month // 3 + 1}"
  return f"{year}-{month + 1:02d}"


def _subject_queries(
  subject, relation, spans, entities, template, min_year, max_year, granularity
) -> list[dict]:
  """The queries of one (subject, relation) from its merged spans, in bucket order."""
  per = _MONTHS_PER_BUCKET[granularity]
  first_bucket, last_bucket = min_year * 12 // per, (max_year * 12 + 11) // per
  popularity = lambda q: entities[q][1]
  buckets = []
  for b in range(first_bucket, last_bucket + 1):
    lo, hi = b * per, b * per + per - 1
    valid = [s for s in spans if s.start <= hi and s.end >= lo]
    objs = sorted(
      {s.obj for s in valid},
      key=lambda o: (-popularity(o), min(s.start for s in valid if s.obj == o), qid_order(o)),
    )
    if objs:
      buckets.append((b, objs))
  if not buckets:
    return []
  firsts = [objs[0] for _, objs in buckets]
  counts = collections.Counter(firsts)
  # max() keeps the first maximal item: ties go to the answer that is first earliest.
  frequent = max(dict.fromkeys(firsts), key=lambda o: counts[o])
  recent = firsts[-1]
  entity = lambda q: {"wikidata_id": q, "name": entities[q][0]}
  query = template.replace("<subject>", entities[subject][0]).replace("<object>", Y_TOKEN)
  out = []
  for b, objs in buckets:
    key = _bucket_key(b, granularity)
    out.append(
      {
        "query": query,
        "answer": [entity(o) for o in objs],
        "date": key,
        "id": f"{subject}_{relation}_{key}",
        "most_frequent_answer": entity(frequent),
        "most_recent_answer": entity(recent),
        "relation": relation,
      }
    )
  return out


def split_subjects(subjects, seed: int) -> dict[str, str]:
  """Subject -> "train" | "val" | "test": 20% / 10% / 70% of a seeded permutation.

  Args:
    subjects: subject ids (order does not matter).
    seed: permutation seed.

  Returns:
    The split of every subject; the counts are round(0.2 n), round(0.1 n) and the rest.
  """
  ordered = sorted(set(subjects), key=qid_order)
  perm = np.random.default_rng(seed).permutation(len(ordered))
  n_train = math.floor(SPLIT_FRACTIONS[0] * len(ordered) + 0.5)
  n_val = math.floor(SPLIT_FRACTIONS[1] * len(ordered) + 0.5)
  out = {}
  for rank, i in enumerate(perm):
    out[ordered[i]] = "train" if rank < n_train else "val" if rank < n_train + n_val else "test"
  return out


def build_templama(
  facts: str,
  entities: str,
  output_dir: str,
  min_year: int = 2010,
  max_year: int = 2020,
  max_subjects_per_relation: int = 1000,
  granularity: str = "year",
  seed: int = 0,
  templates: str = TEMPLATES_CSV,
) -> dict:
  """Builds TempLAMA from Wikidata-style facts and writes train.json, val.json, test.json.

  Args:
    facts: the facts TSV (`relation, subject, object, qualifier...`).
    entities: the entities TSV (`qid, name, popularity`).
    output_dir: created (or replaced, if it holds only these files) atomically.
    min_year: first year of queries; facts need a start or end at or after it.
    max_year: last year of queries.
    max_subjects_per_relation: the most popular subjects kept per relation.
    granularity: "year", "quarter" or "month" date buckets.
    seed: seed of the subject split.
    templates: the templates CSV (default: the public TempLAMA templates).

  Returns:
    Counts: facts read / kept / skipped, subjects and queries per split, and queries per split
    by relation and by year.

  Raises:
    UserError: bad arguments; DataError: bad input lines (nothing is written then).
  """
  _check_arguments(min_year, max_year, max_subjects_per_relation, granularity, seed)
  check_replaceable(output_dir, {f"{s}.json" for s in SPLITS})
  template_map = read_templates(templates)
  entity_map = read_entities(entities)
  fact_list, fact_counts = read_facts(facts, template_map, entity_map, min_year)

  spans = collections.defaultdict(list)
  for relation, subject, span in fact_list:
    spans[(relation, subject)].append(span)
  window = (min_year * 12, max_year * 12 + 11)
  selected = {}  # relation -> [(subject, merged spans)] in popularity order
  for relation in template_map:
    candidates = []
    for (rel, subject), group in spans.items():
      if rel != relation:
        continue
      merged = merge_spans(group)
      in_window = any(s.start <= window[1] and s.end >= window[0] for s in merged)
      if in_window and len({s.obj for s in merged}) > 1:
        candidates.append((subject, merged))
    candidates.sort(key=lambda c: (-entity_map[c[0]][1], qid_order(c[0])))
    if candidates:
      selected[relation] = candidates[:max_subjects_per_relation]

  split_of = split_subjects([s for cands in selected.values() for s, _ in cands], seed)
  rows = {s: [] for s in SPLITS}
  for relation, cands in selected.items():
    for subject, merged in cands:
      rows[split_of[subject]].extend(
        _subject_queries(
          subject,
          relation,
          merged,
          entity_map,
          template_map[relation],
          min_year,
          max_year,
          granularity,
        )
      )

  # Every date key is parsed back (year_of) before anything is written.
  counts = _counts(rows, split_of, fact_counts, list(template_map))
  with atomic_output_dir(output_dir) as tmp:
    for split in SPLITS:
      with open(os.path.join(tmp, f"{split}.json"), "w", encoding="utf-8") as f:
        for row in rows[split]:
          f.write(json.dumps(row, ensure_ascii=False) + "\n")
  return counts


def _check_arguments(
  min_year: int, max_year: int, max_subjects_per_relation: int, granularity: str, seed: int
) -> None:
  """Raises UserError for an argument whose value would end in the output unreadable."""
  if granularity not in GRANULARITIES:
    raise UserError(f"granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")
  # Date keys are four-digit years ("2014", "2014-Q2", "2014-05"), as `year_of` reads them.
  for name, year in (("min_year", min_year), ("max_year", max_year)):
    if not MIN_YEAR <= year <= MAX_YEAR:
      raise UserError(f"{name} must be a year in [{MIN_YEAR}, {MAX_YEAR}], got {year}")
  if min_year > max_year:
    raise UserError(f"min_year {min_year} is after max_year {max_year}")
  if max_subjects_per_relation < 1:
    raise UserError("max_subjects_per_relation must be at least 1")
  if not 0 <= seed <= MAX_SEED:
    raise UserError(f"seed must be in [0, 2**64 - 1], got {seed}")


def _counts(rows: dict, split_of: dict, fact_counts: dict, relations: list[str]) -> dict:
  by_relation = collections.defaultdict(lambda: dict.fromkeys(SPLITS, 0))
  by_year = collections.defaultdict(lambda: dict.fromkeys(SPLITS, 0))
  multi = 0
  for split, split_rows in rows.items():
    for row in split_rows:
      by_relation[row["relation"]][split] += 1
      by_year[str(year_of(row["date"]))][split] += 1
      multi += len(row["answer"]) > 1
  subjects = collections.Counter(split_of.values())
  return {
    "facts": fact_counts,
    "subjects": {s: subjects.get(s, 0) for s in SPLITS},
    "queries": {**{s: len(rows[s]) for s in SPLITS}, "total": sum(map(len, rows.values()))},
    "queries_with_several_answers": multi,
    "by_relation": dict(sorted(by_relation.items(), key=lambda kv: relations.index(kv[0]))),
    "by_year": dict(sorted(by_year.items())),
  }
