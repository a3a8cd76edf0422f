"""Surface `layout`: the workdir's own entries of the wrong kind (a file where a directory
belongs and the reverse, a FIFO, a dangling link, an immutable directory) and checkpoint
directories that are not steps, met when a training resumes or an evaluation writes.
"""

import os
import shutil

from tests.hostile.probe import train_args

from .common import ON_W, S2, W, case, either, error, trained

SURFACE = "layout"


def _entry(entry, kind, *sets, mode="resume"):
  """W's `entry` replaced by a `kind` (file, dir, fifo, dangling, immutable: `chattr +i`, left
  in place), then W resumed with `sets` or evaluated."""

  def setup(ctx):
    ctx.copy("W0", W)
    rel = os.path.join(W, entry)
    if os.path.lexists(ctx.path(rel)) and kind != "immutable":
      if os.path.isdir(ctx.path(rel)) and not os.path.islink(ctx.path(rel)):
        shutil.rmtree(ctx.path(rel))
      else:
        os.remove(ctx.path(rel))
    if kind == "file":
      ctx.write(rel, "x")
    elif kind == "dir":
      os.makedirs(ctx.path(rel))
    elif kind == "fifo":
      ctx.fifo(rel)
    elif kind == "dangling":
      ctx.symlink(rel, ctx.path("nowhere"))
    elif kind == "immutable":
      os.makedirs(ctx.path(rel), exist_ok=True)
      ctx.make_immutable(rel)
    if mode == "resume":
      return train_args(ctx.path(W), "train.steps=3", *sets)
    return ["--mode=eval", f"--workdir={ctx.path(W)}", *(f"--set={s}" for s in sets)]

  return setup


# (entry of W ("" is W itself), what it becomes, --sets of the resumed training).
RESUMED = [
  ("profile", "file", ("train.profile_steps=2,3",)),
  ("tensorboard", "file", ()),
  ("tensorboard", "fifo", ()),
  ("checkpoints", "file", ()),
  ("best", "file", ("train.keep_best=eval_loss", "train.eval_every=1")),
  ("metrics.jsonl", "dir", ()),
  ("config.json", "dir", ()),
  ("model_config.json", "fifo", ()),
  ("spiece.model", "dir", ()),
  ("tensorboard", "dangling", ()),
  ("profile", "dangling", ("train.profile_steps=2,3",)),
  ("checkpoints", "immutable", ()),
  ("tensorboard", "immutable", ()),
  ("", "immutable", ()),
]
# (entry of W, what it becomes) when W is evaluated.
EVALUATED = [("results", "file"), ("results", "immutable"), ("results", "fifo")]


def _step_is_a_file(ctx):
  shutil.rmtree(ctx.path(S2))
  ctx.write(S2, "x")


def _empty_step(name):
  """An empty step directory `name` newer than W's steps. It holds no checkpoint, so it is
  declared damaged: moving it aside (to STEP.bad) is the recovery, not a checkpoint lost."""

  def make(ctx):
    rel = f"W/checkpoints/{name}"
    os.makedirs(ctx.path(rel))
    ctx.damaged.add(rel)

  return make


def _non_numeric_entry(ctx):
  os.makedirs(ctx.path("W/checkpoints/abc"))
  ctx.write("W/checkpoints/readme", "x")


# (name, what is done to W/checkpoints) before W resumes: an error naming it or a recovery.
STEP_ENTRIES = [
  ("step_is_a_file", _step_is_a_file),
  ("empty_newer_step", _empty_step("999")),
  ("non_numeric_entry", _non_numeric_entry),
  ("fifo_step", lambda ctx: ctx.fifo("W/checkpoints/5")),
  ("huge_step_number", _empty_step("9" * 30)),
]


def _step_entry(make):
  def setup(ctx):
    ctx.copy("W0", W)
    make(ctx)
    return ON_W["resume"](ctx)

  return setup


def _immutable_parent(ctx):
  os.makedirs(ctx.path("ro"))
  ctx.make_immutable("ro")
  return train_args(ctx.path("ro/w"))


CASES = [
  *(
    case(
      f"layout_{entry or 'workdir'}_{kind}_resume",
      SURFACE,
      _entry(entry, kind, *sets),
      **error(entry or W, writes=(W,), workdirs=(W,)),
    )
    for entry, kind, sets in RESUMED
  ),
  *(
    case(
      f"layout_{entry}_{kind}_eval",
      SURFACE,
      _entry(entry, kind, mode="eval"),
      **error(entry, writes=(W,), workdirs=(W,)),
    )
    for entry, kind in EVALUATED
  ),
  *(
    case(
      f"layout_checkpoints_{name}_resume",
      SURFACE,
      _step_entry(make),
      **either(trained(W, 3), W, mentions=("checkpoints",), workdirs=(W,)),
    )
    for name, make in STEP_ENTRIES
  ),
  case("layout_workdir_in_unwritable_parent", SURFACE, _immutable_parent, **error("ro")),
]
