"""What tlm prints for a person to read: progress lines on stdout, notices and warnings on stderr.

One home for the three kinds of line, so that every module prints them the same way: at once
(flushed, also when the stream is a pipe or a file, as on a cluster), and warnings and notices
with their prefix, which the tests and a reader of a log grep for.
"""

import sys


def log_line(text: str) -> None:
  """Prints a progress line at once, also when stdout is a pipe or a file (cluster logs)."""
  print(text, flush=True)


def warn(message: str) -> None:
  """Prints a one-line warning on stderr: something was wrong and tlm went on without it."""
  print(f"warning: {message}", file=sys.stderr, flush=True)


def notice(message: str) -> None:
  """Prints a one-line notice on stderr: expected, but worth knowing (a torn last line, a
  conversion done once)."""
  print(f"notice: {message}", file=sys.stderr, flush=True)
