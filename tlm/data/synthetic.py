"""The embedded synthetic temporal world: a deterministic stand-in for CustomNews + Wikidata.

DESIGN.md "The embedded synthetic world"; the paper's dataset section (CustomNews, TempLAMA)
and its "Future Relations" section. `build_world(output_dir, seed, scale)` writes, atomically:

- `news.jsonl`: `{"date": "YYYY-MM-DD", "text": ...}` documents for 2010-2020;
- `facts.tsv`: `relation<TAB>subject<TAB>object[<TAB>P580=YYYY[MM[DD]]][<TAB>P582=...]`;
- `entities.tsv`: `qid<TAB>name<TAB>popularity`;
- `future_relations/queries.jsonl` + `future_relations/candidates/{cities,countries}.txt`;
- `pretrain/generic.jsonl`, `pretrain/encyclopedia.jsonl`: `{"text": ...}` documents of the two
  pre-training corpora (the "public T5" and the "Wikipedia" ones, `synthetic_pretrain.py`);
- `spiece.model`: a SentencePiece model trained on the news, the TempLAMA templates and the
  queries; `stats.json`: the counts that `build_world` returns.
so that the TempLAMA builder, the SSM builder and the samplers run on it unchanged. Everything is
a pure function of (seed, scale): same seed, byte-identical files. The parts: entities and facts
(`synthetic_facts.py`), their records (`synthetic_types.py`), names (`synthetic_names.py`), news
(`synthetic_news.py`), sentence templates (`synthetic_templates.py`), pre-training corpora
(`synthetic_pretrain.py`).

Settings, fixed for realism before any model was trained on the world (never tune them to make
a model look good):

Change rates (mean tenure of a subject's object; gamma shapes give the spread):
- P54 member of sports team: 3.0 years (shape 3): contracts run 2-5 years; 12% of tenures
  carry a 5-11 month loan to another team (several correct answers that year).
- P286 head coach: 2.5 years (shape 2, sackings make it irregular), "every ~2-3 years"; coaches
  move between teams (45% of appointments go to a coach who is free, else a new one).
- P108 employer: 4.5 years (shape 3), about the median job tenure; 8% joint appointments.
- P102 member of political party: 9 years (shape 3) and 30% of politicians never switch:
  party membership changes rarely.
- P39 position held and P6 head of government: change only at elections, every 4 or 5 years
  on a fixed date per country or city; at an election the holder changes with probability 0.8
  (positions: ministers are reshuffled) or 0.6 (heads of government are often re-elected), i.e.
  mean tenures of 5.6 and 7.5 years. Ministries have one holder at a time; 15% of ministers also
  sit in the assembly for a while.
- P69 educated at: 2-3 degrees of 3.5 years (shape 6, degree lengths are fixed), starting
  2003-2015, sometimes with a gap year; 6% exchange terms.
- P488 chairperson: 5 years (shape 4, fixed terms). P127 owned by: 7 years (shape 2,
  acquisitions are irregular), owners are bigger companies or investors.
- 10% of the subjects of each relation (20% for P127) keep one object throughout 2004-2022
  (one-club players, long-serving leaders): the TempLAMA builder drops them.
- Outside TempLAMA, for the future-relations sets: P276 annual event -> host city / country
  changes every year (never a host of the last two editions); P159 headquarters of companies,
  teams, organisations moves rarely (12 years, shape 2, 30% never move); P131 landmark -> city
  and P17 city -> country never change (written without qualifiers).
Dates: month precision for 75% of recorded dates, day 15%, year 10%. Facts span 2004-2022; a
start before 2004 is recorded half of the time (from 1995), else missing; the current object
has no end.

Sizes at scale 1 (scale multiplies every count): 20 subjects per TempLAMA relation (about 145
subjects whose object changes in 2010-2020, about 1500 TempLAMA queries; about 130 (subject,
relation) pairs whose answer changes inside 2010-18, so that the questions of the paper's
mechanism, answers that change within the training years, have enough cases), 12 countries (3 with
national politics: 3 parties, 6 ministries, a speaker and an assembly each), 40 cities, 20
teams, 24 companies, 12 universities, 16 organisations, 20 annual events, 16 landmarks, and the
people the relations need. These sizes follow DESIGN.md's sizing data point: a 2+2-layer
d_model-128 T5 memorises about a hundred subjects x nine years within minutes of CPU training.

The news: 1500 fact sentences in 2010 growing 10% a year (x2.6 by 2020), about 2500-7000
sentences a year in all; each fact of a year is stated at least 3 times in that year's news,
popular subjects more often (weight = latent popularity x days valid). A document (about 3
sentences) holds 1-3 fact sentences about its subject, a linked subject (a player's team, a
city's country) or, in round-ups, a subject of the same kind, 2% of them in the TempLAMA
template's words (real news seldom words a fact as plainly as a cloze template: "X plays for
Y." is a caption, not a news sentence), the others in 3-5 present-tense paraphrases per
relation; distractors (about a third of all sentences: scores, quotes, visits that mention
entities without stating a relation); sentences about the past or the future without a year
(3%: "X previously played for Y", "X will join Z next season"); and sentences with an explicit
year (4%, 54% of those the publication year, as the paper counts 3.9% and 2.1% in CustomNews:
"In 2012, X played for Y.", "X joined Y in March 2014.", "X has coached Y since 2013.").
Vocabulary: 800 SentencePiece
pieces at scale 1 (unigram, x sqrt(scale)): frequent words are single pieces, most names span
several (about 5 per name, 19 per sentence), and tiny models stay fast.
"""

import datetime
import math
import os
from collections import Counter

from tlm.data import synthetic_templates as T
from tlm.data.synthetic_facts import generate_world
from tlm.data.synthetic_news import Document, NewsSettings, generate_news
from tlm.data.synthetic_pretrain import encyclopedia_texts, generic_texts
from tlm.data.synthetic_types import Fact, RelationSpec, World, WorldSettings, stream, year_of
from tlm.data.vocab import train_sentencepiece
from tlm.errors import ConfigError, UserError
from tlm.files import atomic_output_dir, atomic_output_file, write_json, write_jsonl

R = RelationSpec
WORLD = WorldSettings(
  relations={
    "P54": R("P54", "member of sports team", "renewal", 3.0, 3.0, loyal_share=0.1,
             secondary_prob=0.12, secondary_months=(5, 11)),
    "P39": R("P39", "position held", "elections", change_prob=0.8, loyal_share=0.1,
             secondary_prob=0.15, secondary_months=(6, 24)),
    "P108": R("P108", "employer", "renewal", 4.5, 3.0, loyal_share=0.1, secondary_prob=0.08,
              secondary_months=(6, 24)),
    "P102": R("P102", "member of political party", "renewal", 9.0, 3.0, loyal_share=0.3),
    "P286": R("P286", "head coach", "renewal", 2.5, 2.0, loyal_share=0.1),
    "P69": R("P69", "educated at", "studies", 3.5, 6.0, loyal_share=0.1, secondary_prob=0.06,
             secondary_months=(4, 10)),
    "P488": R("P488", "chairperson", "renewal", 5.0, 4.0, loyal_share=0.1),
    "P6": R("P6", "head of government", "elections", change_prob=0.6, loyal_share=0.1),
    "P127": R("P127", "owned by", "renewal", 7.0, 2.0, loyal_share=0.2, secondary_prob=0.06,
              secondary_months=(12, 36)),
    "P159": R("P159", "headquarters location", "renewal", 12.0, 2.0, loyal_share=0.3),
    "P276": R("P276", "location (annual event host)", "annual"),
    "P131": R("P131", "located in (landmark)", "static"),
    "P17": R("P17", "country (city)", "static"),
  },
  counts={
    "countries": 12, "cities": 40, "political_countries": 3, "teams": 20, "companies": 24,
    "universities": 12, "organisations": 16, "city_events": 14, "country_events": 6,
    "landmarks": 16,
  },
  min_counts={
    "countries": 5, "cities": 14, "political_countries": 1, "teams": 6, "companies": 8,
    "universities": 4, "organisations": 4, "city_events": 7, "country_events": 3,
    "landmarks": 7,
  },
  # TempLAMA keeps its 1000 most frequent subjects per relation; the miniature keeps 20, so
  # that ~130 (subject, relation) pairs change their answer inside 2010-18.
  subjects_per_relation=20,
  min_subjects_per_relation=4,
)  # fmt: skip
NEWS = NewsSettings(
  first_year=2010,
  last_year=2020,
  fact_sentences_first_year=1500,
  growth_per_year=1.10,
  min_mentions=3,
  facts_per_document=(0.25, 0.45, 0.30),
  distractor_prob=0.45,
  # Real news rarely words a fact exactly as a TempLAMA cloze ("X plays for Y."): 2%.
  templama_phrasing_share=0.02,
  recent_phrasing_share=0.5,
  past_future_share=0.03,
  explicit_year_share=0.04,
  same_year_fraction=0.54,
  announce_days=150,
)
VOCAB_PIECES = 800  # at scale 1; see vocab_pieces()
TEMPLAMA_RELATIONS = tuple(T.TEMPLAMA)
QUERIES_PER_SET = 20  # at scale 1; kept within 10-30
WORLD_FILES = ("news.jsonl", "facts.tsv", "entities.tsv", "future_relations", "spiece.model",
               "stats.json")  # fmt: skip


def generate(seed: int = 0, scale: float = 1.0) -> tuple[World, list[Document]]:
  """The world's facts and news as records (what `build_world` writes), for analysis and tests."""
  _check_scale(scale)
  world = generate_world(WORLD, seed, scale)
  return world, generate_news(world, NEWS, stream(seed, "news"))


def build_world(output_dir: str, seed: int = 0, scale: float = 1.0) -> dict:
  """Writes the synthetic world to `output_dir` (replaced as a whole) and returns its counts.

  Args:
    output_dir: the directory to create; an existing one must be empty or hold a previous
      world (it is then replaced as a whole).
    seed: the world's seed; the same seed gives byte-identical files.
    scale: size multiplier (subjects, entities and documents); must be > 0.

  Returns:
    Counts: entities by kind, facts by relation, TempLAMA-eligible subjects and queries,
    documents and sentences per year, explicit-year sentence shares, query-set sizes.
  """
  _check_scale(scale)
  _check_output_dir(output_dir)
  world, docs = generate(seed, scale)
  queries = future_queries(world)
  counts = _counts(world, docs, queries)
  with atomic_output_dir(output_dir) as tmp:
    write_jsonl(
      os.path.join(tmp, "news.jsonl"), ({"date": d.date_str, "text": d.text} for d in docs)
    )
    with atomic_output_file(os.path.join(tmp, "facts.tsv")) as f:
      f.writelines(format_fact(fact) + "\n" for fact in world.facts)
    with atomic_output_file(os.path.join(tmp, "entities.tsv")) as f:
      f.writelines(f"{e.qid}\t{e.name}\t{e.popularity}\n" for e in world.entities.values())
    pretrain = pretraining_texts(world)
    for name, texts in pretrain.items():
      write_jsonl(os.path.join(tmp, "pretrain", f"{name}.jsonl"), ({"text": t} for t in texts))
    fr = os.path.join(tmp, "future_relations")
    write_jsonl(os.path.join(fr, "queries.jsonl"), queries)
    for name, kind in (("cities", "city"), ("countries", "country")):
      with atomic_output_file(os.path.join(fr, "candidates", f"{name}.txt")) as f:
        f.writelines(e.name + "\n" for e in world.by_kind(kind))
    texts = _vocab_texts(world, docs, queries, pretrain)
    model = train_sentencepiece(texts, vocab_pieces(scale))
    with atomic_output_file(os.path.join(tmp, "spiece.model"), "wb") as f:
      f.write(model)
    counts["vocab_pieces"] = vocab_pieces(scale)
    write_json(os.path.join(tmp, "stats.json"), counts)
  return counts


def vocab_pieces(scale: float) -> int:
  """SentencePiece pieces of the world's vocabulary: `VOCAB_PIECES` x sqrt(scale).

  The number of distinct words grows about as sqrt(scale) (most of them are names), and the
  unigram trainer cannot make more pieces than the corpus holds (about 1070 at scale 1, 710 at
  0.2, 1560 at 2); this keeps a margin of a quarter below that.
  """
  return max(256, min(4000, int(round(VOCAB_PIECES * math.sqrt(scale)))))


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
  ent = world.entities
  n = min(30, max(10, int(round(QUERIES_PER_SET * world.scale))))
  by_pop = lambda qids: sorted(qids, key=lambda q: (-ent[q].popularity, q))
  objects = {}
  for f in world.facts:
    objects.setdefault((f.relation, f.subject), ent[f.obj].kind)
  sets = {
    "frequent": [("P276", q) for q in by_pop(world.subjects["P276"])[:n]],
    "rare": [("P159", q) for q in by_pop(world.subjects["P159"])[:n]],
  }
  landmarks = by_pop(world.subjects["P131"])[: max(1, (n * 7) // 10)]
  cities = by_pop(world.subjects["P17"])[: n - len(landmarks)]
  sets["never"] = [("P131", q) for q in landmarks] + [("P17", q) for q in cities]
  queries = []
  for name in ("frequent", "rare", "never"):
    for i, (rel, q) in enumerate(sets[name]):
      key = f"P159:{ent[q].kind}" if rel == "P159" else rel
      text = T.QUERY[key].format(s=ent[q].mention)
      queries.append({
        "id": f"{name}_{i:03d}",
        "set": name,
        "query": text[0].upper() + text[1:],
        "candidates": "cities" if objects[(rel, q)] == "city" else "countries",
        "relation": rel,
        "subject": q,
      })  # fmt: skip
  return queries


def pretraining_texts(world: World) -> dict[str, list[str]]:
  """The two pre-training corpora (`synthetic_pretrain.py`): "generic" and "encyclopedia"."""
  return {"generic": generic_texts(world, world.seed), "encyclopedia": encyclopedia_texts(world)}


def _vocab_texts(world: World, docs: list[Document], queries: list[dict], pretrain: dict):
  """News sentences, the pre-training corpora, the TempLAMA templates, time prefixes, queries
  and entity names."""
  for doc in docs:
    for s in doc.sentences:
      yield s.text
  for texts in pretrain.values():
    yield from texts
  for template in T.TEMPLAMA.values():
    yield template.replace("{S}", "").replace("{O}", "").strip()
  for year in range(2000, 2036):
    yield f"year: {year} In {year}, "
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
  tl = templama_pairs(world)
  return {
    "seed": world.seed,
    "scale": world.scale,
    "entities": len(world.entities),
    "entities_by_kind": dict(sorted(Counter(e.kind for e in world.entities.values()).items())),
    "facts": len(world.facts),
    "facts_by_relation": dict(Counter(f.relation for f in world.facts)),
    "subjects_by_relation": {r: len(s) for r, s in world.subjects.items()},
    "templama_subjects": {r: v["subjects"] for r, v in tl.items()},
    "templama_queries": {r: v["queries"] for r, v in tl.items()},
    "documents": len(docs),
    "documents_per_year": {str(y): doc_years[y] for y in years},
    "sentences": n_sent,
    "sentences_per_year": {str(y): sent_years[y] for y in years},
    "explicit_year_sentence_share": round(n_year / max(1, n_sent), 4),
    "publication_year_sentence_share": round(n_same / max(1, n_sent), 4),
    "templama_template_sentence_share": round(n_templated / max(1, n_sent), 4),
    "future_relations": dict(Counter(q["set"] for q in queries)),
  }
