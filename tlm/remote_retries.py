"""The one retry layer of tlm's requests to an object store: which failures are retried, how
long to wait before the next attempt, when to stop, and the counts a run reports.

A request that failed is sent again if the failure may pass (`retriable`: a timeout, a refused
or reset connection, 408, 429, 5xx), never if it cannot (403, 401, 404, 400: the credentials,
the object, the request itself), after a random wait below a bound that doubles with each retry
("full jitter", so that the hosts of a pod that failed together do not come back together):
below `FIRST_PAUSE * deadline` before the first retry, at most `MAX_PAUSE * deadline`. It stops
after `RETRIES` retries, or when the next attempt would begin past the deadline
(`tlm.remote_clients.deadline_s`, `--storage_deadline_s`) counted from the first; an attempt
still running at the deadline is cut there. A request, its retries included, ends within the
deadline.

Where it applies: every request gcsfs sends (`install_gcsfs` puts this loop in place of
gcsfs's own, which retried 6 times on a fixed schedule; one layer, not two; gcsfs's download of
whole objects to local files, `get_file`, which tlm does not use, keeps its own), and the ranged
reads of an example store (`tlm.store.ranged`, whose loop per range also retries a short read
and asks gcsfs for single attempts: `own_retries`). TensorStore, which writes orbax's arrays,
keeps its own retries, bounded by the same deadline (`tlm.models.formats.tensorstore_gcs`).

Unreachable store: once a request has spent its attempts on failures of the transport (no
connection, no answer), the store is taken for gone and each later request gets one attempt,
until one succeeds: the run fails on the first request's line instead of every cleanup step
waiting out its own retries. (A request fails a run only after the whole deadline; a store
that comes back within it is not taken for gone.)

`COUNTS` counts this process's requests, their retries, timeouts (no answer in time) and slow
answers (after more than `SLOW_S`); the train loop writes them to metrics.jsonl
(`tlm.train.run_records`).
"""

import asyncio
import contextvars
import random
import threading
import time

from tlm import remote_clients

RETRIES = 7
# The bound of the first retry's wait, and the most any wait may be, as shares of the deadline
# (0.5 s and 15 s at the default 120 s).
FIRST_PAUSE = 1 / 240
MAX_PAUSE = 1 / 8
# An answer after this long counts as slow (GCS answers in 50-100 ms).
SLOW_S = 1.0
# HTTP statuses worth a retry; any other status fails at once.
_TRANSIENT = frozenset({408, 429}) | frozenset(range(500, 600))


class Counts:
  """Requests of this process to an object store: sent, retried, timed out, slow (thread-safe)."""

  FIELDS = ("requests", "retries", "timeouts", "slow")

  def __init__(self):
    self._lock = threading.Lock()
    self._values = dict.fromkeys(self.FIELDS, 0)

  def add(self, field: str, n: int = 1) -> None:
    with self._lock:
      self._values[field] += n

  def snapshot(self) -> dict[str, int]:
    with self._lock:
      return dict(self._values)


COUNTS = Counts()


def status(error: BaseException) -> int | None:
  """The HTTP status of a client's error: gcsfs's HttpError (`code`), aiohttp's response errors
  (`status`); gcsfs raises a 403 as a plain OSError "Forbidden: URL" and a 404 as
  FileNotFoundError."""
  for name in ("status", "code"):
    value = getattr(error, name, None)
    if isinstance(value, int) and 100 <= value < 600:
      return value
  if isinstance(error, FileNotFoundError):
    return 404
  if isinstance(error, OSError) and str(error).startswith("Forbidden"):
    return 403
  return None


def is_timeout(error: BaseException) -> bool:
  return isinstance(error, (TimeoutError, asyncio.TimeoutError))  # ours, or aiohttp's sockets


def retriable(error: BaseException) -> bool:
  """Whether a failed request may succeed if sent again (see the module docstring)."""
  if is_timeout(error):
    return True
  code = status(error)
  if code is not None:
    # gcsfs's exception: a token that expired between its refresh and the request.
    return code in _TRANSIENT or code == 401 and "Invalid Credentials" in str(error)
  if isinstance(error, (PermissionError, IsADirectoryError, ValueError)):
    return False
  return isinstance(error, OSError) or _transport_package(error)


def _transport_package(error: BaseException) -> bool:
  return type(error).__module__.split(".")[0] in ("aiohttp", "requests", "urllib3", "http")


def transport_failure(error: BaseException) -> bool:
  """A failure to reach the store at all (no connection, no answer), not an answer of it."""
  return retriable(error) and status(error) is None


def pause_s(retry: int, deadline_s: float) -> float:
  """The random wait before retry number `retry` (1, 2, ...) of a request."""
  bound = min(MAX_PAUSE, FIRST_PAUSE * 2 ** (retry - 1)) * deadline_s
  return random.uniform(0, bound)


# Set while a caller with a loop of its own (tlm.store.ranged) sends requests: gcsfs's hooked
# request then makes one attempt.
_SINGLE = contextvars.ContextVar("tlm_single_attempt", default=False)
_UNREACHABLE = [False]


def own_retries() -> None:
  """In the running asyncio task (and the tasks it starts), each gcsfs request gets one
  attempt: the caller retries them itself (a task runs in a copy of the context, so this ends
  with it)."""
  _SINGLE.set(True)


def unreachable() -> bool:
  """Whether the store was taken for gone (see the module docstring)."""
  return _UNREACHABLE[0]


def succeeded(sent: float) -> None:
  """Counts an answer that came `time.monotonic() - sent` after its request was sent."""
  _UNREACHABLE[0] = False
  if time.monotonic() - sent > SLOW_S:
    COUNTS.add("slow")


def gave_up(error: BaseException) -> None:
  """A request spent its attempts; `error` was its last failure."""
  if transport_failure(error):
    _UNREACHABLE[0] = True


async def attempts(send, deadline_s: float):
  """`await send()` until it succeeds or a failure ends it (see the module docstring); raises
  the last failure."""
  began, retry = time.monotonic(), 0
  while True:
    sent = time.monotonic()
    COUNTS.add("requests")
    try:
      # The last attempt too ends by the deadline (each has its socket timeouts besides).
      result = await asyncio.wait_for(send(), max(0.001, began + deadline_s - sent))
    except Exception as e:
      if is_timeout(e):
        COUNTS.add("timeouts")
      if not retriable(e):
        raise
      retry += 1
      pause = pause_s(retry, deadline_s)
      if retry > RETRIES or unreachable() or time.monotonic() + pause - began >= deadline_s:
        gave_up(e)
        raise
      COUNTS.add("retries")
      await asyncio.sleep(pause)
      continue
    succeeded(sent)
    return result


def install_gcsfs() -> None:
  """Puts `attempts` in place of gcsfs's own retry loop around each of its requests
  (`GCSFileSystem._request`, decorated by gcsfs with 6 attempts on a fixed schedule; the
  function inside the decorator is kept as the request). Once per process; nothing if gcsfs is
  not installed or no longer has that decorator."""
  try:
    from gcsfs import core
  except ImportError:
    return
  current = core.GCSFileSystem._request
  if getattr(current, "tlm_retries", False):
    return
  request = getattr(current, "__wrapped__", None)
  if request is None:
    return

  async def _request(self, *args, **kwargs):
    if _SINGLE.get():
      return await request(self, *args, **kwargs)
    return await attempts(lambda: request(self, *args, **kwargs), remote_clients.deadline_s())

  _request.__wrapped__ = request
  _request.tlm_retries = True
  core.GCSFileSystem._request = _request
