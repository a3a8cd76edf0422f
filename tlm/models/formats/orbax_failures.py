"""What a failed orbax save leaves behind, handled: its reports stay off the terminal (tlm
reports the failure itself, as one line) and its writers are waited for before cleaning up.

When a save fails (a full disk, a permission), orbax's background threads each log the
exception with its traceback (`_SignalingThread.run() raised an exception`, `Failed to run ...
Handler Commit operations ... in background save thread`, `Save Finalize thread ... failed`:
hundreds of lines for one full disk), asyncio logs orbax's abandoned tasks at exit (`Task
exception was never retrieved`, or `Future exception ...` for tensorstore's failure set on a
future orbax wrapped), and tensorstore's pending callbacks, arriving at the event
loop orbax closed, print `RuntimeError: Event loop is closed` through `sys.unraisablehook`.
Each of those exceptions is also stored by orbax and raised again in the thread that waits for
the save, where tlm turns it into its one-line `CheckpointError` (`tlm.train.checkpointing`) or
`OutputError` (`tlm.files`), so the terminal shows that line alone.

What `install` drops, and only that: ERROR records whose exception (or one it was raised from)
is a failed file operation (`tlm.files.io_error_reason`) raised in orbax's code, logged by
orbax or by asyncio for one of orbax's tasks, and the unraisable `RuntimeError("Event loop is
closed")` raised in asyncio's `call_soon_threadsafe`. Any other orbax error (a bug, a mismatched
tree) is logged as before.

A failed restore leaves the other arrays' TensorStore reads in flight in the same way; their
callbacks are dropped by the same hook, `settle_callbacks` waits for them to stop arriving
before tlm reports the failure, and asyncio's reports of those reads' own exceptions ("Task
exception was never retrieved": Orbax stopped awaiting them at the first failure) are dropped
once a restore has failed.

Orbax raises the first failed write while its other writers (its `_SignalingThread`s, and
tensorstore's own threads under them) still run: `join_writers` waits for orbax's threads and
`settle` until nothing changes in the directory being written any more, so that what the failed
save left is removed for good instead of being written again after the removal.
"""

import contextlib
import gc
import logging
import os
import sys
import threading
import time
import warnings

from tlm.files import io_error_reason

_installed = False
# When the last callback of a closed event loop arrived (time.monotonic()), for
# `settle_callbacks`.
_last_closed_loop_callback = [0.0]
# Whether a restore has failed in this process (`settle_callbacks`), for `_AbandonedReads`.
_restore_failed = [False]


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
    # asyncio's "Future exception was never retrieved" for a future orbax wrapped around
    # tensorstore's: the exception was set on it, never raised, so it has no traceback to
    # show where it came from; tensorstore reports a failed write as such a ValueError
    # (seen under load, when the future is collected before orbax's last writer returns).
    by_orbax = (
      by_orbax
      or record.name == "asyncio"
      and any(type(e) is ValueError and e.__traceback__ is None for e in chain)
    )
    return not (by_orbax and any(io_error_reason(e) is not None for e in chain))


def _raised_in_asyncio_only(e: BaseException) -> bool:
  """Whether every frame `e` went through is asyncio's: it was raised by an awaitable written
  in C, such as a TensorStore future, which asyncio awaited for one of Orbax's tasks; or it
  was never raised at all, only set on a future Orbax wrapped around TensorStore's (no
  traceback: asyncio logs "Future exception was never retrieved")."""
  tb = e.__traceback__
  while tb is not None:
    if f"{os.sep}asyncio{os.sep}" not in tb.tb_frame.f_code.co_filename:
      return False
    tb = tb.tb_next
  return True


class _AbandonedReads(logging.Filter):
  """After a failed restore (`settle_callbacks`), drops asyncio's ERROR records of the other
  reads' exceptions: Orbax stopped awaiting those tasks at the first failure, so asyncio logs
  each exception, never retrieved, with its traceback when the task is collected."""

  def filter(self, record: logging.LogRecord) -> bool:
    if not _restore_failed[0] or record.levelno < logging.ERROR or not record.exc_info:
      return True
    return not _raised_in_asyncio_only(record.exc_info[1])


def _closed_loop_callback(unraisable) -> bool:
  """The unraisable RuntimeError of a callback sent to an event loop orbax has closed.

  asyncio has no exception type of its own for a closed loop: it is told by where the
  RuntimeError was raised, `_check_closed` (which raises nothing else) called by
  `call_soon_threadsafe` (tensorstore's callbacks), not by its text.
  """
  if unraisable.exc_type is not RuntimeError:
    return False
  frames = []
  tb = unraisable.exc_traceback
  while tb is not None:
    frames.append(tb.tb_frame.f_code)
    tb = tb.tb_next
  asyncio_dir = f"{os.sep}asyncio{os.sep}"
  return (
    len(frames) >= 2
    and [code.co_name for code in frames[-2:]] == ["call_soon_threadsafe", "_check_closed"]
    and all(asyncio_dir in code.co_filename for code in frames[-2:])
  )


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
      # orbax's join raises the thread's failure, or CancelledError for one `stop_writers`
      # stopped: the failure is the caller's to report, once.
      with contextlib.suppress(Exception):
        thread.join(max(0.0, deadline - time.monotonic()))


def stop_writers(timeout: float = 60.0) -> None:
  """After a save failed: stops orbax's writer threads that are left, then waits for them
  (`join_writers`).

  Orbax's writer threads (`_SignalingThread`) wait for each other through signals: one waits
  until the threads it depends on have signalled their part done. A thread that failed never
  signals, so those waiting for it would wait out orbax's coordination timeout (300 s), and
  the process, which cannot exit while they run, with them: on an object store, whose failure
  stops a write half-way, that is what a failed save looked like (minutes of silence after the
  error). Each thread still running is cancelled (orbax's own `cancel`: a thread that has not
  begun its work will not begin it; one at work has its task cancelled) and the signals it
  waits for are set, so that it wakes, sees itself cancelled and ends.
  """
  try:
    from orbax.checkpoint._src.futures import future
  except ImportError:  # another orbax: only waited for
    future = None
  # The coroutine of a thread stopped before it began, made when orbax made the thread, is
  # collected unrun: Python's "coroutine ... was never awaited" at exit is about those.
  warnings.filterwarnings("ignore", r"coroutine '.*' was never awaited", RuntimeWarning)
  for thread in threading.enumerate():
    kind = type(thread)
    if not (kind.__module__.startswith("orbax.") and kind.__name__ == "_SignalingThread"):
      continue
    with contextlib.suppress(Exception):
      thread.cancel()
      if future is not None:
        future.set_signals(thread._receive_signals, operation_id=thread._operation_id)
  join_writers(timeout)


def _snapshot(directory: str, prefix: str) -> set:
  out = set()
  with contextlib.suppress(OSError):
    tops = [n for n in os.listdir(directory) if n.startswith(prefix)]
    for name in tops:
      out.add(name)
      for top, dirs, names in os.walk(os.path.join(directory, name)):
        for entry in dirs + names:
          with contextlib.suppress(OSError):
            st = os.lstat(os.path.join(top, entry))
            out.add((top, entry, st.st_size, st.st_mtime_ns))
  return out


def settle(directory: str, prefix: str = "", quiet_s: float = 0.25, timeout_s: float = 10.0):
  """Waits until nothing under the local `directory` (its entries starting with `prefix`) has
  changed for `quiet_s` seconds, at most `timeout_s` in all: the in-flight writes of a failed
  save have then ended. Only on the failure path; on an object store the uncommitted objects
  are removed by their prefix anyway."""
  deadline = time.monotonic() + timeout_s
  last, quiet_since = None, time.monotonic()
  while time.monotonic() < deadline:
    now = _snapshot(directory, prefix)
    if now != last:
      last, quiet_since = now, time.monotonic()
    elif time.monotonic() - quiet_since >= quiet_s:
      return
    time.sleep(0.05)


def settle_callbacks(quiet_s: float = 0.2, timeout_s: float = 2.0) -> None:
  """After a failed restore: waits until TensorStore's callbacks for the reads still in flight
  have stopped arriving (none for `quiet_s` seconds, at most `timeout_s` in all), so that they
  reach the hook `install` set while tlm still runs, not the interpreter's exit.

  Orbax runs a restore's reads as asyncio tasks over TensorStore futures and closes its event
  loop as soon as one fails; the others' reads go on in TensorStore's threads and, as each
  ends, call the closed loop. Neither Orbax nor TensorStore hands out those futures to wait
  for, so their arrivals are what is watched.
  """
  _restore_failed[0] = True
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    if time.monotonic() - max(_last_closed_loop_callback[0], deadline - timeout_s) >= quiet_s:
      break
    time.sleep(0.02)
  # The abandoned tasks that have finished are collected now, their exceptions' reports
  # dropped by `_AbandonedReads`, rather than at some later collection or at exit.
  gc.collect()


def install() -> None:
  """Installs the log filter and the unraisable hook (once per process)."""
  global _installed
  if _installed:
    return
  _installed = True
  for logger in ("absl", "asyncio"):
    logging.getLogger(logger).addFilter(_ReportedWriteFailures())
  logging.getLogger("asyncio").addFilter(_AbandonedReads())
  previous = sys.unraisablehook

  def hook(unraisable) -> None:
    if _closed_loop_callback(unraisable):
      _last_closed_loop_callback[0] = time.monotonic()
    else:
      previous(unraisable)

  sys.unraisablehook = hook
