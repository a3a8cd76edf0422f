"""The example store at scale: memory, start-up and rows/s against corpus size; build_ssm MB/s
against workers; the store's goal (a 30x corpus in a real training process). JSON lines.

  python benchmarks/data.py --store=1,10,50          # stores of 1M, 10M, 50M examples
  python benchmarks/data.py --store_build=10 --workers=1,2   # build_ssm on 10 copies of news
  python benchmarks/data.py --store_goal=30          # tiny_temporal on 1 and 30 copies

`--store`: the synthetic world's news, built into a tokenized store (`--vocab`, the world's
vocabulary), is tiled into stores of N million training examples over the nine train years
(tokens and offsets written directly; the examples repeat, which nothing here can exploit: the
batcher's cache is keyed by example index). For each, a fresh process opens it as training does
(`load_sources`, `MixtureSampler` with TempLAMA at 1000:1, `Batcher`; the paper's per-host
shape: 128 rows of 128 + 32 tokens, i.e. batch 2048 over 16 hosts) and reports its start-up
(open, check every offset, first batch), peak resident memory (VmHWM) and rows per second
per CPU second over `--steps` batches. At the smallest size the same is measured for a text
store (the miniature's default) and for the path before the store, the alternative a user
had: the same examples in JSON lines, loaded and batched by the code of commit a1c6c45 (every
example parsed into a Python object; per-example arrays and every text's ids kept).

`--store_build=C --workers=1,2`: `build_ssm` on C copies of the world's news, with each worker
count in turn, twice (alternating, so that load on a shared machine hits both), text and
tokenized; MB/s of input, the speed-up over 1 worker, and the CPU seconds spent (this process
and its workers): on a machine busy with other sessions (Linux's autogroup scheduling gives a
session a share of the CPUs, however many processes it runs) only the CPU seconds compare.

`--store_goal=C`: `run.py --mode=train --config=tiny_temporal` for 20 steps on the world's news
and on C copies of it (built with 2 workers), alternating, twice, from a text store, a
tokenized store and, as the reference, with the code of commit a1c6c45 on its JSON-lines
build; peak memory of the training process (its VmHWM, read while it runs), seconds to its
first progress line and in all.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tlm.data.vocab import Vocabulary  # noqa: E402
from tlm.input import datasets  # noqa: E402
from tlm.input.packing import Batcher  # noqa: E402
from tlm.input.sampling import NEWS_SSM, TEMPLAMA, MixtureSampler  # noqa: E402
from tlm.store import store, store_files, store_write  # noqa: E402
from tlm.store.build_ssm import build_ssm  # noqa: E402

TRAIN_YEARS = tuple(range(2010, 2019))
OLD_COMMIT = "a1c6c45"  # before the store


def vm_hwm_mb(pid: int | str = "self") -> float:
  """Peak resident memory of a process (VmHWM). Not ru_maxrss: a child inherits its parent's
  maximum through fork, and the benchmark's parent holds the world."""
  with open(f"/proc/{pid}/status") as f:
    for line in f:
      if line.startswith("VmHWM:"):
        return int(line.split()[1]) / 1024
  raise RuntimeError("no VmHWM in /proc/self/status")


def _load(path: str) -> str:
  out = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
  return out.split("load average:")[-1].strip() if "load average" in out else "?"


def world(root: str) -> dict:
  """The synthetic world (scale 1, seed 0), its TempLAMA and its SSM in a tokenized and a
  text store, under `root`."""
  paths = datasets.ensure_synthetic_data(os.path.join(root, "world"), seed=0, scale=1.0)
  tok = os.path.join(root, "ssm-tok")
  if not store.is_store(tok):
    build_ssm(
      os.path.join(paths.world_dir, "news.jsonl"),
      tok,
      gazetteer=os.path.join(paths.world_dir, "entities.tsv"),
      vocab=paths.vocab_path,
    )
  return {
    "news": os.path.join(paths.world_dir, "news.jsonl"),
    "entities": os.path.join(paths.world_dir, "entities.tsv"),
    "vocab": paths.vocab_path,
    "templama": paths.templama_dir,
    "ssm_text": paths.news_ssm_dir,
    "ssm_tok": tok,
  }


def synth_store(src: str, out: str, examples: int) -> dict:
  """A store of `examples` training examples tiled from `src`'s train tables (its val tables
  copied), in the format `build_ssm` writes."""
  source = store.Store(src)
  field = store.TOKENS if source.vocab_sha256 else store.TEXT
  dtype = np.dtype(source.manifest["token_dtype"] or "uint8").newbyteorder("<")
  tables, files = {}, {}
  per_year = examples // len(TRAIN_YEARS)
  os.makedirs(out)
  for split in ("train", "val"):
    os.makedirs(os.path.join(out, split))
  for year in TRAIN_YEARS:
    base = os.path.join(src, "train", f"{year}.{field}")
    data = np.fromfile(base + ".bin", dtype)
    off = np.fromfile(base + ".idx", "<i8")
    n = (off.size - 1) // 2
    name = f"train/{year}.{field}"
    binf = store_files.HashedFile(os.path.join(out, name + ".bin"))
    idxf = store_files.HashedFile(os.path.join(out, name + ".idx"))
    idxf.write(np.zeros(1, "<i8").tobytes())
    left, shift = per_year, 0
    while left:
      take = min(left, n)
      end = off[2 * take]
      binf.write(data[:end].tobytes())
      idxf.write((off[1 : 2 * take + 1] + shift).astype("<i8").tobytes())
      shift += int(end)
      left -= take
    files[name + ".bin"], files[name + ".idx"] = binf.close(), idxf.close()
    tables[f"train/{year}"] = {"examples": per_year, "fields": [field]}
    vkey = f"val/{year}"
    entry = source.manifest["tables"][vkey]
    tables[vkey] = entry
    for f in entry["fields"]:
      for ext in ("bin", "idx"):
        rel = f"val/{year}.{f}.{ext}"
        shutil.copy(os.path.join(src, rel), os.path.join(out, rel))
        files[rel] = source.manifest["files"][rel]
  if source.vocab_path:
    shutil.copy(source.vocab_path, os.path.join(out, store.VOCAB_FILE))
  vocab = source.manifest["vocab"]
  store_write.write_manifest(
    out, store_write.manifest_bytes(tables, files, source.manifest["token_dtype"], vocab)
  )
  return {"examples": per_year * len(TRAIN_YEARS), "bytes": sum(v["bytes"] for v in files.values())}


# ---- one process: open a store as training does, build batches ---------------------------------


def probe(ssm_dir: str, templama: str, vocab_path: str, steps: int, old: bool) -> dict:
  """Run in a fresh process: start-up, first batch, rows/s per CPU second, peak RSS."""
  t0 = time.perf_counter()
  vocab = Vocabulary(vocab_path)
  if old:
    loaded, batcher_cls = _old_path(ssm_dir, templama)
  else:
    loaded = datasets.load_sources(ssm_dir, templama, years=TRAIN_YEARS, split="train")
    batcher_cls = Batcher
  sampler = MixtureSampler(
    loaded, seed=0, years=TRAIN_YEARS, source_weights={NEWS_SSM: 1000.0, TEMPLAMA: 1.0}
  )
  batcher = batcher_cls(sampler, vocab, rows=128, input_length=128, target_length=32)
  opened = time.perf_counter() - t0
  batcher.batch(0)
  first = time.perf_counter() - t0
  c0, w0 = time.process_time(), time.perf_counter()
  for step in range(1, steps + 1):
    batcher.batch(step)
  cpu, wall = time.process_time() - c0, time.perf_counter() - w0
  return {
    "open_s": round(opened, 3),
    "startup_s": round(first, 3),
    "peak_rss_mb": round(vm_hwm_mb(), 1),
    "rows_per_cpu_s": round(128 * steps / cpu, 1),
    "ms_per_batch": round(1e3 * wall / steps, 2),
    "examples": len(sampler),
  }


def _old_module(name: str):
  """A module of tlm as it was at commit a1c6c45 (before the store)."""
  import importlib.util

  code = subprocess.run(
    ["git", "show", f"{OLD_COMMIT}:tlm/data/{name}.py"],
    cwd=ROOT,
    capture_output=True,
    text=True,
    check=True,
  ).stdout
  path = os.path.join(tempfile.mkdtemp(), f"{name}_old.py")
  with open(path, "w") as f:
    f.write(code)
  spec = importlib.util.spec_from_file_location(f"{name}_old", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _old_path(jsonl_dir: str, templama: str):
  """The sources and Batcher class of commit a1c6c45: `load_sources` parses every line of the
  JSON-lines SSM files into a TextExample; the Batcher keeps per-example arrays and every text's
  ids."""
  loaded = _old_module("datasets").load_sources(
    jsonl_dir, templama, years=TRAIN_YEARS, split="train"
  )
  return loaded, _old_module("packing").Batcher


def write_jsonl_dir(text_store: str, out: str) -> None:
  """The JSON-lines SSM directory (the format before the store) of a text store's train split."""
  src = store.Store(text_store)
  os.makedirs(os.path.join(out, "train"))
  for year in TRAIN_YEARS:
    table = src.table("train", year)
    with open(os.path.join(out, "train", f"{year}.jsonl"), "w", encoding="utf-8") as f:
      for start in range(0, len(table), 65536):
        for inputs, targets in table.texts(np.arange(start, min(start + 65536, len(table)))):
          f.write(json.dumps({"inputs": inputs, "targets": targets, "year": year}) + "\n")


def _probe_child(args: list[str]) -> dict:
  cmd = [sys.executable, os.path.abspath(__file__), "--probe", *args]
  out = subprocess.run(cmd, capture_output=True, text=True, check=False)
  if out.returncode:
    raise RuntimeError(out.stderr[-2000:])
  return json.loads(out.stdout.strip().splitlines()[-1])


def store_sizes(sizes_m: list[float], steps: int, keep: bool = False) -> None:
  root = tempfile.mkdtemp(prefix="tlm-bench-store-")
  try:
    w = world(root)
    for i, size in enumerate(sizes_m):
      for kind in ["tok", "text", "old"] if i == 0 else ["tok"]:
        src = w["ssm_tok"] if kind == "tok" else w["ssm_text"]
        path = os.path.join(root, f"store-{kind}-{size:g}M")
        t0 = time.perf_counter()
        if kind == "old":  # the text store's examples in JSON lines
          write_jsonl_dir(os.path.join(root, f"store-text-{size:g}M"), path)
          info = {
            "examples": int(size * 1e6) // 9 * 9,
            "bytes": sum(
              os.path.getsize(os.path.join(path, "train", n))
              for n in os.listdir(os.path.join(path, "train"))
            ),
          }
        else:
          info = synth_store(src, path, int(size * 1e6))
        info["synth_s"] = round(time.perf_counter() - t0, 1)
        row = {"benchmark": "data_store", "store": kind, "million_examples": size, **info}
        row.update(_probe_child([path, w["templama"], w["vocab"], str(steps), str(kind == "old")]))
        row["load_average"] = _load(path)
        print(json.dumps(row), flush=True)
      if not keep:
        for kind in ("tok", "text", "old"):
          shutil.rmtree(os.path.join(root, f"store-{kind}-{size:g}M"), ignore_errors=True)
  finally:
    if not keep:
      shutil.rmtree(root, ignore_errors=True)


# ---- build_ssm against workers -------------------------------------------------------------


def _cpu_seconds() -> float:
  """User + system CPU time of this process and of its children that have been waited for."""
  import resource

  own, children = (
    resource.getrusage(resource.RUSAGE_SELF),
    resource.getrusage(resource.RUSAGE_CHILDREN),
  )
  return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _copies(news: str, out: str, copies: int) -> int:
  with open(news, "rb") as f:
    data = f.read()
  with open(out, "wb") as f:
    for _ in range(copies):
      f.write(data)
  return len(data) * copies


def build_speed(copies: int, workers: list[int], rounds: int = 2) -> None:
  root = tempfile.mkdtemp(prefix="tlm-bench-build-")
  try:
    w = world(root)
    news = os.path.join(root, "news.jsonl")
    size = _copies(w["news"], news, copies)
    for vocab in (None, w["vocab"]):
      times = {n: [] for n in workers}
      cpu = {n: [] for n in workers}
      for _ in range(rounds):
        for n in workers:
          out = os.path.join(root, f"out-{n}")
          c0, t0 = _cpu_seconds(), time.perf_counter()
          build_ssm(news, out, gazetteer=w["entities"], vocab=vocab, num_workers=n)
          times[n].append(time.perf_counter() - t0)
          cpu[n].append(_cpu_seconds() - c0)  # this process and its (joined) workers
          shutil.rmtree(out)
      best = {n: min(t) for n, t in times.items()}
      print(
        json.dumps(
          {
            "benchmark": "data_store_build",
            "copies": copies,
            "input_mb": round(size / 2**20, 1),
            "tokenized": vocab is not None,
            "seconds": {n: [round(x, 2) for x in t] for n, t in times.items()},
            "mb_per_s": {n: round(size / 2**20 / b, 2) for n, b in best.items()},
            "speedup_vs_1": {n: round(best[workers[0]] / b, 3) for n, b in best.items()},
            "cpu_seconds": {n: [round(x, 2) for x in c] for n, c in cpu.items()},
            "mb_per_cpu_s": {n: round(size / 2**20 / min(c), 2) for n, c in cpu.items()},
            "cpus": os.cpu_count(),
            "load_average": _load(root),
          }
        ),
        flush=True,
      )
  finally:
    shutil.rmtree(root, ignore_errors=True)


# ---- the goal: a training process on a 30x corpus -----------------------------------------------


def _old_tree(root: str) -> str:
  """A copy of tlm at commit a1c6c45 (before the store), to run its run.py."""
  path = os.path.join(root, "old")
  os.makedirs(path)
  tar = subprocess.run(["git", "archive", OLD_COMMIT], cwd=ROOT, capture_output=True, check=True)
  subprocess.run(["tar", "-x", "-C", path], input=tar.stdout, check=True)
  return path


def _train(ssm_dir: str, w: dict, workdir: str, tree: str = ROOT) -> dict:
  sets = [
    f"data.ssm_dir={ssm_dir}",
    f"data.templama_dir={w['templama']}",
    f"data.vocab={w['vocab']}",
    "data.synthetic=false",
    "train.steps=20",
    "train.log_every=1",
    "train.eval_every=0",
    "train.checkpoint_every=1000",
  ]
  cmd = [
    sys.executable,
    os.path.join(tree, "run.py"),
    "--mode=train",
    "--config=tiny_temporal",
    f"--workdir={workdir}",
  ] + [f"--set={s}" for s in sets]
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  t0 = time.perf_counter()
  proc = subprocess.Popen(
    cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
  )
  first, peak, lines = None, 0.0, []

  def watch():  # VmHWM only grows: its last reading before the exit is the peak
    nonlocal peak
    while proc.poll() is None:
      try:
        peak = max(peak, vm_hwm_mb(proc.pid))
      except (OSError, RuntimeError):
        pass
      time.sleep(0.05)

  watcher = threading.Thread(target=watch, daemon=True)
  watcher.start()
  for line in proc.stdout:
    lines.append(line)
    if first is None and line.startswith("step "):
      first = time.perf_counter() - t0
  err = proc.stderr.read()
  status = proc.wait()
  total = time.perf_counter() - t0
  watcher.join()
  if status:
    raise RuntimeError(err[-2000:])
  return {
    "first_step_s": round(first, 2),
    "total_s": round(total, 2),
    "peak_rss_mb": round(peak, 1),
  }


def goal(copies: int, rounds: int = 2) -> None:
  root = tempfile.mkdtemp(prefix="tlm-bench-goal-")
  try:
    w = world(root)
    big = os.path.join(root, "news-x.jsonl")
    _copies(w["news"], big, copies)
    stores, old = {}, _old_tree(root)
    for n, news in ((1, w["news"]), (copies, big)):
      for vocab in (None, w["vocab"]):
        kind = "tok" if vocab else "text"
        out = os.path.join(root, f"ssm-{kind}-{n}")
        build_ssm(news, out, gazetteer=w["entities"], vocab=vocab, num_workers=2)
        stores[kind, n] = out
      # The JSON-lines SSM directory of a1c6c45's builder, which its training reads.
      stores["old", n] = os.path.join(root, f"ssm-old-{n}")
      subprocess.run(
        [
          sys.executable,
          os.path.join(old, "run.py"),
          "--mode=build_ssm",
          f"--news={news}",
          f"--output_dir={stores['old', n]}",
          f"--entities={w['entities']}",
        ],
        cwd=old,
        check=True,
        capture_output=True,
      )
    for kind in ("text", "tok", "old"):
      runs = {1: [], copies: []}
      for r in range(rounds):
        for n in (1, copies):
          workdir = os.path.join(root, f"wd-{kind}-{n}-{r}")
          runs[n].append(_train(stores[kind, n], w, workdir, old if kind == "old" else ROOT))
      small, large = runs[1], runs[copies]
      manifests = {n: store.read_manifest(stores["text", n]) for n in (1, copies)}
      examples = {
        n: sum(manifests[n]["tables"][f"train/{y}"]["examples"] for y in TRAIN_YEARS)
        for n in (1, copies)
      }
      print(
        json.dumps(
          {
            "benchmark": "data_store_goal",
            "store": kind,
            "copies": copies,
            "train_examples": examples,
            "runs": {"x1": small, f"x{copies}": large},
            "peak_rss_mb_delta": round(
              min(r["peak_rss_mb"] for r in large) - min(r["peak_rss_mb"] for r in small), 1
            ),
            "first_step_s_delta": round(
              min(r["first_step_s"] for r in large) - min(r["first_step_s"] for r in small), 2
            ),
            "total_s_delta": round(
              min(r["total_s"] for r in large) - min(r["total_s"] for r in small), 2
            ),
            "load_average": _load(root),
          }
        ),
        flush=True,
      )
  finally:
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--probe":
  ssm_dir, templama, vocab, steps, old = sys.argv[2:7]
  print(json.dumps(probe(ssm_dir, templama, vocab, int(steps), old == "True")))
