"""Preemption: SIGTERM makes a training run save the current step and stop, on every process
at the same step.

On one process a SIGTERM handler sets a flag the loop reads at each step boundary; on several,
jax.distributed's preemption service turns a SIGTERM on any host into the same sync point on
all of them (`multihost_utils.reached_preemption_sync_point`).
"""

import signal
import threading

import jax

from tlm.errors import UserError


class Preempted(UserError):
  """The run received SIGTERM and saved a checkpoint at the current step."""


class Preemption:
  """SIGTERM -> save and stop at the next step boundary, agreed by every process."""

  def __init__(self):
    self.requested = False
    self._previous = None
    self._multi = jax.process_count() > 1
    if not self._multi and threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, signum, frame):
    self.requested = True

  def reached(self, step: int) -> bool:
    """Whether the run stops before `step` (the same answer on every process)."""
    if self._multi:
      from jax.experimental import multihost_utils

      return multihost_utils.reached_preemption_sync_point(step)
    return self.requested

  def close(self) -> None:
    """Restores the SIGTERM handler that was there before."""
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)
