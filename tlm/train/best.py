"""`train.keep_best=<metric>`: the checkpoint where a logged metric was best, kept in WORKDIR/best/.

WORKDIR/checkpoints/ keeps the newest `train.keep_checkpoints` steps and deletes older ones,
the best among them. The best is therefore saved a second time, when a record improves on it,
into WORKDIR/best/: a training workdir of its own (checkpoints/<step>/ with params, opt_state
and data_state, model_config.json, spiece.model, config.json) whose one checkpoint orbax
replaces atomically, and `best.json` = {"metric", "mode", "value", "step"}. So the best model
is evaluated or exported like any other (`--workdir=WORKDIR/best`), and resumed like any
other from a copy of the directory (training in WORKDIR/best itself would replace the best),
or used as `model.init_checkpoint=WORKDIR/best`. Losses and times (names with "loss" or
"seconds") are best when lowest, everything else when highest. A resumed run continues from
`best.json`, read back as hostile input (`read_best`: a bounded regular file, every field of
its type, else a one-line error naming it).

All processes take part in the save (the decision is made from values every process computed
alike); process 0 writes the files.
"""

import math
import os

from tlm import safe_read, storage
from tlm.errors import CheckpointError, ConfigError
from tlm.files import atomic_output_file, write_json
from tlm.train.checkpointing import CheckpointManager

COPIED = ("model_config.json", "spiece.model", "config.json")
# best.json is ~100 bytes.
MAX_BEST_BYTES = 1 << 16


def best_dir(workdir: storage.PathArg) -> storage.Location:
  """WORKDIR/best."""
  return storage.abspath(workdir) / "best"


def _exists(path: str) -> bool:
  # Anything by that name (a FIFO or a directory too) is read, and refused, by `read_best`.
  path = storage.location(path)
  return storage.exists(path) if path.is_remote else os.path.lexists(path)


def read_best(path: str) -> dict:
  """A `best.json`, checked: {"metric": str, "mode": "min" | "max", "value": finite number,
  "step": int >= 0}.

  Raises:
    CheckpointError: one line naming the file, if it is not a regular file of at most
      MAX_BEST_BYTES of such JSON.
  """
  hint = "delete it, and the best checkpoint is chosen again from this run's next records"
  try:
    saved = safe_read.read_json(
      path, MAX_BEST_BYTES, error=CheckpointError, what="best.json", max_depth=2
    )
  except CheckpointError as e:
    raise CheckpointError(f"{e}; {hint}") from None
  why = None
  if not isinstance(saved, dict):
    why = "not a JSON object"
  elif not isinstance(saved.get("metric"), str):
    why = "'metric' is not a string"
  elif saved.get("mode") not in ("min", "max"):
    why = '\'mode\' is not "min" or "max"'
  elif not _is_finite(saved.get("value")):
    why = "'value' is not a finite number"
  elif not isinstance(saved.get("step"), int) or isinstance(saved["step"], bool):
    why = "'step' is not an integer"
  elif saved["step"] < 0:
    why = "'step' is negative"
  if why is not None:
    raise CheckpointError(f"{path}: not a best.json written by tlm ({why}); {hint}")
  return {**saved, "value": float(saved["value"])}


def _is_finite(value) -> bool:
  if not isinstance(value, (int, float)) or isinstance(value, bool):
    return False
  try:
    return math.isfinite(float(value))
  except OverflowError:  # an integer beyond float's range
    return False


def mode_of(metric: str) -> str:
  """ "min" for losses and times, else "max"."""
  return "min" if ("loss" in metric or "seconds" in metric) else "max"


def check_metric(metric: str, logged: tuple[str, ...]) -> None:
  """Raises ConfigError unless `metric` is one of the metrics this run logs."""
  if metric and metric not in logged:
    raise ConfigError(
      f"train.keep_best={metric!r} is not a metric this run logs; one of: {', '.join(logged)}"
    )


class BestKeeper:
  """Keeps the best checkpoint of one run.

  Args:
    workdir: the training workdir (the best goes to WORKDIR/best/).
    metric: the record field to compare.
    main: whether this is process 0 (writes best.json and the copied files).
  """

  def __init__(self, workdir: str, metric: str, main: bool):
    self.workdir = storage.abspath(workdir)
    self.metric, self.mode, self.main = metric, mode_of(metric), main
    self.directory = best_dir(self.workdir)
    self.manager = CheckpointManager(self.directory, keep=1)
    self.value, self.step = self._load()

  def _load(self) -> tuple[float | None, int | None]:
    path = storage.join(self.directory, "best.json")
    if not _exists(path):
      return None, None
    saved = read_best(path)
    # A crash between best.json and the end of its (asynchronous) save leaves an older step:
    # then the value is not backed by a checkpoint and the next record replaces it.
    if saved["metric"] != self.metric or saved["step"] != self.manager.latest_step():
      return None, None
    return saved["value"], saved["step"]

  def improves(self, value: float) -> bool:
    if self.value is None:
      return True
    return value < self.value if self.mode == "min" else value > self.value

  def update(self, record: dict, params, opt_state, data_state: dict) -> bool:
    """Saves the state as the new best if `record[metric]` improves on it; returns whether."""
    value = record.get(self.metric)
    if value is None or not self.improves(float(value)):
      return False
    step = int(record["step"])
    self.manager.save(step, params, opt_state, data_state)
    self.value, self.step = float(value), step
    if self.main:
      for name in COPIED:
        source = storage.join(self.workdir, name)
        if storage.isfile(source):
          with atomic_output_file(storage.join(self.directory, name), "wb") as out:
            out.write(storage.read_bytes(source))
      write_json(
        storage.join(self.directory, "best.json"),
        {"metric": self.metric, "mode": self.mode, "value": self.value, "step": step},
      )
    return True

  def wait(self) -> None:
    self.manager.wait()

  def close(self) -> None:
    self.manager.close()
