"""Pronounceable, unique, deterministic names for the synthetic world's entities.

Names are built from syllables (onset + vowel + optional coda) drawn from a numpy Generator, so
they are a pure function of the generator's state. Every root word is used once in the whole
world, so no two entities share a name and a surname never doubles as a city; first names repeat
across people, as in real news. Names contain letters, spaces and apostrophes only: no digits,
so a four-digit number in the corpus is always a year.
"""

import numpy as np

_ONSETS = ("b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "")
_CLUSTERS = ("br", "dr", "kr", "gr", "tr", "st", "sh", "pl", "fl", "kl")
_VOWELS = ("a", "e", "i", "o", "u")
_DIPHTHONGS = ("ai", "ei", "ou", "ia")
_CODAS = ("n", "r", "l", "s", "m", "k", "t")

# Words that must never be generated as a root: they occur in the news templates or the
# TempLAMA templates, and an entity named like them would blur the salient spans.
_RESERVED = frozenset(
  """the for of and in on at to by as is was are has had plays holds works attended owned
  head chair member position government city team party club new port saint united
  games cup bank group media island south north east west""".split()
)

COUNTRY_SUFFIXES = ("ia", "ia", "a", "and", "ar", "ora", "istan", "ea")
CITY_SUFFIXES = ("", "", "", "", "", "ton", "burg", "ville", "ford", "stad", "wick")
TEAM_SUFFIXES = (
  "United",
  "Rovers",
  "Athletic",
  "Wanderers",
  "Rangers",
  "Falcons",
  "Lions",
  "Albion",
  "Hawks",
  "Dynamo",
  "Olympic",
  "Town",
)
COMPANY_SUFFIXES = (
  "Systems",
  "Group",
  "Holdings",
  "Motors",
  "Energy",
  "Airlines",
  "Foods",
  "Pharma",
  "Telecom",
  "Logistics",
  "Capital",
  "Industries",
)
ORGANISATION_FORMS = (
  "{} Foundation",
  "{} Society",
  "{} Chamber of Commerce",
  "{} Football Association",
  "{} Trust",
  "{} Arts Council",
  "{} Medical Association",
  "{} Olympic Committee",
)
CITY_EVENT_FORMS = (
  "{} Cup",
  "{} Film Festival",
  "{} Music Awards",
  "{} Games",
  "{} Trophy",
  "{} Expo",
  "{} Book Fair",
  "{} Jazz Festival",
)
COUNTRY_EVENT_FORMS = ("{} Summit", "{} Forum", "{} Congress", "{} Song Contest")
LANDMARK_FORMS = (
  "{} Tower",
  "{} Bridge",
  "{} Cathedral",
  "{} Palace",
  "{} Gardens",
  "{} Museum",
  "{} Lighthouse",
  "{} Arch",
  "{} Opera House",
  "{} Castle",
)
PARTY_IDEOLOGIES = (
  "Liberal",
  "Conservative",
  "Social Democratic",
  "Green",
  "Progressive",
  "National",
  "Labour",
  "Christian Democratic",
  "Reform",
  "People's",
)
PARTY_NOUNS = ("Party", "Alliance", "Union", "Movement", "Front")
PORTFOLIOS = (
  "Finance",
  "Health",
  "Defence",
  "Education",
  "Transport",
  "Energy",
  "Justice",
  "Agriculture",
  "Culture",
  "Trade",
  "Tourism",
  "the Interior",
)


class NameGenerator:
  """Draws unique pronounceable names from a numpy Generator.

  Args:
    rng: the generator; names depend only on its state and the sequence of calls.
    num_first_names: size of the shared pool of first names.
  """

  def __init__(self, rng: np.random.Generator, num_first_names: int = 80):
    self._rng = rng
    self._used_roots: set[str] = set()
    self._used_names: set[str] = set()
    self._first_names = [self.root(2, 2) for _ in range(num_first_names)]

  def _choice(self, options):
    return options[int(self._rng.integers(len(options)))]

  def _syllable(self) -> str:
    r = self._rng.random(3)
    onset = self._choice(_CLUSTERS if r[0] < 0.12 else _ONSETS)
    vowel = self._choice(_DIPHTHONGS if r[1] < 0.12 else _VOWELS)
    coda = self._choice(_CODAS) if r[2] < 0.4 else ""
    return onset + vowel + coda

  def root(self, min_syllables: int = 2, max_syllables: int = 2, max_len: int = 8) -> str:
    """A capitalised word never returned before by this generator."""
    while True:
      n = int(self._rng.integers(min_syllables, max_syllables + 1))
      word = "".join(self._syllable() for _ in range(n))
      if not 4 <= len(word) <= max_len or word in _RESERVED or word in self._used_roots:
        continue
      # Three equal letters in a row ("ooo", "nnn") are not pronounceable.
      if any(word[i] == word[i + 1] == word[i + 2] for i in range(len(word) - 2)):
        continue
      self._used_roots.add(word)
      return word.capitalize()

  def unique(self, make) -> str:
    """Calls `make()` until it returns a full name that was never returned before."""
    while True:
      name = make()
      if name not in self._used_names:
        self._used_names.add(name)
        return name

  def person(self) -> str:
    """A new person: a shared first name and a new surname."""
    return self.unique(lambda: f"{self._choice(self._first_names)} {self.root(2, 3, 9)}")

  def country(self) -> str:
    """A new country name ("Veloria")."""
    return self.unique(lambda: self.root(1, 2, 6) + self._choice(COUNTRY_SUFFIXES))

  def city(self) -> str:
    """A new city name, sometimes with Port or New in front."""

    def make():
      name = self.root(1, 2, 7) + self._choice(CITY_SUFFIXES)
      r = self._rng.random()
      if r < 0.06:
        return "Port " + name
      if r < 0.12:
        return "New " + name
      return name

    return self.unique(make)

  def team(self) -> str:
    """A new sports team ("Kemke Athletic")."""
    return self.unique(lambda: f"{self.root()} {self._choice(TEAM_SUFFIXES)}")

  def company(self) -> str:
    """A new company ("Mafes Pharma")."""
    return self.unique(lambda: f"{self.root()} {self._choice(COMPANY_SUFFIXES)}")

  def university(self) -> tuple[str, bool]:
    """A university name and whether running text puts "the" before it."""
    r = self._rng.random()
    if r < 0.4:
      return self.unique(lambda: f"University of {self.root()}"), True
    if r < 0.8:
      return self.unique(lambda: f"{self.root()} University"), False
    return self.unique(lambda: f"{self.root()} Institute of Technology"), True

  def organisation(self) -> str:
    """A new organisation ("Zosha Trust"); running text writes "the"."""
    return self.unique(lambda: self._choice(ORGANISATION_FORMS).format(self.root()))

  def event(self, hosted_by_country: bool) -> str:
    """A new annual event: a festival or cup for cities, a summit or contest for countries."""
    forms = COUNTRY_EVENT_FORMS if hosted_by_country else CITY_EVENT_FORMS
    return self.unique(lambda: self._choice(forms).format(self.root()))

  def landmark(self) -> str:
    """A new landmark ("Seves Cathedral")."""
    return self.unique(lambda: self._choice(LANDMARK_FORMS).format(self.root()))

  def parties(self, country: str, n: int) -> list[str]:
    """`n` distinct party names of one country ("Green Alliance of Vandoria")."""
    ideologies = self._rng.permutation(len(PARTY_IDEOLOGIES))[:n]
    return [
      self.unique(lambda i=i: f"{PARTY_IDEOLOGIES[i]} {self._choice(PARTY_NOUNS)} of {country}")
      for i in ideologies
    ]

  def ministries(self, country: str, n: int) -> list[str]:
    """`n` distinct minister positions of one country ("Minister of Health of Vandoria")."""
    portfolios = self._rng.permutation(len(PORTFOLIOS))[:n]
    return [
      self.unique(lambda i=i: f"Minister of {PORTFOLIOS[i]} of {country}") for i in portfolios
    ]
