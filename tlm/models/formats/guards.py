"""Guards for reading checkpoint files that may be corrupt or hostile.

Every checkpoint reader treats its input as untrusted: a downloaded checkpoint is a bundle of
files anyone may have written. The helpers here are the pieces several readers share:

- `load_json`: JSON with a bounded size and nesting depth, so that a deeply nested header or
  `config.json` is a one-line `CheckpointError` instead of a `RecursionError` inside the json
  module (`tlm.safe_read`, raising `CheckpointError`; a FIFO or device is never opened).

A file name read from inside a checkpoint is confined to its directory by
`tlm.safe_read.confined_path`, and a string from a file is quoted for a message by
`tlm.safe_read.shown`.
"""

from tlm import safe_read
from tlm.errors import CheckpointError

# No checkpoint JSON nests deeper than a few levels (a safetensors header: 3, an HF config.json
# with task_specific_params: 3); see safe_read.
MAX_JSON_DEPTH = safe_read.MAX_JSON_DEPTH
# HF index and config files are kilobytes; safetensors caps its header at 100 MB.
MAX_JSON_BYTES = 100_000_000


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
