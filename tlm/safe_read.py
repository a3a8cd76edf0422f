"""Reading a file as hostile input: regular files only, a bounded size, bounded JSON.

Every file tlm reads may have been written by someone else, its own state files included
(checksum manifests, `best.json`, the workdir lock, a saved `config.json`, results read back):
a file can be replaced by a FIFO (opening it blocks until a writer appears), a name read from
a file can lead to a device (`/dev/zero` never ends), a JSON file can be gigabytes long or
nested deeper than the parser's recursion limit. The helpers here are the one way tlm reads
such a file:

- `open_regular`: opens a file for reading only if it is a regular file; a FIFO, device,
  socket or directory is refused without being opened (the name is stat'ed first, opened
  non-blocking, and its descriptor checked again, so a name swapped in between is caught).
- `read_bounded`: at most a given number of bytes of such a file; a larger file is refused.
- `parse_json` / `read_json`: JSON (UTF-8) of bounded size and nesting depth, any problem one
  line naming the file, raised as the `UserError` subclass the caller names.

Names read from inside a file are confined to their directory by
`tlm.models.formats.guards.confined_path` before they reach these. Pure Python: the data layer
and `tlm.checksums` use it without jax.
"""

import errno
import json
import os
import stat
from typing import IO

from tlm import storage
from tlm.errors import DataError, UserError

# No JSON tlm writes or reads nests deeper than a few levels (a safetensors header: 3, an
# evaluation result: 6); 64 leaves room for anything legitimate and stays far below the
# interpreter's recursion limit, which the json module's scanner would otherwise hit.
MAX_JSON_DEPTH = 64


class NotARegularFile(OSError):
  """The name is a FIFO, device, socket or directory: never opened for reading."""


class FileTooLarge(OSError):
  """The file is larger than the bound its reader set."""


def kind(mode: int) -> str:
  """What a non-regular `st_mode` is, in words ("a FIFO", "a character device", ...)."""
  for test, name in (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
  ):
    if test(mode):
      return name
  return "not a regular file"


def require_regular(mode: int, path: str) -> None:
  """Raises NotARegularFile unless `mode` (an `st_mode`) is a regular file's."""
  if not stat.S_ISREG(mode):
    name = kind(mode)
    what = name if name.startswith("not ") else f"not a regular file ({name})"
    raise NotARegularFile(errno.EINVAL, what, path)


def open_regular(path: str) -> IO[bytes]:
  """Opens `path` for binary reading if it is a regular file (links followed).

  Raises:
    NotARegularFile: a FIFO, device, socket or directory (never opened).
    OSError: it cannot be opened (missing, permissions), or the name holds a NUL.
  """
  if storage.is_remote(path):  # an object store holds plain objects only
    return storage.open_file(path, "rb")
  local = storage.local(path)
  if "\0" in local:
    raise OSError(errno.EINVAL, "a NUL character in the file name", path)
  require_regular(os.stat(local).st_mode, path)
  # Non-blocking: if a FIFO was swapped in after the stat, the open returns at once.
  fd = os.open(local, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
  try:
    require_regular(os.fstat(fd).st_mode, path)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")
  except BaseException:
    os.close(fd)
    raise


def regular_size(path: str) -> int:
  """The size of a regular file (links followed), read without opening it.

  Raises:
    NotARegularFile: a FIFO, device, socket or directory.
    OSError: it does not exist or cannot be examined, or the name holds a NUL.
  """
  if storage.is_remote(path):
    return storage.getsize(path)
  local = storage.local(path)
  if "\0" in local:
    raise OSError(errno.EINVAL, "a NUL character in the file name", path)
  st = os.stat(local)
  require_regular(st.st_mode, path)
  return st.st_size


def read_bounded(path: str, max_bytes: int) -> bytes:
  """The bytes of a regular file of at most `max_bytes`, reading at most one byte more.

  Raises:
    FileTooLarge: the file holds more than `max_bytes`.
    OSError: as `open_regular`.
  """
  with open_regular(path) as f:
    raw = f.read(max_bytes + 1)
  if len(raw) > max_bytes:
    raise FileTooLarge(errno.EFBIG, f"larger than {max_bytes} bytes", path)
  return raw


def json_depth(value) -> int:
  """The deepest nesting of lists and dicts in a parsed JSON value (a scalar is 0), iteratively."""
  deepest, stack = 0, [(value, 1)]
  while stack:
    node, depth = stack.pop()
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
    if children is not None:
      deepest = max(deepest, depth)
      stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
  return deepest


def parse_json(
  raw: bytes,
  source: str,
  max_depth: int = MAX_JSON_DEPTH,
  error: type[UserError] = DataError,
  what: str = "JSON",
):
  """Parses UTF-8 JSON bytes whose nesting is at most `max_depth`.

  Args:
    raw: the JSON text.
    source: the file (and what in it) to name in errors.
    max_depth: the deepest nesting of arrays and objects allowed.
    error: the UserError subclass to raise.
    what: what the file should be, for the message ("JSON", "a checksum manifest", ...).

  Raises:
    error: `source: cannot read WHAT (...)` in one line for invalid UTF-8, invalid JSON
      (including integers beyond Python's digit limit) or nesting deeper than `max_depth`.
  """
  try:
    value = json.loads(raw.decode("utf-8"))
  except UnicodeDecodeError as e:
    raise error(f"{source}: cannot read {what} (not UTF-8 at byte {e.start})") from None
  except RecursionError:
    # The json module's scanner recurses per level and gives up near the interpreter's
    # recursion limit (about 1000).
    raise error(
      f"{source}: cannot read {what} (nested too deeply, at most {max_depth} levels)"
    ) from None
  except ValueError as e:  # JSONDecodeError, or an integer beyond Python's digit limit
    detail = str(e).splitlines()[0][:200]
    raise error(f"{source}: cannot read {what} ({detail})") from None
  depth = json_depth(value)
  if depth > max_depth:
    raise error(f"{source}: cannot read {what} (nested {depth} levels deep, at most {max_depth})")
  return value


def read_json(
  path: str,
  max_bytes: int,
  *,
  error: type[UserError] = DataError,
  what: str = "JSON",
  max_depth: int = MAX_JSON_DEPTH,
):
  """Reads a JSON file of at most `max_bytes` and `max_depth` levels.

  Raises:
    error: naming the file, if it is missing, special (a FIFO, a device), too large,
      unreadable or not such JSON.
  """
  try:
    raw = read_bounded(path, max_bytes)
  except OSError as e:
    raise error(f"{path}: cannot read {what} ({e.strerror or e})") from None
  return parse_json(raw, path, max_depth, error, what)
