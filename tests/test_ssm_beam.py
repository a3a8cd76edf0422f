"""The distributed build's stages are safe to retry and to spread: each unit of work run twice,
or failed half-way and run again, gives the local builder's store byte for byte (inputs are
deleted only after the manifest); the Beam pipeline in the DirectRunner's multi-process mode,
every bundle run twice, writes that store too; and a JSON-lines SSM directory on an object
store is refused at the start of training with one line naming `--mode=convert_ssm` instead
of being converted by every host."""

import hashlib
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import DATA, FIXTURE_DATA_SETS
from tlm import storage
from tlm.data import ssm
from tlm.data.ssm import BuildSettings
from tlm.errors import UserError
from tlm.input import datasets
from tlm.store import store, store_build, store_convert, store_write
from tlm.store.build_ssm import build_ssm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "data", "store")
NEWS = os.path.join(FIXTURES, "news_sample.jsonl")  # every 40th article of the world's news
ENTITIES = os.path.join(FIXTURES, "entities_sample.tsv")
JSONL_SSM = os.path.join(FIXTURES, "tiny_ssm_jsonl")  # an SSM directory before the store
VOCAB = os.path.join(DATA, "spiece.model")


def _tree(path: str) -> dict:
  """{relative path: sha256} of every file under `path`."""
  out = {}
  for d, _, files in os.walk(path):
    for name in files:
      with open(os.path.join(d, name), "rb") as f:
        out[os.path.relpath(os.path.join(d, name), path)] = hashlib.sha256(f.read()).hexdigest()
  return out


class Crash(Exception):
  """A worker lost half-way (preempted, out of memory)."""


def _fail_on_call(monkeypatch, module, name, call):
  """Makes `module.name` raise Crash on its `call`-th call (1-based) only."""
  real, calls = getattr(module, name), []

  def flaky(*args, **kwargs):
    calls.append(1)
    if len(calls) == call:
      raise Crash(f"{name}: simulated failure")
    return real(*args, **kwargs)

  monkeypatch.setattr(module, name, flaky)
  return calls


@pytest.fixture(scope="module")
def local_store(tmp_path_factory):
  """The local builder's store (two processes), tokenized, with the gazetteer."""
  out = str(tmp_path_factory.mktemp("local") / "ssm")
  build_ssm(NEWS, out, gazetteer=ENTITIES, seed=3, vocab=VOCAB, num_workers=2)
  return out


def test_every_stage_run_twice_or_after_a_failure_gives_the_local_store(
  tmp_path, monkeypatch, local_store
):
  """The stages as an engine may run them: every chunk written twice, one of them failing after
  some of its parts were flushed; every merge failing half-way once and run again, then run a
  second time after it succeeded; the parts, deleted only after the manifest, are all there."""
  settings = BuildSettings(ENTITIES, 3, 2000, 0.1, ssm.MAX_CONTEXT_WORDS, VOCAB)
  out = str(tmp_path / "ssm")
  part_dir = os.path.join(out, store_build.PARTS_DIR)
  paths, options = store_build.prepare(NEWS, out, settings)
  monkeypatch.setattr(store_write, "_FLUSH_BYTES", 2048)  # parts are flushed as they grow
  monkeypatch.setattr(store_build, "MIN_CHUNK_BYTES", 4096)  # several chunks of the 80 KB input
  chunks = store_build.plan_chunks(paths, 64)
  assert len(chunks) > 6
  plan = store_build.make_plan(chunks, [store_build.scan_chunk(c) for c in chunks], settings)
  results = []
  for chunk in chunks:
    args = (chunk, plan.chunk_plan(chunk.index), options, part_dir)
    with monkeypatch.context() as m:  # the first attempt dies at its fourth flush
      _fail_on_call(m, store_write._Part, "flush", 4)
      with pytest.raises(Crash):
        store_build.process_chunk(*args)
    first = store_build.process_chunk(*args)
    again = store_build.process_chunk(*args)  # a duplicate attempt: the same parts
    assert (again.index, again.parts) == (first.index, first.parts)
    results.append(first)
  parts = _tree(part_dir)
  assert parts and [n for n in parts if ".tmp" in n] == []  # no attempt left a temporary
  jobs = store_build.merge_jobs(out, part_dir, plan, results, options.token_dtype)
  merged = []
  for job in jobs:
    if job[-1]:  # a merge with parts fails after copying its first one (if several), retried
      with monkeypatch.context() as m:
        _fail_on_call(m, storage, "read_bytes", min(2, len(job[-1])))
        with pytest.raises(Crash):
          store_build.merge_job(job)
      assert not store.is_store(out)
    merged.append(((job[1], job[2], job[3]), store_build.merge_job(job)))
    assert store_build.merge_job(job) == merged[-1][1]  # run twice: the same result
  assert _tree(part_dir) == parts  # a merge only reads its parts
  store_build.finish(out, plan, results, merged, options)
  store_build.finish(out, plan, results, merged, options)  # the last stage, retried
  storage.rmtree(part_dir)
  assert _tree(out) == _tree(local_store)


def test_merge_rerun_after_a_failure_equals_one_run(tmp_path, monkeypatch):
  """A merge that fails half-way publishes nothing, keeps its parts and, run again, writes the
  table of a merge that never failed."""
  parts = str(tmp_path / "parts")
  prefixes = []
  for unit in range(3):
    writer = store_write.PartWriter(parts, unit)
    for i in range(5):
      writer.add_text("train", 2014, f"input {unit}.{i} <extra_id_0>", f"target {i}")
    writer.close()
    prefixes.append(writer.prefix("train", 2014, store.TEXT))
  once = store_write.merge_table(str(tmp_path / "once"), "train", 2014, store.TEXT, 1, prefixes)
  out = str(tmp_path / "retried")
  with monkeypatch.context() as m:
    _fail_on_call(m, storage, "read_bytes", 3)  # the third part's lengths: two parts copied
    with pytest.raises(Crash):
      store_write.merge_table(out, "train", 2014, store.TEXT, 1, prefixes)
  assert not os.path.exists(out) or _tree(out) == {}  # nothing published, no temporary left
  assert all(os.path.exists(p + ".bin") and os.path.exists(p + ".len") for p in prefixes)
  again = store_write.merge_table(out, "train", 2014, store.TEXT, 1, prefixes)
  assert again == once
  assert _tree(out) == _tree(str(tmp_path / "once"))


def test_merge_on_an_object_store_publishes_only_whole_tables(bucket, tmp_path, monkeypatch):
  """On gs:// (tests/objstore.py) too: parts and tables appear whole or not at all, and a merge
  re-run after a failure writes the objects of one run."""
  from tests import objstore

  parts, out = f"{bucket}/build/.parts", f"{bucket}/build"
  prefixes = []
  for unit in range(2):
    writer = store_write.PartWriter(parts, unit)
    writer.add_text("val", 2019, f"input {unit} <extra_id_0>", "target")
    if unit == 1:  # a unit that fails leaves no part behind
      writer.abort()
      assert not storage.exists(writer.prefix("val", 2019, store.TEXT) + ".bin")
      writer = store_write.PartWriter(parts, unit)
      writer.add_text("val", 2019, f"input {unit} <extra_id_0>", "target")
    writer.close()
    prefixes.append(writer.prefix("val", 2019, store.TEXT))
  with monkeypatch.context() as m:
    _fail_on_call(m, storage, "read_bytes", 2)
    with pytest.raises(Crash):
      store_write.merge_table(out, "val", 2019, store.TEXT, 1, prefixes)
  assert not storage.exists(f"{out}/val")
  merged = store_write.merge_table(out, "val", 2019, store.TEXT, 1, prefixes)
  local = store_write.merge_table(str(tmp_path), "val", 2019, store.TEXT, 1, prefixes)
  assert merged == local and merged["examples"] == 2
  assert _tree(objstore.local_path(f"{out}/val")) == _tree(str(tmp_path / "val"))


def _beam_or_skip():
  if os.environ.get("TLM_REQUIRE_BEAM") != "1":  # .ci/run's Beam environment sets it
    pytest.importorskip("apache_beam")


# Beam's DirectRunner in multi-process mode, every bundle run twice. Beam 2.77's DirectRunner
# hands this pipeline to Prism, which takes no --direct_running_mode (its workers are threads of
# the launching process), so the runner behind that mode, the FnApiRunner, is named: two worker
# processes that receive the stages pickled, as a distributed runner's workers do.
MULTI_PROCESS = (
  "--runner=FnApiRunner --direct_running_mode=multi_processing --direct_num_workers=2 "
  "--direct_runner_bundle_repeat=1"
)


def test_beam_multi_processing_writes_the_local_store(tmp_path, monkeypatch, local_store):
  """Two worker processes, each bundle replayed once (its files written twice): the local
  builder's store, byte for byte, and no part left behind."""
  _beam_or_skip()
  monkeypatch.setenv("PYTHONPATH", ROOT)  # the worker processes import tlm
  monkeypatch.setattr(store_build, "MIN_CHUNK_BYTES", 4096)  # several chunks of the 80 KB input
  out = str(tmp_path / "beam")
  got = build_ssm(NEWS, out, gazetteer=ENTITIES, seed=3, vocab=VOCAB, beam_options=MULTI_PROCESS)
  assert got["totals"]["examples"] > 0
  assert _tree(out) == _tree(local_store)


def test_jsonl_directory_on_an_object_store_is_refused_in_one_line(bucket, tmp_path):
  """Every host would convert it at once (no lock on an object store): training refuses it,
  naming the command that converts it once, and writes nothing there."""
  from tests import objstore

  remote = f"{bucket}/old_ssm"
  shutil.copytree(JSONL_SSM, objstore.local_path(remote))
  before = _tree(objstore.local_path(remote))
  for load in (
    lambda: store_convert.open_ssm_store(remote),
    lambda: datasets.load_sources(remote, years=[2012], split="train"),
  ):
    with pytest.raises(UserError) as e:
      load()
    message = str(e.value)
    assert "\n" not in message and remote in message
    assert f"--mode=convert_ssm --data={remote} --output_dir=" in message
  assert _tree(objstore.local_path(remote)) == before


def test_training_start_refuses_a_jsonl_directory_on_an_object_store(tmp_path):
  """Through the command line, as a host would start: one `error:` line, before any step."""
  root = tmp_path / "objects"
  shutil.copytree(JSONL_SSM, root / "bucket" / "old_ssm")
  workdir = tmp_path / "run"
  proc = subprocess.run(
    [
      sys.executable,
      os.path.join(ROOT, "tests", "objstore.py"),
      str(root),
      os.path.join(ROOT, "run.py"),
      "--mode=train",
      "--config=tiny_temporal",
      f"--workdir={workdir}",
      *[f"--set={s}" for s in FIXTURE_DATA_SETS],
      "--set=data.ssm_dir=gs://bucket/old_ssm",
      "--set=train.steps=1",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )
  assert proc.returncode == 1, proc.stderr[-3000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and "--mode=convert_ssm" in last, proc.stderr[-3000:]
  assert not (root / "bucket" / "old_ssm" / "manifest.json").exists()
