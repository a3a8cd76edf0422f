"""The per-query numbers of one seed of the reproduction, and the accessors the claims read.

`collect(...)` gathers, from the results `reproduce` holds in memory, everything
`tlm.miniature.claims` needs into one JSON-ready dict, written to `seed=S/results/per_query.json`:

  {"seed": s,
   "models": {model: {"templama": {column: [one value per TempLAMA test query]},
                      "news": {column: [one value per held-out news example]}}},
   "experts": {"id": [...], "year": [...], "f1": {expert year: [...]}},     # Figure 2, left
   "loglik_change": {model: {"single" | "multiple": {year: [...]}}},      # Figure 3
   "entropy": {model: {"set": [...], "entropy": {year: [...]}}},          # Figure 4
   "adaptation": {model: {"before", "alphas", "retrained", "curve", "match_alpha", "steps",
                          "retrain_steps"}}}                              # Figure 5

Model names: "uniform", "temporal", "yearly" and, once trained, "cbqa" (T5-CBQA as is) and
"cbqa_ft" (T5-CBQA-ft). Every model's TempLAMA columns are in the same query order (sorted
by id) and its news columns in the same example order, so that a resample of query indices
applies to every model alike (the paired bootstrap of `tlm.miniature.stats`).

The accessors below are the only readers of this layout: an input that a run did not produce
raises `MissingInput` (the claim is then reported with "holds": null and the reason), and a
misspelt key fails the fast test of this module rather than the end of a long run.
"""

from collections.abc import Mapping, Sequence

import numpy as np

from tlm.configs.schema import MAX_SEED
from tlm.eval import results

TEMPLAMA_COLUMNS = (
  "id",
  "year",
  "subject",
  "relation",
  "duration",
  "f1",
  "prediction",
  "first_answer",
  "most_frequent_is_correct",
)
# Every gold answer of a query (a list per query; M2 needs them all). Optional on reading: a
# per_query.json written before it existed still serves every claim but M2.
ANSWERS = "answers"
NEWS_COLUMNS = ("year", "f1", "loglik", "tokens")


class MissingInput(Exception):
  """A number a claim needs was not measured in this run (e.g. a model not trained)."""


# ---- writing ----------------------------------------------------------------------------------


def templama_columns(result: Mapping) -> dict[str, list]:
  """The TempLAMA per-query columns of an `evaluate` result, sorted by query id."""
  records = sorted(results.templama_records(result), key=lambda r: r["id"])
  cols = {c: [] for c in TEMPLAMA_COLUMNS + (ANSWERS,)}
  for r in records:
    for c in TEMPLAMA_COLUMNS:
      cols[c].append(r["answers"][0] if c == "first_answer" else r[c])
    cols[ANSWERS].append([str(a) for a in r["answers"]])
  return cols


def news_columns(result: Mapping) -> dict[str, list]:
  """The news per-example columns of an `evaluate` result (empty lists without news)."""
  records = results.news_records(result)
  return {c: list(records.get(c, [])) for c in NEWS_COLUMNS}


def collect(
  seed: int,
  evals: Mapping[str, Mapping],
  expert_f1: Mapping[int, Sequence[float]] | None = None,
  future: Mapping[str, Mapping] | None = None,
  future_sets: Mapping[str, str] | None = None,
  adapted: Mapping[str, Mapping] | None = None,
  retrain_steps: Mapping[str, int] | None = None,
) -> dict:
  """One seed's per-query numbers (the layout in the module docstring).

  Args:
    seed: the seed of the run.
    evals: {model: `experiments.evaluate` result}.
    expert_f1: {expert year: F1 of each query of the evaluated TempLAMA list, in its order}
      (`experiments.yearly_gap_curves(..., per_query=...)`); the ids come from `evals`.
    future: {model: `experiments.future_results` result}.
    future_sets: {future-relations query id: its set (frequent / rare / never)}.
    adapted: {model: `adaptation.adapt` result}.
    retrain_steps: {model: steps of the retrained-from-scratch model (Figure 5)}.
  """
  out: dict = {"seed": int(seed), "models": {}, "loglik_change": {}, "entropy": {}}
  for model, result in evals.items():
    out["models"][model] = {"templama": templama_columns(result), "news": news_columns(result)}
  if expert_f1:
    records = results.templama_records(next(iter(evals.values())))  # evaluation order
    out["experts"] = {
      "id": [r["id"] for r in records],
      "year": [r["year"] for r in records],
      "f1": {str(e): list(v) for e, v in expert_f1.items()},
    }
  for model, result in (future or {}).items():
    out["loglik_change"][model] = results.future_loglik_change(result).get("per_query", {})
    per_query = results.future_entropy_per_query(result)
    ids = sorted(per_query)
    years = sorted({int(y) for q in per_query.values() for y in q})
    out["entropy"][model] = {
      "id": ids,
      "set": [(future_sets or {}).get(i, "") for i in ids],
      "entropy": {y: [per_query[i][y] for i in ids] for y in years},
    }
  if adapted:
    out["adaptation"] = {
      m: {k: r.get(k) for k in ("before", "alphas", "retrained", "curve", "match_alpha", "steps")}
      | {"retrain_steps": (retrain_steps or {}).get(m)}
      for m, r in adapted.items()
    }
  return out


# ---- reading ----------------------------------------------------------------------------------

# The type of each column's values (bool is not an int here: JSON true is not a year).
_NUMBER = (int, float)
# An F1 is a number in [0, 1] (NaN is not: an all-NaN column was accepted and then averaged).
_F1 = "F1"
_TEMPLAMA_TYPES = {
  "id": str,
  "year": int,
  "subject": str,
  "relation": str,
  "duration": int,
  "f1": _F1,
  "prediction": str,
  "first_answer": str,
  "most_frequent_is_correct": bool,
}
_NEWS_TYPES = {"year": int, "f1": _F1, "loglik": _NUMBER, "tokens": int}
# Columns a newer per_query.json may hold beside those: every gold answer of a query (claim
# M2), a list of strings per query.
_TEMPLAMA_OPTIONAL = {"answers": "answer lists"}


def _column_problem(values, kind, where: str) -> str | None:
  if not isinstance(values, list):
    return f"{where} is not a list"
  if kind == "answer lists":
    for value in values:
      if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        return f"{where} holds {str(value)[:40]!r}, not a list of strings"
    return None
  if kind == _F1:
    for value in values:
      if isinstance(value, bool) or not isinstance(value, _NUMBER) or not 0 <= value <= 1:
        return f"{where} holds {str(value)[:40]!r}, not an F1 in [0, 1]"
    return None
  for value in values:
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
      name = kind.__name__ if isinstance(kind, type) else "number"
      return f"{where} holds {str(value)[:40]!r}, not a {name}"
  return None


def _table_problem(cols, types: Mapping, where: str, optional: Mapping | None = None) -> str | None:
  optional = optional or {}
  if not isinstance(cols, Mapping) or not set(types) <= set(cols) <= set(types) | set(optional):
    return f"{where} does not have the columns {', '.join(types)}"
  for column, kind in {**types, **optional}.items():
    if column not in cols:
      continue
    if (why := _column_problem(cols[column], kind, f"{where}.{column}")) is not None:
      return why
  if len({len(v) for v in cols.values()}) > 1:
    return f"{where}: its columns differ in length"
  return None


def _by_year_problem(by_year, where: str) -> str | None:
  """{year (as a string): [numbers]}."""
  if not isinstance(by_year, Mapping):
    return f"{where} is not an object"
  for year, values in by_year.items():
    if not str(year).lstrip("-").isdigit():
      return f"{where} has the key {str(year)[:20]!r}, not a year"
    if (why := _column_problem(values, _NUMBER, f"{where}.{year}")) is not None:
      return why
  return None


def _fields_problem(obj, fields: Mapping, where: str) -> str | None:
  """`obj` has exactly `fields`: {name: column type, or "by_year"}."""
  if not isinstance(obj, Mapping) or set(obj) != set(fields):
    return f"{where} does not have {', '.join(fields)}"
  for name, kind in fields.items():
    check = _by_year_problem if kind == "by_year" else lambda v, w, k=kind: _column_problem(v, k, w)
    if (why := check(obj[name], f"{where}.{name}")) is not None:
      return why
  return None


def _models_problem(models: Mapping) -> str | None:
  for model, tables in models.items():
    if not isinstance(tables, Mapping) or set(tables) != {"templama", "news"}:
      return f"models.{model} does not have templama and news"
    for name, types, optional in (
      ("templama", _TEMPLAMA_TYPES, _TEMPLAMA_OPTIONAL),
      ("news", _NEWS_TYPES, {}),
    ):
      where = f"models.{model}.{name}"
      if (why := _table_problem(tables[name], types, where, optional)) is not None:
        return why
  return None


def _probes_problem(meas: Mapping) -> str | None:
  """The Figure 2-5 sections: experts, loglik_change, entropy, adaptation."""
  if "experts" in meas:
    fields = {"id": str, "year": int, "f1": "by_year"}
    if (why := _fields_problem(meas["experts"], fields, "experts")) is not None:
      return why
  for model, groups in meas["loglik_change"].items():
    if not isinstance(groups, Mapping):
      return f"loglik_change.{model} is not an object"
    for group, by_year in groups.items():
      if (why := _by_year_problem(by_year, f"loglik_change.{model}.{group}")) is not None:
        return why
  for model, e in meas["entropy"].items():
    fields = {"id": str, "set": str, "entropy": "by_year"}
    if (why := _fields_problem(e, fields, f"entropy.{model}")) is not None:
      return why
  adaptation = meas.get("adaptation", {})
  if not isinstance(adaptation, Mapping) or not all(
    isinstance(a, Mapping) for a in adaptation.values()
  ):
    return "'adaptation' is not an object of objects"
  return None


def problem(meas) -> str | None:
  """Why `meas` (read back from a per_query.json) is not in the layout `collect` writes, in a
  few words naming the key, or None. Every per-query value the claims read is checked for its
  type, so that a file edited or damaged by hand is refused where it is read, not deep in a
  claim (the adaptation curves are checked to be objects only)."""
  if not isinstance(meas, Mapping):
    return "not a JSON object"
  seed = meas.get("seed")
  if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
    return "'seed' is not an integer in [0, 2**64 - 1] (as reproduce.seeds)"
  for key in ("models", "loglik_change", "entropy"):
    if not isinstance(meas.get(key), Mapping):
      return f"{key!r} is not an object"
  return _models_problem(meas["models"]) or _probes_problem(meas)


def _model(meas: Mapping, model: str) -> Mapping:
  try:
    return meas["models"][model]
  except KeyError:
    raise MissingInput(f"no {model} model evaluated in this run") from None


def templama(meas: Mapping, model: str, years: Sequence[int]) -> dict[str, np.ndarray]:
  """A model's TempLAMA columns for the queries of `years`, as arrays (order: query id)."""
  cols = _model(meas, model)["templama"]
  keep = np.isin(np.asarray(cols["year"]), list(years))
  out = {c: np.asarray(cols[c])[keep] for c in TEMPLAMA_COLUMNS}
  if ANSWERS in cols:  # lists of different lengths: an object array of lists
    answers = np.empty(len(cols[ANSWERS]), dtype=object)
    answers[:] = [list(a) for a in cols[ANSWERS]]
    out[ANSWERS] = answers[keep]
  return out


def news(meas: Mapping, model: str, years: Sequence[int]) -> dict[str, np.ndarray]:
  """A model's news columns for the examples of `years` (MissingInput without news)."""
  cols = _model(meas, model)["news"]
  if not cols["year"]:
    raise MissingInput(f"no held-out news evaluated for {model}")
  keep = np.isin(np.asarray(cols["year"]), list(years))
  return {c: np.asarray(cols[c], dtype=float)[keep] for c in NEWS_COLUMNS}


def experts(meas: Mapping) -> tuple[np.ndarray, dict[int, np.ndarray]]:
  """Figure 2 (left): (query years, {expert year: F1 of every query})."""
  if "experts" not in meas:
    raise MissingInput("no per-expert TempLAMA scores (Figure 2, left) in this run")
  e = meas["experts"]
  return np.asarray(e["year"]), {int(y): np.asarray(v, dtype=float) for y, v in e["f1"].items()}


def expert_pairs(meas: Mapping) -> list[tuple[str, str]]:
  """Figure 2 (left): the (subject, relation) of each query of `experts`, in its order, from
  the TempLAMA columns of the evaluated models (joined by query id)."""
  if "experts" not in meas:
    raise MissingInput("no per-expert TempLAMA scores (Figure 2, left) in this run")
  pair_of = {}
  for block in meas["models"].values():
    cols = block["templama"]
    pair_of.update(zip(cols["id"], zip(cols["subject"], cols["relation"])))
  try:
    return [tuple(pair_of[i]) for i in meas["experts"]["id"]]
  except KeyError as e:
    raise ValueError(f"experts: query {e.args[0]!r} is in no model's TempLAMA columns") from None


def loglik_change(meas: Mapping, model: str) -> dict[str, dict[int, np.ndarray]]:
  """Figure 3: {"single" | "multiple": {year: change of each 2018-correct query}}."""
  if model not in meas["loglik_change"]:
    raise MissingInput(f"no Figure 3 probe of {model} in this run")
  groups = meas["loglik_change"][model]
  return {
    g: {int(y): np.asarray(v, dtype=float) for y, v in groups.get(g, {}).items()}
    for g in ("single", "multiple")
  }


def entropy(meas: Mapping, model: str) -> tuple[list, np.ndarray, dict[int, np.ndarray]]:
  """Figure 4: (query ids, set of each query, {year: entropy of each query}), by query id."""
  if model not in meas["entropy"]:
    raise MissingInput(f"no Figure 4 probe of {model} in this run")
  e = meas["entropy"][model]
  years = {int(y): np.asarray(v, dtype=float) for y, v in e["entropy"].items()}
  return list(e["id"]), np.asarray(e["set"]), years


def adaptation(meas: Mapping, model: str) -> dict:
  """Figure 5 numbers of a model; MissingInput if it was not adapted or not retrained."""
  a = (meas.get("adaptation") or {}).get(model)
  if not a:
    raise MissingInput(f"{model} was not adapted to 2019 in this run")
  if not a.get("retrained"):
    raise MissingInput(f"no retrained-on-2010-19 model for {model} (Figure 5)")
  return a
