"""Surface `checkpoints`: damaged checkpoints loaded by every mode (random bytes or a truncated
parameter file in a training step, a tlm model directory, an HF safetensors file), a named step
against a workdir, a step that is missing or empty.
"""

import json
import os

import numpy as np

from .common import (
  LOADS,
  S1,
  S2,
  W,
  case,
  convert_args,
  either,
  error,
  files_exist,
  fresh,
  largest_param_file,
  load_case,
  ok,
  random_bytes,
  score_args,
  scores_equal,
  truncate_param,
  warned,
)

SURFACE = "checkpoints"


def _damaged(damage, load, steps=(S2,)):
  """W's `steps` damaged by `damage(ctx, step)`, then loaded by `load(ctx)`."""

  def setup(ctx):
    ctx.copy("W0", W)
    for step in steps:
      damage(ctx, step)
    return load(ctx)

  return setup


# (name, damage of W's step 2); each loaded by every mode of common.LOADS.
DAMAGES = [
  ("random_bytes", lambda ctx: random_bytes(ctx, S2)),
  ("truncated_param", lambda ctx: truncate_param(ctx, S2)),
]

# Step 2 of W with random bytes, loaded by the other modes: (name, the load, expectation).
OTHER_LOADS = [
  (
    "convert_workdir",
    lambda ctx: convert_args(ctx.path(W), ctx.path("out"), "hf"),
    ok(files_exist("out/config.json", warning="checkpoints/2"), "out", workdirs=(W,)),
  ),
  (
    "init_checkpoint_step",
    lambda ctx: fresh(ctx, f"model.init_checkpoint={ctx.path(S2)}"),
    error("checkpoints/2", workdirs=(W,)),
  ),
  (
    "eval_future",
    lambda ctx: ["--mode=eval_future", f"--workdir={ctx.path(W)}"],
    either(warned("checkpoints/2"), W, workdirs=(W,)),
  ),
  (
    # The fixture store has train examples for 2010-2018 only (adapt.new_year's default, 2019,
    # has none): W adapts to 2018 from a model of 2010-2017, so that the load is what is tested.
    "adapt",
    lambda ctx: [
      "--mode=adapt",
      f"--workdir={ctx.path(W)}",
      "--set=data.train_years=2010,2011,2012,2013,2014,2015,2016,2017",
      "--set=adapt.new_year=2018",
      "--set=adapt.alphas=0.5",
      "--set=adapt.steps=1",
      "--set=adapt.eval_points=1",
    ],
    either(warned("checkpoints/2"), W, workdirs=(W,), timeout=400),
  ),
]


def _tlm_model(damage):
  """score of a copy M of the base's tlm model directory, damaged."""

  def setup(ctx):
    ctx.copy("tlm", "M")
    if damage == "random_bytes":
      path = largest_param_file(ctx.path("M"))
      with open(path, "r+b") as f:
        f.seek(16)
        f.write(np.random.RandomState(1).bytes(2048))
    elif damage == "no_manifest":
      os.remove(ctx.path("M/tlm_checksums.json"))
    elif damage == "manifest_fifo":
      ctx.fifo("M/tlm_checksums.json")
    return score_args(ctx, ctx.path("M"))

  return setup


def _hf(damage):
  """score of a copy H of the base's HF model directory, its safetensors file damaged."""

  def setup(ctx):
    ctx.copy("hf", "H")
    path = ctx.path("H/model.safetensors")
    if damage == "header_huge":
      with open(path, "r+b") as f:
        f.write((10**15).to_bytes(8, "little"))
    elif damage == "truncated":
      os.truncate(path, os.path.getsize(path) // 2)
    elif damage == "fifo":
      ctx.fifo("H/model.safetensors")
    elif damage == "declares_12g_sparse":
      # A header declaring one tensor of 12 GiB, the file made that long by a sparse tail.
      header = json.dumps(
        {"shared.weight": {"dtype": "F32", "shape": [3 << 30], "data_offsets": [0, 12 << 30]}}
      ).encode()
      with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + (12 << 30))
    return score_args(ctx, ctx.path("H"))

  return setup


# Model directories written by convert: (name, setup, expectation).
MODELS = [
  ("ckpt_tlm_model_intact", _tlm_model(None), ok(scores_equal("ref1"), "out.jsonl")),
  ("ckpt_tlm_model_random_bytes", _tlm_model("random_bytes"), error("M")),
  (
    "ckpt_tlm_model_no_manifest",
    _tlm_model("no_manifest"),
    ok(scores_equal("ref1", warning="tlm_checksums.json"), "out.jsonl"),
  ),
  ("ckpt_tlm_model_manifest_fifo", _tlm_model("manifest_fifo"), error("M")),
  ("ckpt_hf_intact", _hf(None), ok(scores_equal("ref2"), "out.jsonl")),
  ("ckpt_hf_header_huge", _hf("header_huge"), error("model.safetensors")),
  ("ckpt_hf_truncated", _hf("truncated"), error("model.safetensors")),
  ("ckpt_hf_fifo", _hf("fifo"), error("model.safetensors")),
  ("ckpt_hf_declares_12g_sparse", _hf("declares_12g_sparse"), error("model.safetensors")),
]


CASES = [
  *(
    load_case(f"ckpt_{name}_{mode}", SURFACE, damage, mode)
    for name, damage in DAMAGES
    for mode in LOADS
  ),
  *(
    case(f"ckpt_random_bytes_{name}", SURFACE, _damaged(random_bytes, load), **expectation)
    for name, load, expectation in OTHER_LOADS
  ),
  case(
    "ckpt_every_step_random_bytes_resume",
    SURFACE,
    _damaged(random_bytes, LOADS["resume"], steps=(S1, S2)),
    **error("W", writes=(W,), workdirs=(W,)),
  ),
  case(
    "ckpt_missing_step_named",
    SURFACE,
    lambda ctx: score_args(ctx, ctx.base["W0"] + "/checkpoints/7"),
    **error("checkpoints/7"),
  ),
  case(
    "ckpt_step_dir_empty",
    SURFACE,
    lambda ctx: score_args(ctx, os.path.dirname(ctx.write("W/checkpoints/3/x", ""))),
    **error("checkpoints/3"),
  ),
  *(case(name, SURFACE, setup, **expectation) for name, setup, expectation in MODELS),
]
