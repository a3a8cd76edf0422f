"""Orbax's own reports of a failed write, kept off the terminal: tlm reports the failure itself.

When a save fails (a full disk, a permission), orbax's background threads each log the
exception with its traceback (`_SignalingThread.run() raised an exception`, `Failed to run ...
Handler Commit operations ... in background save thread`, `Save Finalize thread ... failed`:
hundreds of lines for one full disk), and tensorstore's pending callbacks, arriving at the
event loop orbax closed when the write failed, print `RuntimeError: Event loop is closed`
tracebacks through `sys.unraisablehook`. Each of those exceptions is also stored by orbax and
raised again in the thread that waits for the save, where tlm turns it into its one-line
`CheckpointError` (`tlm.train.checkpointing`) or `OutputError` (`tlm.files`), so the terminal
shows that line alone.

What is dropped, and only that: ERROR records whose exception (or one it was raised from) is a
failed file operation (`tlm.files.io_error_reason`) raised in orbax's code, logged by orbax or
by asyncio for one of orbax's tasks (`Task exception was never retrieved`, at exit), and the
unraisable `RuntimeError("Event loop is closed")` raised in asyncio's `call_soon_threadsafe`.
Any other orbax error (a bug, a mismatched tree) is logged as before. Orbax raises the first
failed write while its other writers still run: `join_writers` waits for them before tlm
removes what the failed save left, so that none of them fails later, into a removed directory.
"""

import logging
import os
import sys
import threading
import time

from tlm.files import io_error_reason

_installed = False


def _chain(e: BaseException | None):
  seen = set()
  while e is not None and id(e) not in seen:
    seen.add(id(e))
    yield e
    e = e.__cause__ or e.__context__


def _in_orbax(e: BaseException) -> bool:
  tb = e.__traceback__
  while tb is not None:
    if f"{os.sep}orbax{os.sep}" in tb.tb_frame.f_code.co_filename:
      return True
    tb = tb.tb_next
  return False


class _ReportedWriteFailures(logging.Filter):
  """Drops an ERROR record of a failed file write raised in orbax's code: logged by orbax
  itself, or by asyncio for one of orbax's tasks ("Task exception was never retrieved")."""

  def filter(self, record: logging.LogRecord) -> bool:
    if record.levelno < logging.ERROR or not record.exc_info:
      return True
    chain = list(_chain(record.exc_info[1]))
    by_orbax = f"{os.sep}orbax{os.sep}" in record.pathname or any(map(_in_orbax, chain))
    return not (by_orbax and any(io_error_reason(e) is not None for e in chain))


def _closed_loop_callback(unraisable) -> bool:
  """The unraisable RuntimeError of a callback sent to an event loop orbax has closed."""
  if unraisable.exc_type is not RuntimeError or str(unraisable.exc_value) != (
    "Event loop is closed"
  ):
    return False
  tb = unraisable.exc_traceback
  while tb is not None:
    code = tb.tb_frame.f_code
    if code.co_name == "call_soon_threadsafe" and "asyncio" in code.co_filename:
      return True
    tb = tb.tb_next
  return False


def join_writers(timeout: float = 60.0) -> None:
  """Waits (at most `timeout` seconds in all) for orbax's writer threads still running.

  When one write of a save fails, orbax raises at once while the writes of the other arrays
  go on (its `_SignalingThread`s); a caller that cleans up after the failure waits for them
  first, so that none writes into a directory being removed, or reports after tlm's line.
  """
  deadline = time.monotonic() + timeout
  for thread in threading.enumerate():
    kind = type(thread)
    if kind.__module__.startswith("orbax.") and kind.__name__ == "_SignalingThread":
      thread.join(max(0.0, deadline - time.monotonic()))


def install() -> None:
  """Installs the log filter and the unraisable hook (once per process)."""
  global _installed
  if _installed:
    return
  _installed = True
  for logger in ("absl", "asyncio"):
    logging.getLogger(logger).addFilter(_ReportedWriteFailures())
  previous = sys.unraisablehook

  def hook(unraisable) -> None:
    if not _closed_loop_callback(unraisable):
      previous(unraisable)

  sys.unraisablehook = hook
