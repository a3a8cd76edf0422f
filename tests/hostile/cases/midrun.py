"""Surface `midrun`: files damaged while a run reads them: the example store truncated, rewritten
in place or replaced while training draws from it, and a checkpoint deleted while a resumed run
restores it. Each case's damage is done by a watcher thread the setup starts; it waits for a
sign that the run is under way (a checkpoint written, the workdir's lock taken) and then does
its damage. The outcome is timing-dependent by nature, so each case accepts a one-line error
naming the damaged file or a correct recovery; whatever the outcome, the run's newest
checkpoint must be intact (`after`: its files match its checksum manifest), as must every
checkpoint it had before (the probe's `lost` check).
"""

import json
import os
import shutil
import sys
import threading
import time

import numpy as np

from tests.hostile.probe import ROOT, TINY, train_args

from .common import W, case, fresh, trained

SURFACE = "midrun"
_WAIT_S = 240.0  # a watcher gives up after this long (the run ended or never got there)


def _watch(ctx, ready, damage):
  """Starts a thread that waits until `ready()` and then runs `damage()`; `after` stops it."""
  stop = threading.Event()

  def run():
    deadline = time.monotonic() + _WAIT_S
    while not stop.is_set() and time.monotonic() < deadline:
      if ready():
        damage()
        ctx.data["damaged_at"] = time.monotonic()
        return
      time.sleep(0.01)

  thread = threading.Thread(target=run, daemon=True)
  ctx.data["watcher"] = (thread, stop)
  thread.start()


def _newest_intact(workdir):
  """after: the workdir's newest checkpoint step is intact (its files match its manifest)."""

  def after(ctx, run):
    thread, stop = ctx.data.pop("watcher", (None, None))
    if stop is not None:
      stop.set()
      thread.join()
    if ROOT not in sys.path:
      sys.path.insert(0, ROOT)
    from tlm import checksums
    from tlm.train.checkpointing import ITEMS

    steps_dir = ctx.path(os.path.join(workdir, "checkpoints"))
    steps = (
      sorted(int(n) for n in os.listdir(steps_dir) if n.isdigit())
      if os.path.isdir(steps_dir)
      else []
    )
    damaged = {os.path.basename(d) for d in ctx.damaged}
    steps = [s for s in steps if str(s) not in damaged]
    if not steps:
      return None if run["rc"] else f"{workdir}: the run succeeded but left no checkpoint"
    reason = checksums.check(os.path.join(steps_dir, str(steps[-1])), ITEMS)
    return None if reason is None else f"{workdir}/checkpoints/{steps[-1]}: {reason}"

  return after


def _exists(ctx, rel):
  return lambda: os.path.exists(ctx.path(rel))


def _train_tokens(ctx):
  """The train token files of the case's store S."""
  with open(ctx.path("S/manifest.json")) as f:
    names = sorted(json.load(f)["files"])
  return [ctx.path("S/" + n) for n in names if n.startswith("train/") and n.endswith("tokens.bin")]


def _truncate_tokens(ctx):
  for path in _train_tokens(ctx):
    os.truncate(path, os.path.getsize(path) // 2)


def _overwrite_tokens(ctx):
  """The same sizes, the ids beyond the vocabulary (written in place: the run's open file
  sees them)."""
  for path in _train_tokens(ctx):
    with open(path, "r+b") as f:
      f.write(np.full(os.path.getsize(path) // 2, 60000, "<u2").tobytes())


def _replace_tokens(ctx):
  """New files renamed over the old ones (the run keeps reading the files it opened)."""
  for path in _train_tokens(ctx):
    tmp = path + ".new"
    with open(tmp, "wb") as f:
      f.write(np.full(os.path.getsize(path) // 2, 60000, "<u2").tobytes())
    os.replace(tmp, path)


# (name, damage(ctx)) of the store S while a training run draws from it; damage begins once
# the run has written its checkpoint 2 (of 30 steps, one every 2).
STORE_DAMAGES = [
  ("store_truncated", _truncate_tokens),
  ("store_overwritten_in_place", _overwrite_tokens),
  ("store_replaced_by_rename", _replace_tokens),
]


def _train_while_damaged(damage):
  def setup(ctx):
    shutil.copytree(f"{TINY}/ssm", ctx.path("S"))
    _watch(ctx, _exists(ctx, "w/checkpoints/2/tlm_checksums.json"), lambda: damage(ctx))
    return fresh(
      ctx,
      f"data.ssm_dir={ctx.path('S')}",
      "train.steps=30",
      "train.checkpoint_every=2",
      "train.keep_checkpoints=3",
    )

  return setup


def _delete_slowly(ctx, rel):
  """Deletes the files under `rel` one by one, 20 ms apart (a window a restore can fall in)."""
  root = ctx.path(rel)
  for top, _, names in sorted(os.walk(root), reverse=True):
    for name in names:
      try:
        os.remove(os.path.join(top, name))
      except FileNotFoundError:
        pass
      time.sleep(0.02)
  shutil.rmtree(root, ignore_errors=True)


def _resume_while_deleted(ctx):
  """A resumed run of W (steps 1, 2) while W's step 2 is deleted: starting when the run has
  taken the workdir's lock, i.e. before or while it restores step 2."""
  ctx.copy("W0", W)
  ctx.damaged.add(f"{W}/checkpoints/2")
  _watch(ctx, _exists(ctx, f"{W}/.tlm.lock"), lambda: _delete_slowly(ctx, f"{W}/checkpoints/2"))
  return train_args(ctx.path(W), "train.steps=3")


CASES = [
  *(
    case(
      f"midrun_{name}",
      SURFACE,
      _train_while_damaged(damage),
      expect="either",
      check=trained("w", 30),
      mentions=("S/train/",),
      writes=("w", "S"),
      timeout=300,
      after=_newest_intact("w"),
    )
    for name, damage in STORE_DAMAGES
  ),
  case(
    "midrun_checkpoint_deleted_while_restored",
    SURFACE,
    _resume_while_deleted,
    expect="either",
    check=trained(W, 3),
    mentions=("checkpoints/2",),
    writes=(W,),
    workdirs=(W,),
    timeout=300,
    after=_newest_intact(W),
  ),
]
