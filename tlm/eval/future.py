"""Calibration about the future (paper §3.2, Figures 3 and 4).

Figure 3: take the TempLAMA test queries the model answered correctly (exact match) for 2018,
split them into those whose (subject, relation) has a single answer over 2010-2020 and those
with several, and measure how the log-likelihood of that correct answer changes as the query
year goes 2019..2029, relative to 2018.

Figure 4: for the future-relations queries (frequently / rarely / never changing answers, each
with a fixed candidate set), the entropy of the model's distribution over the candidates —
log-likelihoods from the ranking API, renormalised over the set — averaged per set and year
2018..2029.

Models are `TimeConditioned` / `YearlyEnsemble` objects; a model without a time input gets the
year in the text ("In 2025, ...") by being wrapped with conditioning "in_text".
"""

import collections
from collections.abc import Sequence

import numpy as np

from tlm.configs.years import PROBE_YEARS, REFERENCE_YEAR
from tlm.data import metrics
from tlm.data.formatting import templama_query_input
from tlm.data.future_relations import SETS, FutureRelations
from tlm.data.templama import TempLamaExample


def answer_counts(examples: Sequence[TempLamaExample]) -> dict[tuple[str, str], int]:
  """Distinct answers of each (subject, relation) over all its buckets."""
  names: dict = collections.defaultdict(set)
  for ex in examples:
    for answer in ex.answers:
      names[(ex.subject, ex.relation)].add(answer[0])
  return {k: len(v) for k, v in names.items()}


def _matched_answer(prediction: str, example: TempLamaExample) -> str | None:
  """The name of the first answer (any alias) the prediction matches exactly, else None."""
  for answer in example.answers:
    if metrics.exact_match(prediction, [answer]):
      return answer[0]
  return None


def loglik_change(
  model,
  examples: Sequence[TempLamaExample],
  predictions_2018: dict[str, str],
  years: Sequence[int] = PROBE_YEARS,
) -> dict:
  """Figure 3 for one model.

  Args:
    model: `log_likelihood(queries, years, targets)`.
    examples: the test split (every bucket; used for the single/multiple grouping).
    predictions_2018: {example id: prediction} for the split's 2018 queries.
    years: the query years to probe.

  Returns:
    {"single" | "multiple": {year: mean change of log-likelihood vs 2018}, "counts": {...},
     "per_query": {"single" | "multiple": {year: [change of each chosen query]}}}.
  """
  counts = answer_counts(examples)
  chosen: dict[str, list[tuple[str, str]]] = {"single": [], "multiple": []}
  for ex in examples:
    if ex.year != REFERENCE_YEAR or ex.id not in predictions_2018:
      continue
    answer = _matched_answer(predictions_2018[ex.id], ex)
    if answer is None:
      continue
    group = "single" if counts[(ex.subject, ex.relation)] == 1 else "multiple"
    chosen[group].append((templama_query_input(ex.query), answer))
  out: dict = {"counts": {g: len(v) for g, v in chosen.items()}, "per_query": {}}
  for group, pairs in chosen.items():
    out[group], out["per_query"][group] = {}, {}
    if not pairs:
      continue
    queries = [q for q, _ in pairs]
    targets = [a for _, a in pairs]
    base, _ = model.log_likelihood(queries, [REFERENCE_YEAR] * len(pairs), targets)
    for year in years:
      ll, _ = model.log_likelihood(queries, [year] * len(pairs), targets)
      out[group][int(year)] = float(np.mean(ll - base))
      out["per_query"][group][int(year)] = [float(x) for x in ll - base]
  return out


def future_entropy(
  model, future: FutureRelations, years: Sequence[int] = (REFERENCE_YEAR,) + PROBE_YEARS
) -> dict:
  """Figure 4 for one model.

  Returns:
    {"entropy": {set: {year: mean entropy (nats)}}, "max_entropy": {set: mean log |C|},
    "per_query": {query id: {year: entropy}}}.
  """
  per_query: dict = {}
  by_candidates = collections.defaultdict(list)
  for q in future.queries:
    by_candidates[q.candidates].append(q)
  for name, queries in sorted(by_candidates.items()):
    candidates = future.candidates[name]
    texts = [templama_query_input(q.query) for q in queries for _ in years]
    query_years = [y for _ in queries for y in years]
    scores = model.rank(texts, query_years, candidates)
    for i, q in enumerate(queries):
      rows = scores[i * len(years) : (i + 1) * len(years)]
      per_query[q.id] = {int(y): metrics.entropy(r) for y, r in zip(years, rows)}
  entropy, max_entropy = {}, {}
  for s in SETS:
    ids = [q.id for q in future.queries if q.set == s]
    if not ids:
      continue
    entropy[s] = {int(y): float(np.mean([per_query[i][int(y)] for i in ids])) for y in years}
    sizes = [len(future.candidates[q.candidates]) for q in future.queries if q.set == s]
    max_entropy[s] = float(np.mean(np.log(sizes)))
  return {"entropy": entropy, "max_entropy": max_entropy, "per_query": per_query}
