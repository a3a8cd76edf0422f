"""The parts a claim of `tlm.eval.claims` is made of: components with margins, and helpers.

A component is one comparison of a claim ("Temporal > Uniform on TempLAMA 2010-18") as a margin
that is > 0 iff it holds, computed from a *draw*: for each pool of items it reads (the TempLAMA
queries of a slice, the news examples, ...), the item indices of a bootstrap resample, or None
for every item as it is (`tlm.eval.stats`). A pool is a `tlm.eval.stats.Pool` (its items and
the cluster each belongs to, resampled whole) or a plain count of independent items.
"""

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from tlm.eval.measurements import MissingInput
from tlm.eval.stats import Pool

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
