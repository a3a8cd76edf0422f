"""Surface `state`, part 3: results the project writes and later reads back, hostile: a
workdir's results/eval.json read by `tables`, a seed's results/ (per_query.json, eval.json,
seed_summary.json, as reproduce writes them) read by `combine_seeds`.
"""

import os

from .common import FIFO, MISSING, W, case, error, files_exist, ok, put, sparse

SURFACE = "state"


def _tables(content):
  """tables of a copy W of the base's workdir whose results/eval.json is `content`."""

  def setup(ctx):
    ctx.copy("W0", W)
    put(ctx, "W/results/eval.json", content)
    return ["--mode=tables", f"--workdirs={ctx.path(W)}", f"--output_dir={ctx.path('out')}"]

  return setup


def _tables_of_empty_workdir(ctx):
  os.makedirs(ctx.path("empty"))
  return ["--mode=tables", f"--workdirs={ctx.path('empty')}", f"--output_dir={ctx.path('out')}"]


# (name, content of W/results/eval.json); each is an error naming eval.json.
EVAL_JSONS = [
  ("truncated", '{"templama": {"metr'),
  ("templama_is_a_number", lambda r: r.__setitem__("templama", 3)),
  ("metrics_nan_strings", lambda r: r["templama"].__setitem__("metrics", {"f1": "NaN"})),
  ("config_is_a_list", lambda r: r.__setitem__("config", [])),
  ("config_name_nul", lambda r: r["config"].__setitem__("name", "a\0b")),
  ("records_huge_list", lambda r: r["templama"].__setitem__("records", [[]] * 100000)),
  ("fifo", FIFO),
  ("sparse_2g", sparse(2 << 30)),
  ("deep", "[" * 100000),
]


def _combine_seeds(name, content):
  """combine_seeds of a copy of the base's seed whose results/NAME is `content`."""

  def setup(ctx):
    ctx.copy("seed", "seed")
    put(ctx, f"seed/results/{name}", content)
    return [
      "--mode=combine_seeds",
      f"--workdirs={ctx.path('seed')}",
      f"--output_dir={ctx.path('out')}",
    ]

  return setup


def _all_nan(m):
  f1 = m["models"]["temporal"]["templama"]["f1"]
  m["models"]["temporal"]["templama"]["f1"] = [float("nan")] * len(f1)


# (case name, file of the seed's results/, its content); each is an error naming the file. The
# number closing a name is the case's index in the probe when it was named, kept so that runs
# stay comparable.
SEED_RESULTS = [
  ("per_query_edited_245", "per_query.json", lambda m: m.__setitem__("seed", "0")),
  ("per_query_edited_246", "per_query.json", lambda m: m.__setitem__("seed", 2**70)),
  ("per_query_edited_247", "per_query.json", lambda m: m.__setitem__("seed", -1)),
  ("per_query_fifo_248", "per_query.json", FIFO),
  ("per_query_sparse_249", "per_query.json", sparse(2 << 30)),
  ("per_query_missing_250", "per_query.json", MISSING),
  (
    "per_query_edited_251",
    "per_query.json",
    '{"seed": 0, "models": {"temporal": {"templama": {"f1": [NaN, Infinity]',
  ),
  ("per_query_edited_252", "per_query.json", _all_nan),
  ("eval_edited_253", "eval.json", lambda r: r.__setitem__("tiny_temporal", [])),
  ("eval_edited_254", "eval.json", "[" * 100000),
  (
    "seed_summary_edited_255",
    "seed_summary.json",
    lambda s: s["configs"].__setitem__("temporal", {"name": "\0"}),
  ),
  ("seed_summary_fifo_256", "seed_summary.json", FIFO),
]


CASES = [
  case(
    "tables_intact",
    SURFACE,
    _tables(lambda r: r),
    **ok(files_exist("out/table3.md"), "out", workdirs=(W,)),
  ),
  *(
    case(
      f"tables_eval_json_{name}",
      SURFACE,
      _tables(content),
      **error("eval.json", writes=("out",), workdirs=(W,), timeout=180),
    )
    for name, content in EVAL_JSONS
  ),
  case("tables_results_missing", SURFACE, _tables_of_empty_workdir, **error("empty")),
  case(
    "combine_seeds_intact",
    SURFACE,
    _combine_seeds("eval.json", lambda r: r),
    **ok(files_exist("out/summary.json", "out/claims.md"), "out", timeout=300),
  ),
  *(
    case(
      f"combine_seeds_{name}",
      SURFACE,
      _combine_seeds(file, content),
      **error(file, writes=("out",), timeout=180),
    )
    for name, file, content in SEED_RESULTS
  ),
]
