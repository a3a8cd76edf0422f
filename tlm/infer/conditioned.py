"""How the paper queries each variant (§2.3): a model's queries formatted for their year, and
the Yearly experts' routing.

- `TimeConditioned(predictor, conditioning)` formats each query for its year first
  ("year: 2014 " prefix for Temporal, nothing for Uniform, "In 2014, " in the text for the
  future probes of models without a time input);
- `YearlyEnsemble(experts)` routes each query to its year's expert (`route_to_expert`): "When
  provided with a test input, this approach routes it to the appropriate yearly expert based
  on its timestamp. If the timestamp falls outside 2010-18, we use the closest yearly expert
  (e.g. 2018 for all test inputs >= 2018)."
Both expose `predict(queries, years)`, `log_likelihood(queries, years, targets)` and
`rank(queries, years, candidates)`, so the experiments treat every model alike.
"""

from collections.abc import Mapping, Sequence

import numpy as np

from tlm.data.conditioning import format_input, route_to_expert
from tlm.errors import ConfigError
from tlm.infer.predictor import Predictor


class TimeConditioned:
  """A Predictor whose queries are formatted for their year (`tlm.data.conditioning`).

  Args:
    predictor: the model.
    conditioning: "temporal" ("year: 2014 " prefix), "none" (the query alone) or "in_text"
      ("In 2014, " + query: the future probes of models without a time input).
  """

  def __init__(self, predictor: Predictor, conditioning: str):
    self.predictor = predictor
    self.conditioning = conditioning

  def _inputs(self, queries: Sequence[str], years: Sequence[int]) -> list[str]:
    if len(queries) != len(years):
      raise ValueError(f"{len(queries)} queries but {len(years)} years")
    return [format_input(q, int(y), self.conditioning) for q, y in zip(queries, years)]

  def predict(self, queries: Sequence[str], years: Sequence[int]) -> list[str]:
    return self.predictor.predict(self._inputs(queries, years))

  def log_likelihood(self, queries, years, targets) -> tuple[np.ndarray, np.ndarray]:
    return self.predictor.log_likelihood(self._inputs(queries, years), targets)

  def rank(self, queries, years, candidates) -> np.ndarray:
    return self.predictor.rank(self._inputs(queries, years), candidates)


class YearlyEnsemble:
  """One model per year; each query goes to `route_to_expert(year)` (paper §2.3).

  Args:
    experts: year -> a model with the TimeConditioned interface (usually
      `TimeConditioned(predictor, "none")`).
  """

  def __init__(self, experts: Mapping[int, TimeConditioned]):
    if not experts:
      raise ConfigError("a Yearly ensemble needs at least one expert")
    self.experts = dict(experts)

  def _route(self, years: Sequence[int]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for i, y in enumerate(years):
      groups.setdefault(route_to_expert(int(y), list(self.experts)), []).append(i)
    return groups

  def _gather(self, years, call) -> list:
    out: list = [None] * len(years)
    for expert, idx in sorted(self._route(years).items()):
      for i, value in zip(idx, call(self.experts[expert], idx)):
        out[i] = value
    return out

  def predict(self, queries, years) -> list[str]:
    return self._gather(
      years, lambda m, idx: m.predict([queries[i] for i in idx], [years[i] for i in idx])
    )

  def log_likelihood(self, queries, years, targets) -> tuple[np.ndarray, np.ndarray]:
    def call(m, idx):
      ll, n = m.log_likelihood(
        [queries[i] for i in idx], [years[i] for i in idx], [targets[i] for i in idx]
      )
      return list(zip(ll, n))

    pairs = self._gather(years, call)
    return np.asarray([p[0] for p in pairs]), np.asarray([p[1] for p in pairs])

  def rank(self, queries, years, candidates) -> np.ndarray:
    rows = self._gather(
      years,
      lambda m, idx: list(m.rank([queries[i] for i in idx], [years[i] for i in idx], candidates)),
    )
    return np.stack(rows) if rows else np.zeros((0, len(candidates)))
