"""Data-layer throughput on the synthetic world; prints ONE JSON line (or one per size).

  python benchmarks/data.py [--scales=1,4] [--rows=128 --input_length=64 --target_length=16]
  python benchmarks/data.py --long_lines=1,10,100
  python benchmarks/data.py --store=1,10,50 | --store_build=10 --workers=1,2 | --store_goal=30

For each scale, builds the world in a temporary directory and times the two builders the
paper's data pipeline needs (§2.1): salient span masking over the news (`build_ssm`, reported
as SSM examples/s) and the TempLAMA construction from the facts (`build_templama`, facts/s).
Their cost must grow linearly with the world: the JSON reports the CPU-time ratio
time(s_max) / time(s_min) against the expected s_max / s_min. Then, on the smallest world, it
times the batcher: packed batches per second from a cold tokenisation cache and in steady
state, examples per batch and packing efficiency, with the unpacked one-example-per-row layout
as the baseline a T5 pipeline without packing would use.

`--long_lines=MB,...` times `build_ssm` instead on a news file of ONE article per size, a
single line (one paragraph) of that many megabytes made of the world's news sentences, and
prints one JSON line per size: the CPU time, the examples and output bytes, and the ratios of
time and size to the smallest, which must stay about equal (sentence splitting and span
finding are linear in the article; they were quadratic).

`--remote_ms=75 --hosts=4,16,64` measures the input path from an object store (requests,
bytes and batch time per host at the paper's shape, start-up against store size, a
`tiny_temporal` run): benchmarks/data_remote.py says how.

`--store`, `--store_build` and `--store_goal` measure the example store at scale (memory and
start-up against corpus size, rows/s, build_ssm against workers, a 30x corpus in a training
process): benchmarks/data_store.py says how.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tlm import synthetic
from tlm.data import templama
from tlm.data.vocab import Vocabulary  # noqa: E402
from tlm.input.datasets import load_sources  # noqa: E402
from tlm.input.packing import Batcher  # noqa: E402
from tlm.input.sampling import NEWS_SSM, TEMPLAMA, MixtureSampler  # noqa: E402
from tlm.store import store  # noqa: E402
from tlm.store.build_ssm import build_ssm

TRAIN_YEARS = tuple(range(2010, 2019))


def _lines(path: str) -> int:
  with open(path, encoding="utf-8") as f:
    return sum(1 for line in f if line.strip())


def _ssm_examples(ssm_dir: str) -> int:
  return sum(t["examples"] for t in store.read_manifest(ssm_dir)["tables"].values())


def _timed(fn, *args, **kwargs):
  """Runs fn; returns (result, wall seconds, CPU seconds of this process)."""
  w0, c0 = time.perf_counter(), time.process_time()
  out = fn(*args, **kwargs)
  return out, time.perf_counter() - w0, time.process_time() - c0


def _build(root: str, scale: float) -> dict:
  world = os.path.join(root, "world")
  _, world_s, world_cpu = _timed(synthetic.build_world, world, seed=0, scale=scale)
  # As `ensure_synthetic_data` runs it: the world's entity names as gazetteer.
  _, ssm_s, ssm_cpu = _timed(
    build_ssm,
    os.path.join(world, "news.jsonl"),
    os.path.join(root, "ssm"),
    gazetteer=os.path.join(world, "entities.tsv"),
  )
  tl_stats, tl_s, tl_cpu = _timed(
    templama.build_templama,
    os.path.join(world, "facts.tsv"),
    os.path.join(world, "entities.tsv"),
    os.path.join(root, "templama"),
  )
  n_ssm = _ssm_examples(os.path.join(root, "ssm"))
  n_facts = _lines(os.path.join(world, "facts.tsv"))
  return {
    "scale": scale,
    "world_s": round(world_s, 3),
    "world_cpu_s": round(world_cpu, 3),
    "news_docs": _lines(os.path.join(world, "news.jsonl")),
    "ssm_s": round(ssm_s, 3),
    "ssm_cpu_s": round(ssm_cpu, 3),
    "ssm_examples": n_ssm,
    "ssm_examples_per_s": round(n_ssm / ssm_s, 1),
    "ssm_examples_per_cpu_s": round(n_ssm / ssm_cpu, 1),
    "templama_s": round(tl_s, 3),
    "templama_cpu_s": round(tl_cpu, 3),
    "facts": n_facts,
    "templama_facts_per_s": round(n_facts / tl_s, 1),
    "templama_facts_per_cpu_s": round(n_facts / tl_cpu, 1),
    "templama_queries": tl_stats["queries"]["total"],
  }


def _batches(root: str, rows: int, input_length: int, target_length: int, steps: int) -> dict:
  sources = load_sources(
    os.path.join(root, "ssm"), os.path.join(root, "templama"), years=TRAIN_YEARS, split="train"
  )
  vocab = Vocabulary(os.path.join(root, "world", "spiece.model"))
  sampler = MixtureSampler(
    sources, seed=0, years=TRAIN_YEARS, source_weights={NEWS_SSM: 1000, TEMPLAMA: 1}
  )
  out = {"rows": rows, "input_length": input_length, "target_length": target_length}
  for name, packed in (("packed", True), ("unpacked", False)):
    batcher = Batcher(
      sampler,
      vocab,
      rows=rows,
      input_length=input_length,
      target_length=target_length,
      packed=packed,
    )
    t0 = time.perf_counter()
    stats = [batcher.batch_with_stats(step)[1] for step in range(steps)]
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    for step in range(steps):
      batcher.batch(step)
    warm = time.perf_counter() - t0
    out[name] = {
      "cold_batches_per_s": round(steps / cold, 1),
      "batches_per_s": round(steps / warm, 1),
      "ms_per_batch": round(1e3 * warm / steps, 3),
      "examples_per_batch": round(float(np.mean([s.examples for s in stats])), 2),
      "efficiency": round(float(np.mean([s.efficiency for s in stats])), 4),
      "encoder_efficiency": round(float(np.mean([s.encoder_efficiency for s in stats])), 4),
      "decoder_efficiency": round(float(np.mean([s.decoder_efficiency for s in stats])), 4),
      "truncated_per_batch": round(float(np.mean([s.truncated for s in stats])), 3),
    }
  out["examples_ratio_packed_vs_unpacked"] = round(
    out["packed"]["examples_per_batch"] / out["unpacked"]["examples_per_batch"], 3
  )
  return out


def _long_article(news: str, size: int) -> str:
  """`size` bytes (UTF-8, about) of the world's news texts, one paragraph, cycled."""
  with open(news, encoding="utf-8") as f:
    texts = [json.loads(line)["text"].replace("\n", " ") for line in f if line.strip()]
  chunk = " ".join(texts)
  reps, rest = divmod(size, len(chunk.encode("utf-8")) + 1)
  text = " ".join([chunk] * reps + [chunk[:rest]])
  return text[: text.rfind(" ")] if rest else text


def long_lines(sizes_mb: list[float]) -> None:
  with tempfile.TemporaryDirectory(prefix="tlm-bench-long-") as tmp:
    world = os.path.join(tmp, "world")
    synthetic.build_world(world, seed=0, scale=1.0)
    first = None
    for mb in sizes_mb:
      news = os.path.join(tmp, "long.jsonl")
      with open(news, "w", encoding="utf-8") as f:
        text = _long_article(os.path.join(world, "news.jsonl"), int(mb * 2**20))
        f.write(json.dumps({"date": "2014-05-03", "text": text}, ensure_ascii=False) + "\n")
        del text
      line_bytes = os.path.getsize(news)
      out = os.path.join(tmp, "ssm")
      stats, wall, cpu = _timed(build_ssm, news, out, gazetteer=os.path.join(world, "entities.tsv"))
      out_bytes = sum(
        os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(out) for n in names
      )
      row = {
        "benchmark": "data_long_line",
        "mb": mb,
        "line_bytes": line_bytes,
        "ssm_s": round(wall, 3),
        "ssm_cpu_s": round(cpu, 3),
        "cpu_s_per_mb": round(cpu / (line_bytes / 2**20), 3),
        "sentences": stats["totals"]["sentences"],
        "examples": stats["totals"]["examples"],
        "examples_cut": stats["context_cap"]["examples_cut"],
        "output_bytes": out_bytes,
      }
      first = first or (line_bytes, cpu)
      row["size_ratio"] = round(line_bytes / first[0], 3)
      row["time_ratio"] = round(cpu / first[1], 3)
      print(json.dumps(row), flush=True)
      shutil.rmtree(out)
      os.remove(news)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--scales", default="1,4", help="comma-separated world scales")
  parser.add_argument("--rows", type=int, default=128)
  parser.add_argument("--input_length", type=int, default=64)
  parser.add_argument("--target_length", type=int, default=16)
  parser.add_argument("--steps", type=int, default=200, help="batches timed per mode")
  parser.add_argument("--long_lines", default="", help="comma-separated article sizes, MB")
  parser.add_argument("--store", default="", help="store sizes, millions of examples")
  parser.add_argument("--store_steps", type=int, default=200, help="batches timed per store")
  parser.add_argument("--store_build", type=int, default=0, help="copies of the news to build")
  parser.add_argument("--workers", default="1,2", help="build_ssm worker counts")
  parser.add_argument("--store_goal", type=int, default=0, help="copies of the news (goal)")
  parser.add_argument("--remote_ms", type=float, default=0, help="ms per object-store request")
  parser.add_argument("--hosts", default="4,16,64", help="simulated host counts (--remote_ms)")
  parser.add_argument("--remote_sizes", default="1,10,50", help="store sizes, millions")
  parser.add_argument("--remote_steps", type=int, default=20, help="batches timed per host count")
  parser.add_argument("--tiny_steps", type=int, default=40, help="tiny_temporal steps (0: none)")
  args = parser.parse_args()
  if args.remote_ms:
    import data_remote

    data_remote.run(
      args.remote_ms,
      [int(h) for h in args.hosts.split(",")],
      [float(s) for s in args.remote_sizes.split(",")],
      args.remote_steps,
      args.tiny_steps,
    )
    return
  if args.store or args.store_build or args.store_goal:
    import data_store

    if args.store:
      data_store.store_sizes([float(s) for s in args.store.split(",")], args.store_steps)
    if args.store_build:
      data_store.build_speed(args.store_build, [int(n) for n in args.workers.split(",")])
    if args.store_goal:
      data_store.goal(args.store_goal)
    return
  if args.long_lines:
    long_lines([float(mb) for mb in args.long_lines.split(",")])
    return
  scales = sorted(float(s) for s in args.scales.split(","))
  with tempfile.TemporaryDirectory(prefix="tlm-bench-data-") as tmp:
    builds = []
    for scale in scales:
      root = os.path.join(tmp, f"scale{scale:g}")
      builds.append(_build(root, scale))
    batches = _batches(
      os.path.join(tmp, f"scale{scales[0]:g}"),
      args.rows,
      args.input_length,
      args.target_length,
      args.steps,
    )
  first, last = builds[0], builds[-1]
  result = {
    "benchmark": "data",
    "builds": builds,
    "expected_ratio": round(last["scale"] / first["scale"], 3),
    # CPU time: the builders are single-threaded, and wall time on a shared machine is noise.
    "ratio_ssm_time": round(last["ssm_cpu_s"] / first["ssm_cpu_s"], 3),
    "ratio_templama_time": round(last["templama_cpu_s"] / first["templama_cpu_s"], 3),
    "ratio_world_time": round(last["world_cpu_s"] / first["world_cpu_s"], 3),
    "ratio_ssm_examples": round(last["ssm_examples"] / first["ssm_examples"], 3),
    "ratio_facts": round(last["facts"] / first["facts"], 3),
    "batching": batches,
  }
  print(json.dumps(result))


if __name__ == "__main__":
  main()
