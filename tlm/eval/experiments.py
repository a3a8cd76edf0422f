"""The paper's evaluations of trained models: Table 2 rows, Figures 2-4 (paper §3.1-§3.2).

- `eval_data(config)`: the held-out TempLAMA and news data every experiment takes (`EvalData`),
  and `score(model, data)`: one model's results on it (both `tlm.eval.heldout`'s).
- `evaluate(config, workdir, log, data)`: TempLAMA and news F1 (and news perplexity, Table 7)
  of the model trained in `workdir` with `config`; writes `results/eval.json` and the model's
  Markdown row of Table 2.
- `eval_future(config, workdir, log, data)`: Figure 3 (change of log-likelihood of
  2018-correct answers over 2019..2029) and Figure 4 (entropy over a candidate set for
  frequently / rarely / never changing facts); writes `results/future.json`, `figure3.png`,
  `figure4.png`.
- `yearly_gap_curves(...)`: Figure 2, left (each yearly expert on every year).

The models are loaded, and queried as the paper queries each variant, by
`tlm.infer.trained_models`; the results are read back through `tlm.eval.results`.
"""

from collections.abc import Callable

import numpy as np

from tlm import configs, safe_read, storage
from tlm.configs import Config
from tlm.configs.years import REFERENCE_YEAR, SLICES
from tlm.data import metrics
from tlm.data.formatting import templama_query_input
from tlm.data.future_relations import FutureRelations, load_future_relations
from tlm.errors import DataError
from tlm.eval import figures, future, results, tables
from tlm.eval.heldout import EvalData, eval_data, score
from tlm.eval.tables import MAX_EVAL_BYTES
from tlm.eval.templama_eval import answer_baselines
from tlm.files import atomic_output_file, write_json
from tlm.infer.trained_models import expert_dir, load_expert, load_model, require_model

Log = Callable[[str], None]


# ---- experiments -----------------------------------------------------------------------------


def writes_results() -> bool:
  """Whether this process writes the result files: process 0 of a multi-host run (every
  process computes the same results; one writer keeps them whole)."""
  import jax

  return jax.process_index() == 0


def _results_dir(workdir: str) -> str:
  path = storage.join(workdir, "results")
  storage.makedirs(path)
  return path


def _log_slices(log: Log, label: str, result: dict) -> None:
  parts = [f"TempLAMA F1 {s} {100 * results.templama_f1(result, s):.1f}" for s in SLICES]
  news = {s: results.news_f1(result, s) for s in SLICES}
  parts += [f"news F1 {s} {100 * f1:.1f}" for s, f1 in news.items() if f1 is not None]
  log(f"{label}: " + ", ".join(parts))


def evaluate_model(model, data: EvalData, log: Log, label: str) -> dict:
  """`score`, saying what it decodes and the F1 of each slice."""
  news = f" and news SSM on {sum(len(v) for v in data.news.values())} held-out examples"
  log(f"{label}: decoding {len(data.templama)} TempLAMA queries" + (news if data.news else ""))
  result = score(model, data)
  _log_slices(log, label, result)
  return result


def evaluate(config: Config, workdir: str, log: Log = print, data: EvalData | None = None) -> dict:
  """`--mode=eval`: writes WORKDIR/results/eval.json and table2_row.md; returns the result."""
  require_model(config, workdir)
  data = data or eval_data(config)
  model = load_model(config, workdir)
  result = evaluate_model(model, data, log, config.name)
  result["config"] = configs.to_dict(config)
  result["answer_baselines"] = answer_baselines(data.templama, data.durations)
  if not writes_results():
    return result
  out = _results_dir(workdir)
  write_json(storage.join(out, "eval.json"), result)
  with atomic_output_file(storage.join(out, "table2_row.md")) as f:
    f.write(tables.table2({config.name: result}, results.answer_baselines(result)))
  return result


def future_results(
  config: Config, workdir: str, data: EvalData, predictions: dict[str, str], log: Log
) -> dict:
  """Figure 3 and Figure 4 numbers for one model."""
  model = load_model(config, workdir, future_probe=True)
  fr: FutureRelations = load_future_relations(data.future_relations_dir)
  log(f"{config.name}: Figure 3, log-likelihood of 2018-correct answers over 2019-2029")
  fig3 = future.loglik_change(model, data.templama, predictions)
  log(f"{config.name}: Figure 4, entropy over candidates for {len(fr.queries)} queries")
  fig4 = future.future_entropy(model, fr)
  return {"loglik_change": fig3, "entropy": fig4}


def _predictions_2018(config: Config, workdir: str, data: EvalData, log: Log) -> dict[str, str]:
  """{id: prediction} of the 2018 TempLAMA queries: from `--mode=eval`'s eval.json if there is
  one, else decoded now."""
  eval_path = storage.join(workdir, "results", "eval.json")
  if not storage.isfile(eval_path):
    log(f"{eval_path} not found: decoding the 2018 TempLAMA queries first")
    model = load_model(config, workdir)
    queries_2018 = [ex for ex in data.templama if ex.year == REFERENCE_YEAR]
    preds = model.predict(
      [templama_query_input(ex.query) for ex in queries_2018], [ex.year for ex in queries_2018]
    )
    return {ex.id: p for ex, p in zip(queries_2018, preds)}
  saved = safe_read.read_json(eval_path, MAX_EVAL_BYTES, error=DataError, what="an eval.json")
  try:
    return results.predictions_by_id(saved)
  except (ValueError, results.MissingResult, KeyError, TypeError) as e:
    message = f"not an eval.json written by --mode=eval ({type(e).__name__}: {e})"
    raise DataError(message, eval_path) from None


def eval_future(
  config: Config, workdir: str, log: Log = print, data: EvalData | None = None
) -> dict:
  """`--mode=eval_future`: WORKDIR/results/future.json, figure3.png, figure4.png."""
  require_model(config, workdir)
  data = data or eval_data(config)
  predictions = _predictions_2018(config, workdir, data, log)
  result = future_results(config, workdir, data, predictions, log)
  if not writes_results():
    return result
  out = _results_dir(workdir)
  write_json(storage.join(out, "future.json"), result)
  name = config.name
  fig3, fig4 = storage.join(out, "figure3.png"), storage.join(out, "figure4.png")
  draw(log, figures.figure3, {name: results.future_loglik_change(result)}, fig3)
  draw(log, figures.figure4, {name: results.future_entropy_by_set(result)}, fig4)
  return result


def draw(log: Log, fn, *args) -> None:
  """Draws a figure; without matplotlib, says so and carries on (the JSON is complete)."""
  try:
    fn(*args)
  except figures.FiguresUnavailable as e:
    log(f"note: {e}")


def yearly_gap_curves(
  config: Config, workdir: str, data: EvalData, log: Log, per_query: dict | None = None
) -> dict[str, dict[int, float]]:
  """Figure 2, left: F1 of every yearly expert on every year, averaged by (test - train) year.

  Args:
    per_query: if given, filled with {expert year: [TempLAMA F1 of each query of
      `data.templama`, in order]} (the claims' bootstrap resamples the queries).

  Returns:
    {"TempLAMA": {gap: F1}, "News": {gap: F1}} (News only with news data).
  """
  sums: dict = {"TempLAMA": {}, "News": {}}
  for expert_year in config.data.train_years:
    model = load_expert(config, workdir, expert_year)
    log(f"Figure 2: expert {expert_year} ({expert_dir(workdir, expert_year)}) on every year")
    scored = score(model, data)
    if per_query is not None:
      per_query[expert_year] = [r["f1"] for r in results.templama_records(scored)]
    by_year = {"TempLAMA": results.templama_f1_by_year(scored)}
    by_year["News"] = results.news_f1_by_year(scored)
    for source, f1 in by_year.items():
      for year, v in f1.items():
        sums[source].setdefault(year - expert_year, []).append(v)
  return {k: {g: float(np.mean(v)) for g, v in sorted(d.items())} for k, d in sums.items() if d}


def f1_by_duration(result: dict) -> dict[int, float]:
  """TempLAMA F1 of the 2010-18 queries by fact duration in years (Figure 2, right)."""
  records = [r for r in results.templama_records(result) if 2010 <= r["year"] <= 2018]
  groups = metrics.group_mean([r["f1"] for r in records], [r["duration"] for r in records])
  return {int(k): v["mean"] for k, v in sorted(groups.items())}
