"""The settings of the synthetic world, each value with the reason for it.

The values were fixed for realism before any model was trained on the world: never tune them to
make a model look good. Counts are at scale 1 (`build_world`'s `scale` multiplies them); the
floors keep every kind of entity and every relation at small scales. The world is sized so that
the tiny models (`tlm.configs.tiny`) converge in minutes: docs/reproduction.md, Deviations.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class RelationSpec:
  """How the object of one relation changes over time (the processes: `facts.py`).

  `dynamics` is "renewal" (gamma tenures of mean `mean_years` and shape `shape`), "elections"
  (at each election the object changes with probability `change_prob`), "studies" (2-3 degrees
  of gamma length), "annual" (a new object every year) or "static" (never changes). A
  `loyal_share` of the subjects keeps one object throughout 2004-2022; a tenure carries a
  concurrent second object of `secondary_months` with probability `secondary_prob`.
  """

  pid: str
  label: str
  dynamics: str
  mean_years: float = 0.0
  shape: float = 1.0
  change_prob: float = 0.0
  loyal_share: float = 0.0
  secondary_prob: float = 0.0
  secondary_months: tuple[int, int] = (0, 0)

  @property
  def expected_tenure_years(self) -> float:
    """Mean time between changes of a non-loyal subject's main object."""
    if self.dynamics == "elections":
      return 4.5 / self.change_prob  # cycles of 4 or 5 years, equally likely
    if self.dynamics == "annual":
      return 1.0
    return self.mean_years


@dataclasses.dataclass
class WorldSettings:
  """Sizes and change processes of the entities and facts (`facts.py`)."""

  relations: dict[str, RelationSpec]
  counts: dict[str, int]  # pool sizes at scale 1
  min_counts: dict[str, int]  # floors, so that small scales keep every kind of entity
  subjects_per_relation: int
  min_subjects_per_relation: int
  parties_per_country: int
  ministries_per_country: int
  election_change_months: tuple[int, int]  # elections fall in these months (inclusive)
  month_precision_share: float  # of written dates: YYYYMM
  day_precision_share: float  # of written dates: YYYYMMDD (the others: YYYY)
  recorded_start_share: float  # of tenures begun before 2004: the start is written
  recorded_start_from_year: int  # ... if it is not older than this
  reuse_shares: dict[str, float]  # coach/chair/investor: a free existing person, not a new one


@dataclasses.dataclass(frozen=True)
class NewsSettings:
  """How much news there is and what it says (`news.py`)."""

  first_year: int
  last_year: int
  fact_sentences_first_year: int  # at scale 1
  growth_per_year: float
  min_mentions: int
  facts_per_document: tuple[float, float, float]  # P(1), P(2), P(3) fact sentences
  distractor_prob: float  # each of two distractor slots per document is filled with this prob
  templama_phrasing_share: float
  recent_phrasing_share: float
  past_future_share: float  # of all sentences: previous / next object, no year
  explicit_year_share: float  # of all sentences: an explicit year
  same_year_fraction: float  # of explicit-year sentences: the publication year
  announce_days: int  # how long before a change the news may announce it
  # How often and when a fact is stated (`coverage.py`). "floor" (world v3): `min_mentions` each
  # year, the rest of the year's budget by subject weight x days held. "salience" (world v4): no
  # floor; by subject weight x the news of the day: a fact's daily rate is
  # 1 + change_burst * exp(-days since its start / burst_days).
  coverage: str = "floor"
  change_burst: float = 0.0
  burst_days: float = 1.0
  # World v4: of the past / future sentences, the share that look back (0: v3's choice between
  # the topic's previous and next object); of the mentions of a new tenure worded as new, the
  # share that name the previous object ("X, who joined Z from Y this season, ...").
  look_back_share: float = 0.0
  from_share: float = 0.0


# One-club players, long-serving leaders: 10% of a relation's subjects keep one object throughout
# 2004-2022, so the TempLAMA builder's "more than one object" cut has something to drop.
_LOYAL = 0.1

WORLD = WorldSettings(
  relations={
    # Contracts run 2-5 years; 12% of tenures carry a 5-11 month loan (two answers that year).
    "P54": RelationSpec(
      "P54",
      "member of sports team",
      "renewal",
      mean_years=3.0,
      shape=3.0,
      loyal_share=_LOYAL,
      secondary_prob=0.12,
      secondary_months=(5, 11),
    ),
    # Ministers are reshuffled: a change at 80% of elections (mean tenure 5.6 years); 15% of
    # ministers also sit in the assembly for a while.
    "P39": RelationSpec(
      "P39",
      "position held",
      "elections",
      change_prob=0.8,
      loyal_share=_LOYAL,
      secondary_prob=0.15,
      secondary_months=(6, 24),
    ),
    # About the median job tenure; 8% of jobs come with a joint appointment.
    "P108": RelationSpec(
      "P108",
      "employer",
      "renewal",
      mean_years=4.5,
      shape=3.0,
      loyal_share=_LOYAL,
      secondary_prob=0.08,
      secondary_months=(6, 24),
    ),
    # Party membership changes rarely, and 30% of politicians never switch.
    "P102": RelationSpec(
      "P102",
      "member of political party",
      "renewal",
      mean_years=9.0,
      shape=3.0,
      loyal_share=0.3,
    ),
    # A new head coach "every 2-3 years"; sackings make it irregular (shape 2).
    "P286": RelationSpec(
      "P286",
      "head coach",
      "renewal",
      mean_years=2.5,
      shape=2.0,
      loyal_share=_LOYAL,
    ),
    # Degree lengths are fixed (shape 6); 6% exchange terms of 4-10 months.
    "P69": RelationSpec(
      "P69",
      "educated at",
      "studies",
      mean_years=3.5,
      shape=6.0,
      loyal_share=_LOYAL,
      secondary_prob=0.06,
      secondary_months=(4, 10),
    ),
    # Chairs serve fixed terms (shape 4).
    "P488": RelationSpec(
      "P488",
      "chairperson",
      "renewal",
      mean_years=5.0,
      shape=4.0,
      loyal_share=_LOYAL,
    ),
    # Heads of government are often re-elected: a change at 60% of elections (mean 7.5 years).
    "P6": RelationSpec(
      "P6",
      "head of government",
      "elections",
      change_prob=0.6,
      loyal_share=_LOYAL,
    ),
    # Acquisitions are irregular (shape 2) and 20% of companies keep their owner; 6% joint
    # ownership for 1-3 years.
    "P127": RelationSpec(
      "P127",
      "owned by",
      "renewal",
      mean_years=7.0,
      shape=2.0,
      loyal_share=0.2,
      secondary_prob=0.06,
      secondary_months=(12, 36),
    ),
    # Headquarters move rarely and 30% never move: the "rare" future-relations set.
    "P159": RelationSpec(
      "P159",
      "headquarters location",
      "renewal",
      mean_years=12.0,
      shape=2.0,
      loyal_share=0.3,
    ),
    # A new host every edition: the "frequent" future-relations set.
    "P276": RelationSpec("P276", "location (annual event host)", "annual"),
    # A landmark's city and a city's country never change: the "never" set.
    "P131": RelationSpec("P131", "located in (landmark)", "static"),
    "P17": RelationSpec("P17", "country (city)", "static"),
  },
  counts={
    "countries": 12,  # homes of cities, politics, and hosts of the country events
    "cities": 40,  # hosts, headquarters and the candidates of the future-relations queries
    "political_countries": 3,  # national politics (parties, ministries, an assembly) in 3
    "teams": 20,  # P54's objects, P286's subjects
    "companies": 24,  # P108's and P127's objects
    "universities": 12,  # P69's objects (and employers)
    "organisations": 16,  # P488's subjects
    "city_events": 14,  # the annual events: 20 in all, the "frequent" query set
    "country_events": 6,
    "landmarks": 16,  # most of the "never" query set
  },
  # Enough of each kind at small scales for every relation to have objects to change among.
  min_counts={
    "countries": 5,
    "cities": 14,
    "political_countries": 1,
    "teams": 6,
    "companies": 8,
    "universities": 4,
    "organisations": 4,
    "city_events": 7,
    "country_events": 3,
    "landmarks": 7,
  },
  # TempLAMA keeps its 1000 most frequent subjects per relation; the miniature keeps 20, so
  # that ~130 (subject, relation) pairs change their answer inside 2010-18.
  subjects_per_relation=20,
  min_subjects_per_relation=4,  # a few changing subjects per relation even at tiny scales
  parties_per_country=3,  # enough for politicians to switch parties more than once
  ministries_per_country=6,  # plus the speaker: the offices ministers are reshuffled among
  election_change_months=(3, 11),  # elections and handovers fall between March and November
  # As in Wikidata, most dates are known to the month, some to the day, a few to the year only.
  month_precision_share=0.75,
  day_precision_share=0.15,
  # Old tenures are often undated in Wikidata: half of those begun 1995-2003 have a start.
  recorded_start_share=0.5,
  recorded_start_from_year=1995,
  reuse_shares={
    "coach": 0.45,  # coaches move between teams
    "chair": 0.2,  # chairs seldom move between organisations
    "investor": 0.5,  # investors own several companies
  },
)

NEWS_V3 = NewsSettings(
  first_year=2010,  # CustomNews's years, 2010-2020
  last_year=2020,
  fact_sentences_first_year=1500,  # with the growth: ~2500-7000 sentences a year in all
  growth_per_year=1.10,  # later years have more news: x2.6 from 2010 to 2020
  min_mentions=3,  # every fact of a year is stated at least 3 times in that year's news
  facts_per_document=(0.25, 0.45, 0.30),  # 1-3 fact sentences in a ~3-sentence document
  distractor_prob=0.45,  # about a third of all sentences state no relation
  # Real news rarely words a fact exactly as a TempLAMA cloze ("X plays for Y." is a caption).
  templama_phrasing_share=0.02,
  recent_phrasing_share=0.5,  # half the mentions of a new tenure say it is new
  past_future_share=0.03,  # "X previously played for Y", "X will join Z next season"
  explicit_year_share=0.04,  # the paper counts 3.9% of CustomNews sentences naming a year,
  same_year_fraction=0.54,  # and 2.1% naming the publication year (2.1 / 3.9)
  announce_days=150,  # changes are reported up to five months ahead (transfers, elections)
)

# World v4: v3's news with the data properties the paper's findings rest on, each from the
# paper's text (research/world4/PREREGISTRATION.md quotes the lines); nothing else changes.
NEWS_V4 = dataclasses.replace(
  NEWS_V3,
  # "likely to only memorize common facts about popular entities" (Discussion): a fact is
  # stated as often as its subject is in the news, with no floor, so a long-lived fact of a
  # less prominent subject goes unstated in some years, and a model that pools years can
  # recall what one year's news never said (the pooling behind C3 and C10).
  min_mentions=0,
  coverage="salience",
  # The news of the day: a change (a transfer, an election, an appointment, this year's host)
  # is news. On the day of a change a fact is stated 1 + 20 times as often as in its steady
  # state, decaying over four months (a season's transfer window, an election's aftermath): its
  # first year carries about seven years' worth of its steady-state mentions. CustomNews "is far
  # more likely to describe short-lived facts" than TempLAMA (Section 3.1): a short tenure
  # spends more of its life being new. (Chosen on the worlds of seeds 200-202, against the
  # properties of research/world4/PREREGISTRATION.md, no model trained: 8 and 90 days left the
  # news about as short-lived as TempLAMA.)
  change_burst=20.0,
  burst_days=120.0,
  # Articles "may talk about historical events or discuss events scheduled to happen in the
  # future" (Discussion); that they look back more often than ahead is this world's reading of
  # Figure 2's "the decline is larger for future years" (C9), not a number of the paper's:
  # three in four past / future sentences look back, and half the news of a new tenure worded
  # as new names the previous object ("X joined Z from Y").
  look_back_share=0.75,
  from_share=0.5,
)

# Forward-looking sentences (`forward.py`; off by default, `data.forward_looking`), when on: 0.5%
# of all news sentences name a later year in which a current term ends. The paper counts 3.9% of
# CustomNews sentences naming a year of 2010-18 and 2.1% naming the publication year: 1.8% name
# another year of 2010-18, past or future. That count leaves out later years beyond 2018, which
# is what a 2016-18 article's "until 2019" names. Seed 0's default world (scale 1): 2.15% of its
# sentences name the publication year, 1.23% an earlier year, 0.60% a later one (next year's
# event hosts; none for a TempLAMA relation), 1.83% another year in all, the paper's 1.8%.
# 0.5% more makes that 2.3%, a quarter above the paper's count, which misses part of what these
# sentences name; later years become 1.1% of sentences, half of the other-year mentions.
# `--set=data.forward_share=` tries other shares.
FORWARD_SHARE = 0.005


# The world's versions: v3, the default until 2026-12 (its news has a floor of three mentions a
# year, the start names no year, the encyclopedia no history), kept buildable for comparison
# (`data.world_version=3`); v4, the default. A version is part of the world's cache name.
@dataclasses.dataclass(frozen=True)
class WorldVersion:
  news: NewsSettings
  dated_start: bool  # the generic ("public T5") text names the years 2000-2035 in order
  histories: bool  # the encyclopedia states each subject's history with years to its snapshot


VERSIONS = {
  3: WorldVersion(NEWS_V3, dated_start=False, histories=False),
  4: WorldVersion(NEWS_V4, dated_start=True, histories=True),
}
DEFAULT_VERSION = 4
# The version built before versions were recorded: its files (stats.json included) and its cache
# records stay byte-identical to what that code wrote, so they name no version.
UNRECORDED_VERSION = 3
NEWS = VERSIONS[DEFAULT_VERSION].news

# SentencePiece pieces at scale 1 (`world.vocab_pieces` scales them): frequent words are single
# pieces, most names span several, and tiny models stay fast.
VOCAB_PIECES = 800
# Years that are one whole piece each ("▁2019"), whatever the corpus: every year a time prefix,
# a probe, a figure or a claim uses (TempLAMA 2010-20, the future probes to 2029), with a margin.
# Left to the unigram trainer, only the years frequent in the news become pieces (2010-2020 in
# seed 0's world) and 2021-2029 split into digits, a step that Figures 3 and 4 would show.
YEAR_PIECES = range(2000, 2036)
# Future-relations queries per set at scale 1, kept within 10-30: the paper has 86 in three sets.
QUERIES_PER_SET = 20
