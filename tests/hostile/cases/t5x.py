"""Surface `t5x`: a T5X checkpoint (the base's workdir converted to T5X) read through
--checkpoint and model.init_checkpoint, intact and damaged: its msgpack, a parameter's
.zarray metadata and chunks, step directories that are empty or absurdly numbered, an array
directory that links out.
"""

import glob
import os
import shutil
import subprocess
import sys

import numpy as np

from tests.hostile.probe import ROOT

from .common import (
  FIFO,
  case,
  convert_args,
  edit_json,
  files_exist,
  fresh,
  ok,
  put,
  score_args,
  scores_equal,
  trained,
)

SURFACE = "t5x"
STEP = "T/checkpoint_0"


def _param_array(ctx):
  """The directory of the first parameter's array (target.*): the optimizer's (state.*) are not
  read by score / convert / init, so damage there is rightly not noticed."""
  zarrays = sorted(
    glob.glob(os.path.join(ctx.path(STEP), "**", ".zarray"), recursive=True),
    key=lambda p: (os.sep + "target." not in p, p),
  )
  return os.path.dirname(zarrays[0])


def _zarray(ctx):
  return os.path.relpath(os.path.join(_param_array(ctx), ".zarray"), ctx.dir)


def _chunk(ctx):
  """The first chunk file of the first parameter's array (relative to the case)."""
  d = _param_array(ctx)
  chunk = next(n for n in sorted(os.listdir(d)) if not n.startswith("."))
  return os.path.relpath(os.path.join(d, chunk), ctx.dir)


def _truncate_half(path):
  os.truncate(path, os.path.getsize(path) // 2)


def _links_out(ctx):
  d = _param_array(ctx)
  shutil.rmtree(d)
  os.symlink("/etc", d)


def _sparse_12g(path):
  """The file as it was, then 12 GiB of nothing (a sparse file: no disk space)."""
  os.truncate(path, 12 << 30)


# The base's legacy checkpoint rewritten as T5X's Orbax layout (`checkpoint_0/state`) by the
# tests' reference writer (tests/t5x_reference.py, Orbax's own CheckpointManager).
_TO_ORBAX = (
  "import sys, numpy as np; sys.path.insert(0, sys.argv[3]); "
  "from flax import traverse_util; from tests import t5x_reference as ref; "
  "from tlm.models.formats import t5x; "
  "target = traverse_util.unflatten_dict(t5x.read_legacy(sys.argv[1]), sep='/'); "
  "ref.save_orbax(sys.argv[2], {'target': target, 'state': {'step': np.int32(0)}}, 0)"
)


def _orbax_copy(ctx):
  """T: the base's T5X checkpoint in the Orbax layout, with its spiece.model."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  legacy = os.path.join(ctx.base["t5x"], "checkpoint_0")
  proc = subprocess.run(
    [sys.executable, "-c", _TO_ORBAX, legacy, ctx.path("T"), ROOT],
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  if proc.returncode:
    raise RuntimeError(f"writing the Orbax copy failed: {proc.stderr[-500:]}")
  shutil.copy(os.path.join(ctx.base["t5x"], "spiece.model"), ctx.path("T/spiece.model"))


def _orbax_data_missing(ctx):
  """The largest data file of the Orbax copy's OCDBT store removed: arrays whose data it held
  cannot be read, while the others' reads are in flight."""
  data = ctx.path("T/checkpoint_0/state/ocdbt.process_0/d")
  os.remove(os.path.join(data, max(os.listdir(data), key=lambda n: os.path.getsize(f"{data}/{n}"))))


MSGPACK = f"{STEP}/checkpoint"
# What a damage does to the copy T, by name.
DAMAGES = {
  "msgpack_truncated": lambda ctx: _truncate_half(ctx.path(MSGPACK)),
  "msgpack_random": lambda ctx: put(ctx, MSGPACK, np.random.RandomState(0).bytes(4096)),
  "msgpack_fifo": lambda ctx: put(ctx, MSGPACK, FIFO),
  "zarray_shape_huge": lambda ctx: edit_json(
    ctx.path(_zarray(ctx)), lambda z: z.__setitem__("shape", [10**12, 10**12])
  ),
  "zarray_fifo": lambda ctx: put(ctx, _zarray(ctx), FIFO),
  "zarray_dtype_unknown": lambda ctx: edit_json(
    ctx.path(_zarray(ctx)), lambda z: z.__setitem__("dtype", "<q16")
  ),
  "chunk_fifo": lambda ctx: put(ctx, _chunk(ctx), FIFO),
  "chunk_random": lambda ctx: put(ctx, _chunk(ctx), np.random.RandomState(2).bytes(512)),
  "chunk_missing": lambda ctx: os.remove(ctx.path(_chunk(ctx))),
  "empty_newer_step": lambda ctx: os.makedirs(ctx.path("T/checkpoint_5")),
  "huge_step_number": lambda ctx: os.makedirs(ctx.path("T/checkpoint_" + "9" * 40)),
  "zarray_links_out": _links_out,
  "msgpack_sparse_12g": lambda ctx: _sparse_12g(ctx.path(MSGPACK)),
  "chunk_sparse_12g": lambda ctx: _sparse_12g(ctx.path(_chunk(ctx))),
  "orbax_array_data_missing": _orbax_data_missing,
}
# What reads T, by mode.
READS = {
  "score": lambda ctx: score_args(ctx, ctx.path("T")),
  "score_step": lambda ctx: score_args(ctx, ctx.path(STEP)),
  "convert": lambda ctx: convert_args(ctx.path("T"), ctx.path("out"), "tlm"),
  "init": lambda ctx: fresh(ctx, f"model.init_checkpoint={ctx.path('T')}"),
  "predict": lambda ctx: score_args(ctx, ctx.path("T"), "out.jsonl", "predict"),
}


def _t5x(damage, mode="score"):
  """A copy T of the base's T5X checkpoint, damaged (a key of DAMAGES, or None), read by
  `mode` (a key of READS)."""

  def setup(ctx):
    if damage is not None and damage.startswith("orbax"):
      _orbax_copy(ctx)
    else:
      ctx.copy("t5x", "T")
    if damage and damage != "orbax":
      DAMAGES[damage](ctx)
    return READS[mode](ctx)

  return setup


# The intact checkpoint: (name, mode, expectation).
INTACT = [
  ("t5x_score_model_dir", "score", ok(scores_equal("ref2"), "out.jsonl")),
  ("t5x_score_step_dir", "score_step", ok(scores_equal("ref2"), "out.jsonl")),
  ("t5x_convert", "convert", ok(files_exist("out/params", "out/model_config.json"), "out")),
  ("t5x_init_checkpoint", "init", ok(trained("w", 2), "w")),
]
# The damaged checkpoint: (damage, mode, expect); an error names T.
DAMAGED = [
  ("msgpack_truncated", "score", "error"),
  ("msgpack_random", "score", "error"),
  ("msgpack_fifo", "score", "error"),
  ("zarray_shape_huge", "score", "error"),
  ("zarray_fifo", "convert", "error"),
  ("zarray_dtype_unknown", "predict", "error"),
  ("chunk_fifo", "score", "error"),
  ("chunk_random", "score", "error"),
  ("chunk_missing", "init", "either"),
  ("empty_newer_step", "score", "either"),
  ("huge_step_number", "score", "either"),
  ("zarray_links_out", "score", "error"),
  ("msgpack_sparse_12g", "score", "error"),
  ("chunk_sparse_12g", "convert", "error"),
  ("orbax_array_data_missing", "convert", "error"),
  ("orbax_array_data_missing", "score", "error"),
]


def _export_over_earlier(ctx):
  """--format=t5x into out, which holds an earlier export (the base's)."""
  ctx.copy("t5x", "out")
  return convert_args(ctx.base["W0"], ctx.path("out"), "t5x")


CASES = [
  *(case(name, SURFACE, _t5x(None, mode), **expectation) for name, mode, expectation in INTACT),
  case(
    "t5x_orbax_score",
    SURFACE,
    _t5x("orbax", "score"),
    **ok(scores_equal("ref2"), "out.jsonl", timeout=240),
  ),
  case(
    "t5x_convert_over_an_earlier_export",
    SURFACE,
    _export_over_earlier,
    **ok(
      files_exist("out/checkpoint_0/checkpoint", warning="replaced the earlier convert output"),
      "out",
      timeout=240,
    ),
  ),
  *(
    case(
      f"t5x_{damage}_{mode}",
      SURFACE,
      _t5x(damage, mode),
      expect=expect,
      check={"score": scores_equal("ref2"), "init": trained("w", 2)}.get(mode),
      mentions=("T",),
      writes=("out.jsonl", "out", "w"),
      timeout=180,
    )
    for damage, mode, expect in DAMAGED
  ),
]
