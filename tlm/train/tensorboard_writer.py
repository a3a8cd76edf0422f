"""TensorBoard scalars of a training run in WORKDIR/tensorboard/, written without TensorFlow.

The writer is tensorboardX (numpy and protobuf only), an optional dependency like matplotlib:
it is imported when a run starts, and without it one line says so and the run goes on with
`metrics.jsonl` alone (whose content does not depend on it). It is imported without torch
(`_summary_writer`). Each `metrics.jsonl` record
becomes one scalar per numeric field at the record's step: `eval_loss` and the task metrics
under `eval/`, the rest under `train/`. A Yearly expert trains in WORKDIR/year=YYYY/, so
`tensorboard --logdir=WORKDIR` shows one run per expert. A resumed run purges the events at and
after its first step (written by the interrupted run past its last checkpoint), as TensorBoard
expects of a restart.

On an object store (`gs://`, `tlm.storage`), where a file cannot be appended to, the events
are written to a local staging directory and each event file is uploaded whole after every
flush (the files are small: a few scalars per logged step).
"""

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence

from tlm import storage

INSTALL = "pip install tensorboardX==2.6.5"


def tensorboard_dir(workdir: storage.PathArg) -> storage.Location:
  """WORKDIR/tensorboard."""
  return storage.abspath(workdir) / "tensorboard"


def tag(field: str, eval_fields: Sequence[str] = ("eval_loss",)) -> str:
  """The TensorBoard tag of a `metrics.jsonl` field: `eval/...` for the evaluation's fields
  (`eval_fields`: the held-out loss and the evaluators'), `train/...` for the rest."""
  if field == "eval_loss":
    return "eval/loss"
  return f"eval/{field}" if field in eval_fields else f"train/{field}"


def _summary_writer():
  """tensorboardX's `SummaryWriter`, imported without torch.

  tensorboardX's package imports its writer module, which imports torch where it is installed
  (to accept torch tensors as values; about a second and a thousand modules, in a process that
  never makes one). A `None` in `sys.modules` makes that import fail as if torch were absent,
  which tensorboardX expects (`except ImportError`); the entry is removed again at once. Where
  torch is already imported, nothing is hidden.

  Raises:
    ImportError: tensorboardX is not installed.
  """
  if "torch" in sys.modules:
    from tensorboardX import SummaryWriter

    return SummaryWriter
  sys.modules["torch"] = None
  try:
    from tensorboardX import SummaryWriter
  finally:
    if "torch" in sys.modules and sys.modules["torch"] is None:
      del sys.modules["torch"]
  return SummaryWriter


class ScalarWriter:
  """Writes metric records as scalars; a no-op without tensorboardX.

  Args:
    workdir: the training workdir (events go to WORKDIR/tensorboard/).
    start_step: the step the run starts from; > 0 purges earlier events at or after it.
    log: where the one line about a missing tensorboardX goes.
    eval_fields: the fields tagged `eval/...` (`tag`).
  """

  def __init__(
    self,
    workdir: str,
    start_step: int,
    log: Callable[[str], None],
    eval_fields: Sequence[str] = ("eval_loss",),
  ):
    self.directory = tensorboard_dir(workdir)
    self.eval_fields = tuple(eval_fields)
    self._staging = None
    try:
      SummaryWriter = _summary_writer()
    except ImportError:
      self._writer = None
      log(f"tensorboardX is not installed: no TensorBoard events ({INSTALL}); metrics.jsonl only")
      return
    # The file name has the time in seconds and the host: the suffix keeps a run resumed
    # within the same second from overwriting the events of the one before.
    local = self.directory
    if self.directory.is_remote:
      self._staging = local = tempfile.mkdtemp(prefix="tlm-tensorboard-")
    self._writer = SummaryWriter(
      local, purge_step=start_step or None, filename_suffix=f".from_step_{start_step}"
    )

  @property
  def enabled(self) -> bool:
    return self._writer is not None

  def write(self, record: dict) -> None:
    """One scalar per numeric field of `record` at `record["step"]`, flushed at once."""
    if self._writer is None:
      return
    step = int(record["step"])
    for field, value in record.items():
      if field != "step" and isinstance(value, int | float):
        self._writer.add_scalar(tag(field, self.eval_fields), float(value), step)
    self._writer.flush()
    self._upload()

  def _upload(self) -> None:
    if self._staging is None:
      return
    for rel in storage.walk_files(self._staging):
      with open(os.path.join(self._staging, rel), "rb") as f:
        storage.write_object(self.directory / rel, f.read())

  def close(self) -> None:
    if self._writer is not None:
      self._writer.close()
      self._writer = None
      self._upload()
    if self._staging is not None:
      shutil.rmtree(self._staging, ignore_errors=True)
      self._staging = None
