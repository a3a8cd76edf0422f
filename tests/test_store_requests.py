"""Every request to an object store has a deadline and one retry layer (tlm/remote_retries.py,
tlm/store/ranged.py, tlm/remote_clients.py), tested through tests/remote_store.py's double of
gs://: a black-holed range fails in one line naming the object and the byte range within the
deadline; 403 and 404 are not retried; transient failures are retried after jittered waits,
at most RETRIES times; a store taken for gone gets one attempt per request until one succeeds;
the counts reach metrics.jsonl's record; the deadline is a flag checked at start. The same
through the real clients (gcsfs over HTTP against an emulator): tests/test_gcs_emulator.py."""

import os
import shutil
import time

import numpy as np
import pytest

from tests import objstore, remote_store
from tests.helpers import DATA, run_tlm
from tlm import remote_clients, remote_retries
from tlm.errors import DataError
from tlm.store.ranged import RangeReader
from tlm.train.run_records import Window

OBJECT = "gs://bucket/ssm/train/2014.tokens.bin"


@pytest.fixture
def remote(tmp_path, monkeypatch):
  """The fixture store on gs://bucket/ssm behind the double, with a 2 s deadline (a request has
  a quarter of a second: enough on a loaded machine for what is answered at once)."""
  remote_store.install(str(tmp_path / "bucket-root"), latency_s=0.0)
  shutil.copytree(os.path.join(DATA, "ssm"), objstore.local_path("gs://bucket/ssm"))
  monkeypatch.setenv(remote_clients.DEADLINE_ENV, "2")
  monkeypatch.setattr(remote_retries, "_UNREACHABLE", [False])
  remote_store.COUNTS.reset()
  yield
  remote_store.inject(None)
  objstore.uninstall()


def _counts(before: dict) -> dict:
  now = remote_retries.COUNTS.snapshot()
  return {k: now[k] - before[k] for k in now}


def test_a_black_holed_range_is_one_line_within_the_deadline(remote):
  remote_store.inject(lambda key, start, end: remote_store.HANG if start >= 100 else None)
  reader, before = RangeReader(OBJECT), remote_retries.COUNTS.snapshot()
  t0 = time.monotonic()
  with pytest.raises(DataError) as err:
    reader.read([0, 100], [50, 160])
  took = time.monotonic() - t0
  message = str(err.value)
  assert message.startswith(f"{OBJECT}: read of bytes [100, 160) failed ") and "\n" not in message
  assert "; the last: no answer in " in message, message
  # It gives up when the next retry would begin past the deadline: at the earliest one longest
  # wait (MAX_PAUSE of it) before; and not much after it.
  assert 2 * (1 - remote_retries.MAX_PAUSE) <= took < 2.6, took
  counts = _counts(before)
  # Each request timed out after an eighth of the deadline, then was retried: several times.
  assert counts["timeouts"] >= 3 and counts["retries"] == counts["timeouts"] - 1, counts


@pytest.mark.parametrize(
  "error", [PermissionError(13, "Forbidden"), FileNotFoundError(OBJECT), OSError("Forbidden: x")]
)
def test_403_and_404_are_not_retried(remote, error):
  remote_store.inject(lambda key, start, end: error)
  before = remote_retries.COUNTS.snapshot()
  with pytest.raises(DataError, match=r"read of bytes \[0, 10\) failed \(.*\); not retried$"):
    RangeReader(OBJECT).read([0], [10])
  assert _counts(before)["requests"] == 1 and remote_store.COUNTS.snapshot()["requests"] == 1


def test_transient_failures_are_retried_at_most_retries_times(remote, monkeypatch):
  # The waits themselves are tested below (test_waits_are_jittered_and_bounded): none here.
  monkeypatch.setattr(remote_retries, "pause_s", lambda retry, deadline_s: 0.0)
  failures = []

  def flaky(key, start, end):
    failures.append(start)
    return OSError("503 Service Unavailable") if len(failures) <= 3 else None

  remote_store.inject(flaky)
  data = RangeReader(OBJECT).read([0], [64])[0]
  with open(objstore.local_path(OBJECT), "rb") as f:
    assert data == f.read(64)
  assert len(failures) == 4
  remote_store.inject(lambda key, start, end: OSError("503 Service Unavailable"))
  remote_store.COUNTS.reset()
  with pytest.raises(DataError, match=r"failed 8 times in .* s; the last: 503 Service Unavail"):
    RangeReader(OBJECT, deadline_s=60).read([0], [64])
  assert remote_store.COUNTS.snapshot()["requests"] == remote_retries.RETRIES + 1


def test_waits_are_jittered_and_bounded():
  draws = np.array([[remote_retries.pause_s(r, 120.0) for r in range(1, 9)] for _ in range(400)])
  bounds = np.minimum(0.5 * 2.0 ** np.arange(8), 15.0)  # 0.5 s doubling, at most 15 s
  assert (draws >= 0).all() and (draws <= bounds).all()
  # Uniform below each bound: the mean near half of it, and no two hosts alike.
  np.testing.assert_allclose(draws.mean(0) / bounds, 0.5, atol=0.08)
  assert len(np.unique(draws[:, 0])) == 400


def test_what_is_retried():
  class Http(Exception):  # gcsfs's HttpError carries the status as `code`
    def __init__(self, code, message=""):
      super().__init__(message)
      self.code = code

  retried = [TimeoutError(), ConnectionResetError(), OSError("reset"), Http(503), Http(429)]
  retried += [Http(408), Http(500), Http(401, "Invalid Credentials")]
  final = [PermissionError(13, "x"), FileNotFoundError("x"), OSError("Forbidden: x"), Http(403)]
  final += [Http(404), Http(400), Http(401, "revoked"), ValueError("Bad Request")]
  assert all(map(remote_retries.retriable, retried))
  assert not any(map(remote_retries.retriable, final))


def test_a_store_taken_for_gone_gets_one_attempt_per_request_until_one_succeeds(remote):
  remote_store.inject(lambda key, start, end: ConnectionRefusedError(111, "refused"))
  with pytest.raises(DataError, match="failed 8 times"):
    RangeReader(OBJECT).read([0], [10])
  assert remote_retries.unreachable()
  remote_store.COUNTS.reset()
  with pytest.raises(DataError, match="failed once in"):
    RangeReader(OBJECT).read([0], [10])
  assert remote_store.COUNTS.snapshot()["requests"] == 1
  remote_store.inject(None)  # it is back: the first success ends it
  assert len(RangeReader(OBJECT).read([0], [10])[0]) == 10
  assert not remote_retries.unreachable()


def test_the_counts_reach_the_metrics_record(remote):
  window = Window()
  flaky = []
  remote_store.inject(lambda key, start, end: None if flaky.append(1) or len(flaky) > 2 else 1)
  RangeReader(OBJECT).read([0], [10])  # two short reads, then the bytes
  remote_store.inject(lambda key, start, end: remote_store.HANG)
  with pytest.raises(DataError):
    RangeReader(OBJECT, deadline_s=0.4).read([0], [10])
  record = window.record(1)
  assert record["store_retries"] >= 3 and record["store_timeouts"] >= 1, record
  assert record["store_slow_requests"] == 0
  assert Window().record(1)["store_retries"] == 0  # a window counts its own


def test_the_deadline_flag(tmp_path):
  for bad in ("0", "-3", "nan"):
    proc = run_tlm(
      "--mode=check_store", f"--data={tmp_path}", f"--storage_deadline_s={bad}", cwd=str(tmp_path)
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == (
      f"error: --storage_deadline_s={float(bad)!r}: must be a number of seconds > 0"
    ), proc.stderr


def test_the_clients_are_set_for_a_pod(monkeypatch):
  monkeypatch.setattr(remote_clients, "_applied", {})
  for name in (
    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT",
    "TENSORSTORE_CURL_CONNECT_TIMEOUT_SECONDS",
    "TENSORSTORE_CURL_LOW_SPEED_LIMIT_BYTES",
    remote_clients.DEADLINE_ENV,
  ):
    monkeypatch.setenv(name, "")  # restored (to absent, or the value it had) afterwards
    monkeypatch.delenv(name)
  monkeypatch.setenv("TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS", "99")  # the user's: kept
  remote_clients.configure(40)
  assert os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] == "false"
  assert os.environ["TENSORSTORE_CURL_CONNECT_TIMEOUT_SECONDS"] == "5"  # 40 s / 8
  assert os.environ["TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS"] == "99"
  assert remote_clients.deadline_s() == 40 and remote_clients.request_timeout_s() == 5
