"""Checksum manifests of tlm checkpoints: written after a save completes, checked on every load.

Orbax verifies nothing it reads back: a truncated chunk file makes the restore fail with a bare
`Exception`, and random bytes written into a parameter chunk are restored silently (the model
then scores NaN, or plausible wrong numbers). Each training checkpoint `WORKDIR/checkpoints/STEP/`
therefore gets a manifest, `STEP/tlm_checksums.json`, listing the size and SHA-256 of every file
orbax wrote, once the save has completed (the step directory is final); a tlm model directory
(`tlm.models.checkpoints.save_tlm`) gets one beside its `params/`. Before a checkpoint is
restored, whatever the mode (resume, `model.init_checkpoint`, score, predict, eval, convert),
its files are checked against it; `newest_good_step` picks the newest checkpoint that passes,
with a one-line warning naming each bad one and the one used, and a one-line error when none
is left.

The manifest is read as hostile input too (`read_manifest`): bounded in size, every entry a
normalised relative name confined to the checkpoint (`safe_read.confined_path`: no `..`, no
absolute path, no link out of it, no NUL) with an integer size and a hex SHA-256; every file
of a checked item must be listed (so a manifest cut short cannot leave files unchecked), and
only regular files are ever opened (a FIFO or a device named by an entry, or put in place of a
file, makes the checkpoint bad instead of blocking the reader). A manifest that breaks any of
this makes its checkpoint "unreadable", like a corrupt file.

A checkpoint without a manifest (written by an older tlm, or the run was killed between orbax's
commit and the manifest) is checked for completeness only: every item directory must hold the
file orbax writes last into it, and only regular files. Such a checkpoint is used with a warning
that it is unverified.

On an object store (`tlm.storage`) the files are read through epath, and a step directory also
needs orbax's commit marker (`commit_success.txt`, written last there in place of the rename
that makes a local step directory appear whole): without it the checkpoint is incomplete.

Cost: hashing reads the checkpoint once more after each save (in a background thread while the
training goes on, `tlm.train.checkpointing`) and once before a load: the sizes first (one stat
per file, so a truncated or overwritten-with-more file is caught without reading), then the
digests, several files at once (hashlib releases the GIL). The load that follows then reads
the files from the page cache; benchmarks/verify_checkpoint.py measures the cost against the
load itself. Pure Python (hashlib): no jax, so `tlm.models.checkpoints` checks the same way.
"""

import concurrent.futures
import hashlib
import os
import posixpath
import re
from collections.abc import Callable, Iterable

from tlm import safe_read, storage
from tlm.console import warn
from tlm.errors import CheckpointError

MANIFEST = "tlm_checksums.json"
_FORMAT = "tlm-checkpoint-checksums/1"
# The file orbax writes last into each item of a training checkpoint: its presence means the
# item is complete (`params`/`opt_state` are orbax pytrees, `data_state` is orbax JSON).
_ITEM_MARKERS = {"params": "_METADATA", "opt_state": "_METADATA", "data_state": "metadata"}
_CHUNK = 1 << 20
# orbax's commit marker of a checkpoint on an object store (atomicity.COMMIT_SUCCESS_FILE).
ORBAX_COMMIT = "commit_success.txt"
# An entry is ~150 bytes; a checkpoint of 1,000 hosts with tens of files each stays far below.
MAX_MANIFEST_BYTES = 64 << 20
# No file is larger (off_t is 64-bit): an entry beyond it is hostile even for a file the load
# at hand does not read (score reads params only; size 10**30 on another entry was accepted).
_MAX_FILE_SIZE = 2**63
_SHA256 = re.compile(r"[0-9a-f]{64}")
# Files hashed at once: hashlib releases the GIL, so these run on as many cores.
_HASH_THREADS = max(1, min(8, os.cpu_count() or 1))


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with safe_read.open_regular(path) as f:
    while chunk := f.read(_CHUNK):
      digest.update(chunk)
  return digest.hexdigest()


def _hidden(rel: str) -> bool:
  return any(part.startswith(".") for part in rel.split("/"))


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

  step_dir = storage.location(step_dir)
  files = {}
  for rel in _files(step_dir):
    path = step_dir / rel
    files[rel] = {"size": storage.getsize(path), "sha256": _sha256(path)}
  write_json(step_dir / MANIFEST, {"format": _FORMAT, "files": files})


def has_manifest(step_dir: str) -> bool:
  """Whether the checkpoint has a manifest (anything by that name: a FIFO or a directory
  there is a manifest that cannot be read, not a checkpoint without one)."""
  path = storage.join(step_dir, MANIFEST)
  if path.is_remote:
    return storage.exists(path)
  return os.path.lexists(path)


def read_manifest(step_dir: str) -> dict[str, tuple[int, str]]:
  """The entries of a checkpoint's manifest, {relative name: (size, sha256)}.

  Raises:
    CheckpointError: one line naming the manifest, if it is unreadable (special file, larger
      than MAX_MANIFEST_BYTES, not JSON, not this format) or an entry is not a normalised name
      inside `step_dir` with an integer size (below 2**63) and a hex SHA-256.
  """
  path = storage.join(step_dir, MANIFEST)
  manifest = safe_read.read_json(
    path, MAX_MANIFEST_BYTES, error=CheckpointError, what="a checksum manifest", max_depth=3
  )
  files = manifest.get("files") if isinstance(manifest, dict) else None
  if not isinstance(files, dict) or manifest.get("format") != _FORMAT:
    raise CheckpointError(f"{path}: not a checksum manifest ({_FORMAT} with 'files')")
  entries = {}
  for rel, want in files.items():
    # No `..`, absolute name, NUL or link out; a special file is `check`'s to find, per file.
    safe_read.confined_path(step_dir, rel, path, refuse_special=False)
    if posixpath.normpath(rel) != rel or "\\" in rel or rel == MANIFEST:
      raise CheckpointError(f"{path}: file name {safe_read.shown(rel)} is not a normalised name")
    size = want.get("size") if isinstance(want, dict) else None
    digest = want.get("sha256") if isinstance(want, dict) else None
    if (
      not isinstance(size, int)
      or isinstance(size, bool)
      or not 0 <= size < _MAX_FILE_SIZE
      or not isinstance(digest, str)
      or not _SHA256.fullmatch(digest)
    ):
      raise CheckpointError(
        f'{path}: entry {safe_read.shown(rel)} is not {{"size": bytes, "sha256": hex digest}}'
      )
    entries[rel] = (size, digest)
  return entries


def _in_items(rel: str, items: tuple[str, ...]) -> bool:
  return any(rel == item or rel.startswith(item + "/") for item in items)


def _incomplete_item(step_dir: str, items: tuple[str, ...]) -> str | None:
  for item in items:
    marker = f"{item}/{_ITEM_MARKERS.get(item, '')}".rstrip("/")
    if not storage.exists(storage.join(step_dir, marker)):
      what = "missing" if not storage.exists(storage.join(step_dir, item)) else "incomplete"
      return f"incomplete ({item} {what})"
  return None


def _item_files(step_dir: str, items: tuple[str, ...]) -> list[str]:
  """The files of `items` in the checkpoint (hidden names aside: no orbax file is hidden)."""
  out = []
  for item in items:
    for rel in storage.walk_files(storage.join(step_dir, item)):
      if not _hidden(rel):
        out.append(f"{item}/{rel}")
  return out


def _size(step_dir: str, rel: str) -> int:
  return safe_read.regular_size(storage.join(step_dir, *rel.split("/")))


def _why_not(rel: str, e: OSError) -> str:
  if isinstance(e, FileNotFoundError):
    return f"incomplete ({rel} missing)"
  return f"unreadable ({rel}: {e.strerror or e})"


def _digests_differ(step_dir: str, want: dict[str, tuple[int, str]]) -> str | None:
  """Why the first file (in name order) whose SHA-256 is not its entry's is bad, or None."""
  names = sorted(want)

  def bad(rel: str) -> str | None:
    try:
      if _sha256(storage.join(step_dir, *rel.split("/"))) != want[rel][1]:
        return f"corrupt ({rel}: checksum differs)"
    except OSError as e:
      return _why_not(rel, e)
    return None

  if len(names) <= 1 or _HASH_THREADS == 1:
    reasons = map(bad, names)
  else:
    with concurrent.futures.ThreadPoolExecutor(_HASH_THREADS) as pool:
      reasons = list(pool.map(bad, names))
  return next((r for r in reasons if r is not None), None)


def check(step_dir: str, items: Iterable[str]) -> str | None:
  """Checks a checkpoint's `items` (e.g. ("params",)) against its manifest.

  Never raises for what the checkpoint holds: a bad manifest or file is a reason.

  Returns:
    None if they are intact (or, without a manifest, complete); otherwise why not, in a few
    words naming the file.
  """
  items = tuple(items)
  step_dir = storage.location(step_dir)
  if step_dir.is_remote and not storage.isfile(step_dir / ORBAX_COMMIT):
    return f"incomplete (no {ORBAX_COMMIT})"
  if (reason := _incomplete_item(step_dir, items)) is not None:
    return reason
  present = _item_files(step_dir, items)
  if not has_manifest(step_dir):
    for rel in present:  # unverified, but no FIFO or device is handed to orbax
      try:
        _size(step_dir, rel)
      except OSError as e:
        return _why_not(rel, e)
    return None
  try:
    entries = read_manifest(step_dir)
  except CheckpointError as e:
    detail = str(e).removeprefix(storage.join(step_dir, MANIFEST) + ": ")
    return f"unreadable ({MANIFEST}: {detail})"
  unlisted = sorted(set(present) - set(entries))
  if unlisted:
    return f"corrupt ({unlisted[0]} is not in {MANIFEST})"
  want = {rel: v for rel, v in entries.items() if _in_items(rel, items)}
  for rel, (size, _) in sorted(want.items()):  # sizes first: one stat each
    try:
      have = _size(step_dir, rel)
    except OSError as e:
      return _why_not(rel, e)
    if have != size:
      return f"corrupt ({rel}: {have} bytes, expected {size})"
  return _digests_differ(step_dir, want)


def newest_good_step(
  root: str,
  steps: Iterable[int],
  items: Iterable[str],
  *,
  warn: Callable[[str], None] = warn,
  inspect: Callable[[str, int], str | None] | None = None,
) -> int | None:
  """The newest of `steps` (checkpoints `root/STEP`) whose `items` pass `check`.

  Args:
    root: the directory of the step directories.
    steps: the steps to consider.
    items: the items of each step that must be intact.
    warn: where the warnings go.
    inspect: `inspect(step_dir, step)` checks what an intact checkpoint holds (e.g. its data
      state) and says why it is unusable, or None; a checkpoint it rejects is bad like one
      that fails `check`.

  Warns once for each newer checkpoint that failed, naming it and the one used, and once if
  the one used has no manifest.

  Returns:
    The step, or None if `steps` is empty.

  Raises:
    CheckpointError: every checkpoint failed (one line naming each and why).
  """
  steps = sorted(steps, reverse=True)
  items = tuple(items)
  root = storage.location(root)
  bad = []
  for step in steps:
    step_dir = root / str(step)
    reason = check(step_dir, items)
    if reason is None and inspect is not None:
      reason = inspect(step_dir, step)
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
