"""Training checkpoints (orbax) and initialisation from an imported public checkpoint.

Layout (docs/ARCHITECTURE.md): `WORKDIR/checkpoints/<step>/{params,opt_state,data_state}`,
written by an orbax `CheckpointManager`: saves are asynchronous (the step loop continues while
the arrays are written), atomic (a step directory appears only when complete, so a run killed
mid-save leaves the previous checkpoint as the latest) and the last K are kept. `params` and
`opt_state` are pytrees of arrays saved shard by shard by the processes that hold them;
`data_state` is JSON. The data position is the step itself: the sampler is a pure function of
(seed, step, row), so restoring step s and drawing batch s continues the uninterrupted run
exactly; `data_state` records what the stream depends on so that a resumed run with another
data config fails instead of silently training on a different stream.

Integrity (`tlm.checksums`): once a save has completed, process 0 writes the checkpoint's
checksum manifest (in a background thread, while training goes on); `latest_step` is the
newest checkpoint whose files match theirs, so a truncated, overwritten or partly deleted newest
checkpoint is reported in one line and the previous one is used. A failed save (disk full,
permissions) is a one-line `CheckpointError` naming the directory, the only report of it on the
terminal (orbax's own tracebacks of it are dropped: `tlm.models.formats.orbax_failures`); orbax's
temporary directory of that step is removed, so the workdir holds only complete checkpoints.

On an object store (`gs://`, `tlm.storage`) orbax writes each step in place and commits it
with `commit_success.txt`, written last (its COMMIT_FILE atomicity, chosen explicitly here for
every remote scheme); a step directory without it is incomplete (`tlm.checksums.check`).
Nothing here renames a directory there: setting a bad checkpoint aside copies it.

When the workdir has no checkpoint, `load_init_params` starts from `model.init_checkpoint`: any
format `tlm.models.checkpoints.load_checkpoint` reads (HF directory, Mesh-TF prefix, tlm model
directory or workdir), strictly: the architecture and every parameter name and shape must match.
"""

import contextlib
import dataclasses
import threading
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from tlm import checksums, safe_read, storage
from tlm.console import warn
from tlm.errors import CheckpointError
from tlm.files import io_error_reason
from tlm.models.formats import orbax_failures, tensorstore_gcs
from tlm.sharding.partitioning import place_params

# orbax's background threads log the failure of a save with their tracebacks, which
# `_io_errors` reports as one line: they stay off the terminal.
orbax_failures.install()
tensorstore_gcs.install()  # TensorStore's GCS retries bounded

ITEMS = ("params", "opt_state", "data_state")
# The file of the `data_state` item (orbax's JsonCheckpointHandler writes the JSON there).
_DATA_STATE_FILE = "metadata"
# A data state is a few hundred bytes (the data config and the step).
MAX_DATA_STATE_BYTES = 1 << 20
# T5Config fields that change the computation but not the parameters: a checkpoint may differ.
_RUNTIME_FIELDS = ("dropout_rate", "dtype", "remat")


def checkpoints_dir(workdir: storage.PathArg) -> storage.Location:
  """WORKDIR/checkpoints."""
  return storage.abspath(workdir) / "checkpoints"


class CheckpointManager:
  """Saves and restores (params, opt_state, data_state) under WORKDIR/checkpoints/<step>/.

  Args:
    workdir: the training workdir (shared by all processes).
    keep: how many of the latest checkpoints to keep.
    async_save: write in a background thread while training continues.
  """

  def __init__(self, workdir: str, keep: int = 3, async_save: bool = True):
    if keep < 1:
      raise CheckpointError(f"train.keep_checkpoints must be >= 1, got {keep}")
    self.directory = checkpoints_dir(workdir)
    remote = self.directory.is_remote
    options = ocp.CheckpointManagerOptions(
      max_to_keep=keep,
      create=True,
      enable_async_checkpointing=async_save,
      # No directory rename on an object store: write in place, commit_success.txt last.
      atomicity_options=(
        ocp.options.AtomicityOptions(mode=ocp.options.AtomicityMode.COMMIT_FILE) if remote else None
      ),
    )
    self._keep = keep
    self._manager = ocp.CheckpointManager(self.directory, options=options, item_names=ITEMS)
    self._main = jax.process_index() == 0
    self._pending: int | None = None  # step being saved by orbax
    self._manifest: threading.Thread | None = None  # writing the previous step's checksums
    self._manifest_error: tuple[str, BaseException] | None = None  # (step dir, why)
    self._failed = False
    self._good: int | None = None  # cached `latest_step` (checking reads every file)
    self._set_aside = False

  def latest_step(self) -> int | None:
    """The newest checkpoint whose files are intact, or None if there is no checkpoint.

    Checks the checkpoints newest first against their checksum manifests (`tlm.checksums`):
    each bad one is named in a warning with the one used. In a multi-process run, process 0
    checks and tells the others.

    Raises:
      CheckpointError: there are checkpoints and none is intact.
    """
    if self._good is None:
      self._good = self._newest_good()
    return self._good

  def _newest_good(self) -> int | None:
    if jax.process_count() == 1:
      return self._newest_good_here()
    from jax.experimental import multihost_utils

    step, error = -1, None
    if self._main:
      try:
        found = self._newest_good_here()
        step = -1 if found is None else found
      except CheckpointError as e:
        step, error = -2, e
    step = int(multihost_utils.broadcast_one_to_all(np.int32(step)))
    if error is not None:
      raise error
    if step == -2:
      raise CheckpointError(f"{self.directory}: no good checkpoint left (see process 0)")
    return None if step == -1 else step

  def _newest_good_here(self) -> int | None:
    return checksums.newest_good_step(
      self.directory, self._manager.all_steps(), ITEMS, inspect=data_state_problem
    )

  @property
  def complete_step(self) -> int | None:
    """The newest checkpoint known complete (restored or saved by this run), without reading
    the store (for a message after it failed); None if there is none."""
    return self._good

  def all_steps(self) -> list[int]:
    """Steps of the complete checkpoints, ascending."""
    return sorted(self._manager.all_steps())

  def save(self, step: int, params: Any, opt_state: Any, data_state: dict) -> None:
    """Starts saving the state after `step` updates (asynchronously unless disabled).

    Raises:
      CheckpointError: this or the previous save failed (disk full, permissions), naming the
        directory; nothing of the failed step is left.
    """
    self._finish(wait_manifest=False)
    self._set_aside_bad_steps()
    self._pending = step
    with self._io_errors():
      self._manager.save(
        step,
        args=ocp.args.Composite(
          params=ocp.args.StandardSave(params),
          opt_state=ocp.args.StandardSave(opt_state),
          data_state=ocp.args.JsonSave(data_state),
        ),
        force=True,
      )

  def _set_aside_bad_steps(self) -> None:
    """Renames checkpoints newer than the restored one (all failed the check) to STEP.bad.

    They are in this run's future: its saves would collide with them, and orbax would count
    them among the checkpoints it keeps. Renamed, not deleted, so that they can be examined.
    """
    if self._good is None or self._set_aside:
      return
    self._set_aside = True
    bad = [s for s in self._manager.all_steps() if s > self._good]
    if not bad:
      return
    if self._main:
      moved = []
      for step in bad:
        path = storage.join(self.directory, str(step))
        target, n = f"{path}.bad", 1
        while storage.exists(target):
          target, n = f"{path}.bad{n}", n + 1
        try:
          storage.move_tree(path, target)
        except FileNotFoundError:  # deleted since it was found bad: nothing left to set aside
          continue
        moved.append(step)
      if moved:
        warn(f"moved the bad checkpoint(s) {moved} in {self.directory} aside to STEP.bad")
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils

      multihost_utils.sync_global_devices("tlm: bad checkpoints set aside")
    self._manager.reload()

  def _finish(self, wait_manifest: bool) -> None:
    """Waits for the pending orbax save, then has its checksum manifest written.

    The manifest of step N is written in a thread that overlaps the training steps up to the
    next save, which joins it before orbax may delete old steps (with keep=1 it is joined at
    once: orbax deletes step N as soon as N+1 is committed).
    """
    self._join_manifest()
    with self._io_errors():
      self._manager.wait_until_finished()
    step, self._pending = self._pending, None
    if step is None:
      return
    self._good = step  # saved by this run: the newest intact checkpoint
    if not self._main:
      return
    step_dir = storage.join(self.directory, str(step))
    self._manifest = threading.Thread(target=self._write_manifest, args=(step_dir,), daemon=True)
    self._manifest.start()
    if wait_manifest or self._keep == 1:
      self._join_manifest()

  def _write_manifest(self, step_dir: str) -> None:
    try:
      checksums.write_manifest(step_dir)
    except BaseException as e:  # re-raised by _join_manifest, in the training thread
      try:
        # A step orbax deleted meanwhile (train.keep_checkpoints) needs no manifest.
        gone = not storage.isdir(step_dir)
      except OSError:  # the store that failed the manifest
        gone = False
      if not gone:
        self._manifest_error = (step_dir, e)

  def _join_manifest(self) -> None:
    if self._manifest is not None:
      self._manifest.join()
      self._manifest = None
    failed, self._manifest_error = self._manifest_error, None
    if failed is not None:
      step_dir, error = failed
      detail = io_error_reason(error) or f"{type(error).__name__}: {error}"
      raise CheckpointError(f"{step_dir}: cannot write its checksum manifest ({detail})")

  @contextlib.contextmanager
  def _io_errors(self):
    """Turns a failed file operation of orbax into a one-line CheckpointError."""
    try:
      yield
    except Exception as e:
      detail = io_error_reason(e)
      if detail is None:
        raise
      self._failed = True
      step, self._pending = self._pending, None
      # The first failed write is raised while orbax's other writers may still run: once they
      # have failed too (they do at once on a full disk), nothing writes into the step's
      # temporary directory while it is removed, and nothing of theirs is printed later.
      orbax_failures.stop_writers()
      if step is not None and not self.directory.is_remote:
        orbax_failures.settle(self.directory, prefix=f"{step}.orbax-checkpoint-tmp")
      if step is not None and self._main and storage.isdir(self.directory):
        # orbax's temporary directory of the failed step (on an object store the uncommitted
        # step itself): free its space, leave no debris.
        remote = self.directory.is_remote
        for name in storage.listdir(self.directory):
          if name.startswith(f"{step}.orbax-checkpoint-tmp") or remote and name == str(step):
            storage.rmtree(storage.join(self.directory, name))
      which = f"checkpoint {step}" if step is not None else "a checkpoint"
      # On an object store the objects of the failed step are removed too, unless the store
      # itself is what failed; uncommitted, they are skipped and replaced by a resumed run.
      left = "committed" if self.directory.is_remote else "kept"
      raise CheckpointError(
        f"{self.directory}: cannot save {which} ({detail}); nothing of it was {left}"
      ) from None

  def restore(self, step: int, abstract_params: Any, abstract_opt_state: Any):
    """Restores a checkpoint onto the shardings of the abstract trees.

    Args:
      step: the checkpoint's step.
      abstract_params: jax.ShapeDtypeStruct tree (with shardings) of the parameters.
      abstract_opt_state: likewise for the optimizer state.

    Returns:
      (params, opt_state, data_state).

    Raises:
      CheckpointError: if the checkpoint does not match the trees (names or shapes).
    """
    try:
      restored = self._manager.restore(
        step,
        args=ocp.args.Composite(
          params=ocp.args.StandardRestore(abstract_params),
          opt_state=ocp.args.StandardRestore(abstract_opt_state),
          data_state=ocp.args.JsonRestore(),
        ),
      )
    except (ValueError, KeyError, TypeError) as e:
      orbax_failures.settle_callbacks()  # the other arrays' reads, still in flight
      raise CheckpointError(
        f"{self.directory}/{step}: does not match the model and optimizer of this config "
        f"({str(e).splitlines()[0][:300]}); use another workdir"
      ) from None
    except Exception as e:  # tensorstore reports an unreadable chunk as a bare Exception
      orbax_failures.settle_callbacks()
      raise CheckpointError(_unreadable(self.directory, step, e)) from None
    return restored.params, restored.opt_state, dict(restored.data_state)

  def restore_params(self, step: int, abstract_params: Any) -> Any:
    """Restores only the parameters of a checkpoint onto the abstract tree's shardings.

    Raises:
      CheckpointError: if the checkpoint's parameters do not match the tree.
    """
    try:
      restored = self._manager.restore(
        step, args=ocp.args.Composite(params=ocp.args.StandardRestore(abstract_params))
      )
    except (ValueError, KeyError, TypeError) as e:
      orbax_failures.settle_callbacks()
      raise CheckpointError(
        f"{self.directory}/{step}/params: does not match the model ({str(e).splitlines()[0][:300]})"
      ) from None
    except Exception as e:
      orbax_failures.settle_callbacks()
      raise CheckpointError(_unreadable(self.directory, step, e)) from None
    return restored.params

  def wait(self) -> None:
    """Blocks until pending saves and their checksum manifests are complete.

    Raises:
      CheckpointError: the save failed (disk full, permissions), naming the directory.
    """
    self._finish(wait_manifest=True)

  def close(self) -> None:
    """Waits for pending saves and releases the manager.

    Raises:
      CheckpointError: the pending save failed (not again after a failed save was reported).
    """
    try:
      if not self._failed:
        self._finish(wait_manifest=True)
    finally:
      if self._failed:
        with contextlib.suppress(Exception):
          self._manager.close()
      else:
        with self._io_errors():
          self._manager.close()


def data_state_problem(step_dir: str, step: int) -> str | None:
  """Why a checkpoint's `data_state` is unusable, or None: it must be a JSON object (of at most
  MAX_DATA_STATE_BYTES) whose "step" is the checkpoint's. (What it says of the data stream is
  compared with the config on resume: `tlm.train.data_state.check_data_state`.)"""
  path = storage.join(step_dir, "data_state", _DATA_STATE_FILE)
  try:
    saved = safe_read.read_json(path, MAX_DATA_STATE_BYTES, error=CheckpointError, what="JSON")
  except CheckpointError as e:
    return f"unreadable (data_state/{_DATA_STATE_FILE}: {str(e).removeprefix(path + ': ')})"
  if not isinstance(saved, dict):
    return f"corrupt (data_state/{_DATA_STATE_FILE}: not a JSON object)"
  if saved.get("step") != step or isinstance(saved.get("step"), bool):
    return f"corrupt (data_state/{_DATA_STATE_FILE}: step {saved.get('step')!r}, expected {step})"
  return None


def _unreadable(directory: str, step: int, e: Exception) -> str:
  # Only a checkpoint without a checksum manifest gets this far unverified.
  return (
    f"{directory}/{step}: unreadable ({str(e).splitlines()[0][:200]}); it has no "
    f"{checksums.MANIFEST} to tell corruption early: move it aside to resume from the previous one"
  )


def check_architecture(model_config: Any, checkpoint_config: Any, path: str) -> None:
  """Raises CheckpointError if the checkpoint's architecture differs from the config's preset.

  Dropout, dtype and remat may differ: they are taken from the experiment config.
  """
  want = {k: v for k, v in dataclasses.asdict(model_config).items() if k not in _RUNTIME_FIELDS}
  have = {
    k: v for k, v in dataclasses.asdict(checkpoint_config).items() if k not in _RUNTIME_FIELDS
  }
  diff = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
  if diff:
    details = ", ".join(f"{k}: checkpoint {have.get(k)!r} vs config {want.get(k)!r}" for k in diff)
    raise CheckpointError(
      f"{path}: architecture differs from model.preset ({details}); set model.preset to the "
      "checkpoint's size"
    )


def load_init_params(path: str, model_config: Any, abstract_params: Any) -> Any:
  """Loads `model.init_checkpoint` onto the shardings of `abstract_params`.

  A tlm training workdir (model_config.json + checkpoints/) is restored from its latest
  checkpoint directly onto the shardings, each process reading only its shards; any other
  path goes through `tlm.models.checkpoints.load_checkpoint` (HF directory, Mesh-TF prefix,
  tlm model directory) and is then placed.

  Args:
    path: the checkpoint path.
    model_config: the T5Config the run uses.
    abstract_params: ShapeDtypeStruct tree with shardings.

  Returns:
    The parameters as sharded jax arrays.

  Raises:
    CheckpointError: unreadable checkpoint, other architecture, or mismatched parameters.
  """
  from tlm.models.checkpoints import load_checkpoint, read_model_config

  if not storage.exists(path) and not any(
    storage.exists(path + suffix) for suffix in (".index", ".meta")
  ):
    raise CheckpointError(f"model.init_checkpoint: no such file or directory: {path}")
  config_path = storage.join(path, "model_config.json")
  if storage.isdir(checkpoints_dir(path)) and storage.isfile(config_path):
    checkpoint_config = read_model_config(config_path)
    check_architecture(model_config, checkpoint_config, path)
    manager = CheckpointManager(path)
    try:
      step = manager.latest_step()
      if step is None:
        raise CheckpointError(f"{path}: training workdir without a complete checkpoint")
      return manager.restore_params(step, abstract_params)
    finally:
      manager.close()
  checkpoint_config, params = load_checkpoint(path)
  check_architecture(model_config, checkpoint_config, path)
  return place_params(params, abstract_params, path)
