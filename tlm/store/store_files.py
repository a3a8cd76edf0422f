"""Store files that appear whole or not at all: `StagedFile` (written beside its destination,
or locally for an object store, then moved or uploaded as one object) and `HashedFile` (a
`StagedFile` that also hashes what it writes, for the manifest). The builder's writer
(`tlm.store.store_write`) and the shuffled merge (`tlm.store.store_shuffle`) both write through
them, so that any unit of work an engine runs twice or re-runs after a failure is safe."""

import contextlib
import hashlib
import os
import shutil
import tempfile
import uuid

from tlm import storage


class StagedFile:
  """A file that appears whole, when closed, or not at all: written to a temporary file (beside
  it, or in the local temporary directory for an object store) and then moved into place (or
  uploaded as one object). `abort` drops it, and so does leaving a `with` block on an
  exception. A unit of work that an engine runs twice at once, or that fails half-way, thus
  never leaves a partial file where the other attempt's whole one was: both write the same
  bytes, and whichever finishes last replaces the other's.
  """

  def __init__(self, path: storage.PathArg):
    self.path = path = storage.location(path)
    if path.is_remote:
      directory, prefix = tempfile.gettempdir(), "tlm-staged-"
    else:
      directory = os.path.dirname(path)
      prefix = f".{os.path.basename(path)}."
      os.makedirs(directory, exist_ok=True)
    self._tmp = os.path.join(directory, f"{prefix}{uuid.uuid4().hex}.tmp")
    # O_EXCL: a name of our own; mode 0o666 less the umask, as `open` would create it.
    fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    self._f = os.fdopen(fd, "wb")

  def write(self, data: bytes) -> None:
    self._f.write(data)

  def close(self) -> None:
    """Publishes the file (once; later calls do nothing)."""
    if self._f is None:
      return
    self._f.close()
    self._f = None
    try:
      if self.path.is_remote:
        with open(self._tmp, "rb") as src, storage.open_file(self.path, "wb") as dst:
          shutil.copyfileobj(src, dst, 1 << 24)
      else:
        os.replace(self._tmp, self.path)
    finally:
      with contextlib.suppress(FileNotFoundError):
        os.remove(self._tmp)

  def abort(self) -> None:
    """Drops what was written; the destination is left as it was."""
    if self._f is None:
      return
    self._f.close()
    self._f = None
    with contextlib.suppress(FileNotFoundError):
      os.remove(self._tmp)

  def __enter__(self) -> "StagedFile":
    return self

  def __exit__(self, kind, value, traceback) -> None:
    if kind is None:
      self.close()
    else:
      self.abort()


class HashedFile:
  """Writes a file (a `StagedFile`) and hashes what it writes; `close` publishes it and returns
  its manifest entry, {"bytes", "sha256"}; `abort` drops it."""

  def __init__(self, path: str):
    self.f = StagedFile(path)
    self.sha = hashlib.sha256()
    self.size = 0

  def write(self, data: bytes) -> None:
    self.f.write(data)
    self.sha.update(data)
    self.size += len(data)

  def close(self) -> dict:
    self.f.close()
    return {"bytes": self.size, "sha256": self.sha.hexdigest()}

  def abort(self) -> None:
    self.f.abort()
