"""`train.profile_steps=START,END`: a jax.profiler trace of steps START..END-1 in WORKDIR/profile/.

The trace starts before step START is dispatched and stops once step END-1 has finished on the
device, so it holds exactly those steps (each inside a `StepTraceAnnotation`, which
TensorBoard's profile plugin uses to split the timeline); nothing is traced outside the window.
A run resumed inside the window traces from its first step. Only process 0 traces. The files
are `WORKDIR/profile/plugins/profile/<run>/<host>.xplane.pb`, the layout TensorBoard's profile
plugin reads (`tensorboard --logdir=WORKDIR/profile`); Perfetto opens the trace through it.
"""

import contextlib

import jax

from tlm import storage
from tlm.errors import ConfigError


def profile_dir(workdir: storage.PathArg) -> storage.Location:
  """WORKDIR/profile."""
  # jax.profiler writes the trace itself, through its own file layer (gs:// untested here).
  return storage.abspath(workdir) / "profile"


def check_window(steps: tuple[int, ...], train_steps: int) -> tuple[int, int] | None:
  """(START, END) of `train.profile_steps`, or None when empty.

  Args:
    steps: `train.profile_steps`.
    train_steps: `train.steps`: the run's steps are 0..train_steps-1.

  Raises:
    ConfigError: unless it is two steps with 0 <= START < END and START < train.steps (a
      window that opens after the last step would trace nothing, silently).
  """
  if not steps:
    return None
  if len(steps) != 2 or not 0 <= steps[0] < steps[1]:
    raise ConfigError(
      f"train.profile_steps must be START,END with 0 <= START < END, got {list(steps)}"
    )
  if steps[0] >= train_steps:
    raise ConfigError(
      f"train.profile_steps={steps[0]},{steps[1]} starts after the last step of "
      f"train.steps={train_steps} (steps 0..{train_steps - 1}): nothing would be traced"
    )
  return int(steps[0]), int(steps[1])


class ProfileWindow:
  """Starts and stops the trace around the loop's steps.

  Args:
    window: (START, END) or None.
    workdir: the training workdir.
    enabled: False on processes other than 0.
  """

  def __init__(self, window: tuple[int, int] | None, workdir: str, enabled: bool = True):
    self.window = window if enabled else None
    self.directory = profile_dir(workdir)
    self.active = False

  def step(self, step: int):
    """Context of step `step`'s dispatch: starts the trace first when the window opens."""
    if self.window is None or not self.window[0] <= step < self.window[1]:
      return contextlib.nullcontext()
    if not self.active:
      storage.makedirs(self.directory)
      jax.profiler.start_trace(self.directory)
      self.active = True
    return jax.profiler.StepTraceAnnotation("train", step_num=step)

  def after(self, step: int, outputs) -> None:
    """Stops the trace once step END-1's `outputs` are computed."""
    if self.active and step + 1 >= self.window[1]:
      jax.block_until_ready(outputs)
      self.stop()

  def stop(self) -> None:
    """Stops an active trace (also when the run stops inside the window)."""
    if self.active:
      self.active = False
      jax.profiler.stop_trace()
