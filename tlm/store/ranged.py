"""Byte ranges of one store file: `os.pread` locally; on an object store, concurrent ranged
requests under a deadline, retried here (the one retry layer of these requests), and counted.

On an object store (gcsfs: one GET per range, all of a read in flight at once on its event
loop) a request can fail, come back short, or never come back at all. `RangeReader.read` gives
each range a deadline (`tlm.remote_clients.deadline_s`, `--storage_deadline_s`, default 120 s)
and each of its requests a timeout (an eighth of it): a range that failed, came back short or
timed out is requested again, alone, after a jittered exponential backoff ("full jitter": a wait
drawn uniformly below `BACKOFF_S` doubled per retry, at most `MAX_BACKOFF_S`, so that the hosts
of a pod that failed together do not retry together), at most `RETRIES` times and never past
the deadline. A transient failure costs a few tenths of a second and changes nothing in the
bytes returned, so the batches are the same. A range that still fails is a `DataError` of one
line naming the object and the byte range, raised before the step that needed it (the last
checkpoint is untouched), at the latest when the deadline passes. A failure that cannot succeed
on a retry fails at once: 403 (the credentials may not read it), 401, 404 (the object is gone),
400. A short read counts as a failure: an object store never returns part of a range that
exists, so a short answer is a torn response or an object replaced while in use.

gcsfs retries each of its requests itself (`_request`: 6 attempts on 408, 429, 5xx and transport
errors); under tlm's own loop that would be two layers, up to 36 attempts for a persistent 503.
tlm's reads go through a copy of the filesystem whose requests gcsfs does not retry
(`_single_attempt`); gcsfs's other requests (metadata, whole files, writes) keep its retries.

`COUNTS` counts this process's remote requests, their retries, timeouts and slow answers (over
`SLOW_S`); the train loop writes them to metrics.jsonl (`tlm.train.records`).

A local file is read with `pread`; a short read there is the file having shrunk, which no
retry mends: the caller's length checks report it.
"""

import asyncio
import functools
import os
import random
import threading
import time
import types
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from tlm import remote_clients, storage
from tlm.errors import DataError

# Retries of one range after its first request; each waits a random time below
# BACKOFF_S * 2**(retry - 1), at most MAX_BACKOFF_S (GCS's guidance: exponential backoff with
# jitter for 408, 429, 5xx and broken connections).
RETRIES = 7
BACKOFF_S = 0.5
MAX_BACKOFF_S = 16.0
# A request answered after this long is counted as slow (GCS answers in 50-100 ms).
SLOW_S = 1.0
# Requests of one read in flight at once (the rest wait their turn without their clock
# running); aiohttp's connection pool, which gcsfs keeps, holds 100.
MAX_IN_FLIGHT = 64
# HTTP statuses worth a retry; any other status fails at once.
_TRANSIENT = frozenset({408, 429}) | frozenset(range(500, 600))


class Counts:
  """Remote ranged requests of this process: how many, retried, timed out, slow (thread-safe)."""

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


def _one_line(error: BaseException) -> str:
  text = " ".join(str(error).split()) or type(error).__name__
  return text[:200]


def _status(error: BaseException) -> int | None:
  """The HTTP status of a backend's error: gcsfs's HttpError (`code`), aiohttp's response
  errors (`status`); gcsfs raises a 403 as a plain OSError "Forbidden: URL"."""
  for name in ("status", "code"):
    value = getattr(error, name, None)
    if isinstance(value, int) and 100 <= value < 600:
      return value
  if isinstance(error, OSError) and str(error).startswith("Forbidden"):
    return 403
  return None


def retriable(error: BaseException) -> bool:
  """Whether a failed request may succeed if sent again: a timeout, a transport failure, a
  408/429/5xx; not a missing object (404), a refusal (401, 403) or a bad request (400)."""
  if isinstance(error, (TimeoutError, asyncio.TimeoutError)):  # ours, or aiohttp's sockets
    return True
  if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError, ValueError)):
    return False
  status = _status(error)
  if status is not None:
    return status in _TRANSIENT
  return isinstance(error, (OSError, ConnectionError)) or _is_transport_error(error)


def _is_transport_error(error: BaseException) -> bool:
  package = type(error).__module__.split(".")[0]
  return package in ("aiohttp", "requests", "urllib3", "http")


class _Failed(Exception):
  """A range that will not be read: the one line of the DataError."""


# gcsfs filesystems whose requests gcsfs does not retry, by the token of the one they copy.
_UNRETRIED: dict = {}
_UNRETRIED_LOCK = threading.Lock()
# Threads for a filesystem without an async API (the sync call runs there, its wait timed).
_SYNC_POOL = ThreadPoolExecutor(MAX_IN_FLIGHT, thread_name_prefix="tlm-ranged")


def _single_attempt(fs):
  """`fs`, or, for gcsfs, a filesystem like it whose requests gcsfs sends once: gcsfs wraps each
  request in a retry loop (its `_request`, decorated); the copy's `_request` is the function
  inside that decorator, so tlm's loop is the only one. Shared by the readers of one store."""
  inner = getattr(getattr(type(fs), "_request", None), "__wrapped__", None)
  if inner is None or not type(fs).__module__.startswith("gcsfs"):
    return fs
  with _UNRETRIED_LOCK:
    copy = _UNRETRIED.get(fs._fs_token)
    if copy is None:
      copy = type(fs)(**fs.storage_options, skip_instance_cache=True)
      copy._request = types.MethodType(inner, copy)
      _UNRETRIED[fs._fs_token] = copy
  return copy


class RangeReader:
  """Reads byte ranges of one file (local or fsspec URL), retrying failed remote ranges.

  Args:
    path: the file (a local path or a URL such as gs://bucket/key).
    retries: at most this many retries of a failed, short or timed-out remote range (default
      `RETRIES`).
    backoff_s: the bound of the first retry's random wait, doubled for each next one (default
      `BACKOFF_S`).
    deadline_s: a remote range fails once this long has passed since its read began (default
      `tlm.remote_clients.deadline_s()`); each request times out after an eighth of it.

  Raises:
    DataError: a local file that cannot be opened.
  """

  def __init__(
    self,
    path: storage.PathArg,
    *,
    retries: int | None = None,
    backoff_s: float | None = None,
    deadline_s: float | None = None,
  ):
    self.path = path = storage.location(path)
    self.retries = RETRIES if retries is None else retries
    self.backoff_s = BACKOFF_S if backoff_s is None else backoff_s
    self._deadline_s = deadline_s
    self._fd = self._fs = self._key = None
    if path.is_remote:
      fs, self._key = storage.filesystem(path)
      self._fs = _single_attempt(fs)
    else:
      try:
        self._fd = os.open(path, os.O_RDONLY)
      except OSError as e:
        raise DataError(f"cannot open ({e.strerror})", path) from None

  @property
  def remote(self) -> bool:
    return self._fs is not None

  @property
  def deadline_s(self) -> float:
    return remote_clients.deadline_s() if self._deadline_s is None else self._deadline_s

  def read(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
    """The bytes [start, end) of each range; remote ranges are fetched concurrently.

    Raises:
      DataError: a remote range that could not be read (see the module docstring), naming the
        object and the range.
    """
    starts, ends = [int(s) for s in starts], [int(e) for e in ends]
    if self._fd is not None:
      return [os.pread(self._fd, e - s, s) for s, e in zip(starts, ends)]
    if not starts:
      return []
    import fsspec.asyn

    loop = self._fs.loop if getattr(self._fs, "async_impl", False) else fsspec.asyn.get_loop()
    try:
      return fsspec.asyn.sync(loop, self._read_all, starts, ends)
    except _Failed as e:
      raise DataError(str(e), self.path) from None

  async def _read_all(self, starts: list[int], ends: list[int]) -> list[bytes]:
    deadline = time.monotonic() + self.deadline_s
    slots = asyncio.Semaphore(MAX_IN_FLIGHT)
    tasks = [
      asyncio.ensure_future(self._range(s, e, deadline, slots)) for s, e in zip(starts, ends)
    ]
    try:
      return list(await asyncio.gather(*tasks))
    except BaseException:
      # The first range that failed ends the read: the others' requests are not waited for.
      for task in tasks:
        task.cancel()
      await asyncio.gather(*tasks, return_exceptions=True)
      raise

  async def _request(self, start: int, end: int) -> bytes:
    if getattr(self._fs, "async_impl", False):
      return await self._fs._cat_file(self._key, start=start, end=end)
    call = functools.partial(self._fs.cat_file, self._key, start=start, end=end)
    return await asyncio.get_running_loop().run_in_executor(_SYNC_POOL, call)

  async def _range(self, start: int, end: int, deadline: float, slots) -> bytes:
    """One range: requested until it is read whole, or a failure that no retry mends, or
    `retries` retries, or the deadline."""
    began, timeout = time.monotonic(), self.deadline_s / remote_clients.REQUESTS_PER_DEADLINE
    attempts = 0
    while True:
      async with slots:
        wait = max(0.001, min(timeout, deadline - time.monotonic()))
        sent = time.monotonic()
        attempts += 1
        COUNTS.add("requests")
        try:
          data = await asyncio.wait_for(self._request(start, end), wait)
          why = None if len(data) == end - start else f"{len(data)} bytes returned"
        except (TimeoutError, asyncio.TimeoutError):
          COUNTS.add("timeouts")
          why = f"no answer in {wait:.1f} s"
        except Exception as e:
          if not retriable(e):
            what = f"read of bytes [{start}, {end}) failed ({_one_line(e)}); not retried"
            raise _Failed(what) from None
          why = _one_line(e)
        took = time.monotonic() - sent
      if why is None:
        if took > SLOW_S:
          COUNTS.add("slow")
        return bytes(data)
      pause = random.uniform(0, min(MAX_BACKOFF_S, self.backoff_s * 2 ** (attempts - 1)))
      late = time.monotonic() + pause >= deadline
      if attempts > self.retries or late:
        spent = time.monotonic() - began
        limit = f", the deadline (--storage_deadline_s={self.deadline_s:g})" if late else ""
        raise _Failed(
          f"read of bytes [{start}, {end}) failed {attempts} times in {spent:.1f} s{limit}; "
          f"the last: {why}"
        )
      COUNTS.add("retries")
      await asyncio.sleep(pause)

  def close(self) -> None:
    if self._fd is not None:
      os.close(self._fd)
      self._fd = None
