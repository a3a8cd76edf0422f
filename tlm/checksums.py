"""Checksum manifests of training checkpoints: written after a save completes, checked on restore.

Orbax verifies nothing it reads back: a truncated chunk file makes the restore fail with a bare
`Exception`, and random bytes written into a parameter chunk are restored silently (the model
then scores NaN). Each training checkpoint `WORKDIR/checkpoints/STEP/` therefore gets a manifest,
`STEP/tlm_checksums.json`, listing the size and SHA-256 of every file orbax wrote, once the save
has completed (the step directory is final). Before a checkpoint is restored its files are
checked against it; `newest_good_step` picks the newest checkpoint that passes, with a one-line
warning naming each bad one and the one used, and a one-line error when none is left.

A checkpoint without a manifest (written by an older tlm, or the run was killed between orbax's
commit and the manifest) is checked for completeness only: every item directory must hold the
file orbax writes last into it. Such a checkpoint is used with a warning that it is unverified.

On an object store (`tlm.storage`) the files are read through epath, and a step directory also
needs orbax's commit marker (`commit_success.txt`, written last there in place of the rename
that makes a local step directory appear whole): without it the checkpoint is incomplete.

Cost: hashing reads the checkpoint once more after each save (in a background thread while the
training goes on, `tlm.train.checkpointing`) and once before a restore. Pure Python (hashlib):
no jax, so `tlm.models.checkpoints` checks workdirs the same way.
"""

import hashlib
import json
import sys
from collections.abc import Callable, Iterable

from tlm import storage
from tlm.errors import CheckpointError

MANIFEST = "tlm_checksums.json"
_FORMAT = "tlm-checkpoint-checksums/1"
# The file orbax writes last into each item of a training checkpoint: its presence means the
# item is complete (`params`/`opt_state` are orbax pytrees, `data_state` is orbax JSON).
_ITEM_MARKERS = {"params": "_METADATA", "opt_state": "_METADATA", "data_state": "metadata"}
_CHUNK = 1 << 20
# orbax's commit marker of a checkpoint on an object store (atomicity.COMMIT_SUCCESS_FILE).
ORBAX_COMMIT = "commit_success.txt"


def warn(message: str) -> None:
  """Prints a one-line warning on stderr."""
  print(f"warning: {message}", file=sys.stderr, flush=True)


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with storage.open_file(path, "rb") as f:
    while chunk := f.read(_CHUNK):
      digest.update(chunk)
  return digest.hexdigest()


def _files(step_dir: str) -> list[str]:
  out = []
  for rel in storage.walk_files(step_dir):
    name = rel.rsplit("/", 1)[-1]
    if rel != MANIFEST and not name.startswith(f".{MANIFEST}."):
      out.append(rel)
  return out


def write_manifest(step_dir: str) -> None:
  """Writes `step_dir/tlm_checksums.json` for a complete checkpoint (atomically).

  Raises:
    OSError: the directory cannot be read or the manifest written.
  """
  from tlm.files import write_json

  files = {}
  for rel in _files(step_dir):
    path = storage.join(step_dir, rel)
    files[rel] = {"size": storage.getsize(path), "sha256": _sha256(path)}
  write_json(storage.join(step_dir, MANIFEST), {"format": _FORMAT, "files": files})


def has_manifest(step_dir: str) -> bool:
  return storage.isfile(storage.join(step_dir, MANIFEST))


def check(step_dir: str, items: Iterable[str]) -> str | None:
  """Checks a checkpoint's `items` (e.g. ("params",)) against its manifest.

  Returns:
    None if they are intact (or, without a manifest, complete); otherwise why not, in a few
    words naming the file.
  """
  items = tuple(items)
  if storage.is_remote(step_dir) and not storage.isfile(storage.join(step_dir, ORBAX_COMMIT)):
    return f"incomplete (no {ORBAX_COMMIT})"
  for item in items:
    marker = f"{item}/{_ITEM_MARKERS.get(item, '')}".rstrip("/")
    if not storage.exists(storage.join(step_dir, marker)):
      what = "missing" if not storage.exists(storage.join(step_dir, item)) else "incomplete"
      return f"incomplete ({item} {what})"
  manifest_path = storage.join(step_dir, MANIFEST)
  if not storage.isfile(manifest_path):
    return None
  try:
    manifest = json.loads(storage.read_bytes(manifest_path))
    files = manifest["files"]
    if manifest.get("format") != _FORMAT or not isinstance(files, dict):
      raise ValueError(manifest.get("format"))
  except (OSError, ValueError, KeyError, TypeError, RecursionError):
    return f"unreadable checksum manifest {MANIFEST}"
  for rel, want in sorted(files.items()):
    if not any(rel == item or rel.startswith(item + "/") for item in items):
      continue
    path = storage.join(step_dir, *rel.split("/"))
    try:
      size = storage.getsize(path)
      if not isinstance(want, dict) or size != want.get("size"):
        return f"corrupt ({rel}: {size} bytes, expected {want.get('size')})"
      if _sha256(path) != want.get("sha256"):
        return f"corrupt ({rel}: checksum differs)"
    except FileNotFoundError:
      return f"incomplete ({rel} missing)"
    except OSError as e:
      return f"unreadable ({rel}: {e.strerror or e})"
  return None


def newest_good_step(
  root: str,
  steps: Iterable[int],
  items: Iterable[str],
  *,
  warn: Callable[[str], None] = warn,
) -> int | None:
  """The newest of `steps` (checkpoints `root/STEP`) whose `items` pass `check`.

  Warns once for each newer checkpoint that failed, naming it and the one used, and once if
  the one used has no manifest.

  Returns:
    The step, or None if `steps` is empty.

  Raises:
    CheckpointError: every checkpoint failed (one line naming each and why).
  """
  steps = sorted(steps, reverse=True)
  items = tuple(items)
  bad = []
  for step in steps:
    step_dir = storage.join(root, str(step))
    reason = check(step_dir, items)
    if reason is not None:
      bad.append((step_dir, reason))
      continue
    for bad_dir, why in bad:
      warn(f"checkpoint {bad_dir} is {why}; using {step_dir} instead")
    if not has_manifest(step_dir):
      warn(
        f"checkpoint {step_dir} has no {MANIFEST} (the run stopped before writing it, or an "
        "older tlm wrote the checkpoint); using it unverified"
      )
    return step
  if bad:
    listed = "; ".join(f"{d.rstrip('/').rsplit('/', 1)[-1]}: {why}" for d, why in bad)
    raise CheckpointError(f"{root}: no good checkpoint left ({listed})")
  return None
