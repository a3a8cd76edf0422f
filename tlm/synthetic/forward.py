"""Forward-looking news sentences: a term that ends in a later year (off by default).

Real news ties later years to current facts: "X's contract with Y runs until 2021", "X's term
as minister ends at the 2021 election". The default world's news never does so for a TempLAMA
relation (its only later years are next year's event hosts), so the token of a year after the
training years never meets a TempLAMA relation in training. `add_forward` adds such sentences
to the news of every year, at a share of all sentences (`settings.FORWARD_SHARE`, and why), in
one of two modes:

- "dated": the sentence names the year the term ends ("... runs until 2021.");
- "undated": the no-year control, the same sentence, in the same place, with the dated phrase
  replaced by an undated one ("... runs until a later year.", "... ends at the next
  election."), so that comparing the two isolates the year.

The rule against leaking what a newspaper could not know: a sentence states an end only where
the world fixes that end in advance, when the term begins, and it states that end and no other:
- P54 (a player's contract: "contracts run 2-5 years"), P69 (a degree: "degree lengths are
  fixed") and P488 (a chair's fixed term): a primary tenure's end in the world is its planned
  end, known from its start; the sentence names the year of the fact's own end. A tenure with
  no end in the world (still running at the end of 2022) gets no sentence.
- P39 (a minister's office) and P6 (a head of government): the term ends at the jurisdiction's
  next election, whose date the world fixes years ahead (`World.elections`); the sentence names
  that election's year, whether or not the office changes hands then (re-election is not
  known in advance, and the sentence does not say it).
- No other relation: P286's irregular tenures are sackings (unplanned), and jobs (P108), party
  membership (P102) and ownership (P127) have no planned end. Secondary objects (loans, joint
  appointments) get none either.
A sentence is written only while the fact holds and only when the year it names is after the
year of publication. Every such sentence is true of the world.

The sentences go right after a sentence of the same document that states the fact they extend,
chosen from one random stream of their own (`records.stream(seed, "forward")`), after the
default news is written: the default news is untouched, and the vocabulary (trained without
these sentences, `world._vocab_texts`) and the pre-training corpora stay the default world's, so
a start pretrained on the default world is the start of this one too. `stated_answers` counts
the TempLAMA answers of later years that these sentences state.
"""

import dataclasses
import re
from collections.abc import Iterable, Sequence

import numpy as np

from tlm.errors import DataError
from tlm.line_files import iter_jsonl
from tlm.synthetic.news import Document, NewsWriter, Sentence
from tlm.synthetic.world_records import Fact, World, year_of

MODES = ("dated", "undated")
KIND = "forward"

# relation -> how its planned end is known (the module docstring).
PLANNED = {"P54": "end", "P69": "end", "P488": "end", "P39": "election", "P6": "election"}

# relation -> templates (text with "{when}", the dated phrase with "{E}", the undated phrase).
# Only the phrase differs between the modes.
TEMPLATES = {
  "P54": (
    ("{s}'s contract with {o} runs {when}.", "until {E}", "until a later year"),
    ("{s} is under contract at {o} {when}.", "until {E}", "until a later year"),
  ),
  "P69": (
    ("{s} is due to graduate from {o} {when}.", "in {E}", "in a later year"),
    ("{s}'s degree at {o} runs {when}.", "until {E}", "until a later year"),
  ),
  "P488": (
    ("{o}'s term as chair of {s} runs {when}.", "until {E}", "until a later year"),
    ("{o} will chair {s} {when}.", "until {E}", "until a later year"),
  ),
  "P39": (
    ("{s}'s term as {o} ends {when}.", "at the {E} election", "at the next election"),
    ("{s} will serve as {o} {when}.", "until the {E} election", "until the next election"),
  ),
  "P6": (
    ("{o}'s term as {role} of {s} ends {when}.", "at the {E} election", "at the next election"),
    ("{Role} {o} will lead {s} {when}.", "until the {E} election", "until the next election"),
  ),
}


@dataclasses.dataclass(frozen=True)
class ForwardSettings:
  """Forward-looking sentences: `mode` ("dated" or "undated") at `share` of all sentences."""

  mode: str
  share: float

  def __post_init__(self):
    if self.mode not in MODES:
      raise ValueError(f"forward-looking mode must be one of {MODES}, got {self.mode!r}")
    if not 0 < self.share < 1:
      raise ValueError(f"forward-looking share must be in (0, 1), got {self.share!r}")


def planned_end(world: World, fact: Fact, d: int) -> int | None:
  """The year in which the term of `fact` current on day `d` ends, as known in advance (the
  module docstring's rule), or None if nothing is known."""
  how = PLANNED.get(fact.relation)
  if how is None or fact.secondary or not fact.dated or not fact.valid_on(d):
    return None
  if how == "end":
    return None if fact.end is None else year_of(fact.end)
  subject = world.entities[fact.subject]
  jurisdiction = subject.country if fact.relation == "P39" else fact.subject
  upcoming = [e for e in world.elections.get(fact.relation, {}).get(jurisdiction, ()) if e >= d]
  if not upcoming:
    return None
  if fact.end is not None and fact.end < min(upcoming):
    raise AssertionError(f"{fact} ends before the election that ends its term")
  return year_of(min(upcoming))


def _candidates(world: World, docs: Sequence[Document]) -> list[tuple[int, int, Fact, int]]:
  """(document, sentence, fact, end year): fact sentences whose term ends in a later year."""
  out = []
  for i, doc in enumerate(docs):
    year = year_of(doc.date)
    for j, s in enumerate(doc.sentences):
      if s.kind != "fact" or s.fact is None:
        continue
      end = planned_end(world, s.fact, doc.date)
      if end is not None and end > year:
        out.append((i, j, s.fact, end))
  return out


def _sentence(writer, fact: Fact, end: int, d: int, mode: str, k: int) -> Sentence:
  text, dated, undated = TEMPLATES[fact.relation][k]
  fields = writer.fields(fact.subject, fact.obj, d)
  fields["when"] = dated.format(E=end) if mode == "dated" else undated
  return dataclasses.replace(
    writer.sentence(text, fields, KIND, f"{KIND}:{fact.relation}:{k}", fact),
    year=end if mode == "dated" else None,
    until=end,
  )


def add_forward(
  world: World, docs: list[Document], settings: ForwardSettings, rng: np.random.Generator
) -> dict:
  """Inserts the forward-looking sentences into `docs` (in place); returns their counts.

  Per year, `share` x (that year's sentences once they are added) sentences, or every candidate
  if there are fewer: candidates are drawn without replacement and each is inserted right
  after the fact sentence it extends.

  Returns:
    {"mode", "share_setting", "sentences": in all, "sentences_per_year", "candidates_per_year",
     "share": the share of all sentences they make}.
  """
  # A writer of its own, on this stream: it fills the fields and draws each template.
  writer = NewsWriter(world, None, rng)
  by_year: dict[int, list[int]] = {}
  for i, doc in enumerate(docs):
    by_year.setdefault(year_of(doc.date), []).append(i)
  added, offered = {}, {}
  total = 0
  for year in sorted(by_year):
    idx = by_year[year]
    base = sum(len(docs[i].sentences) for i in idx)
    cands = _candidates(world, [docs[i] for i in idx])
    n = min(len(cands), int(round(base * settings.share / (1.0 - settings.share))))
    chosen = sorted(rng.choice(len(cands), size=n, replace=False).tolist()) if n else []
    # Insert from the back of each document, so that earlier positions stay valid.
    for c in sorted(chosen, key=lambda c: (cands[c][0], -cands[c][1])):
      local, j, fact, end = cands[c]
      doc = docs[idx[local]]
      k = writer.randint(len(TEMPLATES[fact.relation]))
      doc.sentences.insert(j + 1, _sentence(writer, fact, end, doc.date, settings.mode, k))
    added[str(year)], offered[str(year)] = n, len(cands)
    total += base + n
  n_all = sum(added.values())
  return {
    "mode": settings.mode,
    "share_setting": settings.share,
    "sentences": n_all,
    "sentences_per_year": added,
    "candidates_per_year": offered,
    "share": round(n_all / max(1, total), 5),
  }


@dataclasses.dataclass(frozen=True)
class Record:
  """One forward-looking sentence, as `build_world` writes it to `forward.jsonl`."""

  date: str  # the publication date, YYYY-MM-DD
  subject: str
  relation: str
  obj: str
  until: int  # the year the term ends
  year: int | None  # the year the sentence names (None: the undated control)
  text: str

  @property
  def news_year(self) -> int:
    return int(self.date[:4])

  def as_json(self) -> dict:
    return {
      "date": self.date,
      "subject": self.subject,
      "relation": self.relation,
      "object": self.obj,
      "until": self.until,
      "year": self.year,
      "text": self.text,
    }


def records(docs: Iterable[Document]) -> list[Record]:
  """The forward-looking sentences of `docs`, in document order."""
  return [
    Record(doc.date_str, s.fact.subject, s.fact.relation, s.fact.obj, s.until, s.year, s.text)
    for doc in docs
    for s in doc.sentences
    if s.kind == KIND
  ]


_FIELDS = ("date", "subject", "relation", "object", "until", "year", "text")


def read_records(path: str) -> list[Record]:
  """Reads `forward.jsonl` (as hostile input: every field checked).

  Raises:
    DataError: naming the file and line of a malformed record.
  """
  out = []
  for line_no, obj in iter_jsonl(path, required=_FIELDS):
    strings = ("date", "subject", "relation", "object", "text")
    if not all(isinstance(obj[k], str) and obj[k] for k in strings):
      raise DataError(f"{', '.join(strings)} must be non-empty strings", path, line_no)
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", obj["date"]):
      raise DataError(f"'date' must be YYYY-MM-DD, got {obj['date']!r}", path, line_no)
    year_ok = obj["year"] is None or obj["year"] == obj["until"]
    if type(obj["until"]) is not int or not year_ok:
      raise DataError(
        "'until' must be an integer year and 'year' null or equal to it", path, line_no
      )
    out.append(
      Record(
        obj["date"],
        obj["subject"],
        obj["relation"],
        obj["object"],
        obj["until"],
        obj["year"],
        obj["text"],
      )
    )
  return out


def stated_answers(
  told: Iterable[Record], queries: Iterable, years: Sequence[int], news_years: Sequence[int]
) -> dict:
  """How many of the queries of `years` a forward-looking sentence published in `news_years`
  states the answer of, with a year.

  A dated sentence "S's term as O ends in E" states the answer O of (S, relation) for every
  year up to E: a query of year y is stated when such a sentence names one of its answers and
  E >= y. An undated sentence (the control) names no year, so it states no answer of a given
  year (`undated_covering` counts the queries it would cover if it named its year).

  Args:
    told: the forward-looking sentences (`records`, `read_records`).
    queries: objects with `subject`, `relation`, `year` and `answer_ids` (e.g.
      `tlm.data.templama.TempLamaExample`).

  Returns:
    {"queries": of `years`, "stated", "stated_per_year", "pairs": distinct (subject,
     relation) of the stated queries, "undated_covering", "sentences": dated sentences
     published in `news_years`, "sentences_stating": those that state some query}.
  """
  news_years, years = set(news_years), set(years)
  by_pair: dict[tuple[str, str], list[tuple[int, Record]]] = {}
  n_sentences = 0
  for i, r in enumerate(told):
    if r.news_year in news_years:
      by_pair.setdefault((r.subject, r.relation), []).append((i, r))
      n_sentences += r.year is not None
  n = stated = covering = 0
  per_year = {str(y): 0 for y in sorted(years)}
  pairs, used = set(), set()
  for q in queries:
    if q.year not in years:
      continue
    n += 1
    hits = [
      (i, r)
      for i, r in by_pair.get((q.subject, q.relation), ())
      if r.obj in q.answer_ids and r.until >= q.year
    ]
    if any(r.year is not None for _, r in hits):
      stated += 1
      per_year[str(q.year)] += 1
      pairs.add((q.subject, q.relation))
      used.update(i for i, r in hits if r.year is not None)
    elif hits:
      covering += 1
  return {
    "queries": n,
    "stated": stated,
    "stated_per_year": per_year,
    "pairs": len(pairs),
    "undated_covering": covering,
    "sentences": n_sentences,
    "sentences_stating": len(used),
  }
