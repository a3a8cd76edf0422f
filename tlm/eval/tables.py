"""Markdown renderings of the paper's tables from evaluation results.

Table 2: F1 on the news SSM data ("CustomNews") and TempLAMA, 2010-18 and 2019-20, one row per
model. Table 3 is Table 2 over model sizes. Table 7: news MLM perplexity per year. Table 4:
closed-book CronQuestions EM / F1. Numbers are percentages with one decimal, as in the paper.
"""

import json
from collections.abc import Mapping, Sequence

from tlm import storage
from tlm.errors import ConfigError, DataError

SLICES = ("2010-18", "2019-20")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
  """A GitHub-flavoured Markdown table; floats with one decimal."""

  def cell(v) -> str:
    if v is None:
      return "-"
    return f"{v:.1f}" if isinstance(v, float) else str(v)

  lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
  lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
  return "\n".join(lines) + "\n"


def _pct(x) -> float | None:
  return None if x is None else 100.0 * float(x)


def table2_row(name: str, result: Mapping) -> list:
  """One Table 2 row from an `eval.json` result ({"news": ..., "templama": ...})."""
  news = result.get("news") or {}
  templama = (result.get("templama") or {}).get("metrics", {})
  row = [name]
  for s in SLICES:
    row.append(_pct(news.get(s, {}).get("f1")))
  for s in SLICES:
    row.append(_pct(templama.get(s, {}).get("overall", {}).get("f1")))
  return row


def table2(results: Mapping[str, Mapping], baselines: Mapping[str, Mapping] | None = None) -> str:
  """Table 2 from {model name: eval result}, plus the answer baselines' rows if given."""
  headers = ["Model", "News F1 2010-18", "News F1 2019-20", "TempLAMA F1 2010-18",
             "TempLAMA F1 2019-20"]  # fmt: skip
  rows = [table2_row(n, r) for n, r in results.items()]
  return markdown_table(headers, rows + answer_baseline_rows(baselines or {}))


def table3(results: Mapping[str, Mapping[str, Mapping]]) -> str:
  """Table 3 from {size: {model name: eval result}}: Table 2 per size."""
  headers = ["Size", "Model", "News F1 2010-18", "News F1 2019-20", "TempLAMA F1 2010-18",
             "TempLAMA F1 2019-20"]  # fmt: skip
  rows = [[size] + table2_row(n, r) for size, models in results.items() for n, r in models.items()]
  return markdown_table(headers, rows)


def table7(results: Mapping[str, Mapping]) -> str:
  """Table 7: news perplexity per year, from {model name: eval result}."""
  news = {name: (r.get("news") or {}).get("by_year", {}) for name, r in results.items()}
  years = sorted({int(y) for by_year in news.values() for y in by_year})
  rows = []
  for name, raw in news.items():
    by_year = {int(k): v for k, v in raw.items()}
    rows.append([name] + [by_year[y]["perplexity"] if y in by_year else None for y in years])
  return markdown_table(["Model"] + [str(y) for y in years], rows)


def answer_baseline_rows(baselines: Mapping[str, Mapping]) -> list[list]:
  """Table 2 rows for the most-frequent / most-recent answer rows (TempLAMA only).

  They are labelled "(oracle)": each reads the test subject's own gold answers over 2010-20,
  which no model sees, so they bound what the data allows rather than being baselines.
  """
  rows = []
  for name, agg in baselines.items():
    rows.append([name.replace("_", " ") + " (oracle)", None, None]
                + [_pct(agg.get(s, {}).get("overall", {}).get("f1")) for s in SLICES])  # fmt: skip
  return rows


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
    try:
      result = json.loads(storage.read_bytes(path))
      name = result["config"]["name"]
    except (OSError, ValueError, KeyError, TypeError) as e:
      message = f"not an eval.json written by --mode=eval ({type(e).__name__}: {e})"
      raise DataError(message, path) from None
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
  baselines = next(iter(results.values())).get("answer_baselines")
  return {
    "table2.md": table2(results, baselines),
    "table3.md": table3(by_size),
    "table7.md": table7(results),
  }
