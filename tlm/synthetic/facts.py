"""Entities and time-scoped facts of the synthetic world (its "Wikidata").

This module turns a `WorldSettings` (`settings.py`) and a seed into a `World`: entities with
names and popularity, and facts with the true validity interval of every (relation, subject,
object), following the change processes below. Time is counted in days (proleptic ordinals).

Change processes (`RelationSpec.dynamics`):
- "renewal": a stationary renewal process. A subject keeps an object for a gamma-distributed
  tenure (mean `mean_years`, shape `shape`), then changes; the process starts in 1950 so that
  2004-2022 sees it in equilibrium, which makes "changes per subject-year = 1 / mean tenure"
  hold in expectation inside the window (up to a negligible transient).
- "elections": the subject's jurisdiction votes every 4 or 5 years on a fixed date; at each
  election the object changes with probability `change_prob` (mean tenure = cycle / p).
- "studies": a finite sequence of 2-3 degrees (gamma tenures), sometimes with a gap year.
- "annual": a new object every year (an annual event's host), never one of the last two.
- "static": one object forever (a landmark's city, a city's country).
A `loyal_share` of a relation's subjects keeps a single object throughout 2004-2022 (one-club
players, long-serving leaders): the TempLAMA builder drops them, so its "more than one object"
cut matters. A tenure may carry a short concurrent second object (`secondary_prob`: a loan, a
joint appointment, an exchange term), so some years have several correct answers.

Written dates: a fact's start is unknown (no P580) when it lies before the window (2004) and is
not otherwise recorded; the current object has no end (P582). Inside the window the KB is
complete and correct, so every TempLAMA answer is supported by the news of its year.
"""

import math
from collections.abc import Callable

import numpy as np

from tlm.synthetic.names import NameGenerator
from tlm.synthetic.settings import RelationSpec, WorldSettings
from tlm.synthetic.world_records import (
  DAYS_PER_YEAR,
  HISTORY_START,
  WINDOW_END,
  WINDOW_START,
  Entity,
  Fact,
  World,
  day,
  stream,
  year_of,
)


def _count(settings: WorldSettings, key: str, scale: float) -> int:
  return max(settings.min_counts[key], int(round(settings.counts[key] * scale)))


class _Builder:
  """Creates entities and facts; one instance per world."""

  def __init__(self, settings: WorldSettings, seed: int, scale: float):
    self.settings = settings
    self.scale = scale
    self.names = NameGenerator(stream(seed, "names"))
    self.pop_rng = stream(seed, "popularity")
    self.rng = stream(seed, "facts")
    self.entities: dict[str, Entity] = {}
    self.facts: list[Fact] = []
    self.subjects: dict[str, list[str]] = {}
    self.loyal: dict[str, list[str]] = {}
    self.elections: dict[str, dict[str, list[int]]] = {}

  # -- entities -------------------------------------------------------------------------------

  def add(self, kind: str, name: str, article: bool = False, role: str = "", country: str = ""):
    weight = float(self.pop_rng.lognormal(0.0, 0.9))
    qid = f"Q{1000 + len(self.entities)}"
    popularity = max(1, int(round(40 * weight)))
    self.entities[qid] = Entity(qid, name, kind, popularity, weight, article, role, country)
    return qid

  def person(self, role: str, country: str = "", subrole: str = "") -> str:
    """A new person; `role` is "category" or "category:detail" ("player:striker")."""
    full = f"{role}:{subrole}" if subrole else role
    return self.add("person", self.names.person(), role=full, country=country)

  def pick(self, qids: list[str], power: float = 1.0, exclude=()) -> str | None:
    """A qid drawn with probability proportional to weight**power, or None if none is left."""
    cands = [q for q in qids if q not in exclude]
    if not cands:
      return None
    weights = np.array([self.entities[q].weight ** power for q in cands])
    return cands[int(self.rng.choice(len(cands), p=weights / weights.sum()))]

  def create_entities(self):
    count = lambda key: _count(self.settings, key, self.scale)
    self.countries = [self.add("country", self.names.country()) for _ in range(count("countries"))]
    self.cities = []
    for _ in range(count("cities")):
      # Cities spread over countries, more in the salient ones (weight ** 0.5).
      country = self.pick(self.countries, 0.5)
      self.cities.append(self.add("city", self.names.city(), country=country))
    # Politics happens in the most salient countries, as in Wikidata's coverage.
    by_weight = sorted(self.countries, key=lambda q: -self.entities[q].weight)
    self.political = by_weight[: count("political_countries")]
    self.parties, self.ministries, self.assembly = {}, {}, {}
    for q in self.political:
      country_name = self.entities[q].name
      self.parties[q] = [
        self.add("party", n, article=True, country=q)
        for n in self.names.parties(country_name, self.settings.parties_per_country)
      ]
      singles = self.names.ministries(country_name, self.settings.ministries_per_country)
      singles.append(
        self.names.unique(lambda n=country_name: f"Speaker of the National Assembly of {n}")
      )
      self.ministries[q] = [self.add("position", n, role="single", country=q) for n in singles]
      member = self.names.unique(lambda n=country_name: f"Member of the National Assembly of {n}")
      self.assembly[q] = self.add("position", member, role="multi", country=q)
    self.teams = [self.add("team", self.names.team()) for _ in range(count("teams"))]
    self.companies = [self.add("company", self.names.company()) for _ in range(count("companies"))]
    self.universities = []
    for _ in range(count("universities")):
      name, article = self.names.university()
      self.universities.append(self.add("university", name, article=article))
    self.organisations = [
      self.add("organisation", self.names.organisation(), article=True)
      for _ in range(count("organisations"))
    ]
    self.city_events = [
      self.add("event", self.names.event(False), article=True, role="city")
      for _ in range(count("city_events"))
    ]
    self.country_events = [
      self.add("event", self.names.event(True), article=True, role="country")
      for _ in range(count("country_events"))
    ]
    self.landmarks = [
      self.add("landmark", self.names.landmark(), article=True) for _ in range(count("landmarks"))
    ]
    settings = self.settings
    n = max(settings.min_subjects_per_relation, round(settings.subjects_per_relation * self.scale))
    self.n_subjects = n
    positions = ("striker", "midfielder", "defender", "goalkeeper", "winger")
    self.players = [
      self.person("player", subrole=positions[int(self.rng.integers(len(positions)))])
      for _ in range(n)
    ]
    self.politicians = [
      self.person("politician", country=self.political[i % len(self.political)]) for i in range(n)
    ]
    jobs = ("engineer", "analyst", "economist", "designer", "lawyer", "researcher", "manager")
    self.professionals = [
      self.person("professional", subrole=jobs[int(self.rng.integers(len(jobs)))]) for _ in range(n)
    ]
    self.students = [self.person("student") for _ in range(n)]
    self.coaches: list[str] = []
    self.chairs: list[str] = []
    self.investors: list[str] = []

  # -- timelines ------------------------------------------------------------------------------

  def gamma_days(self, mean_years: float, shape: float) -> int:
    return max(30, int(round(self.rng.gamma(shape, mean_years / shape) * DAYS_PER_YEAR)))

  def renewal_changes(self, spec: RelationSpec) -> list[int]:
    changes, t = [], HISTORY_START
    while True:
      t += self.gamma_days(spec.mean_years, spec.shape)
      if t > WINDOW_END:
        return changes
      changes.append(t)

  def election_days(self) -> list[int]:
    cycle = int(self.rng.integers(4, 6))
    phase = int(self.rng.integers(cycle))
    lo, hi = self.settings.election_change_months
    month, dom = int(self.rng.integers(lo, hi + 1)), int(self.rng.integers(1, 29))
    return [day(y, month, dom) for y in range(1990, 2023) if (y - phase) % cycle == 0]

  def election_changes(self, spec: RelationSpec, elections: list[int]) -> list[int]:
    return [d for d in elections if self.rng.random() < spec.change_prob]

  def segments(self, changes: list[int], loyal: bool) -> list[tuple[int, int | None, int | None]]:
    """(true start, written start or None, end or None) of each tenure that meets the window."""
    if loyal:
      changes = [day(int(self.rng.integers(1985, 2004)), int(self.rng.integers(1, 13)), 1)]
    before = [c for c in changes if c < WINDOW_START]
    inside = [c for c in changes if c >= WINDOW_START]
    first_true = before[-1] if before else HISTORY_START
    # The first start lies before the window: recorded only sometimes, and only when not too old.
    recorded = day(self.settings.recorded_start_from_year)
    share = self.settings.recorded_start_share
    first_written = first_true if first_true >= recorded and self.rng.random() < share else None
    starts = [(first_true, first_written)] + [(c, c) for c in inside]
    ends = inside + [None]
    return [(true, written, end) for (true, written), end in zip(starts, ends)]

  def study_segments(self, spec: RelationSpec, loyal: bool):
    t = day(2003) + int(self.rng.integers(0, 12 * 366))
    n = 1 if loyal else (2 if self.rng.random() < 0.6 else 3)
    segs = []
    for i in range(n):
      if i and self.rng.random() < 0.3:  # a gap between two degrees
        t += int(self.rng.uniform(0.25, 1.5) * DAYS_PER_YEAR)
      end = t + self.gamma_days(spec.mean_years, spec.shape)
      if end >= WINDOW_START:  # a degree finished before 2004 is outside the world
        segs.append((t, t if t >= WINDOW_START else None, end if end <= WINDOW_END else None))
      t = end
      if end > WINDOW_END:
        break
    return segs

  # -- facts ----------------------------------------------------------------------------------

  def digits(self) -> int:
    """The written precision of a date: 6 (month), 8 (day) or 4 (year) digits."""
    r = self.rng.random()
    month_share, day_share = self.settings.month_precision_share, self.settings.day_precision_share
    return 6 if r < month_share else (8 if r < month_share + day_share else 4)

  def emit(self, relation, subject, obj, start, end, secondary=False, digits=None):
    start_digits, end_digits = digits if digits else (self.digits(), self.digits())
    self.facts.append(Fact(relation, subject, obj, start, end, start_digits, end_digits, secondary))

  def run_relation(self, pid: str, subjects: list[str], timeline: Callable, choose: Callable):
    """Builds the tenures of every subject, then assigns objects in chronological order.

    Args:
      timeline: (subject, loyal) -> list of (true start, written start, end) tenures.
      choose: (subject, previous object, first day, last day) -> object qid or None (no
        candidate: the tenure continues the previous one).
    """
    spec = self.settings.relations[pid]
    n_loyal = int(round(len(subjects) * spec.loyal_share))
    loyal = sorted(self.rng.permutation(len(subjects))[:n_loyal].tolist())
    self.subjects[pid] = list(subjects)
    self.loyal[pid] = [subjects[i] for i in loyal]
    tenures = []
    for i, subj in enumerate(subjects):
      for k, seg in enumerate(timeline(subj, i in loyal)):
        tenures.append((seg[0], i, k, seg))
    tenures.sort()
    current: dict[int, list] = {}  # subject index -> [object, true start, written start, end]
    out: dict[int, list] = {i: [] for i in range(len(subjects))}
    for _, i, _k, (true_start, start, end) in tenures:
      prev = current.get(i)
      last = end if end is not None else WINDOW_END
      # A new tenure always changes the object; only a tenure that directly follows the
      # previous one can fall back to continuing it (after a gap there is nothing to continue).
      contiguous = prev is not None and prev[3] == true_start
      obj = choose(subjects[i], prev[0] if prev else None, true_start, last)
      if obj is None and contiguous:
        prev[3] = end  # nobody available: the previous tenure goes on
        continue
      current[i] = [obj, true_start, start, end]
      out[i].append(current[i])
      self.occupy(obj, true_start, last)
    for i, subj in enumerate(subjects):
      for obj, _, start, end in out[i]:
        self.emit(pid, subj, obj, start, end)
        if spec.secondary_prob and self.rng.random() < spec.secondary_prob:
          self.secondary(pid, subj, obj, start, end, spec)

  def secondary(self, pid, subj, primary, start, end, spec):
    lo = max(start if start is not None else WINDOW_START, WINDOW_START)
    hi = min(end if end is not None else WINDOW_END, WINDOW_END)
    length = int(self.rng.integers(spec.secondary_months[0], spec.secondary_months[1] + 1) * 30.4)
    if hi - lo < length + 120:
      return
    s = lo + 30 + int(self.rng.integers(hi - lo - length - 60))
    obj = self.secondary_object(pid, subj, primary)
    if obj is not None:
      digits = (6 if self.rng.random() < 0.7 else 8,) * 2
      self.emit(pid, subj, obj, s, s + length, secondary=True, digits=digits)

  def secondary_object(self, pid, subj, primary):
    if pid == "P54":
      return self.pick(self.teams, 0.8, exclude={primary})
    if pid == "P108":
      return self.pick(self.companies + self.universities, exclude={primary})
    if pid == "P69":
      return self.pick(self.universities, exclude={primary})
    if pid == "P39":  # a minister who also sits in the assembly
      assembly = self.assembly[self.entities[subj].country]
      return assembly if primary != assembly else None
    if pid == "P127":
      return self.pick(self.companies, exclude={primary, subj})
    raise ValueError(f"no secondary objects for {pid}")

  def occupy(self, obj, first, last):
    self.occupied.setdefault(obj, []).append((first, last))

  def free(self, obj, first, last) -> bool:
    """Whether nobody holds `obj` in [first, last); handing over on one day is allowed."""
    return all(b <= first or a >= last for a, b in self.occupied.get(obj, ()))

  def renewal(self, pid: str) -> Callable:
    spec = self.settings.relations[pid]
    return lambda subj, loyal: self.segments(self.renewal_changes(spec), loyal)

  def build(self) -> None:
    self.occupied: dict[str, list[tuple[int, int]]] = {}
    self.create_entities()
    relations = self.settings.relations
    renewal = self.renewal

    # P54 member of sports team: players move between teams, popular teams attract more.
    self.run_relation("P54", self.players, renewal("P54"), self.another(self.teams, 0.8))
    # P39 position held / P6 head of government: changes happen at elections.
    country_elections = {q: self.election_days() for q in self.political}
    self.elections["P39"] = country_elections

    def position(subj, prev, first, last):
      q = self.entities[subj].country
      cands = [p for p in self.ministries[q] if p != prev and self.free(p, first, last)]
      if prev != self.assembly[q]:
        cands.append(self.assembly[q])
      return self.pick(cands)

    def position_at_elections(subj, loyal):
      elections = country_elections[self.entities[subj].country]
      return self.segments(self.election_changes(relations["P39"], elections), loyal)

    self.run_relation("P39", self.politicians, position_at_elections, position)

    def party(subj, prev, first, last):
      return self.pick(self.parties[self.entities[subj].country], exclude={prev})

    self.run_relation("P102", self.politicians, renewal("P102"), party)
    employers = self.companies + self.universities
    self.run_relation("P108", self.professionals, renewal("P108"), self.another(employers))
    self.run_relation(
      "P69",
      self.students,
      lambda subj, loyal: self.study_segments(relations["P69"], loyal),
      self.another(self.universities),
    )
    n = self.n_subjects
    reuse = self.settings.reuse_shares
    coach = self.staff(self.coaches, "coach", reuse["coach"])
    self.run_relation("P286", self.teams[:n], renewal("P286"), coach)
    chair = self.staff(self.chairs, "chair", reuse["chair"])
    self.run_relation("P488", self.organisations[:n], renewal("P488"), chair)
    n_countries = min(len(self.countries), int(round(n * 0.375)))
    heads = self.countries[:n_countries] + self.cities[: n - n_countries]
    leaders: dict[str, list[str]] = {q: [] for q in heads}

    def head(subj, prev, first, last):
      former = [p for p in leaders[subj] if p != prev]
      if former and self.rng.random() < 0.15:  # a comeback
        return self.pick(former)
      kind = self.entities[subj].kind
      leaders[subj].append(self.person("leader", subrole=kind))
      return leaders[subj][-1]

    head_elections = {q: self.election_days() for q in heads}
    self.elections["P6"] = head_elections

    def head_at_elections(subj, loyal):
      return self.segments(self.election_changes(relations["P6"], head_elections[subj]), loyal)

    self.run_relation("P6", heads, head_at_elections, head)
    n_companies = int(round(n * 0.6))
    owned = self.companies[-n_companies:] + self.teams[len(self.teams) - (n - n_companies) :]

    def owner(subj, prev, first, last):
      weight = self.entities[subj].weight
      bigger = [c for c in self.companies if self.entities[c].weight > weight and c != subj]
      if bigger and self.rng.random() < 0.65:
        got = self.pick(bigger, exclude={prev})
        if got is not None:
          return got
      return self.reuse_or_new(self.investors, "investor", reuse["investor"], prev, None, None)

    self.run_relation("P127", owned, renewal("P127"), owner)
    self.build_locations()

  def another(self, pool: list[str], power: float = 1.0) -> Callable:
    """A `choose` for `run_relation`: any other member of `pool` (weight**power)."""
    return lambda subj, prev, first, last: self.pick(pool, power, exclude={prev})

  def staff(self, pool: list[str], role: str, reuse_prob: float) -> Callable:
    """A `choose` for `run_relation`: a free person of `pool` or a new one (`reuse_or_new`)."""
    return lambda subj, prev, first, last: self.reuse_or_new(
      pool, role, reuse_prob, prev, first, last
    )

  def reuse_or_new(self, pool, role, reuse_prob, prev, first, last):
    """A free person from `pool` with probability `reuse_prob`, else a new one."""
    if first is not None:
      free = [p for p in pool if p != prev and self.free(p, first, last)]
    else:
      free = [p for p in pool if p != prev]
    if free and self.rng.random() < reuse_prob:
      return self.pick(free)
    pool.append(self.person(role))
    return pool[-1]

  def build_locations(self):
    """The relations outside TempLAMA that feed the future-relations query sets."""
    # P159 headquarters location: moves rarely, mostly within the same country.
    hq_subjects = self.companies + self.teams + self.organisations

    def hq(subj, prev, first, last):
      if prev is not None and self.rng.random() < 0.8:
        country = self.entities[prev].country
        same = [c for c in self.cities if self.entities[c].country == country]
        got = self.pick(same, exclude={prev})
        if got is not None:
          return got
      return self.pick(self.cities, exclude={prev})

    self.run_relation("P159", hq_subjects, self.renewal("P159"), hq)
    # P276 location of an annual event: a new host every edition, never a recent one.
    self.subjects["P276"] = self.city_events + self.country_events
    self.loyal["P276"] = []
    for event in self.subjects["P276"]:
      hosts = self.cities if self.entities[event].role == "city" else self.countries
      month = int(self.rng.integers(1, 13))
      recent: list[str] = []
      for year in range(year_of(WINDOW_START), year_of(WINDOW_END) + 1):
        host = self.pick(hosts, 0.7, exclude=set(recent[-2:]))
        recent.append(host)
        start = day(year, month, int(self.rng.integers(1, 20)))
        digits = (8, 8) if self.rng.random() < 0.5 else (6, 6)
        self.emit("P276", event, host, start, start + int(self.rng.integers(3, 11)), digits=digits)
    # P131 located in (landmark -> city) and P17 country (city -> country): never change.
    self.subjects["P131"], self.loyal["P131"] = list(self.landmarks), list(self.landmarks)
    for landmark in self.landmarks:
      city = self.pick(self.cities, 0.7)
      self.facts.append(Fact("P131", landmark, city, None, None, 0, 0, dated=False))
    self.subjects["P17"], self.loyal["P17"] = list(self.cities), list(self.cities)
    for city in self.cities:
      country = self.entities[city].country
      self.facts.append(Fact("P17", city, country, None, None, 0, 0, dated=False))


def generate_world(settings: WorldSettings, seed: int, scale: float) -> World:
  """Entities and facts of the world for (seed, scale); a pure function of its arguments."""
  if not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
    raise ValueError(f"scale must be a positive number, got {scale!r}")
  builder = _Builder(settings, seed, scale)
  builder.build()
  return World(
    seed,
    scale,
    builder.entities,
    builder.facts,
    builder.subjects,
    builder.loyal,
    builder.elections,
  )
