"""The background batch pipeline (tlm/input/prefetch.py) and the appended metrics.jsonl
(tlm/train/run_records.py MetricsLog): the same batches with or without prefetching, in any order
of requests; records appended; a torn last line dropped with a notice on resume; gs:// uploads
whole files."""

import json
import os
import threading
import time

import numpy as np
import pytest

from tests.helpers import FIXTURE_DATA_SETS
from tlm import configs
from tlm.errors import ConfigError
from tlm.input import mixture as train_data
from tlm.input.prefetch import Prefetcher
from tlm.train.run_records import MetricsLog, resume_metrics


def test_prefetcher_serves_fn_of_each_step_in_any_order():
  calls = []

  def fn(step):
    calls.append(step)
    return step * step

  before = set(threading.enumerate())  # another test's threads are not this one's to check
  p = Prefetcher(fn, depth=2)
  assert [p.get(s) for s in range(5)] == [0, 1, 4, 9, 16]
  assert p.get(9) == 81 and p.get(10) == 100  # a jump restarts the thread there
  assert p.get(3) == 9  # and so does going back (a resume)
  p.close()
  assert calls[:5] == [0, 1, 2, 3, 4] and set(calls) <= set(range(0, 20))
  assert not any(t.name == "tlm-prefetch" for t in set(threading.enumerate()) - before)


def test_prefetcher_computes_ahead_and_stops_at_end():
  started = []
  p = Prefetcher(lambda s: started.append(s) or s, depth=2, end=4)
  assert p.get(0) == 0
  deadline = time.time() + 10
  while len(started) < 3 and time.time() < deadline:
    time.sleep(0.01)
  assert started[:3] == [0, 1, 2]  # steps 1 and 2 were built before they were asked for
  assert [p.get(s) for s in (1, 2, 3)] == [1, 2, 3]
  assert p.get(7) == 7  # past the end: computed on the spot
  p.close()
  assert max(started) == 3 or started[-1] == 7


def test_prefetcher_raises_the_error_of_its_step():
  def fn(step):
    if step == 2:
      raise ValueError("damaged example")
    return step

  p = Prefetcher(fn, depth=3)
  assert p.get(0) == 0 and p.get(1) == 1
  with pytest.raises(ValueError, match="damaged example"):
    p.get(2)
  assert p.get(5) == 5  # a later request restarts it
  p.close()


def test_training_data_prefetched_batches_equal_direct_ones():
  sets = [*FIXTURE_DATA_SETS, "train.batch_size=8", "train.steps=6"]
  config = configs.override(configs.get("tiny_temporal"), sets)
  data = train_data.TrainingData(config)
  direct = train_data.make_batcher(config.data, data.sources, data.vocab, rows=8)
  try:
    for step in [0, 1, 2, 3, 1, 2, 5, 4, 5]:
      got, stats = data.train_batch(step, 4, 8)
      want, want_stats = train_data.local_batch(direct, step, 4, 8)
      assert stats == want_stats
      for k in want:
        np.testing.assert_array_equal(got[k], want[k], f"step {step} {k}")
  finally:
    data.close()


@pytest.mark.parametrize(
  "sets,message",
  [
    (["data.train_years="], r"data.train_years is empty \(and data.year is 0\)"),
    (
      ["data.new_years=", "data.new_year_prob=0.5"],
      r"data.new_year_prob=0.5 draws from data.new_years, which holds no year outside",
    ),
    (
      ["data.train_years=2010,2011", "data.new_years=2011", "data.new_year_prob=0.5"],
      r"outside the trained years \[2010, 2011\] \(data.new_years=\[2011\]\)",
    ),
  ],
)
def test_a_mixture_without_years_names_its_keys(sets, message):
  """Checked before any data is read (no sources, no vocabulary needed)."""
  config = configs.override(configs.get("tiny_temporal"), sets)
  with pytest.raises(ConfigError, match=message):
    train_data.make_batcher(config.data, None, None, rows=8)


# --- metrics.jsonl --------------------------------------------------------------------------


def _lines(path):
  with open(path, encoding="utf-8") as f:
    return f.read().splitlines()


def test_metrics_log_appends_and_drops_a_torn_last_line(tmp_path, capfd):
  path = str(tmp_path / "metrics.jsonl")
  log = MetricsLog(path, 0)
  for step in (1, 2, 3):
    log.append({"step": step, "loss": 1.0 / step})
  assert [json.loads(x)["step"] for x in _lines(path)] == [1, 2, 3]
  size = os.path.getsize(path)
  with open(path, "a") as f:
    f.write('{"step": 4, "lo')  # a crash in the middle of the next append
  assert capfd.readouterr().err == ""
  resumed = MetricsLog(path, 2)  # resumed from the checkpoint of step 2
  err = capfd.readouterr().err.strip().splitlines()
  assert err == [f"notice: {path}: dropped a torn last line (a write cut short by a crash)"]
  assert [r["step"] for r in resumed.records] == [1, 2]
  assert os.path.getsize(path) < size  # rewritten once with the records kept
  resumed.append({"step": 3, "loss": 0.5})
  assert [json.loads(x)["step"] for x in _lines(path)] == [1, 2, 3]


def test_resume_metrics_damaged_middle_line(tmp_path, capfd):
  path = tmp_path / "metrics.jsonl"
  path.write_text('{"step": 1}\n{"step": 2}\nxx\n{"step": 3}\n')
  assert resume_metrics(str(path), 10) == [{"step": 1}, {"step": 2}]
  assert capfd.readouterr().err.strip() == (
    f"warning: {path}:3: malformed JSON; keeping the 2 records before it"
  )
  path.write_text('{"step": 1}\n{"step": 2}\n')
  assert resume_metrics(str(path), 1) == [{"step": 1}]
  assert capfd.readouterr().err == ""


def test_metrics_log_on_the_object_store_uploads_whole_files(bucket):
  from tests import objstore

  path = f"{bucket}/wd/metrics.jsonl"
  log = MetricsLog(path, 0)
  local = objstore.local_path(path)
  assert open(local).read() == ""
  log.append({"step": 1})
  log.append({"step": 2})
  assert open(local).read() == ""  # no append on an object store: written at the flush
  log.flush()
  assert [json.loads(x)["step"] for x in _lines(local)] == [1, 2]
  log.append({"step": 3})
  log.flush()
  assert [r["step"] for r in MetricsLog(path, 2).records] == [1, 2]
