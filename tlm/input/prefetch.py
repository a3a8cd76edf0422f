"""Batches of the next steps built on background threads, off the training step's path.

The input pipeline's role in T5X / big_vision (a `tf.data` or Grain iterator with prefetch),
kept to what tlm needs: a batch is a pure function of its step (`tlm.input.sampling`), so a
pool of `workers` threads computes `fn(step)` for the steps after the one asked for, at most
`depth` ahead, and hands them out in order. Nothing about the stream changes: the batch of step
s is the same whether it was prefetched, built beside others, asked for after a jump, or built
after a resume. A request for any other step than the next one (a resume, an evaluation's own
batches) restarts the read-ahead there. An exception in `fn` (a damaged store file, a read that
failed after its retries) is raised by `get` of the step that hit it.

numpy releases the GIL in its array work, the step's device computation runs outside Python,
and an object store's requests are mostly waiting: one worker overlaps a local batch's cost
with the step; several steps in flight at once hide an object store's latency (a batch that
waits 0.3 s for its reads costs 0.3 s / workers per step). The loop logs how long it still
waited (`input_wait_share` in metrics.jsonl).
"""

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class Prefetcher:
  """Serves `fn(step)` for increasing steps, computed ahead on a pool of daemon threads.

  Args:
    fn: a pure function of the step, safe to call from several threads at once when
      `workers` > 1.
    depth: batches computed ahead of the one being consumed.
    end: the first step not to compute ahead (None: no end).
    workers: threads computing batches at once (at most `depth` + 1 are in flight).
  """

  def __init__(
    self, fn: Callable[[int], Any], depth: int = 2, end: int | None = None, workers: int = 1
  ):
    if depth < 1 or workers < 1:
      raise ValueError(f"depth and workers must be >= 1, got {depth} and {workers}")
    self._fn, self._depth, self._end, self._workers = fn, depth, end, workers
    self._pool: ThreadPoolExecutor | None = None
    self._futures: dict[int, Future] = {}
    self._next: int | None = None

  def _top_up(self, step: int) -> None:
    """Submits the steps from `step` to `step + depth` not yet in flight."""
    for s in range(step, step + self._depth + 1):
      if s not in self._futures and (self._end is None or s < self._end):
        self._futures[s] = self._pool.submit(self._fn, s)

  def get(self, step: int):
    """`fn(step)`, prefetched when `step` follows the previous request."""
    if self._end is not None and step >= self._end:
      return self._fn(step)
    if self._pool is None or step != self._next:
      self.close()
      self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="tlm-prefetch")
    self._top_up(step)
    future = self._futures.pop(step)
    try:
      value = future.result()
    except BaseException:
      self.close()
      raise
    self._next = step + 1
    self._top_up(step + 1)
    return value

  def close(self) -> None:
    """Stops the read-ahead (the batches being built are finished and dropped)."""
    if self._pool is None:
      return
    for future in self._futures.values():
      future.cancel()
    self._pool.shutdown(wait=True)
    self._pool, self._futures, self._next = None, {}, None
