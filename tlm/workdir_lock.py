"""One writer per workdir: a lock file that names its holder (pid, host, mode, start time).

Two `train` processes on one workdir interleave their checkpoint saves and one of them dies
mid-save (orbax NOT_FOUND); two `eval` runs race on `results/`. Every mode that writes into a
workdir or an output directory therefore holds `WorkdirLock` for its whole run:

  with WorkdirLock(workdir, mode="train"):
    ...

A second writer gets a one-line `LockedError` naming the holder's pid and host. A lock left
behind by a process that died (same host, that pid no longer running, or running but started
after the lock was written, i.e. a reused pid) is taken over with a warning. A lock held from
another host cannot be checked from here: the error says which file to delete if that run is
gone.

Design (why not `fcntl.flock`): flock is advisory, per host, unreliable on NFS and absent on
object stores, which the storage layer targets (etils.epath). The lock is
instead a small JSON file created with an exclusive create of a complete file: here
`os.link` of a fully written temporary file, which fails if the name exists (atomic on local
disks and NFS, and no reader ever sees a half-written lock). Every other step (read, delete)
is an ordinary file operation. On an object store (`gs://`, `tlm.storage`) the exclusive create
is the backend's conditional create (`tlm.storage.create_exclusive`: fsspec `mode="xb"`, GCS
`ifGenerationMatch=0`), or, where the backend has none, a lease read back after writing: the
lock is a single object either way, and reading and deleting it go through epath. Taking over
a stale lock is itself serialised by the same exclusive create (`<lock>.takeover`), so two
processes that find the same stale lock cannot both take it.

Multi-host training: only process 0 takes the lock. The processes of one job are started
together and coordinated by `jax.distributed`; the lock keeps a second job (whose process 0
meets the same file) out. Per-process locks would add nothing: a second job's process 0
collides with the first job's process 0 anyway, and a lock per process would have to be
cleaned up by every host. The caller tells the other processes (`acquire_on_main`).
"""

import contextlib
import datetime
import errno
import json
import os
import socket
import time
import uuid

from tlm import safe_read, storage
from tlm.console import warn
from tlm.errors import UserError
from tlm.files import absent_dirs, not_a_directory, remove_empty_dirs

LOCK_NAME = ".tlm.lock"
# A lock tlm writes is ~200 bytes.
MAX_LOCK_BYTES = 1 << 16
# pid_t is a signed 32-bit integer on every platform tlm runs on (Linux caps pids at 2**22).
_MAX_PID = 2**31 - 1
# A takeover marker older than this was left by a process that died while taking over.
_TAKEOVER_TIMEOUT_S = 60.0
# link(2) refused by the filesystem (FUSE, SMB, some object-store mounts).
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV}


class LockedError(UserError):
  """The workdir is in use by another writer (named in the message)."""


def process_start_time(pid: int) -> str | None:
  """The kernel's start time of `pid` (Linux /proc), to tell a reused pid from the holder."""
  try:
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
      stat = f.read()
  except OSError:
    return None
  # Field 22 (starttime); the command name (field 2) may hold spaces, so split after ")".
  fields = stat.rsplit(")", 1)[-1].split()
  return fields[19] if len(fields) > 19 else None


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # exists, owned by another user
  except OSError:
    return False
  return True


def _create_exclusive(path: storage.PathArg, content: str) -> bool:
  """Creates `path` holding `content` if it does not exist; returns False if it does.

  The content is written to a unique temporary name first and then hard-linked to `path`:
  link(2) fails if `path` exists, so exactly one of several concurrent creators succeeds and
  the file is never seen half-written. On an object store: `storage.create_exclusive`.
  """
  path = storage.location(path)
  if path.is_remote:
    return storage.create_exclusive(path, content)
  tmp = f"{path}.{uuid.uuid4().hex}.tmp"
  try:
    with open(tmp, "w", encoding="utf-8") as f:
      f.write(content)
  except BaseException:  # a full disk fails the write or the close: no temporary left behind
    with contextlib.suppress(OSError):
      os.remove(tmp)
    raise
  try:
    os.link(tmp, path)
    return True
  except FileExistsError:
    return False
  except OSError as e:
    if e.errno not in _NO_LINKS:
      raise
  finally:
    os.remove(tmp)
  # A filesystem without hard links: O_EXCL create, then one write (a reader that sees the
  # file still empty waits, see `_read`).
  try:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
  except FileExistsError:
    return False
  try:
    os.write(fd, content.encode("utf-8"))
  finally:
    os.close(fd)
  return True


def _read(path: str) -> dict | None:
  """The lock's content, None if it vanished (or is being written).

  The lock is read as hostile input: a regular file of at most MAX_LOCK_BYTES (a FIFO put in
  its place is never opened), JSON, and every field of the type tlm writes, the pid within the
  platform's range (a pid of 0 or below would address process groups in `os.kill`), the
  strings short printable lines (they are shown in a one-line error).

  Raises:
    ValueError: not a tlm lock file (why, in a few words).
  """
  try:
    raw = safe_read.read_bounded(path, MAX_LOCK_BYTES)
  except FileNotFoundError:
    return None
  except (safe_read.NotARegularFile, safe_read.FileTooLarge) as e:
    raise ValueError(e.strerror) from None
  if not raw:
    time.sleep(0.05)
    return None
  try:
    holder = safe_read.parse_json(raw, path, max_depth=1, error=UserError)
  except UserError as e:
    raise ValueError(str(e).removeprefix(f"{path}: ")) from None
  if not isinstance(holder, dict):
    raise ValueError("not a JSON object")
  pid = holder.get("pid")
  if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid <= _MAX_PID:
    raise ValueError(f"pid {_shown(pid)} is not a process id")
  for key in ("host", "mode", "since", "token"):  # each optional (older locks lack some)
    if holder.get(key) is not None and not _is_label(holder[key]):
      raise ValueError(f"{key} {_shown(holder[key])} is not a short line of text")
  start = holder.get("process_start")
  if start is not None and not (_is_label(start) and start.isdigit()):
    raise ValueError(f"process_start {_shown(start)} is not a number")
  return holder


def _is_label(value) -> bool:
  return isinstance(value, str) and len(value) <= 256 and value.isprintable()


def _shown(value) -> str:
  text = repr(value)
  return text if len(text) <= 40 else text[:36] + "...'"


def _is_stale(holder: dict) -> bool:
  """True if the holder ran on this host and is gone (or its pid now belongs to another)."""
  if holder.get("host") != socket.gethostname():
    return False
  pid = holder["pid"]
  if not _pid_alive(pid):
    return True
  started = holder.get("process_start")
  return started is not None and process_start_time(pid) not in (None, started)


def _describe(holder: dict) -> str:
  return (
    f"pid {holder['pid']} on host {holder.get('host', '?')} "
    f"(--mode={holder.get('mode', '?')}, since {holder.get('since', '?')})"
  )


class WorkdirLock:
  """Exclusive lock on a workdir (or an output directory), held by one writing process.

  Args:
    directory: the directory the run writes into; the lock is `directory/.tlm.lock` (hidden:
      builders that replace their output directory ignore hidden names). A directory that
      an atomic rename replaces as a whole takes its lock beside it (`lock_path`).
    mode: the --mode of the writer, shown to a second writer.
    lock_path: overrides where the lock file is (default `directory/.tlm.lock`).
  """

  def __init__(self, directory: str, mode: str, lock_path: str | None = None):
    self.directory = storage.abspath(directory)
    self.path = storage.location(lock_path) if lock_path else self.directory / LOCK_NAME
    self.mode = mode
    self._token: str | None = None
    self._created: list[str] = []  # the directories acquire created, deepest first

  @classmethod
  def beside(cls, directory: str, mode: str) -> "WorkdirLock":
    """The lock of an output directory that is replaced as a whole (`atomic_output_dir`).

    It lives beside the directory (`.NAME.tlm.lock` in its parent), since a lock inside would
    be swapped away with the old directory.
    """
    directory = storage.abspath(directory)
    parent, name = storage.dirname(directory), directory.rstrip("/").rsplit("/", 1)[-1]
    if not directory.is_remote:
      parent, name = os.path.split(directory)
    return cls(directory, mode, lock_path=storage.join(parent, f".{name}{LOCK_NAME}"))

  def _content(self) -> str:
    self._token = uuid.uuid4().hex
    return json.dumps(
      {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "process_start": process_start_time(os.getpid()),
        "mode": self.mode,
        "since": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "token": self._token,
      }
    )

  def acquire(self) -> "WorkdirLock":
    """Takes the lock, or raises LockedError naming its holder.

    Raises:
      LockedError: another live process holds the lock, or the lock file is unreadable.
      UserError: the directory cannot be created or written.
    """
    try:
      parent = storage.dirname(self.path)
      # (An object store has no empty directories: nothing to clean up there.)
      self._created = absent_dirs(parent)
      storage.makedirs(parent)
      for _ in range(100):  # a lock that vanishes while read: try again
        if _create_exclusive(self.path, self._content()):
          return self
        try:
          holder = _read(self.path)
        except ValueError as e:
          raise LockedError(
            f"{self.path}: unreadable lock file ({e}); delete it if no run is using "
            f"{self.directory}"
          ) from None
        if holder is None:
          continue
        if not _is_stale(holder):
          raise LockedError(
            f"{self.directory} is in use by {_describe(holder)}; wait for it to finish, use "
            f"another directory, or delete {self.path} if that process is gone"
          )
        if self._take_over(holder):
          return self
        time.sleep(0.05)
    except OSError as e:
      # A regular file where a parent directory must be: named, rather than "File exists".
      blocker = not_a_directory(self.path) if not self.path.is_remote else None
      reason = f"{blocker} is not a directory" if blocker else e.strerror or e
      raise UserError(f"{self.path}: cannot create the lock ({reason})") from None
    raise LockedError(
      f"{self.path}: could not take the lock (empty or changing); delete it if no run is using "
      f"{self.directory}"
    )

  def _take_over(self, stale: dict) -> bool:
    """Replaces a stale lock with ours; False if another process is taking it over."""
    marker = self.path.suffixed(".takeover")
    if not _create_exclusive(marker, str(os.getpid())):
      with contextlib.suppress(FileNotFoundError):
        if time.time() - storage.mtime(marker) > _TAKEOVER_TIMEOUT_S:
          storage.remove(marker)  # its creator died while taking over
      return False
    try:
      # Still the same stale holder? (Another process may have taken over and finished.)
      try:
        current = _read(self.path)
      except ValueError:
        return False
      if current is not None:
        if current.get("token") != stale.get("token") or current["pid"] != stale["pid"]:
          return False
        storage.remove(self.path)
      if not _create_exclusive(self.path, self._content()):
        return False
    finally:
      storage.remove(marker)
    warn(f"{self.path}: took over the lock of {_describe(stale)}, which is no longer running")
    return True

  def release(self) -> None:
    """Removes the lock if it is still ours (never another process's)."""
    if self._token is None:
      return
    try:
      holder = _read(self.path)
    except (ValueError, OSError):
      holder = None
    if holder is not None and holder.get("token") == self._token:
      with contextlib.suppress(FileNotFoundError):
        storage.remove(self.path)
    self._token = None
    # A run that wrote nothing (say, a mistyped workdir) leaves no trace: the workdir and the
    # parents it needed, while empty.
    remove_empty_dirs(self._created)

  def __enter__(self) -> "WorkdirLock":
    return self.acquire()

  def __exit__(self, *exc) -> None:
    self.release()


@contextlib.contextmanager
def acquire_on_main(directory: str, mode: str):
  """Holds the directory's lock on process 0 of a (possibly multi-process) jax run.

  Every process calls this at the same point: process 0 takes the lock and tells the others
  whether it got it, so that all processes stop with the same one-line error instead of the
  others waiting forever in their first collective.
  """
  import jax

  if jax.process_count() == 1:
    with WorkdirLock(directory, mode):
      yield
    return
  import numpy as np
  from jax.experimental import multihost_utils

  lock, error = None, None
  if jax.process_index() == 0:
    try:
      lock = WorkdirLock(directory, mode).acquire()
    except UserError as e:
      error = e
  ok = multihost_utils.broadcast_one_to_all(np.int32(error is None))
  if error is not None:
    raise error
  if not int(ok):
    raise LockedError(f"{directory}: process 0 could not lock it (see its error)")
  try:
    yield
  finally:
    if lock is not None:
      lock.release()
