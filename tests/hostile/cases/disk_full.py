"""Surface `disk_full`: a disk that fills up while training, resuming, converting, scoring and
building, on a small tmpfs (mounting one needs root; elsewhere these cases are `skipped`).
"""

from tests.hostile.probe import train_args

from .builders import ssm
from .common import case, convert_args, error, score_args

SURFACE = "disk_full"


def _train_on_full_disk(ctx):
  ctx.tmpfs("disk", "1m")  # the config and vocabulary fit, the first checkpoint (1.6 MB) not
  return train_args(ctx.path("disk/w"))


def _resume_on_full_disk(ctx):
  # Steps 1 and 2 (3.5 MB in all) fit, step 3 does not: a failed save loses nothing.
  ctx.tmpfs("disk", "4200k")
  ctx.copy("W0", "disk/W")
  return train_args(ctx.path("disk/W"), "train.steps=3")


def _convert_to_full_disk(fmt):
  def setup(ctx):
    ctx.tmpfs("disk", "256k")
    return convert_args(ctx.base["W0"], ctx.path("disk/out"), fmt)

  return setup


def _on_a_full_disk(setup):
  """`setup` after a 64 KiB tmpfs at disk/ was filled up."""

  def run(ctx):
    ctx.tmpfs("disk", "64k")
    ctx.fill("disk/filler")
    return setup(ctx)

  return run


# (name, setup, expectation): each is an error naming where it writes, with nothing lost.
FULL_DISKS = [
  ("disk_full_train_first_checkpoint", _train_on_full_disk, error("disk/w", writes=("disk/w",))),
  (
    "disk_full_resume_step_3",
    _resume_on_full_disk,
    error("disk/W", writes=("disk/W",), workdirs=("disk/W",)),
  ),
  *(
    (
      f"disk_full_convert_{fmt}",
      _convert_to_full_disk(fmt),
      error("disk/out", writes=("disk/out",)),
    )
    for fmt in ("tlm", "hf", "t5x")
  ),
  (
    "disk_full_score_output",
    _on_a_full_disk(lambda ctx: score_args(ctx, ctx.base["W0"], "disk/out.jsonl")),
    error("disk/out.jsonl", writes=("disk/out.jsonl",)),
  ),
  (
    "disk_full_build_ssm",
    _on_a_full_disk(ssm(out="disk/out")),
    # The output or the lock beside it (disk/.out.tlm.lock).
    error("disk/", writes=("disk/out",)),
  ),
]

CASES = [case(name, SURFACE, setup, **expectation) for name, setup, expectation in FULL_DISKS]
