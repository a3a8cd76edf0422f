"""The line-oriented input files (JSON lines, TSV), read as hostile input: every reader names
the file and the line of what is wrong with it.

`iter_jsonl` / `read_jsonl` / `iter_tsv` name the file and line of any malformed line (invalid
UTF-8 and lone surrogates included, a non-object, a missing key) as a one-line `DataError`;
a line is bounded (`MAX_LINE_CHARS`), and a file is opened as a regular file only
(`tlm.safe_read.open_regular`). Local paths and object-store URIs (`tlm.storage`) alike.
"""

import io
import json
import re
from collections.abc import Iterator
from typing import Any

from tlm import safe_read, storage
from tlm.errors import DataError

# The longest line a text input may hold (a JSONL example, a TSV row; a whole news article
# is well under a megabyte): bounds what one line costs in memory.
MAX_LINE_CHARS = 64 << 20

# A str read with errors="surrogateescape" holds the undecodable bytes as U+DC80..U+DCFF, and
# strict UTF-8 never decodes to a surrogate: any surrogate in a raw line is an invalid byte.
_SURROGATE = re.compile("[\ud800-\udfff]")
# Lone surrogates reach a decoded JSON string only through \uXXXX escapes.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _text_lines(path: storage.PathArg) -> Iterator[tuple[int, str]]:
  """Yields `(line number, line)` of a UTF-8 text file; DataError at an invalid byte.

  Undecodable bytes are reported with the line they are on (a plain `open(encoding="utf-8")`
  raises UnicodeDecodeError at some buffer offset instead). Universal newlines, as `open`.
  A line is read at most `MAX_LINE_CHARS` characters at a time: a longer one (a file of
  gigabytes without a newline) is an error, not a MemoryError. A FIFO or device is refused
  unopened (`safe_read.open_regular`).
  """
  path = storage.location(path)
  if not storage.exists(path):
    raise DataError("no such file", path)
  try:
    with _open_text(path) as f:
      line_no = 0
      while line := f.readline(MAX_LINE_CHARS + 1):
        line_no += 1
        if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
          raise DataError(f"line longer than {MAX_LINE_CHARS} characters", path, line_no)
        check_utf8_line(line, path, line_no)
        yield line_no, line
  except OSError as e:
    raise DataError(f"cannot read ({e.strerror})", path) from None


def check_utf8_line(line: str, path: str, line_no: int) -> None:
  """Raises DataError at the first invalid UTF-8 byte of a line decoded with
  errors="surrogateescape" (how `iter_jsonl` and the parallel builders read their inputs)."""
  if not line.isascii():
    bad = _SURROGATE.search(line)
    if bad is not None:
      byte = ord(bad.group(0)) - 0xDC00
      raise DataError(
        f"invalid UTF-8 (byte 0x{byte:02x} at character {bad.start() + 1}); "
        "inputs must be UTF-8 text",
        path,
        line_no,
      )


def _open_text(path: str):
  # open_regular: epath's open takes no errors=, and a FIFO or device is refused unopened.
  binary = safe_read.open_regular(path)
  return io.TextIOWrapper(binary, encoding="utf-8", errors="surrogateescape")


def check_text(value: Any, path: str, line: int) -> None:
  """Raises DataError if a string of a decoded JSON value holds a lone surrogate.

  JSON can spell one (`"\\ud800"`); Python accepts it, but it is not Unicode text: the
  tokenizer and every UTF-8 writer fail on it later, far from the line that caused it.
  """
  stack = [value]  # iterative: a line nested as deep as json allows is no RecursionError here
  while stack:
    value = stack.pop()
    if isinstance(value, str):
      bad = _SURROGATE.search(value)
      if bad is not None:
        raise DataError(
          f"lone surrogate \\u{ord(bad.group(0)):04x} in a string (not Unicode text)", path, line
        )
    elif isinstance(value, dict):
      stack.extend(value.keys())
      stack.extend(value.values())
    elif isinstance(value, list):
      stack.extend(value)


def iter_jsonl(path: str, required: tuple[str, ...] = ()) -> Iterator[tuple[int, dict]]:
  """Yields `(line number, object)` of every non-blank line of a JSON-lines file.

  Args:
    path: the file.
    required: keys every object must have.

  Raises:
    DataError: naming the file and line of invalid UTF-8, a malformed line, a non-object, a
      lone surrogate in a string, or a missing key (only when that line is reached: callers
      that must not half-process a file collect everything first).
  """
  for line_no, line in _text_lines(path):
    obj = parse_jsonl_line(line, path, line_no, required)
    if obj is not None:
      yield line_no, obj


def parse_jsonl_line(
  line: str, path: str, line_no: int, required: tuple[str, ...] = ()
) -> dict | None:
  """One line of a JSON-lines file, its UTF-8 already checked (`check_utf8_line`): None if
  blank, else the object; DataError naming the file and line as `iter_jsonl`."""
  if not line.strip():
    return None
  try:
    obj = json.loads(line)
  except json.JSONDecodeError as e:
    raise DataError(f"malformed JSON ({e.msg})", path, line_no) from None
  except RecursionError:
    raise DataError("malformed JSON (nested too deeply)", path, line_no) from None
  except ValueError as e:  # an integer beyond Python's digit limit (4300 digits)
    raise DataError(f"malformed JSON ({str(e)[:120]})", path, line_no) from None
  if not isinstance(obj, dict):
    raise DataError("expected a JSON object", path, line_no)
  if _SURROGATE_ESCAPE.search(line):  # rare: only then walk the object
    check_text(obj, path, line_no)
  missing = [k for k in required if k not in obj]
  if missing:
    raise DataError(f"missing field(s) {', '.join(map(repr, missing))}", path, line_no)
  return obj


def iter_tsv(path: str) -> Iterator[tuple[int, list[str]]]:
  """Yields `(line number, columns)` of every non-blank line of a tab-separated file.

  Raises:
    DataError: if the file does not exist or a line is not UTF-8 (callers validate the
      columns, naming the line).
  """
  for line_no, line in _text_lines(path):
    line = line.rstrip("\n").rstrip("\r")
    if line.strip():
      yield line_no, line.split("\t")


def read_jsonl(path: str, required: tuple[str, ...] = ()) -> list[dict]:
  """Reads a JSON-lines file; blank lines are skipped.

  Args:
    path: the file.
    required: keys every object must have.

  Returns:
    The objects, in file order.

  Raises:
    DataError: naming the file and line of a malformed line, a non-object, or a missing key.
  """
  return [obj for _, obj in iter_jsonl(path, required)]
