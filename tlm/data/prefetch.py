"""Batches of the next steps built on a background thread, off the training step's path.

The input pipeline's role in T5X / big_vision (a `tf.data` or Grain iterator with prefetch),
kept to what tlm needs: a batch is a pure function of its step (`tlm.data.sampling`), so a
thread computes `fn(step)` for the steps after the one asked for, at most `depth` ahead, and
hands them out in order. Nothing about the stream changes: the batch of step s is the same
whether it was prefetched, asked for after a jump, or built after a resume. A request for any
other step than the next one (a resume, an evaluation's own batches) restarts the thread there.
An exception in `fn` (a damaged store file) is raised by `get` of the step that hit it.

numpy releases the GIL in its array work and the step's device computation runs outside
Python, so one thread overlaps most of a batch's cost with the step; the loop logs how long it
still waited (`input_wait_share` in metrics.jsonl).
"""

import queue
import threading
from collections.abc import Callable
from typing import Any

_POLL_S = 0.1


class Prefetcher:
  """Serves `fn(step)` for increasing steps, computed ahead on a daemon thread.

  Args:
    fn: a pure function of the step (called only on the thread while one runs).
    depth: batches computed ahead of the one being consumed.
    end: the first step not to compute (None: no end).
  """

  def __init__(self, fn: Callable[[int], Any], depth: int = 2, end: int | None = None):
    if depth < 1:
      raise ValueError(f"depth must be >= 1, got {depth}")
    self._fn, self._depth, self._end = fn, depth, end
    self._thread: threading.Thread | None = None
    self._queue: queue.Queue | None = None
    self._stop = threading.Event()
    self._next: int | None = None

  def _run(self, start: int, q: queue.Queue, stop: threading.Event) -> None:
    step = start
    while not stop.is_set() and (self._end is None or step < self._end):
      try:
        item = (step, self._fn(step), None)
      except BaseException as e:  # handed to the consumer, which raises it
        item = (step, None, e)
      while not stop.is_set():
        try:
          q.put(item, timeout=_POLL_S)
          break
        except queue.Full:
          continue
      if item[2] is not None:
        return
      step += 1

  def _restart(self, step: int) -> None:
    self.close()
    self._stop = threading.Event()
    self._queue = queue.Queue(maxsize=self._depth)
    self._thread = threading.Thread(
      target=self._run, args=(step, self._queue, self._stop), name="tlm-prefetch", daemon=True
    )
    self._thread.start()
    self._next = step

  def get(self, step: int):
    """`fn(step)`, prefetched when `step` follows the previous request."""
    if self._thread is None or step != self._next or (self._end is not None and step >= self._end):
      if self._end is not None and step >= self._end:
        return self._fn(step)
      self._restart(step)
    got, value, error = self._queue.get()
    if got != step:  # cannot happen: the thread produces consecutive steps from `_next`
      raise AssertionError(f"prefetched step {got}, expected {step}")
    if error is not None:
      self.close()
      raise error
    self._next = step + 1
    return value

  def close(self) -> None:
    """Stops the thread (it finishes the batch it is building)."""
    if self._thread is None:
      return
    self._stop.set()
    self._thread.join()
    self._thread = self._queue = self._next = None
