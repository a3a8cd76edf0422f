"""World v4's years in the start's text: C4 names years in order, so does the miniature's "C4".

The paper's models start from T5, pretrained on C4, "web text extracted in April 2019" (§2.2):
there, "2019", "2021" or "2025" are ordinary tokens, met in founding dates, seasons, reports,
schedules and plans, in an order ("the 2018 season", "by 2025"). World v3's generic corpus named
no year, so "year: 2019" and every probe year after it were untrained inputs in every phase.
`year_sentences` gives each entity's generic document time-neutral sentences naming years of
`YEAR_PIECES` (2000-2035) next to the years around them, and `calendar_documents` orders the
years outright. No sentence states a fact that changes over time (what the news and TempLAMA
are about) or a news sentence; every year of 2000-2035 is named, each next to its neighbours.
"""

import numpy as np

from tlm.synthetic.settings import YEAR_PIECES

FIRST, LAST = YEAR_PIECES[0], YEAR_PIECES[-1]
# The latest year a plan names ("by 2030"): C4's crawl looked up to about 15 years ahead.
PLANS_FROM = 2020

# A recurring thing of each kind, in consecutive years {P} < {Y} (< {N}).
_SCHEDULE = {
  "team": "The {Y} season of {S} follows its {P} season.",
  "event": "The {Y} edition of {S} comes a year after the {P} edition.",
  "company": "{S} publishes its {Y} annual report a year after its {P} report.",
  "university": "The academic year at {S} that begins in {P} ends in {Y}.",
  "organisation": "{S} holds its {Y} assembly a year after its {P} assembly.",
  "party": "{S} holds its {Y} conference a year after its {P} conference.",
  "country": "{S} sets its {Y} budget a year after its {P} budget.",
  "city": "{S} holds its summer festival every year: in {P}, in {Y} and in {N}.",
  "landmark": "{S} opens its {Y} season a year after its {P} season.",
  "position": "The {Y} report of the office of {S} follows its {P} report.",
  "person": "{S} gave an interview in {P} and another one in {Y}.",
}
# A plan for a later year {Y} >= PLANS_FROM, as a 2019 crawl names 2020-2035.
_PLAN = {
  "team": "{S} plans to renovate its training ground by {Y}.",
  "event": "{S} aims to welcome more visitors by {Y}.",
  "company": "{S} aims to double its sales by {Y}.",
  "university": "{S} plans to open a new campus by {Y}.",
  "organisation": "{S} set out its goals for {Y}.",
  "party": "{S} set out its programme for {Y}.",
  "country": "{S} plans to build new schools by {Y}.",
  "city": "{S} plans to open a new railway line by {Y}.",
  "landmark": "{S} plans new visitor facilities by {Y}.",
  "position": "The office of {S} set out its plans for {Y}.",
  "person": "{S} set out personal goals for {Y}.",
}
# The years in order, one document per year and wording.
_CALENDAR = (
  "The year {Y} comes after {P} and before {N}.",
  "{N} is the year after {Y}, and {P} the year before it.",
)


def _group(entity) -> str:
  return "person" if entity.kind == "person" else entity.kind


def year_sentences(entity, index: int, rng: np.random.Generator) -> list[str]:
  """The schedule sentence (a year of FIRST..LAST, with its neighbours) and the plan (a year of
  PLANS_FROM..LAST) of the `index`-th entity, both time-neutral. The schedule years go round
  FIRST..LAST in turn from a random start, so that every year is named about equally often; the
  plan's year is random."""
  group = _group(entity)
  years = LAST - FIRST + 1
  year = FIRST + (index + int(rng.integers(years))) % years
  plan = int(rng.integers(PLANS_FROM, LAST + 1))
  return [
    _SCHEDULE[group].format(S=entity.name, P=year - 1, Y=year, N=year + 1),
    _PLAN[group].format(S=entity.name, Y=plan),
  ]


def calendar_documents() -> list[str]:
  """One document per year of YEAR_PIECES and wording, naming the year and its neighbours."""
  return [
    template.format(P=year - 1, Y=year, N=year + 1)
    for year in range(FIRST, LAST + 1)
    for template in _CALENDAR
  ]
