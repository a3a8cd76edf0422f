"""The distributed build's stages are safe to retry and to spread: each unit of work run twice,
or failed half-way and run again, gives the local builder's store byte for byte (inputs are
deleted only after the manifest); the Beam pipeline in the DirectRunner's multi-process mode,
every bundle run twice, writes that store too; and a JSON-lines SSM directory on an object
store is refused at the start of training with one line naming `--mode=convert_ssm` instead
of being converted by every host."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import (
  BEAM_MULTI_PROCESS,
  ENTITIES_SAMPLE,
  FIXTURE_DATA_SETS,
  NEWS_SAMPLE,
  ROOT,
  SPIECE_MODEL,
  STORE_FIXTURES,
  Crash,
  beam_or_skip,
  fail_on_call,
  file_hashes,
)
from tlm import storage
from tlm.data import ssm
from tlm.data.ssm import BuildSettings
from tlm.errors import DataError, OutputError, UserError
from tlm.input import datasets
from tlm.store import ssm_beam, store, store_build, store_convert, store_write
from tlm.store.build_ssm import build_ssm

JSONL_SSM = os.path.join(STORE_FIXTURES, "tiny_ssm_jsonl")  # an SSM directory before the store


@pytest.fixture(scope="module")
def local_store(tmp_path_factory):
  """The local builder's store (two processes), tokenized, with the gazetteer."""
  out = str(tmp_path_factory.mktemp("local") / "ssm")
  build_ssm(NEWS_SAMPLE, out, gazetteer=ENTITIES_SAMPLE, seed=3, vocab=SPIECE_MODEL, num_workers=2)
  return out


def test_every_stage_run_twice_or_after_a_failure_gives_the_local_store(
  tmp_path, monkeypatch, local_store
):
  """The stages as an engine may run them: every chunk written twice, one of them failing after
  some of its parts were flushed; every merge failing half-way once and run again, then run a
  second time after it succeeded; the parts, deleted only after the manifest, are all there."""
  settings = BuildSettings(ENTITIES_SAMPLE, 3, 2000, 0.1, ssm.MAX_CONTEXT_WORDS, SPIECE_MODEL)
  out = str(tmp_path / "ssm")
  part_dir = os.path.join(out, store_build.PARTS_DIR)
  paths, options = store_build.prepare(NEWS_SAMPLE, out, settings)
  monkeypatch.setattr(store_write, "_FLUSH_BYTES", 2048)  # parts are flushed as they grow
  monkeypatch.setattr(store_build, "MIN_CHUNK_BYTES", 4096)  # several chunks of the 80 KB input
  chunks = store_build.plan_chunks(paths, 64)
  assert len(chunks) > 6
  plan = store_build.make_plan(chunks, [store_build.scan_chunk(c) for c in chunks], settings)
  results = []
  for chunk in chunks:
    args = (chunk, plan.chunk_plan(chunk.index), options, part_dir)
    with monkeypatch.context() as m:  # the first attempt dies at its fourth flush
      fail_on_call(m, store_write._Part, "flush", 4)
      with pytest.raises(Crash):
        store_build.process_chunk(*args)
    first = store_build.process_chunk(*args)
    again = store_build.process_chunk(*args)  # a duplicate attempt: the same parts
    assert (again.index, again.parts) == (first.index, first.parts)
    results.append(first)
  parts = file_hashes(part_dir)
  assert parts and [n for n in parts if ".tmp" in n] == []  # no attempt left a temporary
  jobs = store_build.merge_jobs(out, part_dir, plan, results, options.token_dtype)
  merged = []
  for job in jobs:
    if job[-1]:  # a merge with parts fails after copying its first one (if several), retried
      with monkeypatch.context() as m:
        fail_on_call(m, storage, "read_bytes", min(2, len(job[-1])))
        with pytest.raises(Crash):
          store_build.merge_job(job)
      assert not store.is_store(out)
    merged.append(((job[1], job[2], job[3]), store_build.merge_job(job)))
    assert store_build.merge_job(job) == merged[-1][1]  # run twice: the same result
  assert file_hashes(part_dir) == parts  # a merge only reads its parts
  store_build.finish(out, plan, results, merged, options)
  store_build.finish(out, plan, results, merged, options)  # the last stage, retried
  storage.rmtree(part_dir)
  assert file_hashes(out) == file_hashes(local_store)


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
    fail_on_call(m, storage, "read_bytes", 3)  # the third part's lengths: two parts copied
    with pytest.raises(Crash):
      store_write.merge_table(out, "train", 2014, store.TEXT, 1, prefixes)
  assert not os.path.exists(out) or file_hashes(out) == {}  # nothing published, no temporary left
  assert all(os.path.exists(p + ".bin") and os.path.exists(p + ".len") for p in prefixes)
  again = store_write.merge_table(out, "train", 2014, store.TEXT, 1, prefixes)
  assert again == once
  assert file_hashes(out) == file_hashes(str(tmp_path / "once"))


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
    fail_on_call(m, storage, "read_bytes", 2)
    with pytest.raises(Crash):
      store_write.merge_table(out, "val", 2019, store.TEXT, 1, prefixes)
  assert not storage.exists(f"{out}/val")
  merged = store_write.merge_table(out, "val", 2019, store.TEXT, 1, prefixes)
  local = store_write.merge_table(str(tmp_path), "val", 2019, store.TEXT, 1, prefixes)
  assert merged == local and merged["examples"] == 2
  assert file_hashes(objstore.local_path(f"{out}/val")) == file_hashes(str(tmp_path / "val"))


def test_beam_multi_processing_writes_the_local_store(tmp_path, monkeypatch, local_store):
  """Two worker processes, each bundle replayed once (its files written twice): the local
  builder's store, byte for byte, and no part left behind."""
  beam_or_skip()
  monkeypatch.setenv("PYTHONPATH", ROOT)  # the worker processes import tlm
  monkeypatch.setattr(store_build, "MIN_CHUNK_BYTES", 4096)  # several chunks of the 80 KB input
  out = str(tmp_path / "beam")
  got = build_ssm(
    NEWS_SAMPLE,
    out,
    gazetteer=ENTITIES_SAMPLE,
    seed=3,
    vocab=SPIECE_MODEL,
    beam_options=BEAM_MULTI_PROCESS,
  )
  assert got["totals"]["examples"] > 0
  assert file_hashes(out) == file_hashes(local_store)


# A worker's UserError reaches the launching process as tlm's own error, whichever runner ran
# it: the worker records it under the parts (`ssm_beam._reporting`), as Beam hands the launcher
# no more than its words (pinned below).


def test_a_stages_tlm_error_is_recorded_and_raised_again_by_the_launcher(tmp_path):
  failures = str(tmp_path / "out" / ".parts" / "failures")

  def parse(line):
    raise DataError("unparsable date '2014-13-01'", "/d/news.jsonl", line)

  def write():
    error = OutputError("/d/out/train: cannot write (No space left on device); not written")
    error.path, error.reason = "/d/out/train", "No space left on device"
    raise error

  stage = ssm_beam._reporting(parse, failures)
  for _ in range(2):  # the stage run again by the runner: one record
    with pytest.raises(DataError):
      stage(380)
  assert len(os.listdir(failures)) == 1
  # What the runner raises says nothing here: the record does.
  runner = RuntimeError("Traceback (most recent call last):\n  ...\nValueError: not this")
  got = ssm_beam._error(runner, failures)
  assert type(got) is DataError and str(got) == "/d/news.jsonl:380: unparsable date '2014-13-01'"
  assert (got.path, got.line) == ("/d/news.jsonl", 380)
  other = str(tmp_path / "other")
  with pytest.raises(OutputError):
    ssm_beam._reporting(write, other)()
  got = ssm_beam._error(runner, other)
  assert type(got) is OutputError
  assert str(got) == "/d/out/train: cannot write (No space left on device); not written"
  assert (got.path, got.reason) == ("/d/out/train", "No space left on device")


def test_a_stages_tlm_error_is_recorded_on_an_object_store_too(bucket):
  failures = f"{bucket}/out/.parts/failures"  # a distributed runner's output directory

  def parse(line):
    raise DataError("unparsable date '2014-13-01'", "gs://bucket/news.jsonl", line)

  with pytest.raises(DataError):
    ssm_beam._reporting(parse, failures)(380)
  got = ssm_beam._error(RuntimeError("Traceback (most recent call last):"), failures)
  assert type(got) is DataError and (got.path, got.line) == ("gs://bucket/news.jsonl", 380)
  assert str(got) == "gs://bucket/news.jsonl:380: unparsable date '2014-13-01'"


def test_a_stage_failing_otherwise_is_the_runners_error_in_one_line(tmp_path):
  failures = str(tmp_path / "failures")

  def bug():
    raise ZeroDivisionError("division by zero")

  with pytest.raises(ZeroDivisionError):  # not tlm's error: not recorded
    ssm_beam._reporting(bug, failures)()
  assert not os.path.exists(failures)
  runner = RuntimeError("Traceback (most recent call last):\n  ...\nZeroDivisionError: by zero\n\n")
  got = ssm_beam._error(runner, failures)
  assert type(got) is UserError
  assert str(got) == "the Beam pipeline failed: RuntimeError: ZeroDivisionError: by zero"
  # A record that cannot be written: the stage's own error still fails it.
  (tmp_path / "file").write_text("")

  def parse():
    raise DataError("bad", "/d/news.jsonl", 1)

  with pytest.raises(DataError, match="^/d/news.jsonl:1: bad$"):
    ssm_beam._reporting(parse, str(tmp_path / "file" / "failures"))()


# One worker process for a pipeline that fails: with two, Beam 2.77's FnApiRunner at times
# hangs closing a failed pipeline (its `stop_worker` waits for a worker process that is still
# waiting on the control stream), seen when the pipeline failed before both workers had started.
BEAM_ONE_WORKER_PROCESS = (
  "--runner=FnApiRunner --direct_running_mode=multi_processing --direct_num_workers=1"
)


def _bad_news(tmp_path) -> str:
  bad = tmp_path / "bad.jsonl"
  with open(NEWS_SAMPLE, encoding="utf-8") as f:
    bad.write_text(f.read() + '{"date": "2014-13-01", "text": "A."}\n', encoding="utf-8")
  return str(bad)


@pytest.mark.parametrize(
  "runner", ["--runner=DirectRunner", BEAM_ONE_WORKER_PROCESS], ids=["direct", "worker_process"]
)
def test_beam_reports_a_bad_line_as_the_local_builder_does(tmp_path, monkeypatch, runner):
  """A bad input line, found by a worker (in the launching process, or in another): the local
  builder's DataError, the same words and the same file and line."""
  beam_or_skip()
  monkeypatch.setenv("PYTHONPATH", ROOT)  # the worker processes import tlm
  monkeypatch.setattr(store_build, "MIN_CHUNK_BYTES", 4096)
  bad = _bad_news(tmp_path)
  with pytest.raises(DataError) as local:
    build_ssm(bad, str(tmp_path / "local"), num_workers=1)
  with pytest.raises(DataError) as beam:
    build_ssm(bad, str(tmp_path / "beam"), beam_options=runner)
  assert str(beam.value) == str(local.value)
  assert str(beam.value).startswith(f"{bad}:380: unparsable date '2014-13-01'")
  assert (beam.value.path, beam.value.line) == (local.value.path, local.value.line) == (bad, 380)
  assert not store.is_store(str(tmp_path / "beam"))


def test_beam_reports_a_workers_bug_in_one_line(tmp_path, monkeypatch):
  beam_or_skip()

  def bug(*args, **kwargs):
    raise ZeroDivisionError("division by zero")

  monkeypatch.setattr(store_build, "make_plan", bug)  # DirectRunner: in this process
  with pytest.raises(UserError) as e:
    build_ssm(NEWS_SAMPLE, str(tmp_path / "out"), beam_options="--runner=DirectRunner")
  assert type(e.value) is UserError and "\n" not in str(e.value)
  assert str(e.value).startswith("the Beam pipeline failed: ZeroDivisionError: division by zero")


def _chain(e):
  while e is not None:
    yield e
    e = e.__cause__ or e.__context__


def test_beams_worker_processes_hand_the_launcher_a_workers_error_as_text_only(monkeypatch):
  """Why the workers record their UserError: Beam 2.77's worker processes (as a distributed
  runner's) fail the pipeline in the launching process with a RuntimeError holding the worker's
  traceback as text, nothing of the DataError but its words. A Beam that carries the exception
  itself fails here, and `ssm_beam` could then read it from the exception instead."""
  beam_or_skip()
  import apache_beam as beam
  from apache_beam.options.pipeline_options import PipelineOptions

  def parse(line):
    raise DataError("unparsable date '2014-13-01'", "/d/news.jsonl", line)

  monkeypatch.setenv("PYTHONPATH", ROOT)
  with pytest.raises(Exception) as raised:
    with beam.Pipeline(options=PipelineOptions(BEAM_ONE_WORKER_PROCESS.split())) as p:
      _ = p | beam.Create([380]) | "Parse" >> beam.Map(parse)
  assert [type(e) for e in _chain(raised.value)] == [RuntimeError], raised.value
  assert not vars(raised.value)
  assert "DataError: /d/news.jsonl:380: unparsable date '2014-13-01'" in str(raised.value)


def test_jsonl_directory_on_an_object_store_is_refused_in_one_line(bucket, tmp_path):
  """Every host would convert it at once (no lock on an object store): training refuses it,
  naming the command that converts it once, and writes nothing there."""
  from tests import objstore

  remote = f"{bucket}/old_ssm"
  shutil.copytree(JSONL_SSM, objstore.local_path(remote))
  before = file_hashes(objstore.local_path(remote))
  for load in (
    lambda: store_convert.open_ssm_store(remote),
    lambda: datasets.load_sources(remote, years=[2012], split="train"),
  ):
    with pytest.raises(UserError) as e:
      load()
    message = str(e.value)
    assert "\n" not in message and remote in message
    assert f"--mode=convert_ssm --data={remote} --output_dir=" in message
  assert file_hashes(objstore.local_path(remote)) == before


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
