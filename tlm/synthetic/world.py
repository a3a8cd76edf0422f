"""Builds the synthetic world's files from its records: `build_world(output_dir, seed, scale)`.

Writes, atomically:
- `news.jsonl`: `{"date": "YYYY-MM-DD", "text": ...}` documents for 2010-2020;
- `facts.tsv`: `relation<TAB>subject<TAB>object[<TAB>P580=YYYY[MM[DD]]][<TAB>P582=...]`;
- `entities.tsv`: `qid<TAB>name<TAB>popularity`;
- `future_relations/queries.jsonl` + `future_relations/candidates/{cities,countries}.txt`;
- `pretrain/generic.jsonl`, `pretrain/encyclopedia.jsonl`: `{"text": ...}` documents of the two
  pre-training corpora (the "public T5" and the "Wikipedia" ones, `pretrain.py`);
- `spiece.model`: a SentencePiece model trained on the news, the TempLAMA templates and the
  queries, each year of `YEAR_PIECES` one whole piece; `stats.json`: the counts that
  `build_world` returns;
- with `forward` (off by default), `forward.jsonl`: the forward-looking sentences that were
  added to the news (`forward.py`), one record each; everything else but `news.jsonl` and
  `stats.json` is then byte-identical to the default world's, the vocabulary included.
so that the TempLAMA builder, the SSM builder and the samplers run on it unchanged. Everything is
a pure function of (seed, scale): same seed, byte-identical files.
"""

import datetime
import math
import os
from collections import Counter

from tlm.data.conditioning import prefix_text
from tlm.data.vocab import train_sentencepiece
from tlm.errors import ConfigError, UserError
from tlm.files import atomic_output_dir, atomic_output_file, write_json, write_jsonl
from tlm.synthetic import forward as forward_news
from tlm.synthetic import templates
from tlm.synthetic.facts import generate_world
from tlm.synthetic.forward import ForwardSettings
from tlm.synthetic.news import Document, generate_news
from tlm.synthetic.pretrain import encyclopedia_texts, generic_texts
from tlm.synthetic.settings import (
  DEFAULT_VERSION,
  NEWS,
  QUERIES_PER_SET,
  UNRECORDED_VERSION,
  VERSIONS,
  VOCAB_PIECES,
  WORLD,
  YEAR_PIECES,
)
from tlm.synthetic.world_records import Fact, World, stream, year_of

TEMPLAMA_RELATIONS = tuple(templates.TEMPLAMA)
# The files whose presence marks a directory as a world that `build_world` may replace.
WORLD_FILES = (
  "news.jsonl",
  "facts.tsv",
  "entities.tsv",
  "future_relations",
  "spiece.model",
  "stats.json",
)


def generate(
  seed: int = 0,
  scale: float = 1.0,
  forward: ForwardSettings | None = None,
  version: int = DEFAULT_VERSION,
) -> tuple[World, list[Document]]:
  """The world's facts and news as records (what `build_world` writes), for analysis and tests."""
  world, docs, _ = _generate(seed, scale, forward, version)
  return world, docs


def check_version(version) -> int:
  """`version` if it is one of the world's versions (`settings.VERSIONS`), else ConfigError."""
  if isinstance(version, bool) or version not in VERSIONS:
    raise ConfigError(
      f"unknown synthetic world version {version!r}; expected one of {sorted(VERSIONS)}"
    )
  return version


def _generate(seed, scale, forward, version):
  _check_scale(scale)
  news = VERSIONS[check_version(version)].news
  world = generate_world(WORLD, seed, scale)  # the facts are the same in every version
  docs = generate_news(world, news, stream(seed, "news"))
  added = None
  if forward is not None:  # after the default news, from a stream of its own
    added = forward_news.add_forward(world, docs, forward, stream(seed, "forward"))
  return world, docs, added


def build_world(
  output_dir: str,
  seed: int = 0,
  scale: float = 1.0,
  forward: ForwardSettings | None = None,
  version: int = DEFAULT_VERSION,
) -> dict:
  """Writes the synthetic world to `output_dir` (replaced as a whole) and returns its counts.

  Args:
    output_dir: the directory to create; an existing one must be empty or hold a previous
      world (it is then replaced as a whole).
    seed: the world's seed; the same seed gives byte-identical files.
    scale: size multiplier (subjects, entities and documents); must be > 0.
    forward: forward-looking sentences to add to the news (`forward.py`); None (the default
      world) adds none.
    version: the world's version (`settings.VERSIONS`): 4, the default, or 3, the world of the
      results committed before 2026-12-07.

  Returns:
    Counts: entities by kind, facts by relation, TempLAMA-eligible subjects and queries,
    documents and sentences per year, explicit-year sentence shares, query-set sizes.
  """
  _check_scale(scale)
  check_version(version)
  _check_output_dir(output_dir)
  world, docs, added = _generate(seed, scale, forward, version)
  queries = future_queries(world)
  counts = _counts(world, docs, queries)
  if version != UNRECORDED_VERSION:
    counts["world_version"] = version
  if added is not None:
    counts["forward"] = added
  with atomic_output_dir(output_dir) as tmp:
    write_jsonl(
      os.path.join(tmp, "news.jsonl"), ({"date": d.date_str, "text": d.text} for d in docs)
    )
    with atomic_output_file(os.path.join(tmp, "facts.tsv")) as f:
      f.writelines(format_fact(fact) + "\n" for fact in world.facts)
    with atomic_output_file(os.path.join(tmp, "entities.tsv")) as f:
      f.writelines(f"{e.qid}\t{e.name}\t{e.popularity}\n" for e in world.entities.values())
    pretrain = pretraining_texts(world, version)
    for name, texts in pretrain.items():
      write_jsonl(os.path.join(tmp, "pretrain", f"{name}.jsonl"), ({"text": t} for t in texts))
    future_dir = os.path.join(tmp, "future_relations")
    write_jsonl(os.path.join(future_dir, "queries.jsonl"), queries)
    for name, kind in (("cities", "city"), ("countries", "country")):
      with atomic_output_file(os.path.join(future_dir, "candidates", f"{name}.txt")) as f:
        f.writelines(e.name + "\n" for e in world.by_kind(kind))
    if forward is not None:
      write_jsonl(
        os.path.join(tmp, "forward.jsonl"), (r.as_json() for r in forward_news.records(docs))
      )
    texts = _vocab_texts(world, docs, queries, pretrain)
    model = train_sentencepiece(texts, vocab_pieces(scale), user_defined_symbols=year_pieces())
    with atomic_output_file(os.path.join(tmp, "spiece.model"), "wb") as f:
      f.write(model)
    counts["vocab_pieces"] = vocab_pieces(scale)
    write_json(os.path.join(tmp, "stats.json"), counts)
  return counts


def vocab_pieces(scale: float) -> int:
  """SentencePiece pieces of the world's vocabulary: `VOCAB_PIECES` x sqrt(scale).

  The number of distinct words grows about as sqrt(scale) (most of them are names), and the
  unigram trainer cannot make more pieces than the corpus holds; `VOCAB_PIECES` keeps a margin
  below that at scale 1.
  """
  return max(256, min(4000, int(round(VOCAB_PIECES * math.sqrt(scale)))))


def year_pieces() -> list[str]:
  """The vocabulary's whole-year pieces (`YEAR_PIECES`), as SentencePiece writes a word that
  follows a space: "▁2019" ("year: 2019", "In 2019,")."""
  return [f"\u2581{year}" for year in YEAR_PIECES]


def _check_scale(scale) -> None:
  if isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale):
    raise ConfigError(f"scale must be a positive number, got {scale!r}")
  if scale <= 0:
    raise ConfigError(f"scale must be > 0, got {scale!r}")


def _check_output_dir(path: str) -> None:
  if os.path.exists(path) and not os.path.isdir(path):
    raise UserError(f"{path}: output path exists and is not a directory")
  if os.path.isdir(path) and os.listdir(path):
    missing = [f for f in WORLD_FILES if not os.path.exists(os.path.join(path, f))]
    if missing:
      raise UserError(
        f"{path}: refusing to replace a non-empty directory that is not a synthetic world "
        f"(no {missing[0]})"
      )


def format_date(d: int, digits: int) -> str:
  """A day as a Wikidata-style qualifier value: YYYY, YYYYMM or YYYYMMDD (`digits`)."""
  return datetime.date.fromordinal(d).strftime("%Y%m%d")[:digits]


def format_fact(fact: Fact) -> str:
  """One facts.tsv line (without newline): relation, subject, object, qualifiers."""
  cols = [fact.relation, fact.subject, fact.obj]
  if fact.start is not None:
    cols.append("P580=" + format_date(fact.start, fact.start_digits))
  if fact.end is not None:
    cols.append("P582=" + format_date(fact.end, fact.end_digits))
  return "\t".join(cols)


def future_queries(world: World) -> list[dict]:
  """The frequent / rare / never future-relations queries (ARCHITECTURE.md format).

  frequent: annual events' hosts; rare: headquarters / home cities; never: landmarks' cities
  and cities' countries. The most popular subjects of each, `QUERIES_PER_SET` x scale of them,
  at least 10 and at most 30.
  """
  entities = world.entities
  per_set = min(30, max(10, int(round(QUERIES_PER_SET * world.scale))))
  most_popular = lambda qids: sorted(qids, key=lambda q: (-entities[q].popularity, q))
  objects = {}
  for f in world.facts:
    objects.setdefault((f.relation, f.subject), entities[f.obj].kind)
  sets = {
    "frequent": [("P276", q) for q in most_popular(world.subjects["P276"])[:per_set]],
    "rare": [("P159", q) for q in most_popular(world.subjects["P159"])[:per_set]],
  }
  landmarks = most_popular(world.subjects["P131"])[: max(1, (per_set * 7) // 10)]
  cities = most_popular(world.subjects["P17"])[: per_set - len(landmarks)]
  sets["never"] = [("P131", q) for q in landmarks] + [("P17", q) for q in cities]
  queries = []
  for name in ("frequent", "rare", "never"):
    for i, (rel, q) in enumerate(sets[name]):
      key = f"P159:{entities[q].kind}" if rel == "P159" else rel
      text = templates.QUERY[key].format(s=entities[q].mention)
      queries.append(
        {
          "id": f"{name}_{i:03d}",
          "set": name,
          "query": text[0].upper() + text[1:],
          "candidates": "cities" if objects[(rel, q)] == "city" else "countries",
          "relation": rel,
          "subject": q,
        }
      )
  return queries


def pretraining_texts(world: World, version: int = DEFAULT_VERSION) -> dict[str, list[str]]:
  """The two pre-training corpora (`pretrain.py`) of a world version: "generic" and
  "encyclopedia"."""
  v = VERSIONS[check_version(version)]
  return {
    "generic": generic_texts(world, world.seed, dated=v.dated_start),
    "encyclopedia": encyclopedia_texts(world, histories=v.histories),
  }


def _vocab_texts(world: World, docs: list[Document], queries: list[dict], pretrain: dict):
  """News sentences, the pre-training corpora, the TempLAMA templates, time prefixes, queries
  and entity names. Not the forward-looking sentences: a world with them has the default
  world's vocabulary, so that the default world's pretrained start is its start too."""
  for doc in docs:
    for s in doc.sentences:
      if s.kind != forward_news.KIND:
        yield s.text
  for texts in pretrain.values():
    yield from texts
  for template in templates.TEMPLAMA.values():
    yield template.replace("{S}", "").replace("{O}", "").strip()
  for year in YEAR_PIECES:  # both time prefixes, from their one definition
    yield f"{prefix_text(year, 'temporal')} {prefix_text(year, 'in_text')} "
  for q in queries:
    yield q["query"]
  for e in world.entities.values():
    yield e.name
  # Every printable ASCII character gets a piece, so no input of the models maps to <unk>.
  yield "".join(chr(c) for c in range(33, 127))


def templama_pairs(world: World, min_year: int = 2010, max_year: int = 2020) -> dict:
  """Subjects and queries the TempLAMA construction would keep, per relation (an estimate).

  A subject is kept when it has more than one object among its facts that start or end in
  `min_year` or later and do not start after `max_year`; it yields one query per year in
  [min_year, max_year] in which any of those facts holds (a missing start counts from
  `min_year`, a missing end to `max_year`). `tlm.data.templama` is the real builder.
  """
  out = {}
  for rel in TEMPLAMA_RELATIONS:
    by_subject: dict[str, list[Fact]] = {}
    for f in world.facts:
      if f.relation != rel:
        continue
      sy = year_of(f.start) if f.start is not None else None
      ey = year_of(f.end) if f.end is not None else None
      if (sy is None or sy < min_year) and (ey is None or ey < min_year):
        continue  # as in the public construction, this drops undated facts too
      if sy is not None and sy > max_year:
        continue
      by_subject.setdefault(f.subject, []).append(f)
    subjects, queries = 0, 0
    for facts in by_subject.values():
      if len({f.obj for f in facts}) < 2:
        continue
      subjects += 1
      years = set()
      for f in facts:
        lo = max(min_year, year_of(f.start)) if f.start is not None else min_year
        hi = min(max_year, year_of(f.end)) if f.end is not None else max_year
        years.update(range(lo, hi + 1))
      queries += len(years)
    out[rel] = {"subjects": subjects, "queries": queries}
  return out


def _counts(world: World, docs: list[Document], queries: list[dict]) -> dict:
  years = range(NEWS.first_year, NEWS.last_year + 1)
  doc_years = Counter(year_of(d.date) for d in docs)
  sent_years = Counter()
  n_sent = n_year = n_same = n_templated = 0
  for d in docs:
    y = year_of(d.date)
    sent_years[y] += len(d.sentences)
    for s in d.sentences:
      n_sent += 1
      n_templated += s.template.endswith(":templama")
      if s.kind == "explicit_year":
        n_year += 1
        n_same += s.year == y
  templama = templama_pairs(world)
  return {
    "seed": world.seed,
    "scale": world.scale,
    "entities": len(world.entities),
    "entities_by_kind": dict(sorted(Counter(e.kind for e in world.entities.values()).items())),
    "facts": len(world.facts),
    "facts_by_relation": dict(Counter(f.relation for f in world.facts)),
    "subjects_by_relation": {r: len(s) for r, s in world.subjects.items()},
    "templama_subjects": {r: v["subjects"] for r, v in templama.items()},
    "templama_queries": {r: v["queries"] for r, v in templama.items()},
    "documents": len(docs),
    "documents_per_year": {str(y): doc_years[y] for y in years},
    "sentences": n_sent,
    "sentences_per_year": {str(y): sent_years[y] for y in years},
    "explicit_year_sentence_share": round(n_year / max(1, n_sent), 4),
    "publication_year_sentence_share": round(n_same / max(1, n_sent), 4),
    "templama_template_sentence_share": round(n_templated / max(1, n_sent), 4),
    "future_relations": dict(Counter(q["set"] for q in queries)),
  }
