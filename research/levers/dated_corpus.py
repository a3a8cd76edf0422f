"""The lever study's start corpus: the miniature's "public T5" corpus with years, as C4 names them.

A lever of research/levers (README.md there), not the protocol's start: `build_world` never
writes it. `tlm.synthetic.pretrain.generic_texts` names no year at all; this corpus adds an order
of years to the same documents.
"""

import numpy as np

from tlm.synthetic.pretrain import generic_documents
from tlm.synthetic.settings import YEAR_PIECES

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


def dated_generic_texts(world, seed: int) -> list[str]:
  """`generic_texts` plus years, as C4 names them (see the comment above); a lever
  (research/levers).

  Each entity's document gets its year of origin and a sentence naming two consecutive years
  in YEARS_FROM..YEARS_TO; one calendar document per year of that range orders the years
  outright. The documents are shuffled with `seed`; a pure function of (world, seed).
  """
  ent = world.entities
  rng = np.random.default_rng([seed, 12])
  docs = []
  for q, document in generic_documents(world).items():
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
