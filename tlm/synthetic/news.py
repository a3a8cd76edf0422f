"""Dated news documents of the synthetic world (its "CustomNews").

For every year, each fact valid in that year gets `min_mentions` mention requests plus a
popularity-weighted share of the year's fact budget, each at a date on which the fact holds; the
requests of one subject are packed into short documents dated at their first request, with
distractor sentences around them. Then a fixed share of sentences about the past or the future
(no year) and a fixed share of sentences with an explicit year (half of them the publication
year) are added to randomly chosen documents. Every sentence is a `Sentence` record (kind, fact,
template) so that tests can check what each one states.
"""

import bisect
import dataclasses
import datetime

import numpy as np

from tlm.synthetic import coverage, templates
from tlm.synthetic.settings import NewsSettings
from tlm.synthetic.world_records import Fact, World, day, year_of

# Distractor slots filled with an entity of this kind (or person category).
_SLOT_KINDS = {
  "team": "team",
  "player": "player",
  "politician": "politician",
  "city": "city",
  "country": "country",
  "party": "party",
  "company": "company",
  "person": "person",
  "university": "university",
  "organisation": "organisation",
  "event": "event",
  "landmark": "landmark",
}
_PLACES = ("city", "country", "landmark", "event")
# The distractor area of a document, by its topic's kind or person category.
_AREAS = {
  "player": "sports",
  "team": "sports",
  "coach": "sports",
  "politician": "politics",
  "city": "politics",
  "country": "politics",
  "party": "politics",
  "leader": "politics",
  "company": "business",
  "professional": "business",
  "investor": "business",
}


class _Fields(dict):
  """Template fields; slots the fact does not fix are drawn on first use (`str.format_map`).

  Args:
    writer: draws the missing slots.
    topic: the document's subject.
    d: the document's date.
    use_topic: a slot of the topic's kind is filled with the topic (distractors); otherwise
      slots are filled with other entities than those in `used`.
    used: qids already in the sentence.
  """

  def __init__(self, writer, topic: str, d: int, use_topic: bool, used=(), **fixed):
    super().__init__(**fixed)
    self.writer = writer
    self.topic = topic
    self.day = d
    self.use_topic = use_topic
    self.used = set(used)

  def __missing__(self, key):
    value = self.writer.filler(key, self)
    self[key] = value
    return value


@dataclasses.dataclass(frozen=True)
class Sentence:
  text: str
  kind: str  # "fact" | "distractor" | "past_future" | "explicit_year" | "forward"
  template: str  # e.g. "P54:templama", "P54:2", "distractor:sports:0"
  fact: Fact | None = None  # "fact": the fact it states, valid at the document date
  year: int | None = None  # "explicit_year", dated "forward": the year it names
  until: int | None = None  # "forward" (`forward.py`): the year the term it extends ends
  # "past_future", and a new tenure's "fact" sentence naming the previous object (world v4):
  # the fact of another time it names (not valid at the document date)
  about: Fact | None = None


@dataclasses.dataclass
class Document:
  date: int  # day ordinal
  topic: str  # qid of the entity the document is about
  sentences: list[Sentence]

  @property
  def date_str(self) -> str:
    return datetime.date.fromordinal(self.date).isoformat()

  @property
  def text(self) -> str:
    return " ".join(s.text for s in self.sentences)


def news_interval(fact: Fact, first: int, last: int) -> tuple[int, int] | None:
  """Days of [first, last] on which the news may state `fact` in present tense.

  An annual event's host is news for the whole year of the edition.
  """
  if fact.relation == "P276":
    return (first, last) if year_of(fact.start) == year_of(first) else None
  return fact.overlap(first, last)


def _holds_in(fact: Fact, year: int) -> bool:
  """Whether `fact` held in mid `year` (an annual event: whether it is that year's edition)."""
  if fact.relation == "P276":
    return year_of(fact.start) == year
  return fact.valid_on(day(year, 7, 1))


def _take(queue: list, chosen: list, limit: int, d: int, valid: list, lookahead: int) -> None:
  """Moves requests from the head of `queue` whose fact holds on day `d` into `chosen`."""
  k = 0
  while k < min(lookahead, len(queue)) and len(chosen) < limit:
    j = queue[k][1]
    if j not in chosen and news_interval(valid[j][0], d, d) is not None:
      chosen.append(j)
      del queue[k]
    else:
      k += 1


class NewsWriter:
  """Writes the documents of each year; all randomness comes from one numpy stream."""

  def __init__(self, world: World, settings: NewsSettings, rng: np.random.Generator):
    self.world = world
    self.settings = settings
    self.rng = rng
    self.entities = world.entities
    self.by_subject: dict[str, list[Fact]] = {}
    for f in world.facts:
      self.by_subject.setdefault(f.subject, []).append(f)
    self.by_kind: dict[str, list[str]] = {}
    for q, e in self.entities.items():
      self.by_kind.setdefault(self.category(q), []).append(q)
      self.by_kind.setdefault(e.kind, []).append(q)
    self.by_kind["person"] = [q for q, e in self.entities.items() if e.kind == "person"]
    self.cumulative = {
      k: np.cumsum([self.entities[q].weight for q in v]).tolist() for k, v in self.by_kind.items()
    }
    self._block: list[float] = []
    self._next = 0

  # -- helpers --------------------------------------------------------------------------------

  def category(self, qid: str) -> str:
    e = self.entities[qid]
    return e.role.split(":")[0] if e.kind == "person" else e.kind

  def uniform(self) -> float:
    """The next uniform in [0, 1) from the numpy stream, drawn in blocks (one call per block
    instead of one per draw keeps the news fast)."""
    if self._next == len(self._block):
      self._block = self.rng.random(4096).tolist()
      self._next = 0
    self._next += 1
    return self._block[self._next - 1]

  def randint(self, n: int) -> int:
    """Uniform in [0, n)."""
    return min(n - 1, int(self.uniform() * n))

  def choice(self, options):
    return options[self.randint(len(options))]

  def sample(self, n: int, k: int) -> list[int]:
    """`k` distinct indices of range(n) in random order (partial Fisher-Yates)."""
    idx = list(range(n))
    for i in range(min(k, n)):
      j = i + self.randint(n - i)
      idx[i], idx[j] = idx[j], idx[i]
    return idx[: min(k, n)]

  def random_entity(self, kind: str, exclude=()) -> str:
    """An entity of `kind` (or person category) drawn in proportion to its weight."""
    qids, cum = self.by_kind[kind], self.cumulative[kind]
    for _ in range(50):
      q = qids[min(len(qids) - 1, bisect.bisect_right(cum, self.uniform() * cum[-1]))]
      if q not in exclude:
        break
    return q

  def fields(self, subject: str, obj: str, d: int) -> _Fields:
    """Fields of a sentence stating (subject, obj); other slots get other entities."""
    subject_entity, object_entity = self.entities[subject], self.entities[obj]
    role = ""
    for e in (subject_entity, object_entity):
      if e.kind == "person" and ":" in e.role:
        detail = e.role.split(":")[1]
        role = {"city": "mayor", "country": "prime minister"}.get(detail, detail)
    return _Fields(
      self,
      subject,
      d,
      False,
      (subject, obj),
      s=subject_entity.mention,
      o=object_entity.mention,
      S=subject_entity.name,
      O=object_entity.name,
      role=role,
      Role=role[:1].upper() + role[1:],
      a_role=("an " if role[:1] in "aeiou" else "a ") + role,
      Y=year_of(d),
    )

  def filler(self, key: str, fields: _Fields):
    """A value for a template slot that the fact does not fix (another team, a weekday...)."""
    if key in _SLOT_KINDS or key in ("team2", "country2"):
      kind = _SLOT_KINDS.get(key, key[:-1])
      topic = fields.topic
      fits = self.category(topic) == kind or self.entities[topic].kind == kind
      if fields.use_topic and key in _SLOT_KINDS and fits and topic not in fields.used:
        q = topic
      else:
        q = self.random_entity(kind, exclude=fields.used)
      fields.used.add(q)
      bare = key in ("city", "country", "team2", "country2")  # templates say "in {city}"
      return self.entities[q].name if bare else self.entities[q].mention
    if key == "weekday":  # a day of the week before the publication
      d = fields.day - self.randint(7)
      return templates.WEEKDAYS[datetime.date.fromordinal(d).weekday()]
    if key == "month":
      return self.choice(templates.MONTHS)
    if key == "topic":
      return self.choice(templates.TOPICS)
    if key == "a":  # the winner's goals; "b" (the loser's) is drawn below it
      return 1 + self.randint(4)
    if key == "b":
      return self.randint(fields["a"])
    if key == "n":
      return 2 + self.randint(10)
    raise KeyError(key)

  def sentence(
    self, template: str, fields, kind: str, template_id: str, fact=None, year=None, about=None
  ):
    text = template.format_map(fields)
    return Sentence(text[0].upper() + text[1:], kind, template_id, fact, year, about=about)

  def key(self, fact: Fact) -> str:
    if fact.relation == "P159":
      return f"P159:{self.entities[fact.subject].kind}"
    return fact.relation

  # -- fact sentences -------------------------------------------------------------------------

  def fact_sentence(self, fact: Fact, d: int) -> Sentence:
    fields = self.fields(fact.subject, fact.obj, d)
    rel = fact.relation
    if rel == "P276":
      key = "P276:before" if d < fact.start else "P276:after"
      i = self.randint(len(templates.FACT[key]))
      return self.sentence(templates.FACT[key][i], fields, "fact", f"{key}:{i}", fact)
    r = self.uniform()
    if rel in templates.TEMPLAMA and r < self.settings.templama_phrasing_share:
      return self.sentence(templates.TEMPLAMA[rel], fields, "fact", f"{rel}:templama", fact)
    recent = fact.start is not None and 0 <= d - fact.start < 300
    if rel in templates.RECENT and recent and self.uniform() < self.settings.recent_phrasing_share:
      previous = self.previous(fact) if self.settings.from_share > 0 else None
      if previous is not None and self.uniform() < self.settings.from_share:
        fields["p"] = self.entities[previous.obj].mention
        fields.used.add(previous.obj)
        template = templates.RECENT_FROM[rel]
        return self.sentence(template, fields, "fact", f"{rel}:from", fact, about=previous)
      return self.sentence(templates.RECENT[rel], fields, "fact", f"{rel}:recent", fact)
    options = templates.FACT[self.key(fact)]
    i = self.randint(len(options))
    return self.sentence(options[i], fields, "fact", f"{self.key(fact)}:{i}", fact)

  def previous(self, fact: Fact) -> Fact | None:
    """The subject's object of the same relation that `fact` took over from: the primary fact
    that ended last before `fact` started, within a year, or None."""
    before = [
      f
      for f in self.by_subject.get(fact.subject, ())
      if f.relation == fact.relation
      and not f.secondary
      and f.obj != fact.obj
      and f.end is not None
      and fact.start is not None
      and 0 <= fact.start - f.end <= 365
    ]
    return max(before, key=lambda f: f.end) if before else None

  def distractor(self, topic: str, d: int) -> Sentence:
    area = _AREAS.get(self.category(topic), "general")
    i = self.randint(len(templates.DISTRACTORS[area]))
    fields = _Fields(self, topic, d, True)
    return self.sentence(
      templates.DISTRACTORS[area][i], fields, "distractor", f"distractor:{area}:{i}"
    )

  # -- documents ------------------------------------------------------------------------------

  def year_documents(self, year: int) -> list[Document]:
    settings = self.settings
    first, last = day(year), day(year, 12, 31)
    valid = []
    for f in self.world.facts:
      iv = news_interval(f, first, last)
      if iv is not None:
        valid.append((f, iv))
    budget = settings.fact_sentences_first_year * settings.growth_per_year ** (
      year - settings.first_year
    )
    days = coverage.mention_days(self.world, valid, budget * self.world.scale, settings, self.rng)
    requests: dict[str, list[tuple[int, int]]] = {}
    for i, ((f, _), dates) in enumerate(zip(valid, days)):
      requests.setdefault(f.subject, []).extend((int(x), i) for x in dates)
    pending = {subj: sorted(reqs) for subj, reqs in requests.items()}
    # Documents also report facts of linked subjects (a player's team, a city's country).
    links: dict[str, set[str]] = {}
    for f, _ in valid:
      if f.subject in pending and f.obj in pending:
        links.setdefault(f.subject, set()).add(f.obj)
        links.setdefault(f.obj, set()).add(f.subject)
    # ... and, in round-ups, facts of other subjects of the same kind (other teams' coaches).
    same_kind: dict[str, list[str]] = {}
    for subj in sorted(pending):
      same_kind.setdefault(self.category(subj), []).append(subj)
    docs = []
    for subject in sorted(pending):
      queue = pending[subject]
      related = sorted(links.get(subject, ()))
      peers = same_kind[self.category(subject)]
      while queue:
        d, i = queue.pop(0)
        docs.append(self.document(subject, d, i, queue, pending, related, peers, valid))
    self.add_extras(docs, year)
    docs.sort(key=lambda doc: doc.date)
    return docs

  def document(self, subject, d, i, queue, pending, related, peers, valid) -> Document:
    """One article about `subject` on day `d`: the fact `valid[i]`, up to two more facts due
    around that day (its own, then linked subjects', then same-kind peers'; taken out of their
    queues), and distractor sentences between them."""
    settings = self.settings
    r, p1, p2 = self.uniform(), settings.facts_per_document[0], settings.facts_per_document[1]
    n_facts = 1 if r < p1 else (2 if r < p1 + p2 else 3)
    chosen = [i]
    _take(queue, chosen, n_facts, d, valid, lookahead=6)
    for k in self.sample(len(related), 4):
      if len(chosen) >= n_facts:
        break
      _take(pending[related[k]], chosen, len(chosen) + 1, d, valid, lookahead=12)
    for k in self.sample(len(peers), 2):
      if len(chosen) >= n_facts:
        break
      if peers[k] != subject:
        _take(pending[peers[k]], chosen, len(chosen) + 1, d, valid, lookahead=12)
    sentences = [self.fact_sentence(valid[j][0], d) for j in chosen]
    n_distract = (self.uniform() < settings.distractor_prob) + (
      self.uniform() < settings.distractor_prob
    )
    if len(sentences) == 1:
      n_distract = max(1, n_distract)
    for _ in range(n_distract):
      pos = 1 + self.randint(len(sentences))
      sentences.insert(pos, self.distractor(subject, d))
    return Document(d, subject, sentences)

  def add_extras(self, docs: list[Document], year: int) -> None:
    """Adds the past/future and explicit-year sentences at their configured shares."""
    settings = self.settings
    base = sum(len(doc.sentences) for doc in docs)
    total = base / (1.0 - settings.past_future_share - settings.explicit_year_share)
    n_pf = int(round(total * settings.past_future_share))
    n_year = int(round(total * settings.explicit_year_share))
    n_same = int(round(n_year * settings.same_year_fraction))
    for i in self.rng.choice(len(docs), size=min(n_pf, len(docs)), replace=False):
      self.insert(docs[i], self.past_future(docs[i].topic, docs[i].date))
    for k, i in enumerate(self.rng.choice(len(docs), size=min(n_year, len(docs)), replace=False)):
      doc = docs[i]
      if k < n_same:
        sent = self.same_year(doc.topic, doc.date)
      else:
        sent = self.other_year(doc.topic, doc.date)
      self.insert(doc, sent)

  def insert(self, doc: Document, sentence: Sentence) -> None:
    doc.sentences.insert(1 + self.randint(len(doc.sentences)), sentence)

  # -- past, future and explicit years --------------------------------------------------------

  def primaries(self, subject: str) -> list[Fact]:
    return [f for f in self.by_subject.get(subject, ()) if f.dated and not f.secondary]

  def neighbours(self, subject: str, d: int) -> tuple[list[Fact], list[Fact]]:
    """Facts of `subject` that ended before `d`, and those that start after `d`."""
    facts = self.primaries(subject)
    if facts and facts[0].relation == "P276":
      past = [f for f in facts if year_of(f.start) == year_of(d) - 1]
      future = [f for f in facts if year_of(f.start) == year_of(d) + 1]
      return past, future
    past = [f for f in facts if f.end is not None and f.end < d]
    future = [
      f for f in facts if f.start is not None and 0 < f.start - d <= self.settings.announce_days
    ]
    return past, future

  def past_future(self, topic: str, d: int) -> Sentence:
    """The topic's previous or next object, no year ("X previously played for Y")."""
    if self.settings.look_back_share > 0:
      tense, f = self.looking(topic, d)
    else:  # world v3: either neighbour of the topic, equally likely
      past, future = self.neighbours(topic, d)
      options = [("past", f) for f in past[-1:]] + [("future", f) for f in future[:1]]
      if not options:  # nothing changed around the topic: last year's host of some event
        event = self.random_entity("event")
        past, _ = self.neighbours(event, d)
        options = [("past", past[0])]
      tense, f = self.choice(options)
    table = templates.PAST if tense == "past" else templates.FUTURE
    fields = self.fields(f.subject, f.obj, d)
    return self.sentence(table[f.relation], fields, "past_future", f"{tense}:{f.relation}", about=f)

  def looking(self, topic: str, d: int) -> tuple[str, Fact]:
    """World v4: the topic's previous object (weight `look_back_share`) or its next one (the
    rest); when it has only one, that one; when none, some event's host of last year."""
    past, future = self.neighbours(topic, d)
    if past and future:
      back = self.uniform() < self.settings.look_back_share
      return ("past", past[-1]) if back else ("future", future[0])
    if past or future:
      return ("past", past[-1]) if past else ("future", future[0])
    past, _ = self.neighbours(self.random_entity("event"), d)
    return "past", past[0]

  def same_year(self, topic: str, d: int) -> Sentence:
    year = year_of(d)
    started = [
      f
      for f in self.primaries(topic)
      if f.relation in templates.STARTED
      and f.start is not None
      and f.start <= d
      and year_of(f.start) == year
    ]
    if started:
      f = started[-1]
      fields = self.fields(f.subject, f.obj, d)
      start = datetime.date.fromordinal(f.start)
      month = templates.MONTHS[start.month - 1]
      fields["when"] = f"{month} {year}" if self.uniform() < 0.7 else str(year)
      return self.sentence(
        templates.STARTED[f.relation], fields, "explicit_year", "started", f, year
      )
    events = [f for f in self.primaries(topic) if f.relation == "P276" and year_of(f.start) == year]
    if events:
      f = events[0]
      template = templates.EVENT_YEAR_BEFORE if d < f.start else templates.EVENT_YEAR_AFTER
      fields = self.fields(f.subject, f.obj, d)
      return self.sentence(template, fields, "explicit_year", "event_year", f, year)
    fields = {"x": self.entities[topic].mention, "Y": year}
    kind = self.entities[topic].kind
    group = "person" if kind == "person" else ("place" if kind in _PLACES else "organisation")
    i = self.randint(len(templates.PLAIN_YEAR[group]))
    template = templates.PLAIN_YEAR[group][i]
    return self.sentence(template, fields, "explicit_year", f"plain:{group}:{i}", None, year)

  def other_year(self, topic: str, d: int) -> Sentence:
    year = year_of(d)
    facts = [f for f in self.primaries(topic) if f.relation in templates.PAST_YEAR]
    r = self.uniform()
    if r < 0.35:
      current = [
        f
        for f in facts
        if f.relation in templates.SINCE
        and f.valid_on(d)
        and f.start is not None
        and year_of(f.start) < year
      ]
      if current:
        f = current[0]
        fields = self.fields(f.subject, f.obj, d)
        fields["Y"] = year_of(f.start)
        return self.sentence(
          templates.SINCE[f.relation], fields, "explicit_year", "since", f, fields["Y"]
        )
    if r < 0.8:
      for k in self.sample(8, 8):
        y = year - 1 - k
        held = [f for f in facts if y >= 2004 and _holds_in(f, y)]
        if held:
          f = held[0]
          fields = self.fields(f.subject, f.obj, d)
          fields["Y"] = y
          return self.sentence(
            templates.PAST_YEAR[f.relation], fields, "explicit_year", "past_year", f, y
          )
    # Next year's edition of an event (hosts are announced a year ahead).
    event = topic if self.entities[topic].kind == "event" else self.random_entity("event")
    _, future = self.neighbours(event, d)
    f = future[0]
    fields = self.fields(f.subject, f.obj, d)
    fields["Y"] = year + 1
    return self.sentence(
      templates.EVENT_YEAR_BEFORE, fields, "explicit_year", "next_event", f, year + 1
    )


def generate_news(world: World, settings: NewsSettings, rng: np.random.Generator) -> list[Document]:
  """All documents of `first_year`..`last_year`, sorted by date; a pure function of the inputs."""
  writer = NewsWriter(world, settings, rng)
  docs: list[Document] = []
  for year in range(settings.first_year, settings.last_year + 1):
    docs.extend(writer.year_documents(year))
  return docs
