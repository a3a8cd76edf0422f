"""Byte ranges of one store file: `os.pread` locally; on an object store, concurrent ranged
requests, each range retried on its own until it is read whole or its deadline passes.

On an object store (gcsfs: one GET per range, all of a read in flight at once on its event
loop) a request can fail, come back short, or never come back at all. Each range of a
`RangeReader.read` is requested until its bytes are all there, under tlm's retry policy
(`tlm.remote_retries`: jittered backoff, at most `RETRIES` retries, no attempt begun past the
deadline `tlm.remote_clients.deadline_s`, `--storage_deadline_s`, default 120 s; 403, 401, 404
and 400 fail at once), each request timed out after an eighth of the deadline. A transient
failure costs a few tenths of a second and changes nothing in the bytes returned, so the
batches are the same. A range that still fails is a `DataError` of one line naming the object
and the byte range, raised before the step that needed it (the last checkpoint is untouched),
at the latest when its deadline passes. A short read counts as a failure: an object store never
returns part of a range that exists, so a short answer is a torn response or an object replaced
while in use. This loop is the only one around these requests: gcsfs is asked for single
attempts (`tlm.remote_retries.own_retries`).

A local file is read with `pread`; a short read there is the file having shrunk, which no
retry mends: the caller's length checks report it.
"""

import asyncio
import functools
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from tlm import remote_clients, remote_retries, storage
from tlm.errors import DataError

RETRIES = remote_retries.RETRIES
# Requests of one read in flight at once (the rest wait their turn without their clock
# running): aiohttp's connection pool, which gcsfs keeps, holds 100.
MAX_IN_FLIGHT = 100


def _one_line(error: BaseException) -> str:
  text = " ".join(str(error).split()) or type(error).__name__
  if isinstance(error, FileNotFoundError):  # gcsfs's holds only the request's URL
    text = f"no such object: {text}"
  return text[:200]


class _Failed(Exception):
  """A range that will not be read: the one line of the DataError."""


# Threads for a filesystem without an async API (the sync call runs there, its wait timed),
# shared by the reads in flight at once (the prefetch's workers): made as needed.
_SYNC_POOL = ThreadPoolExecutor(4 * MAX_IN_FLIGHT, thread_name_prefix="tlm-ranged")


class RangeReader:
  """Reads byte ranges of one file (local or fsspec URL), retrying failed remote ranges.

  Args:
    path: the file (a local path or a URL such as gs://bucket/key).
    retries: at most this many retries of a failed, short or timed-out remote range (default
      `RETRIES`).
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
    deadline_s: float | None = None,
  ):
    self.path = path = storage.location(path)
    self.retries = RETRIES if retries is None else retries
    self._deadline_s = deadline_s
    self._fd = self._fs = self._key = None
    if path.is_remote:
      self._fs, self._key = storage.filesystem(path)
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
    remote_retries.own_retries()  # gcsfs's requests of this read: one attempt each
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
    retry = 0
    while True:
      async with slots:
        wait = max(0.001, min(timeout, deadline - time.monotonic()))
        sent = time.monotonic()
        remote_retries.COUNTS.add("requests")
        try:
          data = await asyncio.wait_for(self._request(start, end), wait)
        except Exception as e:
          if remote_retries.is_timeout(e):
            remote_retries.COUNTS.add("timeouts")
            e = TimeoutError(f"no answer in {wait:.1f} s")
          if not remote_retries.retriable(e):
            what = f"read of bytes [{start}, {end}) failed ({_one_line(e)}); not retried"
            raise _Failed(what) from None
          failure = e
        else:
          if len(data) == end - start:
            remote_retries.succeeded(sent)
            return bytes(data)
          failure = OSError(f"{len(data)} bytes returned")
      retry += 1
      pause = remote_retries.pause_s(retry, self.deadline_s)
      late = time.monotonic() + pause >= deadline
      if retry > self.retries or late or remote_retries.unreachable():
        remote_retries.gave_up(failure)
        spent = time.monotonic() - began
        limit = f", the deadline (--storage_deadline_s={self.deadline_s:g})" if late else ""
        times = "once" if retry == 1 else f"{retry} times"
        raise _Failed(
          f"read of bytes [{start}, {end}) failed {times} in {spent:.1f} s{limit}; "
          f"the last: {_one_line(failure)}"
        )
      remote_retries.COUNTS.add("retries")
      await asyncio.sleep(pause)

  def close(self) -> None:
    if self._fd is not None:
      os.close(self._fd)
      self._fd = None
