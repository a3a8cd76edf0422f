"""Atomic file and directory output, so that a failed run leaves nothing half-written.

Every command that writes results goes through these helpers: the content is produced under a
temporary sibling name and renamed into place only when it is complete. A crash or a
`UserError` in the middle leaves the destination untouched (absent, or as it was), and a disk
that is full, read-only or not ours becomes a one-line `OutputError` naming the destination.
`check_replaceable` guards the directories that are replaced as a whole; `check_output_file`
vets an output path and `check_layout` an output directory's entries before work starts. The
input side, the JSON-lines and TSV readers, is `tlm.line_files`.

Remote paths (`gs://...`, `tlm.storage`) have no rename: a file is produced in memory and
uploaded as one object when the block exits cleanly; a directory is produced in a local
staging directory, uploaded, and marked complete by a commit marker written last
(`tlm.storage.COMMIT_MARKER`, checked by `tlm.storage.is_committed`).
"""

import contextlib
import errno
import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from tlm import storage
from tlm.errors import OutputError, UserError

# OSErrors that mean "this output cannot be written", whichever code in the block hit them.
_WRITE_ERRNOS = frozenset(
  {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM}
)


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def _default_mode(directory: bool) -> int:
  # mkstemp/mkdtemp create private (0600/0700) entries; outputs get the usual permissions.
  return (0o777 if directory else 0o666) & ~_umask()


def _is_write_error(e: BaseException, tmp: str) -> bool:
  """True for an OSError about writing the output: disk full, quota, read-only, permissions.

  A `write` that fails has no file name; an error naming another file (an input read inside
  the block) is the caller's to report.
  """
  if not isinstance(e, OSError) or e.errno not in _WRITE_ERRNOS:
    return False
  name = e.filename
  return name is None or os.path.abspath(os.fsdecode(name)).startswith(tmp)


# tensorstore's Python binding raises a failed file operation as a plain `ValueError`, with no
# errno, status code or other attribute: the absl status code leads its message and the errno is
# quoted in it, e.g. `RESOURCE_EXHAUSTED: Error writing local file "x": ... No space left on
# device [os_error_code='28']` (tensorstore 0.1.86; orbax raises it as it is). The message is
# the only place either is, so `tensorstore_status` reads it, and nothing else in tlm does (but
# `tensorstore_one_line`, which shortens it for display: it decides nothing); tests/test_faults.py
# pins the message of a real failed write, so that a tensorstore that changes it fails there
# instead of a full disk becoming a traceback.
_TS_STATUS = re.compile(r"([A-Z]+(?:_[A-Z]+)*): ")
_TS_ERRNO = re.compile(r"\[os_error_code='?(\d+)'?\]")
# A request of tensorstore's object-store drivers that failed, wherever orbax or the zarr driver
# wrapped it ("Error writing gs://b/x: ABORTED: All 6 retry attempts failed: CURL error ..."):
# its retries ran out, the store cannot be reached or did not answer in time, the credentials
# were refused, a quota.
_TS_REMOTE = re.compile(
  r"(?:^|: )(?:ABORTED|UNAVAILABLE|DEADLINE_EXCEEDED|PERMISSION_DENIED|UNAUTHENTICATED|"
  r"RESOURCE_EXHAUSTED): "
)
# The HTTP and cloud client packages under fsspec's backends (gcsfs: aiohttp): their failure
# to reach the store, raised through orbax's own file operations.
_CLIENT_PACKAGES = frozenset({"aiohttp", "requests", "urllib3", "google", "botocore", "gcsfs"})


def tensorstore_status(e: BaseException) -> tuple[str, int | None] | None:
  """(absl status code, errno or None) of the ValueError tensorstore raised for a failed
  operation, e.g. ("RESOURCE_EXHAUSTED", 28); None for any other exception."""
  if type(e) is not ValueError:
    return None
  text = str(e)
  status = _TS_STATUS.match(text)
  if status is None:
    return None
  code = _TS_ERRNO.search(text)
  return status.group(1), int(code.group(1)) if code else None


def tensorstore_one_line(e: BaseException) -> str:
  """An exception of orbax or tensorstore as one short line, "Type: first line": tensorstore
  appends its whole JSON spec to a message (` [tensorstore_spec=...]`), which is cut off."""
  text = str(e).strip().split("\n")[0].split(" [tensorstore_spec=")[0]
  text = text if len(text) <= 300 else text[:297] + "..."
  return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _one_line(text: str, limit: int = 300) -> str:
  text = " ".join(text.split())
  return text if len(text) <= limit else text[: limit - 3] + "..."


def io_error_reason(e: BaseException) -> str | None:
  """Why a write failed, e.g. "No space left on device", if `e` is a failed file operation.

  Recognises OSError, the ValueError tensorstore (and orbax through it) raises for one
  (`tensorstore_status`), a request of tensorstore's to an object store that failed (named
  with its object: "Error writing gs://b/x: ABORTED: All 6 retry attempts failed: ..."), an
  HTTP client's failure to reach the store, and a tlm error that reports one (its `reason`);
  None for anything else (a bug, a mismatched tree). One line.
  """
  if isinstance(e, OSError):
    return _one_line(e.strerror or str(e)) or type(e).__name__
  if isinstance(e, UserError):
    return getattr(e, "reason", None)
  if type(e).__module__.split(".")[0] in _CLIENT_PACKAGES:
    return _one_line(f"{type(e).__name__}: {e}")
  status = tensorstore_status(e)
  text = str(e).split(" [tensorstore_spec=")[0]
  if type(e) is ValueError and _TS_REMOTE.search(text) and re.search(r"\b(?:gs|s3)://", text):
    return tensorstore_one_line(e).removeprefix("ValueError: ")
  if status is None:
    return None
  code, number = status
  if number is not None:
    return os.strerror(number)
  if code == "PERMISSION_DENIED":
    return os.strerror(errno.EACCES)
  if code == "RESOURCE_EXHAUSTED":
    return "disk full or quota exceeded (RESOURCE_EXHAUSTED)"
  return None


def _output_error(path: str, e: BaseException, unchanged: bool) -> OutputError:
  reason = io_error_reason(e)
  state = "left as it was" if unchanged else "not written"
  error = OutputError(f"{path}: cannot write ({reason}); {state}")
  error.path, error.reason = path, reason
  return error


@contextlib.contextmanager
def atomic_output_file(path: storage.PathArg, mode: str = "w") -> Iterator[Any]:
  """Opens a temporary file that replaces `path` only if the block exits cleanly.

  Raises:
    OutputError: the file cannot be written (disk full, quota, read-only, permissions),
      naming `path`; the temporary file is removed and `path` left as it was.
  """
  path = storage.location(path)
  if path.is_remote:
    with _remote_output_file(path, mode) as f:
      yield f
    return
  directory = os.path.dirname(os.path.abspath(path))
  existed = os.path.exists(path)
  try:
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
  except OSError as e:
    raise _output_error(path, e, existed) from None
  try:
    with os.fdopen(fd, mode) as f:
      yield f
    os.chmod(tmp, _default_mode(directory=False))
    os.replace(tmp, path)
  except BaseException as e:
    with contextlib.suppress(FileNotFoundError):
      os.remove(tmp)
    if _is_write_error(e, tmp) or isinstance(e, OSError) and e.filename in (tmp, path):
      raise _output_error(path, e, existed) from None
    raise


@contextlib.contextmanager
def _remote_output_file(path: storage.Location, mode: str) -> Iterator[Any]:
  """`atomic_output_file` on an object store: buffered, then uploaded as one object."""
  buffer = io.BytesIO() if "b" in mode else io.StringIO()
  yield buffer
  data = buffer.getvalue()
  try:
    storage.write_object(path, data if isinstance(data, bytes) else data.encode("utf-8"))
  except OSError as e:
    raise _output_error(path, e, _exists(path)) from None


def _exists(path: storage.Location) -> bool:
  try:
    return storage.exists(path)
  except OSError:
    return False


@contextlib.contextmanager
def atomic_output_dir(path: storage.PathArg) -> Iterator[str]:
  """Yields a temporary directory that becomes `path` only if the block exits cleanly.

  An existing `path` is replaced as a whole on success and left as it was on failure.

  Raises:
    OutputError: the directory cannot be written (disk full, quota, read-only, permissions),
      naming `path`; the temporary directory is removed and `path` left as it was.
  """
  path = storage.location(path)
  if path.is_remote:
    with _remote_output_dir(path) as tmp:
      yield tmp
    return
  path = os.path.abspath(path)
  parent = os.path.dirname(path)
  existed = os.path.exists(path)
  try:
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=parent)
    os.chmod(tmp, _default_mode(directory=True))
  except (FileExistsError, NotADirectoryError) as e:
    # makedirs met a file where a directory must be: say which, not "File exists".
    blocker = not_a_directory(path)
    if blocker is None:
      raise _output_error(path, e, existed) from None
    error = OutputError(f"{path}: cannot write ({blocker} is not a directory); not written")
    error.path, error.reason = path, f"{blocker} is not a directory"
    raise error from None
  except OSError as e:
    raise _output_error(path, e, existed) from None
  with _cleaned_on_failure(tmp, path, existed):
    yield tmp
  try:
    if os.path.exists(path):
      old = tmp + ".old"
      os.replace(path, old)
      os.replace(tmp, path)
      shutil.rmtree(old, ignore_errors=True)
    else:
      os.replace(tmp, path)
  except OSError as e:
    shutil.rmtree(tmp, ignore_errors=True)
    raise _output_error(path, e, existed) from None


def _staging_name(path: str) -> re.Pattern:
  """The names `atomic_output_dir(path)` stages under beside `path` (mkdtemp's 8 characters),
  and the old `path` set aside while the new one is renamed in (`.old`)."""
  return re.compile(rf"\.{re.escape(os.path.basename(path))}\.[a-z0-9_]{{8}}\.tmp(\.old)?")


def _tree_size(path: str) -> int:
  total = 0
  for top, _, names in os.walk(path):
    for name in names:
      with contextlib.suppress(OSError):
        total += os.lstat(os.path.join(top, name)).st_size
  return total


def remove_interrupted_staging(path: storage.PathArg) -> tuple[int, int]:
  """Removes what killed runs writing the output directory `path` left beside it: their
  staging directories (`atomic_output_dir`), which a SIGKILL or a power cut leaves behind
  (gigabytes, for a store at the paper's scale). Only under the lock on writing `path`
  (`tlm.workdir_lock.WorkdirLock.beside`): no other run is writing it, so none is in use.

  Returns:
    (directories removed, their bytes); (0, 0) on an object store, which has none there.
  """
  if storage.location(path).is_remote:
    return 0, 0
  path = os.path.abspath(path)
  parent, pattern = os.path.dirname(path), _staging_name(path)
  try:
    names = sorted(n for n in os.listdir(parent) if pattern.fullmatch(n))
  except OSError:
    return 0, 0
  count = size = 0
  for name in names:
    stage = os.path.join(parent, name)
    if os.path.isdir(stage) and not os.path.islink(stage):
      size += _tree_size(stage)
      shutil.rmtree(stage, ignore_errors=True)
      count += not os.path.lexists(stage)
  return count, size


def not_a_directory(path: str) -> str | None:
  """The nearest existing ancestor of the local `path` if it is not a directory (a regular
  file, say), which makes `path` impossible to create."""
  parent = os.path.dirname(os.path.abspath(path))
  while not os.path.lexists(parent):
    parent = os.path.dirname(parent)
  return None if os.path.isdir(parent) else parent


@contextlib.contextmanager
def _cleaned_on_failure(tmp: str, path: str, existed: bool) -> Iterator[None]:
  """The caller's block writing into the temporary `tmp`: if it fails, `tmp` is removed and a
  write error inside it is reported as an OutputError naming the destination `path`."""
  try:
    yield
  except BaseException as e:
    shutil.rmtree(tmp, ignore_errors=True)
    _reraise_inner(e, tmp, path, existed)
    raise


def _reraise_inner(e: BaseException, tmp: str, path: str, existed: bool) -> None:
  """Raises the OutputError naming `path` for a write error inside the temporary directory."""
  # A tlm error about an output below `tmp`, by the `path` it carries: a file of the directory
  # written atomically in its turn (an OutputError), or orbax's save of parameters there (the
  # CheckpointError of tlm.models.formats.orbax_params.save, which keeps tensorstore's reason).
  path_of_error = getattr(e, "path", None)
  inner = (
    isinstance(e, UserError) and path_of_error is not None and storage.within(path_of_error, tmp)
  )
  inner = inner and (isinstance(e, OutputError) or io_error_reason(e) is not None)
  if inner or _is_write_error(e, tmp):
    raise _output_error(path, e, existed) from None


@contextlib.contextmanager
def _remote_output_dir(path: storage.Location) -> Iterator[str]:
  """`atomic_output_dir` on an object store (no rename): write-then-commit-marker.

  The block writes into a local staging directory, so that builders writing with `open`,
  orbax or safetensors need nothing else; a failed block leaves `path` untouched. On success
  the old `path` loses its commit marker first (so it no longer reads as complete), its
  objects are deleted, the staged files are uploaded and the marker is written last: a crash
  during the commit leaves `path` without a marker, which `storage.is_committed` reports.
  """
  path = storage.abspath(path)
  existed = _exists(path)
  try:
    tmp = tempfile.mkdtemp(prefix=".tlm-staging.", suffix=".tmp")
  except OSError as e:
    raise _output_error(path, e, existed) from None
  with _cleaned_on_failure(tmp, path, existed):
    yield tmp
  try:
    marker = path / storage.COMMIT_MARKER
    if existed:
      with contextlib.suppress(FileNotFoundError):
        storage.remove(marker)
      storage.rmtree(path)
    storage.upload_tree(tmp, path)
    storage.write_object(marker, b"committed\n")
  except OSError as e:
    raise _output_error(path, e, False) from None
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: str, obj: Any) -> None:
  """Writes `obj` as indented JSON, atomically."""
  with atomic_output_file(path) as f:
    json.dump(obj, f, indent=2, sort_keys=False)
    f.write("\n")


def write_jsonl(path: str, rows) -> None:
  """Writes an iterable of JSON-serialisable rows, one per line, atomically."""
  with atomic_output_file(path) as f:
    for row in rows:
      f.write(json.dumps(row, ensure_ascii=False))
      f.write("\n")


def check_replaceable(output_dir: storage.PathArg, ours: set[str]) -> None:
  """Raises UserError if `output_dir` exists and holds entries other than `ours`.

  `atomic_output_dir` replaces an existing directory as a whole; a builder calls this first so
  that a mistyped output directory (say, the one holding its inputs) is never wiped. An absent
  or empty directory, or one holding only the builder's own outputs, may be replaced.

  Args:
    output_dir: the directory a builder is about to replace.
    ours: the names the builder writes there; hidden names (leftover temporaries) are ignored.
  """
  output_dir = storage.location(output_dir)
  if storage.isdir(output_dir):
    names = storage.listdir(output_dir)
    foreign = sorted(n for n in names if n not in ours and not n.startswith("."))
    if foreign:
      shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
      raise UserError(
        f"{output_dir}: output directory holds other files ({shown}); "
        "choose a new or empty directory"
      )
  elif storage.exists(output_dir):
    raise UserError(f"{output_dir}: exists and is not a directory")
  elif not output_dir.is_remote and (blocker := not_a_directory(output_dir)):
    raise UserError(f"{output_dir}: cannot be created, {blocker} is not a directory")


def check_output_file(path: storage.PathArg) -> None:
  """Raises UserError unless `path` can be written as a file: run before any work starts.

  `atomic_output_file` creates missing parent directories, so the nearest existing ancestor
  must be a writable directory; `path` itself must be absent or a regular file. On an object
  store only the second half can be checked (permissions show at the upload).
  """
  path = storage.location(path)
  if path.is_remote:
    if storage.isdir(path):
      raise UserError(f"{path}: is a directory; the output must be a file")
    return
  if os.path.isdir(path):
    raise UserError(f"{path}: is a directory; the output must be a file")
  if os.path.exists(path) and not os.path.isfile(path):
    raise UserError(f"{path}: exists and is not a regular file")
  _check_creatable(path)


def _check_creatable(path: str) -> None:
  """Raises UserError unless the nearest existing ancestor of `path` is a writable directory."""
  parent = os.path.dirname(os.path.abspath(path))
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise UserError(f"{path}: cannot be created, {parent} is not a directory")
  if not os.access(parent, os.W_OK | os.X_OK):
    raise UserError(f"{path}: cannot be created, {parent} is not writable")


def absent_dirs(path: storage.PathArg) -> list[str]:
  """`path` and its ancestors that do not exist yet, deepest first: what making `path` would
  create ([] on an object store, which has no directories)."""
  if storage.location(path).is_remote:
    return []
  out, path = [], os.path.abspath(path)
  while not os.path.lexists(path):
    out.append(path)
    path = os.path.dirname(path)
  return out


def remove_empty_dirs(paths: list[str]) -> None:
  """Removes each of `paths` (deepest first) that is still an empty directory: what a run
  that failed before writing anything had created. A non-empty one is left alone."""
  for path in paths:
    try:
      os.rmdir(path)
    except OSError:  # not empty (or already gone): never removed with what it holds
      pass


def check_layout(
  directory: storage.PathArg, files: tuple[str, ...] = (), dirs: tuple[str, ...] = ()
) -> None:
  """Raises UserError unless a run can write `directory` and the entries it names there.

  Run before any work starts (a workdir whose `profile` is a file fails here in milliseconds,
  not after a world build and a compile): `directory` must be a writable directory, or absent
  and creatable; each of `dirs` absent or a writable directory; each of `files` absent or a
  regular file (replaced by `atomic_output_file`, so the directory's permission is what
  counts). On an object store there is nothing to check (no directories; permissions show at
  the upload).

  Args:
    directory: e.g. a training workdir.
    files: names of the files the run writes in it.
    dirs: names of the subdirectories the run writes in it.
  """
  if storage.location(directory).is_remote:
    return
  if not os.path.exists(directory):
    _check_creatable(directory)
    return
  if not os.path.isdir(directory):
    raise UserError(f"{directory}: exists and is not a directory")
  if not os.access(directory, os.W_OK | os.X_OK):
    raise UserError(f"{directory}: is not writable")
  for name in dirs:
    path = os.path.join(directory, name)
    if not os.path.exists(path):
      # A dangling link is neither there (exists() is False) nor creatable: makedirs fails.
      if os.path.islink(path):
        raise UserError(
          f"{path}: is a link to {os.readlink(path)}, which does not exist "
          f"(the run writes {name}/ there)"
        )
      continue
    if not os.path.isdir(path):
      raise UserError(f"{path}: exists and is not a directory (the run writes {name}/ there)")
    if not os.access(path, os.W_OK | os.X_OK):
      raise UserError(f"{path}: is not writable (the run writes {name}/ there)")
  for name in files:
    path = os.path.join(directory, name)
    if os.path.exists(path) and not os.path.isfile(path):
      raise UserError(f"{path}: exists and is not a regular file (the run writes {name} there)")
