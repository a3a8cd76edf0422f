"""Memory of the shuffled build's merge (`tlm.store.store_shuffle.merge_shuffled`) against its
bucket size, on the synthetic world's news copied `--copies` times (a larger corpus).

  python benchmarks/store_shuffle.py --news=~/.cache/tlm/world-v3-s0-x1/world/news.jsonl \
      --copies=10 --scratch=/tmp/shuffle_bench

Builds the keyed parts once (`process_chunk` with a shuffle seed), then merges the largest
train table's tokens in a fresh process per bucket size (and with the corpus-order merge for
reference), printing one JSON line each: buckets, the Python heap's peak during the merge
(tracemalloc: numpy arrays and bytes included), the process's peak RSS, seconds, and that the
table's bytes are the same for every bucket size.
"""

import argparse
import hashlib
import json
import multiprocessing
import os
import resource
import shutil
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _parts(news: str, copies: int, scratch: str) -> tuple[str, list, int]:
  from tlm.data import ssm
  from tlm.store import store_build

  world = os.path.dirname(news)
  shutil.rmtree(scratch, ignore_errors=True)
  os.makedirs(scratch)
  inputs = []
  for i in range(copies):
    inputs.append(os.path.join(scratch, f"news-{i:03d}.jsonl"))
    shutil.copyfile(news, inputs[-1])
  settings = ssm.BuildSettings(
    os.path.join(world, "entities.tsv"), 0, 2000, 0.1, ssm.MAX_CONTEXT_WORDS,
    os.path.join(world, "spiece.model"), 0,
  )  # fmt: skip
  paths, options = store_build.prepare(inputs, os.path.join(scratch, "out"), settings)
  chunks = store_build.plan_chunks(paths, 2)
  plan = store_build.make_plan(chunks, [store_build.scan_chunk(c) for c in chunks], settings)
  part_dir = os.path.join(scratch, "parts")
  work = [(c, plan.chunk_plan(c.index), options, part_dir) for c in chunks]
  with multiprocessing.get_context("spawn").Pool(2) as pool:
    results = pool.starmap(store_build.process_chunk, work)
  jobs = store_build.merge_jobs(scratch, part_dir, plan, results, options.token_dtype, True)
  train = [j for j in jobs if j[1] == "train"]
  biggest = max(train, key=lambda j: sum(os.path.getsize(p + ".bin") for p in j[5]))
  return biggest, len(chunks), sum(os.path.getsize(p) for p in inputs)


def _merge(job, bucket_bytes, out, queue):
  from tlm.store import store_shuffle, store_write

  _, split, year, field, itemsize, prefixes, _ = job
  rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  tracemalloc.start()
  t0 = time.perf_counter()
  if bucket_bytes is None:
    got = store_write.merge_table(out, split, year, field, itemsize, prefixes)
  else:
    got = store_shuffle.merge_shuffled(out, split, year, field, itemsize, prefixes, bucket_bytes)
  seconds = time.perf_counter() - t0
  peak = tracemalloc.get_traced_memory()[1]
  tracemalloc.stop()
  rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  with open(os.path.join(out, f"{split}/{year}.{field}.bin"), "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()[:16]
  queue.put(
    {
      "merge": "corpus order" if bucket_bytes is None else "shuffled",
      "bucket_bytes": bucket_bytes,
      "buckets": got.get("buckets", 1),
      "examples": got["examples"],
      "heap_peak_mb": round(peak / 2**20, 1),
      "rss_peak_mb": round(rss / 1024, 1),
      "rss_before_mb": round(rss0 / 1024, 1),
      "seconds": round(seconds, 2),
      "bin_sha256": digest,
    }
  )


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--news", required=True)
  parser.add_argument("--copies", type=int, default=10)
  parser.add_argument("--scratch", default="/tmp/shuffle_bench")
  parser.add_argument("--bucket_bytes", default="1073741824,8388608,2097152,524288,131072")
  args = parser.parse_args()
  t0 = time.perf_counter()
  job, chunks, input_bytes = _parts(os.path.expanduser(args.news), args.copies, args.scratch)
  table_bytes = sum(os.path.getsize(p + ".bin") for p in job[5])
  print(
    json.dumps(
      {
        "input_mb": round(input_bytes / 2**20, 1),
        "chunks": chunks,
        "table": f"{job[1]}/{job[2]}.{job[3]}",
        "table_mb": round(table_bytes / 2**20, 2),
        "parts_seconds": round(time.perf_counter() - t0, 1),
      }
    ),
    flush=True,
  )
  ctx = multiprocessing.get_context("spawn")
  sizes = [None] + [int(b) for b in args.bucket_bytes.split(",")]
  for i, bucket_bytes in enumerate(sizes):
    queue = ctx.Queue()
    out = os.path.join(args.scratch, f"merged-{i}")
    proc = ctx.Process(target=_merge, args=(job, bucket_bytes, out, queue))
    proc.start()
    print(json.dumps(queue.get()), flush=True)
    proc.join()


if __name__ == "__main__":
  main()
