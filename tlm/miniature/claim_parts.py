"""The parts a claim of `tlm.miniature.claims` is made of: components with margins, and helpers.

A component is one comparison of a claim ("Temporal > Uniform on TempLAMA 2010-18") as a margin
that is > 0 iff it holds, computed from a *draw*: for each pool of items it reads (the TempLAMA
queries of a slice, the news examples, ...), the item indices of a bootstrap resample, or None
for every item as it is (`tlm.miniature.stats`). A pool is a `tlm.miniature.stats.Pool` (its
items and the cluster each belongs to, resampled whole) or a plain count of independent items.

Here too: the resampling units the claims' pools are drawn by (each with why), and the F1
comparisons several claims share (`templama_f1`, `news_f1`, `better`, `templama_better`).
"""

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from tlm.configs.years import SLICES
from tlm.miniature import measurements
from tlm.miniature.measurements import MissingInput
from tlm.miniature.stats import Pool, take

Draw = Mapping[str, np.ndarray | None]


@dataclasses.dataclass(frozen=True)
class Component:
  """One part of a claim: a margin that is > 0 iff the part holds.

  Attributes:
    name: what is compared, e.g. "temporal - uniform".
    unit: the margin's unit.
    pools: {pool name: Pool, or a number of independent items} the margin is a statistic of
      (empty: aggregate numbers only).
    margin: the margin on a draw {pool: indices}; None indices means every item as is.
  """

  name: str
  unit: str
  pools: Mapping[str, "Pool | int"]
  margin: Callable[[Draw], float]


@dataclasses.dataclass(frozen=True)
class Claim:
  id: str
  statement: str
  source: str
  components: Callable[[Mapping], tuple[list[Component], list[str]]]


def mean(x) -> float:
  x = np.asarray(x, dtype=float)
  return float(np.mean(x)) if x.size else float("nan")


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
  xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
  ok = np.isfinite(ys)
  if ok.sum() < 2:
    return float("nan")
  return float(np.polyfit(xs[ok], ys[ok], 1)[0])


def collect(*builders: Callable[[], list[Component]]) -> tuple[list[Component], list[str]]:
  """Runs each component builder; a MissingInput becomes a reason instead of a component."""
  comps, missing = [], []
  for build in builders:
    try:
      comps += build()
    except MissingInput as e:
      missing.append(str(e))
  return comps, missing


def per_draw(fn: Callable[[Draw], object]) -> Callable[[Draw], object]:
  """`fn` computed once per draw: a claim's components all read the same draw."""
  last: list = [None, None]

  def cached(d: Draw):
    if last[0] is not d:
      last[:] = [d, fn(d)]
    return last[1]

  return cached


# ---- the resampling units (`tlm.miniature.stats`: a resample draws whole clusters) ---------------
# TempLAMA: ids are `<subject>_<relation>_<year>`; the 9-11 queries of a (subject, relation)
# pair share the subject, the relation and mostly the answer, so their outcomes are strongly
# correlated (Uniform gives one answer per pair): the pair is the unit, read from the
# `subject` and `relation` columns of per_query.json.
PAIR = "(subject, relation) pair: all of its TempLAMA queries together"
# News: one held-out article gives several SSM examples (one per masked span of each of its
# sentences), so the article is the honest cluster; but per_query.json records no article id
# (nor the date) of a news example, so the examples are resampled one by one. The interval of
# a news margin is therefore too narrow by the unknown design effect of articles; it is said
# so in summary.json rather than hidden.
NEWS_UNIT = "news example (no article id is recorded: examples of one article resampled apart)"
# Figure 3: each item is the 2018 query of one (subject, relation) pair (`tlm.eval.future`
# takes the 2018-correct queries), with its whole curve over 2019-29: item = pair.
PAIR_2018 = "(subject, relation) pair: its 2018 query, all probe years together"
# Figure 4: one future-relations query per subject (the synthetic world draws distinct subjects
# for each set, and the sets' relations take subjects of different kinds), each with its
# whole curve over 2018-29: item = subject. per_query.json keeps the query id, not the subject,
# so this is the world's construction, not checked here.
FUTURE_QUERY = "future-relations query (one per subject), all probe years together"


# ---- TempLAMA and news F1 ---------------------------------------------------------------------


def pairs_pool(cols: Mapping) -> Pool:
  """The TempLAMA queries of `cols` (`measurements.templama`), clustered by (subject, relation)."""
  return Pool.of(zip(cols["subject"].tolist(), cols["relation"].tolist()), PAIR)


def templama_f1(meas, models: Sequence[str], years, pool: str, keep=None) -> tuple[dict, Pool]:
  """{model: F1 points of each query of `years`} (aligned by query id) and the pool's pairs."""
  cols = {m: measurements.templama(meas, m, years) for m in models}
  ids = {m: tuple(c["id"]) for m, c in cols.items()}
  if len(set(ids.values())) > 1:
    raise ValueError(f"{pool}: the models were evaluated on different TempLAMA queries")
  first = cols[models[0]]
  mask = np.ones(len(ids[models[0]]), dtype=bool) if keep is None else keep(first)
  kept = {c: first[c][mask] for c in ("subject", "relation")}
  return {m: 100.0 * c["f1"][mask].astype(float) for m, c in cols.items()}, pairs_pool(kept)


def news_f1(meas, models: Sequence[str], years) -> tuple[dict, Pool]:
  """{model: F1 points of each news example of `years`} and the pool of the examples."""
  cols = {m: measurements.news(meas, m, years) for m in models}
  sizes = {len(c["f1"]) for c in cols.values()}
  if len(sizes) > 1:
    raise ValueError("the models were evaluated on different news examples")
  return {m: 100.0 * c["f1"] for m, c in cols.items()}, Pool.items(sizes.pop(), NEWS_UNIT)


def better(f1: Mapping, a: str, b: str, pool: str, n: Pool) -> Component:
  """The component "a > b": the mean F1 difference over the drawn items of `pool`."""
  return Component(
    f"{a} - {b}", "F1 points", {pool: n}, lambda d: mean(take(f1[a] - f1[b], d[pool]))
  )


def news_better(meas, a: str, others: Sequence[str], slice_name: str) -> list[Component]:
  """The components "news <slice>: a > each of `others`" (C4, C6), on one pool of examples."""
  pool = f"news {slice_name}"
  f1, n = news_f1(meas, (a, *others), SLICES[slice_name])
  return [better(f1, a, b, pool, n) for b in others]


def templama_better(meas, a: str, b: str, slice_name: str) -> tuple[list[Component], list[str]]:
  """The components of "TempLAMA <slice>: a > b" (C1, C2, C3, C5, C7), one seed's
  measurements `meas`; `slice_name` is one of `tlm.configs.years.SLICES`."""
  pool = f"TempLAMA {slice_name}"

  def build():
    f1, n = templama_f1(meas, (a, b), SLICES[slice_name], pool)
    return [better(f1, a, b, pool, n)]

  return collect(build)
