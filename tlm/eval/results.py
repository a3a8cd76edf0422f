"""Accessors of evaluation results: the only readers of the nested dicts the evaluations return.

An evaluation result (`experiments.evaluate`, written to `WORKDIR/results/eval.json`) is

  {"templama": {"metrics": {slice: {"count", "overall": {"f1", "em"},
                                    "by_year" | "by_relation" | "by_duration": {...}}},
                "records": [one dict per query]},                     # templama_eval
   "news": {"by_year": {year: {"f1", "em", "perplexity", "count"}},
            slice: {"f1", "em", "perplexity", "count"}, "records": {...}},  # with news data only
   "answer_baselines": {name: {slice: ...}}, "config": {...}}

where a TempLAMA slice is one of `TEMPLAMA_SLICES` and a news slice one of
`tlm.configs.years.SLICES` (present when the evaluated years include one of its years). A future
result (`experiments.future_results`) is {"loglik_change": ..., "entropy": {"entropy", ...}}.

Every accessor raises `MissingResult` naming the missing key (and the keys that are there),
so that a misspelt key fails `tests/test_results.py` in a second rather than the end of a
reproduction. The news is optional (a config without news data evaluates TempLAMA alone): its
accessors return None (or an empty dict) when the result has no news.
"""

from collections.abc import Mapping

from tlm.configs.years import SLICES

# The slices `templama_eval.aggregate` scores: every query, Table 2's two, and the seen years
# split by fact duration (§3.1, "short-lived" facts).
TEMPLAMA_SLICES = ("all", *SLICES, "2010-18_short_lived", "2010-18_long_lived")


class MissingResult(LookupError):
  """A result lacks a key that the code reading it expects (a misspelt key, or an old file)."""


def _walk(result: Mapping, *keys, what: str = "evaluation result"):
  """result[k0][k1]...; MissingResult naming the first key that is not there."""
  node = result
  for depth, key in enumerate(keys):
    if not isinstance(node, Mapping) or key not in node:
      path = "".join(f"[{k!r}]" for k in keys[: depth + 1])
      there = sorted(map(str, node)) if isinstance(node, Mapping) else type(node).__name__
      raise MissingResult(f"{what} has no {path} (found: {there})")
    node = node[key]
  return node


def _int_keys(by_year: Mapping) -> dict:
  """Years as ints: in memory they are, after a JSON round trip they are strings."""
  return {int(year): v for year, v in by_year.items()}


# ---- TempLAMA ---------------------------------------------------------------------------------


def templama_metrics(result: Mapping, slice_: str = "all") -> Mapping:
  """The `metrics.summarize` dict of a TempLAMA slice ({"count", "overall", "by_year", ...})."""
  return _walk(result, "templama", "metrics", slice_)


def aggregate_f1(aggregate: Mapping, slice_: str = "all", what: str = "aggregate") -> float:
  """F1 of a slice of a `templama_eval.aggregate` dict (e.g. an answer baseline's)."""
  return float(_walk(aggregate, slice_, "overall", "f1", what=what))


def templama_f1(result: Mapping, slice_: str = "all") -> float:
  """TempLAMA token F1 of a slice, a fraction."""
  return float(_walk(result, "templama", "metrics", slice_, "overall", "f1"))


def templama_em(result: Mapping, slice_: str = "all") -> float:
  """TempLAMA exact match of a slice, a fraction."""
  return float(_walk(result, "templama", "metrics", slice_, "overall", "em"))


def templama_f1_by_year(result: Mapping, slice_: str = "all") -> dict[int, float]:
  """{year: mean TempLAMA F1} of a slice (empty when the slice has no queries)."""
  metrics = templama_metrics(result, slice_)
  if not _walk(metrics, "count", what=f"TempLAMA slice {slice_!r}"):
    return {}
  by_year = _walk(metrics, "by_year", "f1", what=f"TempLAMA slice {slice_!r}")
  return {year: float(v["mean"]) for year, v in _int_keys(by_year).items()}


def templama_records(result: Mapping) -> list[dict]:
  """One dict per TempLAMA query (id, year, duration, prediction, answers, f1, em, ...)."""
  return _walk(result, "templama", "records")


def predictions_by_id(result: Mapping) -> dict[str, str]:
  """{TempLAMA query id: prediction}."""
  return {r["id"]: r["prediction"] for r in templama_records(result)}


def answer_baselines(result: Mapping) -> Mapping:
  """{baseline name: aggregate} of the data's own answer baselines (`answer_baselines`)."""
  return _walk(result, "answer_baselines")


# ---- news -------------------------------------------------------------------------------------


def has_news(result: Mapping) -> bool:
  """Whether the held-out news was evaluated (the config has news data)."""
  return bool(result.get("news"))


def _news_slice(result: Mapping, slice_: str) -> Mapping | None:
  if slice_ not in SLICES:
    raise MissingResult(f"no news slice {slice_!r}: the slices are {', '.join(SLICES)}")
  if not has_news(result):
    return None
  return result["news"].get(slice_)  # absent: no evaluated year falls in the slice


def news_f1(result: Mapping, slice_: str) -> float | None:
  """News SSM F1 of a Table 2 slice; None without news or without a year of the slice."""
  scores = _news_slice(result, slice_)
  return None if scores is None else float(_walk(scores, "f1", what=f"news slice {slice_!r}"))


def news_scores(result: Mapping, slice_: str) -> dict | None:
  """{"f1", "em", "perplexity", "count"} of a news slice; None as for `news_f1`."""
  scores = _news_slice(result, slice_)
  return None if scores is None else dict(scores)


def news_by_year(result: Mapping) -> dict[int, Mapping]:
  """{year: {"f1", "em", "perplexity", "count"}} of the news (empty without news)."""
  if not has_news(result):
    return {}
  return _int_keys(_walk(result, "news", "by_year"))


def news_f1_by_year(result: Mapping) -> dict[int, float]:
  """{year: news SSM F1} (empty without news)."""
  return {
    year: float(_walk(v, "f1", what=f"news year {year}"))
    for year, v in news_by_year(result).items()
  }


def news_perplexity_by_year(result: Mapping) -> dict[int, float]:
  """{year: perplexity of the masked spans} (Table 7; empty without news)."""
  return {
    year: float(_walk(v, "perplexity", what=f"news year {year}"))
    for year, v in news_by_year(result).items()
  }


def news_f1_overall(result: Mapping) -> float | None:
  """News SSM F1 over every evaluated example (each year weighted by its examples); None
  without news."""
  f1 = news_f1_by_year(result)
  counts = {y: _walk(v, "count", what=f"news year {y}") for y, v in news_by_year(result).items()}
  total = sum(counts.values())
  return sum(f1[y] * n for y, n in counts.items()) / total if total else None


def news_records(result: Mapping) -> Mapping:
  """{"year", "f1", "loglik", "tokens": one entry per news example} (empty without news)."""
  if not has_news(result):
    return {}
  return _walk(result, "news", "records")


# ---- the future probes (Figures 3 and 4) ------------------------------------------------------


def future_loglik_change(future_result: Mapping) -> Mapping:
  """Figure 3 of a model: {"single" | "multiple": {year: mean change}, "counts", "per_query"}."""
  return _walk(future_result, "loglik_change", what="future result")


def future_entropy_by_set(future_result: Mapping) -> Mapping:
  """Figure 4 of a model: {set: {year: mean entropy over the candidates}}."""
  return _walk(future_result, "entropy", "entropy", what="future result")


def future_entropy_per_query(future_result: Mapping) -> Mapping:
  """{future-relations query id: {year: entropy}}."""
  return _walk(future_result, "entropy", "per_query", what="future result")
