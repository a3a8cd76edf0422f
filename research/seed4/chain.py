"""Seed 4's T5-CBQA chain under one machine setting, against the committed seed-4 predictions.

  nice -n 5 python -m research.seed4.chain --setting=as_run [--root=runs/seed4] [--ft]

The cheapest models of seed 4 that differ from the committed run (docs/results/fresh/seed=4,
2800-step protocol, unpinned workers, commit 7ea968b): T5-CBQA (tiny_t5 400 steps, then
tiny_cbqa 300 steps), and with `--ft` T5-CBQA-ft (300 more). The 2800-step overrides change
neither (they set the news-trained models' steps, the adaptation's and the worker pinning);
as in the committed run, every training here is unpinned and uses the affinity and the thread
settings the chosen setting gives this process.

A setting (`SETTINGS`) is a CPU set for the process (`taskset`'s role) and environment
variables read by XLA when its CPU client starts (XLA_FLAGS; PJRT_NPROC, the size of the CPU
client's thread pool, which otherwise is the number of cores in the affinity). They are
applied here before jax is imported. No persistent compilation cache is used, so each setting
compiles its own programs (a cached program's key names neither the cores nor the ISA).

Writes ROOT/<setting>/seed=4/{t5,cbqa[,cbqa_ft]} (a rerun resumes) and
ROOT/<setting>/result.json: per model, the TempLAMA predictions and the news log-likelihoods
that differ from the committed ones, the final training losses, the setting, the recorded
environment and the wall time.
"""

import argparse
import json
import os
import sys
import time

SEED = 4
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMITTED = os.path.join(REPO, "docs", "results", "fresh", f"seed={SEED}")
ALL_CORES = None  # the process's own affinity, unchanged
CACHE = {  # a compilation cache of its own (ROOT/cache_one_core), every program cached
  "JAX_COMPILATION_CACHE_DIR": os.path.join("runs", "seed4", "cache_one_core"),
  "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
  "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
}
RESTART = ("GLIBC_TUNABLES",)  # read by the C library when the process starts
# name: (CPU set or ALL_CORES, {environment variable: value}). The machine: 2 cores, AVX-512.
SETTINGS = {
  "as_run": (ALL_CORES, {}),
  "one_core": ({0}, {}),
  "nproc_1": (ALL_CORES, {"PJRT_NPROC": "1"}),
  "one_core_nproc_2": ({0}, {"PJRT_NPROC": "2"}),  # 2 threads on 1 core: threads, not cores?
  "nproc_3": (ALL_CORES, {"PJRT_NPROC": "3"}),
  "nproc_4": (ALL_CORES, {"PJRT_NPROC": "4"}),
  "nproc_8": (ALL_CORES, {"PJRT_NPROC": "8"}),
  "nproc_16": (ALL_CORES, {"PJRT_NPROC": "16"}),
  "eigen_single": (ALL_CORES, {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}),
  "isa_avx2": (ALL_CORES, {"XLA_FLAGS": "--xla_cpu_max_isa=AVX2"}),
  "isa_avx": (ALL_CORES, {"XLA_FLAGS": "--xla_cpu_max_isa=AVX"}),
  "isa_sse4_2": (ALL_CORES, {"XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2"}),
  "isa_avx512": (ALL_CORES, {"XLA_FLAGS": "--xla_cpu_max_isa=AVX512"}),
  # an AVX2-only machine (AMD's Zen 3, Intel's before Skylake-SP) with 1, 4 or 8 cores
  "isa_avx2_nproc_1": (ALL_CORES, {"XLA_FLAGS": "--xla_cpu_max_isa=AVX2", "PJRT_NPROC": "1"}),
  "isa_avx2_nproc_4": (ALL_CORES, {"XLA_FLAGS": "--xla_cpu_max_isa=AVX2", "PJRT_NPROC": "4"}),
  "isa_avx2_nproc_8": (ALL_CORES, {"XLA_FLAGS": "--xla_cpu_max_isa=AVX2", "PJRT_NPROC": "8"}),
  # LLVM's tuning for Intel's AVX-512 server CPUs prefers 256-bit vectors (AMD's Zen 4: 512).
  "vector_256": (ALL_CORES, {"XLA_FLAGS": "--xla_cpu_prefer_vector_width=256"}),
  "vector_128": (ALL_CORES, {"XLA_FLAGS": "--xla_cpu_prefer_vector_width=128"}),
  "devices_8": (ALL_CORES, {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}),
  "opt_level_0": (ALL_CORES, {"XLA_FLAGS": "--xla_backend_optimization_level=0"}),
  # run.py at 7ea968b restarted itself with this glibc tunable (tlm.host_memory); read at start.
  "glibc_hugetlb": (ALL_CORES, {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}),
  # A persistent compilation cache filled by a 1-core process, then read by a 2-core one: the
  # cache's key names neither (jax's cache_key.py), so a program compiled under one setting
  # can run under the other.
  "prime_cache_one_core": ({0}, CACHE),
  "from_cache_one_core": (ALL_CORES, CACHE),
}


def apply(setting: str) -> None:
  """Puts this process in `setting` (before jax is imported: XLA reads both at start)."""
  if "jax" in sys.modules:
    raise RuntimeError("a setting must be applied before jax is imported")
  cores, env = SETTINGS[setting]
  if cores is not ALL_CORES:
    os.sched_setaffinity(0, cores)
  os.environ.update(env)


def compare(evals: dict, committed: dict, out_dir: str) -> dict:
  """The evaluated models against the committed per_query.json, by the regeneration check's
  own comparison (`tlm.miniature.regeneration.compare`): {model: its row}. The models'
  columns are written to OUT_DIR/per_query.json first and read back, as the check reads a run."""
  from tlm.files import write_json
  from tlm.miniature import measurements, over_seeds, regeneration

  def only(models: dict) -> dict:
    return {"seed": SEED, "models": models, "loglik_change": {}, "entropy": {}}

  ours = {
    name: {"templama": measurements.templama_columns(r), "news": measurements.news_columns(r)}
    for name, r in evals.items()
  }
  write_json(os.path.join(out_dir, "per_query.json"), only(ours))
  ours = over_seeds.read_seed_file(out_dir, "per_query.json")
  rows = regeneration.compare(ours, only({n: committed["models"][n] for n in evals}))
  return {name: row for name, row in zip(evals, rows)}


def losses(workdir: str) -> list[float]:
  """The training losses a model logged (its metrics.jsonl, every 50 steps), in order."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return [row["loss"] for row in rows if "loss" in row]


def run(setting: str, root: str, ft: bool, log=print) -> dict:
  from research.c12.wording import plan
  from tlm.eval import during_training, experiments
  from tlm.files import write_json
  from tlm.miniature import environment, over_seeds
  from tlm.train.loop import run as train

  start = time.time()
  out_dir = os.path.join(root, setting)
  _, models = plan(SEED, out_dir)
  committed = over_seeds.read_seed_file(COMMITTED, "per_query.json")
  names = ("t5", "cbqa", "cbqa_ft") if ft else ("t5", "cbqa")
  for name in names:
    config, workdir = models[name]
    train(config, workdir, make_evaluators=during_training.evaluators, log=log)
  data = experiments.eval_data(models["cbqa"][0])
  evals = {name: experiments.evaluate(*models[name], log, data) for name in names[1:]}
  report = {
    "setting": setting,
    "cores_and_env": _describe(setting),
    "models": compare(evals, committed, out_dir),
    "losses": {name: losses(models[name][1]) for name in names},
  }
  report["environment"] = environment.record()
  report["wall_minutes"] = round((time.time() - start) / 60, 2)
  write_json(os.path.join(out_dir, "result.json"), report)
  log(json.dumps({k: report[k] for k in ("setting", "models", "wall_minutes")}))
  return report


def _describe(setting: str) -> dict:
  cores, env = SETTINGS[setting]
  return {"cores": None if cores is ALL_CORES else sorted(cores), "env": env}


def table(root: str, out: str) -> dict:
  """OUT/result.json and OUT/result.md from the settings that ran in ROOT (their
  result.json): per setting, the T5-CBQA (and T5-CBQA-ft) predictions and news numbers that
  differ from the committed ones, and which earlier setting, if any, gave the very same
  T5-CBQA numbers (every prediction, news F1 and log-likelihood equal)."""
  from tlm.files import atomic_output_file, write_json

  rows, seen = [], {}
  for setting in SETTINGS:
    path = os.path.join(root, setting, "result.json")
    if not os.path.exists(path):
      continue
    with open(path, encoding="utf-8") as f:
      r = json.load(f)
    with open(os.path.join(root, setting, "per_query.json"), encoding="utf-8") as f:
      numbers = json.dumps(json.load(f)["models"]["cbqa"], sort_keys=True)  # T5-CBQA's
    counts = {
      m: {p["part"]: p["differ"] for p in row["parts"]} | {"equal": row["equal"]}
      for m, row in r["models"].items()
    }
    rows.append(
      {
        "setting": setting,
        "cores": r["cores_and_env"]["cores"],
        "env": r["cores_and_env"]["env"],
        "xla_cpu_threads": r["environment"]["xla_cpu_threads"],
        "xla_cpu_isa": r["environment"]["xla_cpu_isa"],
        "models": counts,
        "same_numbers_as": seen.get(numbers),
        "wall_minutes": r["wall_minutes"],
      }
    )
    seen.setdefault(numbers, setting)
  result = {"seed": SEED, "committed": COMMITTED, "settings": rows}
  result |= spread(root, [r["setting"] for r in rows if r["same_numbers_as"] is None])
  write_json(os.path.join(out, "result.json"), result)
  lines = [
    "| setting | cores | environment | XLA threads | XLA ISA | T5-CBQA predictions differing "
    "(of 1,106) | news log-liks differing (of 2,750) | same numbers as | wall min |",
    "|---|---|---|---|---|---|---|---|---|",
  ]
  for row in rows:
    cbqa = row["models"]["cbqa"]
    env = " ".join(f"{k}={v}" for k, v in row["env"].items() if not k.startswith("JAX_PERS"))
    lines.append(
      f"| {row['setting']} | {row['cores'] or 'both'} | {env or '-'} | {row['xla_cpu_threads']} "
      f"| {row['xla_cpu_isa']} | {cbqa['TempLAMA predictions']} | {cbqa['news loglik']} "
      f"| {row['same_numbers_as'] or '-'} | {row['wall_minutes']} |"
    )
  pairs, to_committed, f1 = result["pairs"], result["to_committed"], result["mean_f1"]
  lines += [
    "",
    f"Between the {len(f1) - 1} settings of distinct numbers: {_range(pairs, 'predictions')} "
    f"predictions differ, median |news log-lik difference| {_range(pairs, 'median_loglik', 2)}; "
    f"from the committed model: {_range(to_committed, 'predictions')} and "
    f"{_range(to_committed, 'median_loglik', 2)}. T5-CBQA's mean TempLAMA F1: "
    f"{100 * min(v for k, v in f1.items() if k != 'committed'):.1f} to "
    f"{100 * max(v for k, v in f1.items() if k != 'committed'):.1f} over the settings, "
    f"{100 * f1['committed']:.1f} committed.",
  ]
  with atomic_output_file(os.path.join(out, "result.md")) as f:
    f.write("\n".join(lines) + "\n")
  return result


def _range(rows: list[dict], key: str, digits: int = 0) -> str:
  values = [r[key] for r in rows]
  return f"{min(values):,.{digits}f}-{max(values):,.{digits}f}"


def spread(root: str, settings: list[str]) -> dict:
  """How far apart the T5-CBQA models of `settings` (each of distinct numbers) are, pair by
  pair and from the committed one: TempLAMA predictions that differ and the median absolute
  difference of the news log-likelihoods; and each one's mean TempLAMA F1."""
  from tlm.miniature import over_seeds

  models = {"committed": over_seeds.read_seed_file(COMMITTED, "per_query.json")["models"]["cbqa"]}
  for s in settings:
    with open(os.path.join(root, s, "per_query.json"), encoding="utf-8") as f:
      models[s] = json.load(f)["models"]["cbqa"]

  def apart(a: dict, b: dict) -> dict:
    pa = dict(zip(a["templama"]["id"], a["templama"]["prediction"]))
    pb = dict(zip(b["templama"]["id"], b["templama"]["prediction"]))
    gaps = sorted(abs(x - y) for x, y in zip(a["news"]["loglik"], b["news"]["loglik"]))
    mid = len(gaps) // 2
    median = gaps[mid] if len(gaps) % 2 else (gaps[mid - 1] + gaps[mid]) / 2
    return {"predictions": sum(pa[i] != pb[i] for i in pa), "median_loglik": median}

  pairs = [
    {"a": a, "b": b} | apart(models[a], models[b])
    for i, a in enumerate(settings)
    for b in settings[i + 1 :]
  ]
  return {
    "pairs": pairs,
    "to_committed": [{"a": s} | apart(models[s], models["committed"]) for s in settings],
    "mean_f1": {k: sum(m["templama"]["f1"]) / len(m["templama"]["f1"]) for k, m in models.items()},
  }


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--setting", choices=sorted(SETTINGS))
  p.add_argument("--table", help="write OUT/result.json and result.md from ROOT's results")
  p.add_argument("--root", default=os.path.join("runs", "seed4"))
  p.add_argument("--ft", action="store_true", help="T5-CBQA-ft too (300 more steps)")
  args = p.parse_args()
  if args.table:
    table(args.root, args.table)
    return
  if not args.setting:
    p.error("--setting or --table is required")
  _, env = SETTINGS[args.setting]
  if any(k in env and os.environ.get(k) != env[k] for k in RESTART):
    os.environ.update({k: env[k] for k in RESTART if k in env})
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
  apply(args.setting)
  run(args.setting, args.root, args.ft)


if __name__ == "__main__":
  main()
