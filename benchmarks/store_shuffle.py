"""The shuffled merge (`tlm.store.store_shuffle.merge_shuffled`): its memory against its bucket
size, and its time reading its parts from an object store, on the synthetic world's news copied
`--copies` times (a larger corpus).

  python benchmarks/store_shuffle.py --news=~/.cache/tlm/world-v3-s0-x1/world/news.jsonl \
      --copies=10 --scratch=/tmp/shuffle_bench
  python benchmarks/store_shuffle.py --news=... --remote_ms=75 --buckets=8 --before=DIR

Builds the parts once (`process_chunk`, then the keyed parts of the largest train table's
tokens: `store_shuffle.key_runs`), then:
- without `--remote_ms`: merges that table in a fresh process per bucket size (and with the
  corpus-order merge for reference), printing one JSON line each: buckets, the Python heap's
  peak during the merge (tracemalloc: numpy arrays and bytes included), the process's peak RSS,
  seconds, and that the table's bytes are the same for every bucket size;
- with `--remote_ms=MS`: the keyed parts on gs:// behind tests/remote_store.py (MS per request,
  100 connections, one GET per range, 5 MB blocks for files opened and read), merged in
  `--buckets` buckets into a local directory, in a fresh process with this checkout's tlm and,
  with `--before=DIR`, with the tlm of another checkout (e.g. the commit before the concurrent
  merge: `git archive C | tar -x -C DIR`; the keyed parts' format is the same): one JSON line
  each (seconds, requests, the table's SHA-256) and the ratio of the two times.
"""

import argparse
import hashlib
import json
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import time
import tracemalloc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _parts(news: str, copies: int, scratch: str) -> tuple[tuple, int, int]:
  """The largest train table's tokens as keyed parts: (its job, the chunks, input bytes)."""
  from tlm.data import ssm
  from tlm.store import store_build, store_shuffle

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
  jobs = store_build.merge_jobs(scratch, part_dir, plan, results, options.token_dtype)
  train = [j for j in jobs if j[1] == "train" and j[3] == "tokens"]
  _, split, year, field, itemsize, prefixes = max(
    train, key=lambda j: sum(os.path.getsize(p + ".bin") for p in j[5])
  )
  runs = [store_shuffle.PartRun(p) for p in prefixes]
  keyed = store_shuffle.key_runs(runs, 0, split, year, itemsize, os.path.join(scratch, "keyed"))
  job = (split, year, field, itemsize, keyed, prefixes)
  return job, len(chunks), sum(os.path.getsize(p) for p in inputs)


def _digest(path: str) -> str:
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()[:16]


def _merge(job, bucket_bytes, out, queue):
  from tlm.store import store_shuffle, store_write

  split, year, field, itemsize, keyed, prefixes = job
  rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  tracemalloc.start()
  t0 = time.perf_counter()
  if bucket_bytes is None:
    got = store_write.merge_table(out, split, year, field, itemsize, prefixes)
  else:
    got = store_shuffle.merge_shuffled(out, split, year, field, itemsize, keyed, bucket_bytes)
  seconds = time.perf_counter() - t0
  peak = tracemalloc.get_traced_memory()[1]
  tracemalloc.stop()
  rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
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
      "bin_sha256": _digest(os.path.join(out, f"{split}/{year}.{field}.bin")),
    }
  )


# Run in a fresh interpreter with ROOT (a checkout) first on sys.path: the merge of keyed parts
# served by the latency double, into a local directory.
_REMOTE = """
import json, sys, time
root, bucket, ms, job, out = sys.argv[1:6]
ms, job = float(ms), json.loads(job)
sys.path.insert(0, root)
from tests import remote_store
remote_store.install(bucket, latency_s=ms / 1000)
from tlm.store import store_shuffle
split, year, field, itemsize, prefixes, bucket_bytes = job
t0 = time.perf_counter()
got = store_shuffle.merge_shuffled(out, split, year, field, itemsize, prefixes, bucket_bytes)
seconds = time.perf_counter() - t0
counts = remote_store.COUNTS.snapshot()
print(json.dumps({"seconds": seconds, "requests": counts["requests"],
                  "metadata": counts["metadata"], "buckets": got["buckets"]}))
"""


def remote(job, ms: float, buckets: int, before: str, scratch: str) -> None:
  split, year, field, itemsize, keyed, _ = job
  bucket = os.path.join(scratch, "bucket-root")
  shutil.rmtree(bucket, ignore_errors=True)
  os.makedirs(os.path.join(bucket, "bucket"))
  os.symlink(os.path.dirname(keyed[0]), os.path.join(bucket, "bucket", "keyed"))
  names = [f"gs://bucket/keyed/{os.path.basename(p)}" for p in keyed]
  table = sum(os.path.getsize(p + ".bin") for p in keyed)
  bucket_bytes = -(-table // buckets)
  rows = {}
  for name, root in (("now", ROOT), ("before", before)):
    if not root:
      continue
    out = os.path.join(scratch, f"remote-{name}")
    shutil.rmtree(out, ignore_errors=True)
    args = json.dumps([split, year, field, itemsize, names, bucket_bytes])
    proc = subprocess.run(
      [sys.executable, "-c", _REMOTE, root, bucket, str(ms), args, out],
      cwd=root,
      env=dict(os.environ, PYTHONPATH=root),
      capture_output=True,
      text=True,
      check=True,
    )
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row.update(
      benchmark="shuffled_merge_remote",
      tlm=name,
      root=root,
      remote_ms=ms,
      parts=len(keyed),
      table_mb=round(table / 2**20, 2),
      seconds=round(row["seconds"], 2),
      bin_sha256=_digest(os.path.join(out, f"{split}/{year}.{field}.bin")),
    )
    rows[name] = row
    print(json.dumps(row), flush=True)
  if len(rows) == 2:
    same = rows["now"]["bin_sha256"] == rows["before"]["bin_sha256"]
    speedup = rows["before"]["seconds"] / rows["now"]["seconds"]
    print(json.dumps({"speedup": round(speedup, 1), "same_bytes": same}), flush=True)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--news", required=True)
  parser.add_argument("--copies", type=int, default=10)
  parser.add_argument("--scratch", default="/tmp/shuffle_bench")
  parser.add_argument("--bucket_bytes", default="1073741824,8388608,2097152,524288,131072")
  parser.add_argument("--remote_ms", type=float, default=0, help="ms per object-store request")
  parser.add_argument("--buckets", type=int, default=8, help="buckets of the remote merge")
  parser.add_argument("--before", default="", help="another checkout's root to time too")
  args = parser.parse_args()
  t0 = time.perf_counter()
  job, chunks, input_bytes = _parts(os.path.expanduser(args.news), args.copies, args.scratch)
  table_bytes = sum(os.path.getsize(p + ".bin") for p in job[4])
  print(
    json.dumps(
      {
        "input_mb": round(input_bytes / 2**20, 1),
        "chunks": chunks,
        "keyed_parts": len(job[4]),
        "table": f"{job[0]}/{job[1]}.{job[2]}",
        "table_mb": round(table_bytes / 2**20, 2),
        "parts_seconds": round(time.perf_counter() - t0, 1),
      }
    ),
    flush=True,
  )
  if args.remote_ms:
    remote(job, args.remote_ms, args.buckets, args.before, args.scratch)
    return
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
