"""A params pytree saved and restored with orbax (the `params/` of a tlm model directory).

A thin layer over `orbax.checkpoint.PyTreeCheckpointer` (tensorstore, OCDBT) that fixes the
two ways tlm restores parameters: to host numpy arrays (conversion, inspection, tests), or
straight onto given shardings (each process reads only its shards; T5X/big_vision style). Orbax
writes into a temporary directory and renames it on success, so a failed save leaves nothing.
Any orbax or tensorstore failure becomes a one-line `CheckpointError` naming the directory.
"""

import logging
import os

import jax
import numpy as np
import orbax.checkpoint as ocp

from tlm import storage
from tlm.errors import CheckpointError
from tlm.files import io_error_reason, tensorstore_one_line
from tlm.models.formats import orbax_failures, tensorstore_gcs

# The step's metadata file of orbax's layout (orbax 0.12.8: `_STEP_METADATA_FILENAME`, private).
_STEP_METADATA = "_CHECKPOINT_METADATA"


class _ItemMetadataFilter(logging.Filter):
  """Drops orbax's warning about a missing `_CHECKPOINT_METADATA` when a `params/` item is read.

  In a training checkpoint (`checkpoints/STEP/params`) that file lives one level up, at the
  step; reading the item on its own is what tlm's model loading does, so the warning says
  nothing a user can act on. The record is told by what orbax passes, not by its words: a
  WARNING whose one argument is the path of that file (an `etils.epath.Path`). Where it was
  logged does not tell it: `module` and `funcName` are those of orbax's private module
  ("checkpoint", "read") only when absl's logger class made the "absl" logger, and absl's
  `log` when a plain logger of that name was made before absl was imported.
  tests/test_formats.py pins the record orbax emits.
  """

  def filter(self, record: logging.LogRecord) -> bool:
    if record.levelno != logging.WARNING or not isinstance(record.args, tuple):
      return True
    if len(record.args) != 1 or not isinstance(record.args[0], os.PathLike):
      return True
    return os.path.basename(os.fspath(record.args[0])) != _STEP_METADATA


logging.getLogger("absl").addFilter(_ItemMetadataFilter())
orbax_failures.install()  # a failed save is reported once, as tlm's one line
tensorstore_gcs.install()  # TensorStore's GCS retries bounded


def _keys(tree) -> dict[str, object]:
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {"/".join(str(getattr(k, "key", k)) for k in path): leaf for path, leaf in leaves}


def save(directory: str, params) -> None:
  """Saves a pytree of arrays (numpy or jax, possibly sharded) to a new directory.

  Args:
    directory: where to write; must not exist yet. On multi-host runs every process calls this
      with the same directory and its own shards.
    params: nested dicts of arrays (plain, not `nn.Partitioned`-boxed).

  Raises:
    CheckpointError: if the directory exists or orbax fails.
  """
  directory = storage.abspath(directory)
  if storage.exists(directory):
    raise CheckpointError(f"{directory}: already exists (refusing to overwrite)")
  for name, leaf in _keys(params).items():
    if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
      raise CheckpointError(f"{directory}: parameter '{name}' is a {type(leaf).__name__}")
  try:
    ocp.PyTreeCheckpointer().save(directory, params)
  except Exception as e:  # orbax/tensorstore raise many types; all mean "not saved"
    # Nothing may still be writing there while the caller removes what is left.
    orbax_failures.stop_writers()
    if not storage.is_remote(directory):  # orbax writes into `directory` + a temporary suffix
      orbax_failures.settle(*os.path.split(directory))
    error = CheckpointError(f"{directory}: cannot save parameters ({tensorstore_one_line(e)})")
    # The failed file operation's reason and where, for `tlm.files` to report the output it
    # was writing: the one line above may cut tensorstore's message before the errno.
    error.path, error.reason = directory, io_error_reason(e)
    raise error from None


def metadata(directory: str) -> dict:
  """The saved tree with `ArrayMetadata` leaves (`.shape`, `.dtype`), read without the data."""
  if not storage.isdir(directory):
    raise CheckpointError(f"{directory}: no such orbax checkpoint directory")
  try:
    meta = ocp.PyTreeCheckpointer().metadata(storage.abspath(directory))
  except Exception as e:
    raise CheckpointError(
      f"{directory}: not an orbax checkpoint ({tensorstore_one_line(e)})"
    ) from None
  tree = getattr(meta, "item_metadata", meta)
  return getattr(tree, "tree", tree)


def restore(directory: str, shardings=None):
  """Restores a params pytree saved by `save`.

  Args:
    directory: the checkpoint directory.
    shardings: None to get numpy arrays on the host, or a pytree with the saved structure whose
      leaves are `jax.sharding.Sharding`s, to get jax Arrays laid out that way.

  Returns:
    The pytree, with the saved shapes and dtypes.

  Raises:
    CheckpointError: naming the directory (and the keys) if it is missing or corrupt, or if
      `shardings` does not have the saved structure.
  """
  tree = metadata(directory)
  if shardings is None:
    args = jax.tree.map(lambda m: ocp.RestoreArgs(restore_type=np.ndarray, dtype=m.dtype), tree)
  else:
    saved, given = _keys(tree), _keys(shardings)
    missing, unexpected = sorted(set(saved) - set(given)), sorted(set(given) - set(saved))
    if missing or unexpected:
      raise CheckpointError(
        f"{directory}: shardings do not match the saved parameters "
        f"(no sharding for {missing[:5]}, not saved: {unexpected[:5]})"
      )
    args = jax.tree.map(
      lambda m, s: ocp.ArrayRestoreArgs(sharding=s, global_shape=m.shape, dtype=m.dtype),
      tree,
      shardings,
    )
  try:
    # Absolute: tensorstore refuses a path with a ".." component ("Invalid file path"), and
    # `--checkpoint=../run` is a user's ordinary way to name one.
    return ocp.PyTreeCheckpointer().restore(
      storage.abspath(directory), args=ocp.args.PyTreeRestore(restore_args=args)
    )
  except Exception as e:
    orbax_failures.settle_callbacks()  # the other arrays' reads, still in flight
    raise CheckpointError(
      f"{directory}: cannot restore parameters ({tensorstore_one_line(e)})"
    ) from None
