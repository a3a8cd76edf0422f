"""Guards for reading checkpoint files that may be corrupt or hostile.

Every checkpoint reader treats its input as untrusted: a downloaded checkpoint is a bundle of
files anyone may have written. The helpers here are the pieces several readers share:

- `load_json`: JSON with a bounded size and nesting depth, so that a deeply nested header or
  `config.json` is a one-line `CheckpointError` instead of a `RecursionError` inside the json
  module (`tlm.safe_read`, raising `CheckpointError`; a FIFO or device is never opened).
- `confined_path`: a file name read from inside a checkpoint (a `weight_map` shard, the
  `model_checkpoint_path` of a TF `checkpoint` state file, an entry of tlm's checksum
  manifest) resolved in the checkpoint directory, refusing names that lead out of it or to a
  special file, so that an index cannot make tlm open `/etc/passwd`, `../../secret` or a FIFO.
- `shown`: a string from a file, made safe to put into a one-line error message.
"""

import os
import re
import stat

from tlm import safe_read, storage
from tlm.errors import CheckpointError

# No checkpoint JSON nests deeper than a few levels (a safetensors header: 3, an HF config.json
# with task_specific_params: 3); see safe_read.
MAX_JSON_DEPTH = safe_read.MAX_JSON_DEPTH
# HF index and config files are kilobytes; safetensors caps its header at 100 MB.
MAX_JSON_BYTES = 100_000_000


def shown(text, limit: int = 80) -> str:
  """`text` (from a file) quoted for a one-line message: control characters escaped, cut."""
  text = repr(text) if isinstance(text, (str, bytes)) else repr(str(text))
  return text if len(text) <= limit else text[: limit - 4] + "...'"


def json_depth(value) -> int:
  """The deepest nesting of lists and dicts in a parsed JSON value (a scalar is 0), iteratively."""
  return safe_read.json_depth(value)


def parse_json(raw: bytes, source: str, max_depth: int = MAX_JSON_DEPTH):
  """Parses UTF-8 JSON bytes whose nesting is at most `max_depth` (`safe_read.parse_json`).

  Args:
    raw: the JSON text.
    source: the file (and what in it) to name in errors, e.g. `.../model.safetensors`.
    max_depth: the deepest nesting of arrays and objects allowed.

  Returns:
    The parsed value.

  Raises:
    CheckpointError: `source: ...` in one line for invalid UTF-8, invalid JSON (including
      integers beyond Python's digit limit) or nesting deeper than `max_depth`.
  """
  return safe_read.parse_json(raw, source, max_depth, CheckpointError)


def load_json(path: str, max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH):
  """Reads a JSON file of at most `max_bytes` and `max_depth` levels.

  Raises:
    CheckpointError: naming the file, if it cannot be read, is too large, is not a regular
      file (a FIFO, a device) or is not JSON.
  """
  return parse_json(read_bounded(path, max_bytes, "JSON"), path, max_depth)


def read_bounded(path: str, max_bytes: int, what: str) -> bytes:
  """The bytes of a small regular file, reading at most `max_bytes` + 1 of them.

  Raises:
    CheckpointError: naming the file and `what` it should be, if it cannot be read, is not a
      regular file (a FIFO or a device is never opened) or is larger than `max_bytes`.
  """
  try:
    return safe_read.read_bounded(path, max_bytes)
  except OSError as e:
    raise CheckpointError(f"{path}: cannot read {what} ({e.strerror or e})") from None


def _inside(path: str, root: str) -> bool:
  return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _hub_blobs(directory: str) -> str | None:
  """`.../models--x/blobs` for an HF hub cache snapshot `.../models--x/snapshots/REV`."""
  parent = os.path.dirname(directory)
  if os.path.basename(parent) != "snapshots":
    return None
  return os.path.join(os.path.dirname(parent), "blobs")


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
  remote = storage.is_remote(directory)
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
  real_dir = os.path.realpath(directory)
  real = os.path.realpath(path)
  blobs = _hub_blobs(real_dir)
  if not _inside(real, real_dir) and not (blobs is not None and _inside(real, blobs)):
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
      kind = safe_read.kind(mode)
      raise CheckpointError(f"{source}: file name {shown(name)} is {kind}, not a file")
  return path
