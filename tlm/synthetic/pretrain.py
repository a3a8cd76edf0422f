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

`generic_documents` gives the generic corpus by entity, for studies that add to it (the lever
study's dated corpus, research/levers/dated_corpus.py).
"""

import numpy as np

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


def generic_texts(world: World, seed: int) -> list[str]:
  """The "public T5" corpus: undated generic text, no time-varying fact, no year.

  Per entity (in qid order): what it is, its never-changing facts, and its kind's general
  statements; the documents are then shuffled with `seed`.
  """
  docs = list(generic_documents(world).values())
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
