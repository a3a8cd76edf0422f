"""Byte ranges of one store file: `os.pread` locally, fsspec `cat_ranges` on an object store.

On an object store (gcsfs: one GET per range, gathered concurrently on its event loop) a
request can fail or come back short at any time (a reset connection, a 503 while the bucket
ramps up). `RangeReader.read` retries the ranges that failed, and only those, with exponential
backoff a bounded number of times: a transient failure costs a few tenths of a second and
changes nothing in the bytes returned, so the batches are the same. A range that still fails is
a `DataError` of one line naming the object and the byte range, raised before the step that
needed it (the last checkpoint is untouched). A short read counts as a failure: an object
store never returns part of a range that exists, so a short answer is a torn response or an
object replaced while in use.

A local file is read with `pread`; a short read there is the file having shrunk, which no
retry mends: the caller's length checks report it.
"""

import os
import time
from collections.abc import Sequence

from tlm import storage
from tlm.errors import DataError

# A few seconds of backoff in all (0.1 + 0.2 + ... + 1.6 s): GCS's guidance for 5xx and
# connection resets is to retry with exponential backoff; longer outages are not transient.
RETRIES = 5
BACKOFF_S = 0.1


def _one_line(error: BaseException) -> str:
  text = " ".join(str(error).split()) or type(error).__name__
  return text[:200]


class RangeReader:
  """Reads byte ranges of one file (local or fsspec URL), retrying failed remote ranges.

  Args:
    path: the file (a local path or a URL such as gs://bucket/key).
    retries: attempts after the first for a failed or short remote range.
    backoff_s: the wait before the first retry; doubled before each next one.

  Raises:
    DataError: a local file that cannot be opened.
  """

  def __init__(
    self, path: storage.PathArg, *, retries: int = RETRIES, backoff_s: float = BACKOFF_S
  ):
    self.path = path = storage.location(path)
    self.retries, self.backoff_s = retries, backoff_s
    self._fd = self._fs = self._key = None
    if path.is_remote:
      import fsspec

      self._fs, self._key = fsspec.core.url_to_fs(str(path))
    else:
      try:
        self._fd = os.open(path, os.O_RDONLY)
      except OSError as e:
        raise DataError(f"cannot open ({e.strerror})", path) from None

  @property
  def remote(self) -> bool:
    return self._fs is not None

  def read(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
    """The bytes [start, end) of each range; remote ranges are fetched concurrently.

    Raises:
      DataError: a remote range that failed or came back short `retries + 1` times, naming
        the object and the range.
    """
    starts, ends = [int(s) for s in starts], [int(e) for e in ends]
    if self._fd is not None:
      return [os.pread(self._fd, e - s, s) for s, e in zip(starts, ends)]
    out: list = [None] * len(starts)
    pending = list(range(len(starts)))
    for attempt in range(self.retries + 1):
      if attempt:
        time.sleep(self.backoff_s * 2 ** (attempt - 1))
      got = self._fs.cat_ranges(
        [self._key] * len(pending),
        [starts[i] for i in pending],
        [ends[i] for i in pending],
        on_error="return",
      )
      failed = []
      for i, data in zip(pending, got):
        if isinstance(data, (bytes, bytearray)) and len(data) == ends[i] - starts[i]:
          out[i] = bytes(data)
        else:
          failed.append((i, data))
      pending = [i for i, _ in failed]
      if not pending:
        return out
    i, data = failed[0]
    why = f"{len(data)} bytes returned" if isinstance(data, (bytes, bytearray)) else _one_line(data)
    raise DataError(
      f"read of bytes [{starts[i]}, {ends[i]}) failed {self.retries + 1} times ({why}); "
      f"{len(failed)} of {len(starts)} ranges failed",
      self.path,
    )

  def close(self) -> None:
    if self._fd is not None:
      os.close(self._fd)
      self._fd = None
