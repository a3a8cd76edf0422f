"""The input path from an object store, through tests/remote_store.py (gcsfs's request costs:
a latency per request, 100 connections, one GET per range); prints one JSON line per figure.

  python benchmarks/data.py --remote_ms=75 --hosts=4,16,64 [--remote_sizes=1,10,50]
                            [--remote_steps=20] [--tiny_steps=40]

- "remote_batch", per host count: host 0's rows of the paper's batch (2048 rows of 128 + 32
  tokens, 2010-18, the block sampler, `data.block_draws` derived from the store) from a store
  of the synthetic world's tokenized examples tiled to the first of `--remote_sizes` million,
  over one block of steps (its first step reads the block's runs, its other steps none):
  requests per block, per step (mean and most) and per trained year, bytes per step, bytes
  read over the bytes of the examples placed in the rows, the batch's time at the block's
  first step, at the others, and amortised over `--remote_steps` steps built ahead on 8
  workers (what training does from gs://). Once, at the first host count, the per-example
  sampler's requests on the same rows (the miniature's sampler).
- "remote_startup", per store size: requests and bytes that opening the nine training tables
  costs a host (manifest, sizes, the ends of each index), and the first batch's.
- "remote_tiny": `tiny_temporal` from the double and from the local disk, `--tiny_steps` steps
  each: seconds per step and `input_wait_share` (metrics.jsonl, the last half of the run).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import data_store  # noqa: E402

from tests import remote_store  # noqa: E402
from tlm.data.conditioning import prefix_text  # noqa: E402
from tlm.data.vocab import Vocabulary  # noqa: E402
from tlm.input import datasets  # noqa: E402
from tlm.input.block_sampling import draws_per_row  # noqa: E402
from tlm.input.packing import Batcher  # noqa: E402
from tlm.input.prefetch import Prefetcher  # noqa: E402
from tlm.input.sampling import MixtureSampler  # noqa: E402

YEARS = data_store.TRAIN_YEARS
ROWS, INPUT_LENGTH, TARGET_LENGTH = 2048, 128, 32  # the paper's batch, large_temporal's rows
WORKERS = 8  # tlm.input.mixture.REMOTE_PREFETCH_WORKERS


def _emit(row: dict) -> None:
  print(json.dumps(row), flush=True)


def _batcher(ssm_dir: str, vocab: Vocabulary, block: bool) -> Batcher:
  sources = datasets.load_sources(ssm_dir, years=YEARS, split="train")
  sampler = MixtureSampler(sources, seed=0, years=YEARS, source_weights={"news_ssm": 1.0})
  prefix = len(vocab.encode(prefix_text(2014, "temporal")))
  draws = draws_per_row(sampler.mean_lengths(), INPUT_LENGTH, TARGET_LENGTH, prefix) if block else 0
  return Batcher(
    sampler,
    vocab,
    rows=ROWS,
    input_length=INPUT_LENGTH,
    target_length=TARGET_LENGTH,
    block_draws=draws,
  )


def _used_bytes(stats, prefix_ids: int) -> int:
  """Stored bytes (uint16 ids) of the examples placed: tokens less EOS and time prefix."""
  ids = stats.encoder_tokens + stats.decoder_tokens - stats.examples * (2 + prefix_ids)
  return 2 * ids


def batches(remote: str, vocab: Vocabulary, hosts: list[int], steps: int, ms: float) -> None:
  prefix = len(vocab.encode(prefix_text(2014, "temporal")))
  block = _batcher(remote, vocab, block=True)
  m = block._blocks.steps  # steps per block: one read per year and host for all of them
  for i, h in enumerate(hosts):
    block.batch(0, 0, h)  # warm: opened, block 0 read
    remote_store.COUNTS.reset()
    per_step, used, seconds = [], 0, []
    for s in range(m, 2 * m):  # block 1: its first step reads, the others find its runs
      before = remote_store.COUNTS.snapshot()["requests"]
      t0 = time.perf_counter()
      _, stats = block.batch_with_stats(s, 0, h)
      seconds.append(time.perf_counter() - t0)
      per_step.append(remote_store.COUNTS.snapshot()["requests"] - before)
      used += _used_bytes(stats, prefix)
    many = remote_store.COUNTS.snapshot()
    pool = Prefetcher(
      lambda s, h=h: block.batch_with_stats(s, 0, h), depth=WORKERS, workers=WORKERS
    )
    t0 = time.perf_counter()
    for s in range(2 * m, 2 * m + steps):
      pool.get(s)
    amortised = (time.perf_counter() - t0) / steps
    pool.close()
    row = {
      "benchmark": "remote_batch",
      "remote_ms": ms,
      "hosts": h,
      "rows_per_host": ROWS // h,
      "block_draws": block._blocks.per_row,
      "block_steps": m,
      "requests_per_block": many["requests"],
      "requests_per_step": round(many["requests"] / m, 2),
      "requests_max_step": max(per_step),
      "requests_per_year_per_block": round(many["requests"] / len(YEARS), 2),
      "bytes_per_step": round(many["bytes"] / m),
      "bytes_read_over_used": round(many["bytes"] / used, 3),
      "data_bytes_read_over_used": round(many["by_suffix"].get(".bin", 0) / used, 3),
      "examples_per_row": round(stats.examples / (ROWS // h), 2),
      "batch_reading_s": round(seconds[0], 3),
      "batch_from_runs_s": round(float(np.median(seconds[1:])), 3),
      "batch_amortised_s": round(amortised, 3),
    }
    if i == 0:
      example = _batcher(remote, vocab, block=False)
      example.batch(0, 0, h)
      remote_store.COUNTS.reset()
      t0 = time.perf_counter()
      example.batch(1, 0, h)
      row["example_sampler_requests_per_step"] = remote_store.COUNTS.snapshot()["requests"]
      row["example_sampler_batch_alone_s"] = round(time.perf_counter() - t0, 3)
    _emit(row)


def startup(remote: str, vocab: Vocabulary, examples: int, ms: float) -> None:
  remote_store.COUNTS.reset()
  t0 = time.perf_counter()
  block = _batcher(remote, vocab, block=True)
  opened = remote_store.COUNTS.snapshot()
  open_s = time.perf_counter() - t0
  block.batch(0, 0, 16)
  first = remote_store.COUNTS.snapshot()
  _emit(
    {
      "benchmark": "remote_startup",
      "remote_ms": ms,
      "train_examples": examples,
      "open_requests": opened["requests"],
      "open_bytes": opened["bytes"],
      "open_s": round(open_s, 2),
      "first_batch_requests_16_hosts": first["requests"] - opened["requests"],
      "first_batch_bytes_16_hosts": first["bytes"] - opened["bytes"],
    }
  )


def _metrics(workdir: str) -> dict:
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f if '"seconds_per_step"' in line]
  rows = rows[len(rows) // 2 :]  # past the compilation and the pipeline's fill
  return {
    "seconds_per_step": round(float(np.mean([r["seconds_per_step"] for r in rows])), 4),
    "input_wait_share": round(float(np.mean([r["input_wait_share"] for r in rows])), 3),
  }


def tiny(root: str, w: dict, ms: float, steps: int) -> None:
  ssm_dir = w["ssm_text"]  # the miniature's store: text, as its world's cache holds it
  bucket = os.path.join(root, "bucket-root")
  os.symlink(ssm_dir, os.path.join(bucket, "bucket", "ssm"))
  out = {"benchmark": "remote_tiny", "remote_ms": ms, "steps": steps}
  for where, path in (("local", ssm_dir), ("remote", "gs://bucket/ssm")):
    workdir = os.path.join(root, f"wd-{where}")
    sets = [
      f"data.ssm_dir={path}",
      f"data.templama_dir={w['templama']}",
      f"data.vocab={w['vocab']}",
      "data.synthetic=false",
      f"train.steps={steps}",
      "train.log_every=2",
      "train.eval_every=0",
      "train.checkpoint_every=100000",
    ]
    run = [os.path.join(ROOT, "run.py"), "--mode=train", "--config=tiny_temporal"]
    run += [f"--workdir={workdir}"] + [f"--set={s}" for s in sets]
    if where == "remote":
      run = [os.path.join(ROOT, "tests", "remote_store.py"), bucket, str(ms)] + run
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, *run], cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
      raise RuntimeError(proc.stderr[-2000:])
    out[where] = _metrics(workdir)
  out["step_time_ratio"] = round(
    out["remote"]["seconds_per_step"] / out["local"]["seconds_per_step"], 3
  )
  _emit(out)


def run(ms: float, hosts: list[int], sizes_m: list[float], steps: int, tiny_steps: int) -> None:
  root = tempfile.mkdtemp(prefix="tlm-bench-remote-")
  try:
    w = data_store.world(root)
    tok = w["ssm_tok"]
    vocab = Vocabulary(w["vocab"])
    bucket = os.path.join(root, "bucket-root")
    remote_store.install(bucket, latency_s=ms / 1000)
    for i, size in enumerate(sizes_m):
      name = f"s{size:g}m"
      out = os.path.join(root, name)  # written outside the bucket, which refuses renames
      info = data_store.synth_store(tok, out, int(size * 1e6))
      os.makedirs(os.path.join(bucket, "bucket"), exist_ok=True)
      os.symlink(out, os.path.join(bucket, "bucket", name))
      startup(f"gs://bucket/{name}", vocab, info["examples"], ms)
      if i == 0:
        batches(f"gs://bucket/{name}", vocab, hosts, steps, ms)
      os.remove(os.path.join(bucket, "bucket", name))
      shutil.rmtree(out)
    if tiny_steps:
      tiny(root, w, ms, tiny_steps)
  finally:
    shutil.rmtree(root, ignore_errors=True)
