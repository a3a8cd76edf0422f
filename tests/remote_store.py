"""An object store with gcsfs's costs behind `gs://`: latency per request, a connection cap,
injected failures, and counters of requests and bytes.

`tests.objstore` gives `gs://` an object store's semantics over a local directory; this adds
what a pod pays for reading it, as gcsfs does it:
- every ranged read is one GET (`cat_file(path, start, end)`);
- `cat_ranges` gathers its ranges: they go out concurrently, at most `MAX_CONNECTIONS` at a
  time (aiohttp's default connection limit, which gcsfs keeps), and a failed range comes back
  as its exception in the results with `on_error="return"`;
- a file opened for reading fetches blocks of `BLOCK_SIZE` (gcsfs's default, 5 MB), one GET
  each; `info` is one metadata request;
- each request takes `LATENCY_S` (set by `install`) before its bytes come back.

`inject(fn)` makes requests fail: `fn(key, start, end)` returns None (served), an exception to
raise, an int: the number of bytes to return (a short read), or `HANG`: no answer (the request
waits until `inject` is called again, or a minute). `COUNTS` holds the requests and bytes
served since `reset()`.

Usage: `install(root, latency_s=0.075)`; `python tests/remote_store.py ROOT MS run.py ...` runs
a tlm command against it.
"""

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import fsspec
from fsspec.spec import AbstractBufferedFile

if __package__ in (None, ""):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests import objstore  # noqa: E402

MAX_CONNECTIONS = 100
BLOCK_SIZE = 5 * 2**20
HANG = "hang"  # what an injected failure returns for a request never answered
_RELEASE = threading.Event()  # set: the hanging requests end


class Counts:
  """Requests and bytes served (thread-safe)."""

  def __init__(self):
    self._lock = threading.Lock()
    self.reset()

  def reset(self) -> None:
    with self._lock:
      self.requests = self.bytes = self.metadata = 0
      self.by_suffix: dict[str, int] = {}  # bytes per file name suffix (".bin", ".idx")

  def add(self, nbytes: int, key: str = "", metadata: bool = False) -> None:
    with self._lock:
      self.requests += 1
      self.bytes += nbytes
      self.metadata += metadata
      suffix = os.path.splitext(key)[1]
      self.by_suffix[suffix] = self.by_suffix.get(suffix, 0) + nbytes

  def snapshot(self) -> dict:
    with self._lock:
      return {
        "requests": self.requests,
        "bytes": self.bytes,
        "metadata": self.metadata,
        "by_suffix": dict(self.by_suffix),
      }


COUNTS = Counts()


class _ReadFile(AbstractBufferedFile):
  """A file read in blocks, one GET each (gcsfs's GCSFile)."""

  def _fetch_range(self, start, end):
    return self.fs._get(self.path, start, end)


class RemoteFS(objstore.ObjectStoreFS):
  """`ObjectStoreFS` with gcsfs's request costs (see the module docstring)."""

  LATENCY_S = 0.0
  FAIL = None  # fn(key, start, end) -> None | Exception | int
  _SLOTS = threading.BoundedSemaphore(MAX_CONNECTIONS)
  _POOL = ThreadPoolExecutor(MAX_CONNECTIONS, thread_name_prefix="remote-store")

  def _get(self, path: str, start: int | None, end: int | None) -> bytes:
    key = self._strip_protocol(path)
    with self._SLOTS:
      time.sleep(self.LATENCY_S)
      local = self._local(key)
      if not os.path.isfile(local):
        COUNTS.add(0)
        raise FileNotFoundError(path)
      size = os.path.getsize(local)
      start = 0 if start is None else (start + size if start < 0 else start)
      end = size if end is None else (end + size if end < 0 else min(end, size))
      fail = self.FAIL(key, start, end) if self.FAIL else None
      if fail == HANG:
        COUNTS.add(0)
        _RELEASE.wait(60)
        raise TimeoutError(f"{path}: no answer (tests/remote_store.py HANG)")
      if isinstance(fail, BaseException):
        COUNTS.add(0)
        raise fail
      with open(local, "rb") as f:
        f.seek(start)
        data = f.read(max(0, end - start))
      if isinstance(fail, int):
        data = data[:fail]
      COUNTS.add(len(data), key)
      return data

  def info(self, path, **kwargs):
    time.sleep(self.LATENCY_S)
    COUNTS.add(0, metadata=True)
    return super().info(path, **kwargs)

  def cat_file(self, path, start=None, end=None, **kwargs):
    return self._get(path, start, end)

  def cat_ranges(self, paths, starts, ends, max_gap=None, on_error="return", **kwargs):
    def one(args):
      try:
        return self._get(*args)
      except Exception as e:
        if on_error == "return":
          return e
        raise

    return list(self._POOL.map(one, zip(paths, starts, ends)))

  def _open(self, path, mode="rb", block_size=None, **kwargs):
    if mode != "rb":
      return super()._open(path, mode, **kwargs)
    size = os.path.getsize(self._local(path)) if os.path.isfile(self._local(path)) else None
    if size is None:
      raise FileNotFoundError(path)
    return _ReadFile(self, path, mode, block_size=block_size or BLOCK_SIZE, size=size)


def inject(fn) -> None:
  """Failures for the requests that follow (None: none); requests left hanging end."""
  RemoteFS.FAIL = staticmethod(fn) if fn else None
  _RELEASE.set()
  _RELEASE.clear()


def install(root: str, latency_s: float = 0.0) -> None:
  """Serves `gs://` from `root` with `latency_s` per request (see `tests.objstore.install`)."""
  from etils.epath import backend

  objstore.install(root)
  RemoteFS.LATENCY_S = latency_s
  for protocol in RemoteFS.protocol:
    fsspec.register_implementation(protocol, RemoteFS, clobber=True)
  RemoteFS.clear_instance_cache()
  objstore.ObjectStoreFS.clear_instance_cache()
  backend.fsspec_backend._get_filesystem.cache_clear()


def _fail_once_exists(path: str):
  """Every data read (.bin) fails from the first one after `path` exists (a bucket lost
  mid-run; `path` may go again: a checkpoint replaced by later ones)."""
  error, seen = OSError("503 Service Unavailable"), []

  def fail(key, start, end):
    if not seen and os.path.exists(path):
      seen.append(path)
    return error if key.endswith(".bin") and seen else None

  return fail


if __name__ == "__main__":
  # python tests/remote_store.py ROOT MS run.py ARGS...: a tlm command reading gs:// at MS ms;
  # with REMOTE_STORE_FAIL_ONCE_EXISTS=PATH in the environment, its data reads fail once PATH
  # exists.
  install(sys.argv[1], float(sys.argv[2]) / 1000)
  if os.environ.get("REMOTE_STORE_FAIL_ONCE_EXISTS"):
    inject(_fail_once_exists(os.environ["REMOTE_STORE_FAIL_ONCE_EXISTS"]))
  import runpy

  script = sys.argv[3]
  sys.argv = [script] + sys.argv[4:]
  runpy.run_path(script, run_name="__main__")
