"""Markdown renderings of the paper's tables from evaluation results.

Table 2: F1 on the news SSM data ("CustomNews") and TempLAMA, 2010-18 and 2019-20, one row per
model. Table 3 is Table 2 over model sizes. Table 7: news MLM perplexity per year. Table 4:
closed-book CronQuestions EM / F1. Numbers are percentages with one decimal, as in the paper.
"""

import os
from collections.abc import Mapping, Sequence

from tlm import safe_read, storage
from tlm.configs.years import SLICES
from tlm.errors import ConfigError, DataError
from tlm.eval.results import (
  MissingResult,
  aggregate_f1,
  answer_baselines,
  news_f1,
  news_perplexity_by_year,
  templama_f1,
  templama_metrics,
  templama_records,
)
from tlm.files import atomic_output_dir, check_replaceable

# An eval.json holds one record per TempLAMA query: tens of megabytes at the paper's scale.
MAX_EVAL_BYTES = 1 << 30


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
  """A GitHub-flavoured Markdown table; floats with one decimal."""

  def cell(v) -> str:
    if v is None:
      return "-"
    return f"{v:.1f}" if isinstance(v, float) else str(v)

  lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
  lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
  return "\n".join(lines) + "\n"


# Table 2's columns (and Table 3's after its "Size"): news, then TempLAMA, on each slice.
TABLE2_HEADERS = (
  "Model",
  *(f"News F1 {s}" for s in SLICES),
  *(f"TempLAMA F1 {s}" for s in SLICES),
)


def _pct(x) -> float | None:
  return None if x is None else 100.0 * float(x)


def table2_row(name: str, result: Mapping) -> list:
  """One Table 2 row from an `eval.json` result ({"news": ..., "templama": ...})."""
  news = [_pct(news_f1(result, s)) for s in SLICES]
  templama = [_pct(templama_f1(result, s)) for s in SLICES]
  return [name, *news, *templama]


def table2(results: Mapping[str, Mapping], baselines: Mapping[str, Mapping] | None = None) -> str:
  """Table 2 from {model name: eval result}, plus the answer baselines' rows if given."""
  rows = [table2_row(n, r) for n, r in results.items()]
  return markdown_table(TABLE2_HEADERS, rows + answer_baseline_rows(baselines or {}))


def table3(results: Mapping[str, Mapping[str, Mapping]]) -> str:
  """Table 3 from {size: {model name: eval result}}: Table 2 per size."""
  headers = ["Size", *TABLE2_HEADERS]
  rows = [[size] + table2_row(n, r) for size, models in results.items() for n, r in models.items()]
  return markdown_table(headers, rows)


def table7(results: Mapping[str, Mapping]) -> str:
  """Table 7: news perplexity per year, from {model name: eval result}."""
  news = {name: news_perplexity_by_year(r) for name, r in results.items()}
  years = sorted({y for by_year in news.values() for y in by_year})
  rows = [[name] + [by_year.get(y) for y in years] for name, by_year in news.items()]
  return markdown_table(["Model"] + [str(y) for y in years], rows)


def answer_baseline_rows(baselines: Mapping[str, Mapping]) -> list[list]:
  """Table 2 rows for the most-frequent / most-recent answer rows (TempLAMA only).

  They are labelled "(oracle)": each reads the test subject's own gold answers over 2010-20,
  which no model sees, so they bound what the data allows rather than being baselines.
  """
  rows = []
  for name, agg in baselines.items():
    f1 = [_pct(aggregate_f1(agg, s, what=f"answer baseline {name}")) for s in SLICES]
    rows.append([name.replace("_", " ") + " (oracle)", None, None] + f1)
  return rows


def _eval_problem(result: Mapping) -> str | None:
  """Why an eval.json that has every number the tables read is still not one --mode=eval
  wrote, in a few words, or None: its config name (a row label, a key) is a printable string,
  its TempLAMA records one object per query counted in its metrics."""
  name = result["config"]["name"]
  if not isinstance(name, str) or not name or not name.isprintable():
    return f"config.name {safe_read.shown(name)} is not a printable name"
  records = templama_records(result)
  count = templama_metrics(result)["count"]
  if not isinstance(records, list) or not all(isinstance(r, Mapping) for r in records):
    return "templama.records is not a list of objects"
  if len(records) != count:
    return f"templama.records holds {len(records)} records, its metrics count {count!r} queries"
  return None


def read_eval_results(workdirs: Sequence[str]) -> dict[str, dict]:
  """{config name: eval.json} of each workdir's `--mode=eval` results (a repeated name gets its
  workdir in parentheses).

  Raises:
    ConfigError: a workdir without results/eval.json.
    DataError: an eval.json that --mode=eval did not write.
  """
  results = {}
  for workdir in workdirs:
    path = storage.join(workdir, "results", "eval.json")
    if not storage.isfile(path):
      raise ConfigError(f"{path}: no such file; run --mode=eval --workdir={workdir} first")
    result = safe_read.read_json(path, MAX_EVAL_BYTES, error=DataError, what="an eval.json")
    try:
      name = result["config"]["name"]
      # Every number the tables read is there (MissingResult names the one that is not).
      table2_row(name, result)
      table7({name: result})
      answer_baselines(result)
      why = _eval_problem(result)
    except (ValueError, KeyError, TypeError, MissingResult) as e:
      why = f"{type(e).__name__}: {e}"
    if why is not None:
      raise DataError(f"not an eval.json written by --mode=eval ({why})", path)
    if name in results:
      name = f"{name} ({workdir})"
    results[name] = result
  return results


def tables_from_workdirs(workdirs: Sequence[str]) -> dict[str, str]:
  """{file name: Markdown} of Tables 2, 3 (over model sizes) and 7 from several workdirs."""
  results = read_eval_results(workdirs)
  # Named configs are SIZE_VARIANT (tiny_temporal, large_uniform, ...).
  by_size: dict[str, dict] = {}
  for name, result in results.items():
    by_size.setdefault(name.split("_")[0], {})[name] = result
  baselines = answer_baselines(next(iter(results.values())))
  return {
    "table2.md": table2(results, baselines),
    "table3.md": table3(by_size),
    "table7.md": table7(results),
  }


def write_tables(workdirs: Sequence[str], output_dir: str) -> dict[str, str]:
  """`tables_from_workdirs` written to `output_dir` (replaced as a whole, atomically, and only
  if it holds nothing but these tables); returns them."""
  outputs = tables_from_workdirs(workdirs)
  check_replaceable(output_dir, set(outputs))
  with atomic_output_dir(output_dir) as out:
    for filename, text in outputs.items():
      with open(os.path.join(out, filename), "w", encoding="utf-8") as f:
        f.write(text)
  return outputs
