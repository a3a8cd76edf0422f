"""The synthetic world's two pre-training corpora: its "C4" and its "Wikipedia".

The paper starts every model from the public T5 checkpoints (Raffel et al., 2020: span
corruption on C4) and the T5-CBQA baselines from Roberts et al.'s (T5 plus salient span masking
on Wikipedia). The miniature needs both starting points, from text of its own world:

- `generic_texts`: the "public T5" corpus. Undated, generic web-like text about the world's
  entities: what each entity is ("Kelvar FC is a football club."), where places lie (the
  relations that never change), and general statements that hold at any time. It never states
  a fact that changes over time and never names a year: it gives the model the language and the
  names of the world, not its temporal knowledge (the knowledge the paper's models are probed
  for comes from the news; see docs/reproduction.md, "Deviations from the paper").
- `encyclopedia_texts`: the "Wikipedia" snapshot. One short article per entity, written at
  `SNAPSHOT` (the end of 2019, about when Roberts et al. (2020) built their SSM checkpoints):
  what the entity is, the never-changing facts, and every time-varying fact that holds on the
  snapshot day, in present tense and without a year, as a Wikipedia lead section states the
  current team, party or head coach.

Neither corpus contains a news sentence (the templates differ from the news templates, and
tests/test_synthetic.py checks it) nor a year. Both are pure functions of the world and seed.

`dated_generic_texts` (not written by `build_world`; a lever of the lever study,
research/levers/README.md) is the generic corpus with years added, as C4 names them.
"""

import numpy as np

from tlm.synthetic.settings import YEAR_PIECES
from tlm.synthetic.world_records import World, day

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


def _generic_documents(world: World) -> dict[str, str]:
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


def generic_texts(world: World, seed: int) -> list[str]:
  """The "public T5" corpus: undated generic text, no time-varying fact, no year.

  Per entity (in qid order): what it is, its never-changing facts, and its kind's general
  statements; the documents are then shuffled with `seed`.
  """
  docs = list(_generic_documents(world).values())
  order = np.random.default_rng([seed, 11]).permutation(len(docs))
  return [docs[i] for i in order]


def encyclopedia_texts(world: World, snapshot: int = SNAPSHOT) -> list[str]:
  """The "Wikipedia" corpus: one article per entity as of `snapshot`, in qid order."""
  ent = world.entities
  current = _facts_on(world, snapshot, set(_ENCYCLOPEDIA))
  articles = []
  for q in _entity_order(world):
    e = ent[q]
    sentences = [_describe(e)]
    for rel, obj in sorted(current.get(q, ())):
      sentences.append(encyclopedia_sentence(rel, e.name, ent[obj].name))
    articles.append(" ".join(sentences))
  return articles


# ---- the "public T5" corpus with years (a lever of research/levers, not the protocol's start) -
#
# C4, the public T5's corpus, was crawled in April 2019 and names years everywhere: founding
# dates, seasons ("2018-19"), reports, plans ("by 2025"), calendars. Its year tokens therefore
# carry an order, which the paper's Temporal model can rely on when it first reads
# "year: 2019". `generic_texts` names no year at all, so the miniature's start has no order of
# years: a deviation from the paper. `dated_generic_texts` removes it: the same documents, each
# with a year of origin and a pair of consecutive years, plus one calendar document per year.
# Every year it names is undated background (no news sentence, no time-varying fact).

# The years the world's vocabulary has whole pieces for (`settings.YEAR_PIECES`).
YEARS_FROM, YEARS_TO = YEAR_PIECES[0], YEAR_PIECES[-1]

# The year an entity came to be (before the news period: no conflict with the world's facts).
_ORIGIN = {
  "person": ("{S} was born in {Y}.", 1950, 1999),
  "country": ("{S} adopted its flag in {Y}.", 1950, 1999),
  "city": ("{S} was granted a town charter in {Y}.", 1950, 1999),
  "landmark": ("{S} was completed in {Y}.", 1950, 2009),
  "event": ("{S} was first held in {Y}.", 1950, 2009),
  "position": ("The office of {S} was created in {Y}.", 1950, 1999),
  "other": ("{S} was founded in {Y}.", 1950, 2009),
}
# Two consecutive years (Y-1, Y), Y drawn in YEARS_FROM+1..YEARS_TO: what orders the years.
_SEQUENCE = {
  "person": "{S} gave an interview in {P} and another in {Y}.",
  "country": "{S} published its {Y} census a year after the {P} one.",
  "city": "{S} held its summer festival in {P} and again in {Y}.",
  "landmark": "{S} welcomed more visitors in {Y} than in {P}.",
  "event": "The {Y} edition of {S} came a year after the {P} edition.",
  "position": "The {Y} budget of the office of {S} followed the {P} budget.",
  "other": "{S} published its {Y} annual report a year after its {P} report.",
}
_CALENDAR = "The year {Y} came after {P} and before {N}. The {P}-{Y} season ended in {Y}."


def _group(entity) -> str:
  kind = entity.kind
  return kind if kind in _SEQUENCE else "other"


def dated_generic_texts(world: World, seed: int) -> list[str]:
  """`generic_texts` plus years, as C4 names them (see the comment above); a lever
  (research/levers).

  Each entity's document gets its year of origin and a sentence naming two consecutive years
  in YEARS_FROM..YEARS_TO; one calendar document per year of that range orders the years
  outright. The documents are shuffled with `seed`; a pure function of (world, seed).
  """
  ent = world.entities
  rng = np.random.default_rng([seed, 12])
  docs = []
  for q, document in _generic_documents(world).items():
    group = _group(ent[q])
    origin, lo, hi = _ORIGIN[group]
    year = int(rng.integers(YEARS_FROM + 1, YEARS_TO + 1))
    extra = [
      origin.format(S=ent[q].name, Y=int(rng.integers(lo, hi + 1))),
      _SEQUENCE[group].format(S=ent[q].name, P=year - 1, Y=year),
    ]
    docs.append(" ".join([document, *extra]))
  for year in range(YEARS_FROM, YEARS_TO + 1):
    docs.append(_CALENDAR.format(P=year - 1, Y=year, N=year + 1))
  order = rng.permutation(len(docs))
  return [docs[i] for i in order]
