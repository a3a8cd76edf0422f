"""The synthetic world's two pre-training corpora: its "C4" and its "Wikipedia".

The paper starts every model from the public T5 checkpoints (Raffel et al., 2020: span
corruption on C4) and the T5-CBQA baselines from Roberts et al.'s (T5 plus salient span masking
on Wikipedia). The miniature needs both starting points, from text of its own world:

- `generic_texts`: the "public T5" corpus. Generic web-like text about the world's entities:
  what each entity is ("Kelvar FC is a football club."), where places lie (the relations that
  never change), and general statements that hold at any time. It never states a fact that
  changes over time: it gives the model the language and the names of the world, not its
  temporal knowledge (the knowledge the paper's models are probed for comes from the news). In
  world v4 it also names the years 2000-2035 in order, as C4 does (`calendar.py`); in world v3
  it named no year.
- `encyclopedia_texts`: the "Wikipedia" snapshot. One short article per entity, written at
  `SNAPSHOT` (the end of 2019, about when Roberts et al. (2020) built their SSM checkpoints):
  what the entity is, the never-changing facts, and the time-varying facts: in world v3 those
  holding on the snapshot day, in present tense and without a year, as a lead section states the
  current team; in world v4 each relation's history up to the snapshot with its years, as an
  article's body does ("X was a player of the club Y from 2011 to 2014.").

Neither corpus contains a news sentence (the templates differ from the news templates, and
tests/test_synthetic.py checks it). Both are pure functions of the world, seed and version.

`generic_documents` gives the generic corpus by entity, for studies that add to it (the lever
study's dated corpus, research/levers/dated_corpus.py).
"""

import numpy as np

from tlm.synthetic import calendar
from tlm.synthetic.world_records import World, day, year_of

SNAPSHOT = day(2019, 12, 31)

# What an entity is, by kind (and a person's category); "{S}" the name, "{d}" a detail.
_IS = {
  "country": "{S} is a country.",
  "city": "{S} is a city.",
  "team": "{S} is a football club.",
  "company": "{S} is a company.",
  "university": "{S} is a university.",
  "organisation": "{S} is an organisation.",
  "party": "{S} is a political party.",
  "landmark": "{S} is a landmark.",
  "event": "{S} is an annual event.",
  "position": "{S} is a political office.",
  "player": "{S} is a professional footballer who plays as a {d}.",
  "coach": "{S} is a football coach.",
  "chair": "{S} is a business executive.",
  "leader": "{S} is a politician.",
  "politician": "{S} is a politician.",
  "professional": "{S} is a {d}.",
  "student": "{S} is a student.",
  "investor": "{S} is an investor.",
}

# Never-changing and time-varying facts, in an encyclopedia's wording (not the news's).
_ENCYCLOPEDIA = {
  "P17": "{S} is a city located in the country of {O}.",
  "P131": "{S} is a landmark located in the city of {O}.",
  "P159": "The headquarters of {S} are located in {O}.",
  "P276": "The most recent edition of {S} took place in {O}.",
  "P54": "{S} is currently a player of the club {O}.",
  "P39": "{S} currently holds the office of {O}.",
  "P108": "{S} is currently employed at {O}.",
  "P102": "{S} is a politician of the {O}.",
  "P286": "The current head coach of {S} is {O}.",
  "P69": "{S} is currently a student at {O}.",
  "P488": "The current chairperson of {S} is {O}.",
  "P6": "The current head of government of {S} is {O}.",
  "P127": "The current owner of {S} is {O}.",
}


def encyclopedia_sentence(relation: str, subject: str, obj: str) -> str:
  """How the encyclopedia (and, for a never-changing fact, the generic text) states
  (relation, subject, object); KeyError for a relation it never states."""
  return _ENCYCLOPEDIA[relation].format(S=subject, O=obj)


STATIC = ("P17", "P131")  # the relations whose object never changes

# General statements that hold at any time, by the entity's kind ("{S}" the entity).
_GENERIC = {
  "country": ("{S} has a long coastline and many rivers.", "The people of {S} enjoy football."),
  "city": ("{S} is known for its old town.", "Many tourists visit {S} in summer."),
  "team": ("{S} plays in red and white.", "Supporters of {S} sing before every match."),
  "company": ("{S} sells its products in many countries.", "{S} employs many engineers."),
  "university": ("{S} offers courses in science and the arts.", "{S} has a large library."),
  "organisation": ("{S} works on matters of public interest.", "{S} publishes reports."),
  "party": ("{S} holds a conference every year.", "{S} has members across the country."),
  "landmark": ("{S} attracts many visitors.", "Guided tours of {S} are popular."),
  "event": ("{S} draws large crowds.", "Tickets for {S} are in high demand."),
  "position": ("The holder of the office of {S} is appointed after an election.",),
  "person": ("{S} gives interviews to the press.", "{S} is active on social media."),
}


def _kind(entity) -> str:
  return entity.role.split(":")[0] if entity.kind == "person" else entity.kind


def _describe(entity) -> str:
  detail = entity.role.split(":")[1] if ":" in entity.role else ""
  return _IS[_kind(entity)].format(S=entity.name, d=detail)


def _facts_on(world: World, d: int, relations) -> dict[str, list[tuple[str, str]]]:
  """Subject -> [(relation, object)] of the primary facts of `relations` holding on day `d`."""
  out: dict[str, list[tuple[str, str]]] = {}
  for f in world.facts:
    if f.relation not in relations or f.secondary:
      continue
    if f.relation == "P276":  # an annual event: its latest edition up to `d`
      continue
    if f.valid_on(d):
      out.setdefault(f.subject, []).append((f.relation, f.obj))
  latest: dict[str, tuple[int, str]] = {}
  if "P276" in relations:
    for f in world.facts:
      if f.relation == "P276" and f.start is not None and f.start <= d:
        if f.subject not in latest or f.start > latest[f.subject][0]:
          latest[f.subject] = (f.start, f.obj)
    for subject, (_, obj) in latest.items():
      out.setdefault(subject, []).append(("P276", obj))
  return out


def _entity_order(world: World) -> list[str]:
  return sorted(world.entities, key=lambda q: (len(q), q))


def generic_documents(world: World) -> dict[str, str]:
  """Entity qid -> its generic document (what it is, its never-changing facts, its kind's
  general statements), in qid order."""
  ent = world.entities
  static = _facts_on(world, SNAPSHOT, STATIC)
  docs = {}
  for q in _entity_order(world):
    e = ent[q]
    sentences = [_describe(e)]
    for rel, obj in static.get(q, ()):
      sentences.append(encyclopedia_sentence(rel, e.name, ent[obj].name))
    generic = _GENERIC["person" if e.kind == "person" else e.kind]
    sentences.extend(t.format(S=e.name) for t in generic)
    docs[q] = " ".join(sentences)
  return docs


def generic_texts(world: World, seed: int, dated: bool = False) -> list[str]:
  """The "public T5" corpus: generic text, no time-varying fact.

  Per entity (in qid order): what it is, its never-changing facts, and its kind's general
  statements; with `dated` (world v4), also its schedule and plan sentences naming years of
  2000-2035, and the calendar documents (`calendar.py`); without (world v3), no year. The
  documents are then shuffled with `seed`.
  """
  generic = generic_documents(world)
  if dated:
    rng = np.random.default_rng([seed, 13])
    ent = world.entities
    docs = [
      " ".join([doc, *calendar.year_sentences(ent[q], i, rng)])
      for i, (q, doc) in enumerate(generic.items())
    ]
    docs += calendar.calendar_documents()
  else:
    docs = list(generic.values())
  order = np.random.default_rng([seed, 11]).permutation(len(docs))
  return [docs[i] for i in order]


def encyclopedia_texts(
  world: World, snapshot: int = SNAPSHOT, histories: bool = False
) -> list[str]:
  """The "Wikipedia" corpus: one article per entity as of `snapshot`, in qid order.

  Without `histories` (world v3) an article states the facts holding on `snapshot`, without a
  year; with it (world v4), as Wikipedia's articles do, each time-varying relation's history up
  to `snapshot` with its years (`history_sentences`), the never-changing facts as before.
  """
  ent = world.entities
  current = _facts_on(world, snapshot, set(_ENCYCLOPEDIA))
  history = _histories(world, snapshot) if histories else {}
  articles = []
  for q in _entity_order(world):
    e = ent[q]
    sentences = [_describe(e)]
    for rel, obj in sorted(current.get(q, ())):
      if rel not in history.get(q, {}):
        sentences.append(encyclopedia_sentence(rel, e.name, ent[obj].name))
    for rel in sorted(history.get(q, {})):
      sentences.extend(history[q][rel])
    articles.append(" ".join(sentences))
  return articles


# A history's sentences, in an encyclopedia's wording (not the news's): a tenure that ended
# ({A} to {B}, or up to {B} when its start is older than the records), one still held ({A}).
_ENDED = {
  "P54": "{S} was a player of the club {O} {span}.",
  "P39": "{S} held the office of {O} {span}.",
  "P108": "{S} was employed at {O} {span}.",
  "P102": "{S} was a politician of the {O} {span}.",
  "P286": "{O} was the head coach of {S} {span}.",
  "P69": "{S} was a student at {O} {span}.",
  "P488": "{O} was the chairperson of {S} {span}.",
  "P6": "{O} was the head of government of {S} {span}.",
  "P127": "{O} was the owner of {S} {span}.",
  "P159": "The headquarters of {S} were located in {O} {span}.",
}
_HELD = {
  "P54": "{S} has been a player of the club {O} since {A}.",
  "P39": "{S} has held the office of {O} since {A}.",
  "P108": "{S} has been employed at {O} since {A}.",
  "P102": "{S} has been a politician of the {O} since {A}.",
  "P286": "{O} has been the head coach of {S} since {A}.",
  "P69": "{S} has been a student at {O} since {A}.",
  "P488": "{O} has been the chairperson of {S} since {A}.",
  "P6": "{O} has been the head of government of {S} since {A}.",
  "P127": "{O} has been the owner of {S} since {A}.",
  "P159": "The headquarters of {S} have been located in {O} since {A}.",
}
_EDITION = "The {A} edition of {S} took place in {O}."


def _span(start_year: int | None, end_year: int) -> str:
  if start_year is None:
    return f"until {end_year}"
  if start_year == end_year:
    return f"in {end_year}"
  return f"from {start_year} to {end_year}"


def history_sentence(fact, subject: str, obj: str, snapshot: int = SNAPSHOT) -> str | None:
  """How the encyclopedia's history states `fact` at `snapshot` (None: it states no year for it,
  a tenure of unknown start still held, stated as a current fact)."""
  start = year_of(fact.start) if fact.start is not None else None
  if fact.relation == "P276":
    return _EDITION.format(A=start, S=subject, O=obj)
  if fact.end is not None and fact.end <= snapshot:
    return _ENDED[fact.relation].format(S=subject, O=obj, span=_span(start, year_of(fact.end)))
  if start is None:
    return None
  return _HELD[fact.relation].format(S=subject, O=obj, A=start)


def _histories(world: World, snapshot: int) -> dict[str, dict[str, list[str]]]:
  """Subject -> relation -> its history's sentences in time order, for every time-varying
  relation of a subject with a dated fact begun by `snapshot` (primary facts only)."""
  ent = world.entities
  by_pair: dict[tuple[str, str], list] = {}
  for f in world.facts:
    if f.relation in STATIC or f.secondary or not f.dated:
      continue
    if f.start is not None and f.start > snapshot:
      continue
    by_pair.setdefault((f.subject, f.relation), []).append(f)
  out: dict[str, dict[str, list[str]]] = {}
  for (subject, rel), facts in by_pair.items():
    facts.sort(key=lambda f: (f.start is not None, f.start or 0))
    sentences = []
    for f in facts:
      text = history_sentence(f, ent[subject].name, ent[f.obj].name, snapshot)
      sentences.append(text or encyclopedia_sentence(rel, ent[subject].name, ent[f.obj].name))
    out.setdefault(subject, {})[rel] = sentences
  return out
