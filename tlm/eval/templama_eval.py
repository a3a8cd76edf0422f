"""TempLAMA and news (SSM) evaluation of a time-aware model (paper §2.2, Tables 2, 3, 7, Fig. 2).

TempLAMA: every query is decoded greedily with the model's time conditioning and scored with
SQuAD token F1 and exact match, the max over all answers and aliases. Results are reported for
the seen years (2010-18) and the future years (2019-20), and by year, relation and fact
duration (the years the first answer holds: from the facts' own dates when given, else from
the buckets; both in `tlm.data.fact_durations`). The two
answer baselines of the data itself — always answering the subject's most frequent or most
recent answer — are scored the same way.

News: the held-out salient-span-masking examples of each year are decoded (F1 / EM against the
masked span) and scored (token-level perplexity of the span, Table 7).

A "model" is anything with `predict(queries, years)` and `log_likelihood(queries, years,
targets)`: `tlm.infer.conditioned.TimeConditioned` or `YearlyEnsemble`.
"""

from collections.abc import Mapping, Sequence

import numpy as np

from tlm.configs.years import SLICES, TRAIN_SLICE
from tlm.data import metrics
from tlm.data.fact_durations import durations_from_buckets
from tlm.data.formatting import templama_query_input
from tlm.data.templama import TempLamaExample

SHORT_LIVED_YEARS = 5  # "queries whose answers persist for less than 5 years" (§3.1)


def slice_of(year: int) -> str | None:
  """The Table 2 slice a year belongs to, or None."""
  for name, years in SLICES.items():
    if year in years:
      return name
  return None


def _answers(example: TempLamaExample) -> list[list[str]]:
  return [list(a) for a in example.answers]


def score_records(
  examples: Sequence[TempLamaExample],
  predictions: Sequence[str],
  durations: Mapping[str, int],
) -> list[dict]:
  """One record per query: id, year, subject, relation, duration, prediction, answers, f1, em,
  and whether the subject's most frequent answer is a correct answer of the query."""
  records = []
  for ex, pred in zip(examples, predictions, strict=True):
    answers = _answers(ex)
    records.append(
      {
        "id": ex.id,
        "year": ex.year,
        "subject": ex.subject,
        "relation": ex.relation,
        "duration": int(durations[ex.id]),
        "most_frequent_is_correct": ex.most_frequent_answer in [a[0] for a in answers],
        "query": ex.query,
        "prediction": pred,
        "answers": [a[0] for a in answers],
        "f1": metrics.token_f1(pred, answers),
        "em": metrics.exact_match(pred, answers),
      }
    )
  return records


def aggregate(records: Sequence[dict]) -> dict:
  """F1/EM overall, per Table 2 slice, by year, relation, duration bucket, short vs long."""
  out = {"all": metrics.summarize(records)}
  for name in SLICES:
    out[name] = metrics.summarize([r for r in records if slice_of(r["year"]) == name])
  for name, keep in (
    ("short", lambda r: r["duration"] < SHORT_LIVED_YEARS),
    ("long", lambda r: r["duration"] >= SHORT_LIVED_YEARS),
  ):
    seen = [r for r in records if slice_of(r["year"]) == TRAIN_SLICE and keep(r)]
    out[f"{TRAIN_SLICE}_{name}_lived"] = metrics.summarize(seen)
  return out


def durations_of(
  examples: Sequence[TempLamaExample], from_dates: Mapping[str, int] | None = None
) -> dict[str, int]:
  """Fact durations of `examples`: from the facts' dates where given, else from the buckets."""
  durations = durations_from_buckets(list(examples))
  durations.update({k: v for k, v in (from_dates or {}).items() if k in durations})
  return durations


def evaluate_templama(
  model,
  examples: Sequence[TempLamaExample],
  durations: Mapping[str, int] | None = None,
) -> dict:
  """Decodes and scores every query.

  Args:
    model: `predict(queries, years)`.
    examples: the queries to evaluate (e.g. the test split; a subject's queries are all in one
      split, so the split itself gives the bucket durations).
    durations: `{id: years}` from the facts' own dates (`tlm.data.fact_durations`); queries
      not in it fall back to the bucket durations.

  Returns:
    {"metrics": aggregate(...), "records": [...]} (read through `tlm.eval.results`).
  """
  durations = durations_of(examples, durations)
  queries = [templama_query_input(ex.query) for ex in examples]
  predictions = model.predict(queries, [ex.year for ex in examples])
  records = score_records(examples, predictions, durations)
  return {"metrics": aggregate(records), "records": records}


def answer_baselines(
  examples: Sequence[TempLamaExample], durations: Mapping[str, int] | None = None
) -> dict:
  """Scores of always answering the most frequent / most recent answer.

  Both are oracles, not baselines a model could be: they read each test subject's gold answers
  over 2010-20 (tables label them "(oracle)").
  """
  durations = durations_of(examples, durations)
  out = {}
  for name in ("most_frequent_answer", "most_recent_answer"):
    records = score_records(examples, [getattr(ex, name) for ex in examples], durations)
    out[name] = aggregate(records)
  return out


def evaluate_news(model, examples_by_year: Mapping[int, Sequence[dict]]) -> dict:
  """SSM F1 / EM and perplexity of the masked spans, per year and per Table 2 slice.

  Args:
    model: `predict(queries, years)` and `log_likelihood(queries, years, targets)`.
    examples_by_year: `{year: [TextExample(inputs, targets, year), ...]}` held-out SSM
      examples (`tlm.input.datasets.load_sources(..., split="test")`).

  Returns:
    {"by_year": {year: {"f1", "em", "perplexity", "count"}}, "<slice>": {...},
     "records": {"year", "f1", "loglik", "tokens": one list entry per example, in the order
     of `examples_by_year`}}.
  """
  by_year, pooled = {}, {}
  records: dict = {"year": [], "f1": [], "loglik": [], "tokens": []}
  for year in sorted(examples_by_year):
    rows = examples_by_year[year]
    if not rows:
      continue
    inputs = [r.inputs for r in rows]
    targets = [r.targets for r in rows]
    years = [year] * len(rows)
    preds = model.predict(inputs, years)
    ll, n = model.log_likelihood(inputs, years, targets)
    f1 = [metrics.token_f1(p, [t]) for p, t in zip(preds, targets)]
    em = [metrics.exact_match(p, [t]) for p, t in zip(preds, targets)]
    records["year"] += years
    records["f1"] += [float(x) for x in f1]
    records["loglik"] += [float(x) for x in ll]
    records["tokens"] += [int(x) for x in n]
    by_year[year] = {
      "f1": float(np.mean(f1)),
      "em": float(np.mean(em)),
      "perplexity": metrics.perplexity(ll, n),
      "count": len(rows),
    }
    name = slice_of(year)
    if name:
      acc = pooled.setdefault(name, {"f1": [], "em": [], "ll": [], "n": []})
      acc["f1"] += f1
      acc["em"] += em
      acc["ll"] += list(ll)
      acc["n"] += list(n)
  out: dict = {"by_year": by_year, "records": records}
  for name, acc in pooled.items():
    out[name] = {
      "f1": float(np.mean(acc["f1"])),
      "em": float(np.mean(acc["em"])),
      "perplexity": metrics.perplexity(acc["ll"], acc["n"]),
      "count": len(acc["f1"]),
    }
  return out
