"""Records and time helpers of the synthetic world: entities, facts, the world, random streams.

The types that the facts generator (`facts.py`) produces and the news writer (`news.py`) reads.
Time is counted in days (proleptic Gregorian ordinals); the world's facts span 2004-2022.
"""

import dataclasses
import datetime

import numpy as np

WINDOW_START = datetime.date(2004, 1, 1).toordinal()
WINDOW_END = datetime.date(2022, 12, 31).toordinal()
HISTORY_START = datetime.date(1950, 1, 1).toordinal()
DAYS_PER_YEAR = 365.25

# Independent random streams, one per purpose, so that changing how the news is written never
# changes the facts (and so on). The ids are part of the output format: never renumber them.
_STREAMS = {"names": 1, "popularity": 2, "facts": 3, "news": 4, "forward": 5}


def stream(seed: int, name: str) -> np.random.Generator:
  """The numpy Generator (PCG64) of one named purpose under `seed`."""
  return np.random.Generator(np.random.PCG64(np.random.SeedSequence([_STREAMS[name], seed])))


def day(year: int, month: int = 1, day_of_month: int = 1) -> int:
  """The day number of a date."""
  return datetime.date(year, month, day_of_month).toordinal()


def year_of(d: int) -> int:
  """The year of a day number."""
  return datetime.date.fromordinal(d).year


@dataclasses.dataclass(frozen=True)
class Entity:
  qid: str
  name: str
  kind: str
  popularity: int  # written to entities.tsv; the TempLAMA builder ranks subjects by it
  weight: float  # latent salience: how often the news mentions the entity
  article: bool = False  # running text writes "the <name>"
  role: str = ""  # person: "player:striker", "leader:city", ...; event: host kind; position
  country: str = ""  # qid of the home country (cities, parties, positions, politicians)

  @property
  def mention(self) -> str:
    return f"the {self.name}" if self.article else self.name


@dataclasses.dataclass(frozen=True)
class Fact:
  """One (relation, subject, object) valid from `start` to `end` (days, both inclusive).

  `start is None`: valid since before the window, start unknown; `end is None`: still valid
  at the end of the world. `*_digits` is the written precision (4 year, 6 month, 8 day).
  """

  relation: str
  subject: str
  obj: str
  start: int | None
  end: int | None
  start_digits: int = 6
  end_digits: int = 6
  secondary: bool = False
  dated: bool = True  # False: a timeless fact written without qualifiers

  def valid_on(self, d: int) -> bool:
    return (self.start is None or self.start <= d) and (self.end is None or d <= self.end)

  def overlap(self, first: int, last: int) -> tuple[int, int] | None:
    """The days of [first, last] on which the fact holds, or None."""
    lo = first if self.start is None else max(first, self.start)
    hi = last if self.end is None else min(last, self.end)
    return (lo, hi) if lo <= hi else None


@dataclasses.dataclass
class World:
  seed: int
  scale: float
  entities: dict[str, Entity]
  facts: list[Fact]
  subjects: dict[str, list[str]]  # relation -> its subjects (loyal ones included)
  loyal: dict[str, list[str]]  # relation -> subjects that keep one object
  # relation ("P39", "P6") -> jurisdiction qid -> its election days: the dates the world fixes
  # in advance (a P39 politician's country; a P6 subject itself)
  elections: dict[str, dict[str, list[int]]] = dataclasses.field(default_factory=dict)

  def by_kind(self, kind: str) -> list[Entity]:
    return [e for e in self.entities.values() if e.kind == kind]
