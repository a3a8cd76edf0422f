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
  line naming the file, raised as the `UserError` subclass the caller names. Where `NAME` is
  missing and `NAME.xz` is there (the committed results keep their large per-query dumps so:
  docs/results/README.md), the compressed file is read instead, its decompressed size bounded
  the same way (`read_bounded_xz`).

- `read_json_object`: the same, for a file that must hold a JSON object.
- `confined_path`: a file name read from inside a checkpoint (a `weight_map` shard, the
  `model_checkpoint_path` of a TF `checkpoint` state file, an entry of tlm's checksum
  manifest) resolved in the checkpoint directory, refusing names that lead out of it or to a
  special file, so that an index cannot make tlm open `/etc/passwd`, `../../secret` or a FIFO.
- `shown`: a string from a file, made safe to put into a one-line error message.

Pure Python: the data layer and `tlm.checksums` use it without jax.
"""

import errno
import json
import lzma
import os
import re
import stat
from typing import IO

from tlm import storage
from tlm.errors import CheckpointError, DataError, UserError

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


def open_regular(path: storage.PathArg) -> IO[bytes]:
  """Opens `path` for binary reading if it is a regular file (links followed).

  Raises:
    NotARegularFile: a FIFO, device, socket or directory (never opened).
    OSError: it cannot be opened (missing, permissions), or the name holds a NUL.
  """
  path = storage.location(path)
  if path.is_remote:  # an object store holds plain objects only
    return storage.open_file(path, "rb")
  local = path
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


def regular_size(path: storage.PathArg) -> int:
  """The size of a regular file (links followed), read without opening it.

  Raises:
    NotARegularFile: a FIFO, device, socket or directory.
    OSError: it does not exist or cannot be examined, or the name holds a NUL.
  """
  path = storage.location(path)
  if path.is_remote:
    return storage.getsize(path)
  local = path
  if "\0" in local:
    raise OSError(errno.EINVAL, "a NUL character in the file name", path)
  st = os.stat(local)
  require_regular(st.st_mode, path)
  return st.st_size


_BLOCK = 1 << 24  # bytes read at once where a file's size is unknown or has grown


def open_size(f) -> int | None:
  """The size of an open file: its descriptor's, or an object store file's; None if unknown."""
  try:
    return os.fstat(f.fileno()).st_size
  except (AttributeError, OSError, ValueError):  # no descriptor (io.UnsupportedOperation)
    size = getattr(f, "size", None)
    return size if isinstance(size, int) else None


def read_bounded(path: str, max_bytes: int) -> bytes:
  """The bytes of a regular file of at most `max_bytes`, reading at most one byte more.

  `max_bytes` is what the file's format can legitimately need (docs/operations.md lists each
  reader's bound), never the file's own size: a larger file is refused by its size, unread.

  Raises:
    FileTooLarge: the file holds more than `max_bytes`.
    OSError: as `open_regular`.
  """
  with open_regular(path) as f:
    # Refused by its size before a byte is read: a sparse file of gigabytes below the bound
    # would otherwise be allocated up to the bound first.
    if (size := open_size(f)) is not None and size > max_bytes:
      raise FileTooLarge(errno.EFBIG, f"larger than {max_bytes} bytes", path)
    # `read(n)` allocates n bytes before reading: a generous bound must not cost its size. The
    # file's size first (one read), then blocks, should it have grown since.
    blocks, total = [], 0
    want = _BLOCK if size is None else size + 1
    while total <= max_bytes:
      block = f.read(min(want, max_bytes + 1 - total))
      if not block:
        break
      blocks.append(block)
      total += len(block)
      want = _BLOCK
    raw = b"".join(blocks)
  if len(raw) > max_bytes:
    raise FileTooLarge(errno.EFBIG, f"larger than {max_bytes} bytes", path)
  return raw


# The suffix of a file kept compressed (XZ), read in place of the missing plain file.
XZ_SUFFIX = ".xz"


def read_bounded_xz(path: str, max_bytes: int) -> bytes:
  """The decompressed bytes of an XZ file, at most `max_bytes` of them (and of the file).

  The output is bounded while it is decompressed (`max_length`), so a small file that expands
  without end is refused at the bound, not after filling memory.

  Raises:
    FileTooLarge: the file, or what it decompresses to, holds more than `max_bytes`.
    OSError: as `open_regular`, or `EINVAL` for a file that is not whole XZ.
  """
  raw = read_bounded(path, max_bytes)
  decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
  try:
    out = decompressor.decompress(raw, max_length=max_bytes + 1)
  except lzma.LZMAError as e:
    raise OSError(errno.EINVAL, f"not XZ data ({e})", path) from None
  if len(out) > max_bytes:
    raise FileTooLarge(errno.EFBIG, f"decompresses to more than {max_bytes} bytes", path)
  if not decompressor.eof or decompressor.unused_data:
    raise OSError(errno.EINVAL, "not one whole XZ stream", path)
  return out


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

  A missing `path` whose `path.xz` exists is read from that (`read_bounded_xz`, the same
  bound on the decompressed bytes).

  Raises:
    error: naming the file, if it is missing, special (a FIFO, a device), too large,
      unreadable or not such JSON.
  """
  compressed = storage.location(path) + XZ_SUFFIX
  if not storage.exists(path) and storage.exists(compressed):
    path = compressed
  try:
    raw = read_bounded_xz(path, max_bytes) if path is compressed else read_bounded(path, max_bytes)
  except OSError as e:
    raise error(f"{path}: cannot read {what} ({e.strerror or e})") from None
  return parse_json(raw, path, max_depth, error, what)


def read_json_object(
  path: str,
  max_bytes: int,
  *,
  error: type[UserError] = DataError,
  what: str = "JSON",
  max_depth: int = MAX_JSON_DEPTH,
) -> dict:
  """`read_json` of a file that must hold a JSON object.

  Raises:
    error: as `read_json`, and `path: cannot read WHAT (not a JSON object)` for any other value.
  """
  value = read_json(path, max_bytes, error=error, what=what, max_depth=max_depth)
  if not isinstance(value, dict):
    raise error(f"{path}: cannot read {what} (not a JSON object)")
  return value


def shown(text, limit: int = 80) -> str:
  """`text` (from a file) quoted for a one-line message: control characters escaped, cut."""
  text = repr(text) if isinstance(text, (str, bytes)) else repr(str(text))
  return text if len(text) <= limit else text[: limit - 4] + "...'"


def _hub_blobs(directory: str) -> "storage.Location | None":
  """`.../models--x/blobs` for an HF hub cache snapshot `.../models--x/snapshots/REV`."""
  parent = os.path.dirname(directory)
  if os.path.basename(parent) != "snapshots":
    return None
  return storage.Location(os.path.join(os.path.dirname(parent), "blobs"), None)


def confined_path(directory: str, name, source: str, *, refuse_special: bool = True) -> str:
  """The file `name` (read from inside a checkpoint) in `directory`, which it must not leave.

  The name must be a relative path without `..` components; the file it names may be a
  symlink only to a file inside `directory`, or, when `directory` is a snapshot of the HF hub
  cache (`.../snapshots/REV`, whose files are symlinks to `../../blobs/HASH`), to a blob of
  that cache. In a remote `directory` (`gs://...`: no symlinks) the name must not be a URI.

  Args:
    directory: the checkpoint directory.
    name: the file name as read from the index or state file.
    source: the index or state file, named in errors.
    refuse_special: refuse a name that is a FIFO, device or socket (a regular file or a
      directory is fine); False for a caller that checks each file itself, when it reads it.

  Returns:
    `directory/name`.

  Raises:
    CheckpointError: `source: ...` if the name is not a string, leads out of `directory` or
      names a special file (a FIFO, a device, a socket).
  """
  if not isinstance(name, str):
    raise CheckpointError(f"{source}: file name {shown(name)} is not a string")
  parts = re.split(r"[\\/]", name)
  directory = storage.location(directory)
  remote = directory.is_remote
  if (
    not name
    or "\0" in name
    or os.path.isabs(name)
    or ".." in parts
    or re.match(r"^\w:", name)
    # In a bucket, a URI (`gs://other-bucket/x`) would name another object store location.
    or (remote and storage.scheme(name) is not None)
  ):
    raise CheckpointError(
      f"{source}: file name {shown(name)} leads outside the checkpoint directory"
    )
  if remote:
    # An object store has no symlinks: a relative key without `..` stays under the prefix.
    return storage.join(directory, name)
  path = os.path.join(directory, name)
  # Real paths are local by construction: Locations made as such, not decided again.
  real_dir = storage.Location(os.path.realpath(directory), None)
  real = storage.Location(os.path.realpath(path), None)
  blobs = _hub_blobs(real_dir)
  if not storage.within(real, real_dir) and not (blobs is not None and storage.within(real, blobs)):
    raise CheckpointError(
      f"{source}: file name {shown(name)} is a link that leads outside the checkpoint directory"
    )
  # A FIFO would block the reader, a device never end: neither is ever opened. (A missing file
  # is the reader's to report; a directory, say a zarr array's, its to read.)
  if refuse_special:
    try:
      mode = os.stat(path).st_mode
    except (OSError, ValueError):
      mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
      raise CheckpointError(f"{source}: file name {shown(name)} is {kind(mode)}, not a file")
  return path
