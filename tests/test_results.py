"""The accessors of `tlm.eval.results` on what the evaluation really writes, in seconds.

`--mode=eval` and `--mode=eval_future` run on fixture TempLAMA and news data with a hand-made
model in place of a checkpoint (everything after loading the model is the real code, down to
eval.json on disk; the fixtures `data`, `model` and `written`, in tests/conftest.py); every
accessor then reads the JSON back, and every reader of those results (Table 2, Table 7, the
seed summary, the adaptation slices, the task metrics of training, the per-query measurements)
runs on it. A misspelt key fails here, not after a 25-minute run.
"""

import inspect
import os

import numpy as np
import pytest

from tests.helpers import NEWS_YEARS
from tlm import configs
from tlm.configs.years import SLICES
from tlm.errors import DataError
from tlm.eval import adaptation, during_training, experiments, results, tables
from tlm.miniature import measurements, reproduce


def _mean(values):
  return float(np.mean(values))


def _templama_accessors(read, result, data):
  records = read("templama_records", result)
  assert [r["id"] for r in records] == [ex.id for ex in data.templama]
  assert set(result["templama"]["metrics"]) == set(results.TEMPLAMA_SLICES)
  for s in results.TEMPLAMA_SLICES:
    assert read("templama_metrics", result, s)["count"] >= 0
  seen = [r for r in records if r["year"] <= 2018]
  future = [r for r in records if r["year"] in (2019, 2020)]
  assert seen and future
  assert read("templama_f1", result) == pytest.approx(_mean([r["f1"] for r in records]))
  assert read("templama_f1", result, "2010-18") == pytest.approx(_mean([r["f1"] for r in seen]))
  assert read("templama_f1", result, "2019-20") == pytest.approx(_mean([r["f1"] for r in future]))
  assert read("templama_em", result, "2010-18") == pytest.approx(_mean([r["em"] for r in seen]))
  short = [r["f1"] for r in seen if r["duration"] < 5]
  assert read("templama_f1", result, "2010-18_short_lived") == pytest.approx(_mean(short))
  years = sorted({ex.year for ex in data.templama})
  assert read("templama_f1_by_year", result) == {y: float(y % 2 == 0) for y in years}
  assert read("templama_f1_by_year", result, "2019-20").keys() == {2019, 2020}
  assert read("predictions_by_id", result) == {r["id"]: r["prediction"] for r in records}
  baselines = read("answer_baselines", result)
  assert set(baselines) == {"most_frequent_answer", "most_recent_answer"}
  for agg in baselines.values():
    assert 0.0 < read("aggregate_f1", agg, "2010-18") <= 1.0


def _news_accessors(read, result):
  assert read("has_news", result)
  assert read("news_f1_by_year", result) == {y: pytest.approx(1 / 3) for y in NEWS_YEARS}
  assert read("news_f1", result, "2010-18") == pytest.approx(1 / 3)
  assert read("news_scores", result, "2019-20")["count"] == 3
  assert set(read("news_by_year", result)) == set(NEWS_YEARS)
  # log p is -(year % 3) per token, so the perplexity is e^(year % 3).
  expected = {y: pytest.approx(np.exp(y % 3)) for y in NEWS_YEARS}
  assert read("news_perplexity_by_year", result) == expected
  assert read("news_f1_overall", result) == pytest.approx(1 / 3)
  assert list(read("news_records", result)["tokens"]) == [1, 2, 2] * len(NEWS_YEARS)


def _future_accessors(read, result, data):
  changes = read("future_loglik_change", result)
  years = {str(y) for y in range(2019, 2030)}
  assert {str(y) for y in changes["single"]} | {str(y) for y in changes["multiple"]} == years
  # Every 2018 query is answered right (an even year), so every one is probed.
  assert sum(changes["counts"].values()) == sum(ex.year == 2018 for ex in data.templama)
  assert set(read("future_entropy_by_set", result)) == {"frequent", "rare", "never"}
  assert len(read("future_entropy_per_query", result)) == 86


def test_accessors_read_what_eval_and_eval_future_return_and_write(written, data):
  """Each public function of `results` is read, in memory and from the JSON files."""
  checked = set()

  def read(name, *args):
    checked.add(name)
    return getattr(results, name)(*args)

  for suffix in ("", ".json"):
    _templama_accessors(read, written["eval" + suffix], data)
    _news_accessors(read, written["eval" + suffix])
    _future_accessors(read, written["future" + suffix], data)
  public = {
    n
    for n, f in inspect.getmembers(results, inspect.isfunction)
    if not n.startswith("_") and f.__module__ == results.__name__
  }
  assert checked == public
  # eval_future drew its figures from the same numbers.
  assert written["figure3"]["tiny_temporal"] == results.future_loglik_change(written["future"])
  assert written["figure4"]["tiny_temporal"] == results.future_entropy_by_set(written["future"])


def test_without_news_the_news_is_absent_not_an_error(written):
  result = written["eval.json"]
  templama_only = {"templama": result["templama"]}
  assert not results.has_news(templama_only)
  assert results.news_f1(templama_only, "2010-18") is None
  assert results.news_scores(templama_only, "2010-18") is None
  assert results.news_by_year(templama_only) == results.news_records(templama_only) == {}
  assert results.news_f1_overall(templama_only) is None
  # A news slice that no evaluated year falls in (no 2019 or 2020 news).
  no_future = dict(result, news={k: v for k, v in result["news"].items() if k != "2019-20"})
  assert results.news_f1(no_future, "2019-20") is None


def test_misspelt_keys_name_the_key():
  result = {"templama": {"metrics": {"all": {"count": 1, "overall": {"f1": 0.5, "em": 0.0}}}}}
  assert results.templama_f1(result) == 0.5
  with pytest.raises(results.MissingResult, match=r"\['2010-18_shortlived'\] \(found: \['all'\]\)"):
    results.templama_f1(result, "2010-18_shortlived")
  with pytest.raises(
    results.MissingResult, match=r"baseline has no \['all'\]\['overall'\]\['f1'\]"
  ):
    results.aggregate_f1({"all": {"overall": {"F1": 1.0}}}, "all", what="baseline")
  with pytest.raises(results.MissingResult, match="no news slice '2019-2020'"):
    results.news_f1(result, "2019-2020")
  with pytest.raises(results.MissingResult, match=r"future result has no \['entropy'\]"):
    results.future_entropy_by_set({"loglik_change": {}})


def test_every_reader_of_the_results_runs_on_them(written):
  result = written["eval"]
  evals = {v: result for v in reproduce.VARIANTS}
  cfgs = {v: configs.get(f"tiny_{v}") for v in reproduce.VARIANTS}
  summary = reproduce._summarize(cfgs, evals, {})
  assert summary["templama_f1"]["temporal"]["2019-20"] == results.templama_f1(result, "2019-20")
  assert summary["news"]["uniform"]["2010-18"]["f1"] == pytest.approx(1 / 3)
  assert "| most frequent answer (oracle) | - | - |" in summary["table2"]
  row = tables.table2_row("m", result)
  assert row == ["m"] + [pytest.approx(100 / 3)] * 2 + [
    100 * results.templama_f1(result, s) for s in SLICES
  ]
  assert tables.table2_row("m", written["eval.json"]) == row
  assert tables.table7({"m": result}).splitlines()[0] == "| Model | 2012 | 2013 | 2019 |"
  assert tables.table7({"m": written["eval.json"]}) == tables.table7({"m": result})
  sliced = adaptation.slices(result, 2019)
  assert sliced["2019"] == 0.0 and sliced["2010-18"] == results.templama_f1(result, "2010-18")
  assert sliced["news"]["2019"] == pytest.approx(1 / 3)
  metrics = during_training.task_metrics(result)
  assert metrics["templama_f1"] == results.templama_f1(result)
  assert metrics["news_f1"] == pytest.approx(1 / 3)
  meas = measurements.collect(0, {"temporal": result}, future={"temporal": written["future"]})
  assert len(meas["models"]["temporal"]["templama"]["id"]) == len(result["templama"]["records"])
  assert experiments.f1_by_duration(result)


def test_a_malformed_eval_json_is_a_data_error(tmp_path, data):
  os.makedirs(tmp_path / "results")
  (tmp_path / "results" / "eval.json").write_text('{"templama": {}}')
  with pytest.raises(DataError, match=r"eval.json: not an eval.json.*\['records'\]"):
    experiments._predictions_2018(configs.get("tiny_temporal"), str(tmp_path), data, print)
  with pytest.raises(DataError, match="eval.json: not an eval.json"):
    tables.read_eval_results([str(tmp_path)])
