"""Surface `extremes`: settings at and beyond their limits (sizes that cannot be allocated,
seeds beyond 64 bits, NaN and infinite rates, empty lists, malformed `--set`s) for training,
reproduce, adapt, build_world and predict; each should cost milliseconds, not a compile.
"""

import json
import os

from .common import W, both, case, files_exist, fresh, ok, predict_case, trained

SURFACE = "extremes"

# (name, --sets of a fresh training); each is an error naming the first set's key.
TRAIN_SETS = [
  ("batch_1e12", ("train.batch_size=1000000000000",)),
  ("input_length_1e9", ("data.input_length=1000000000",)),
  ("target_length_1e9", ("data.target_length=1000000000",)),
  ("input_length_max_batch_big", ("data.input_length=131072", "train.batch_size=100000")),
  ("steps_2_40", ("train.steps=1099511627776",)),
  ("seed_2_64", ("train.seed=18446744073709551616",)),
  ("seed_minus_1", ("train.seed=-1",)),
  ("data_seed_minus_1", ("data.seed=-1",)),
  ("world_seed_2_64", ("data.world_seed=18446744073709551616",)),
  ("lr_nan", ("train.learning_rate=nan",)),
  ("lr_inf", ("train.learning_rate=inf",)),
  ("lr_minus_inf", ("train.learning_rate=-inf",)),
  ("z_loss_nan", ("train.z_loss=nan",)),
  ("dropout_1", ("model.dropout_rate=1",)),
  ("train_years_empty", ("data.train_years=",)),
  ("new_years_empty_prob", ("data.new_years=", "data.new_year_prob=0.5")),
  ("profile_reversed", ("train.profile_steps=5,1",)),
  ("profile_one_value", ("train.profile_steps=1",)),
  ("profile_three_values", ("train.profile_steps=1,2,3",)),
  ("profile_beyond_steps", ("train.profile_steps=100,200",)),
  ("eval_every_negative", ("train.eval_every=-1",)),
  ("microbatches_not_dividing", ("train.microbatches=3",)),
  ("microbatches_zero", ("train.microbatches=0",)),
  ("mesh_data_1000", ("mesh.data=1000",)),
  ("mesh_model_zero", ("mesh.model=0",)),
  ("keep_checkpoints_zero", ("train.keep_checkpoints=0",)),
  ("checkpoint_every_zero", ("train.checkpoint_every=0",)),
  ("log_every_2_40", ("train.log_every=1099511627776",)),
  ("num_layers_1e9", ("model.num_layers=1000000000",)),
  ("emb_dim_1e7", ("model.emb_dim=10000000",)),
  ("num_heads_1e6", ("model.num_heads=1000000",)),
  ("head_dim_beyond_int64", ("model.head_dim=" + "9" * 30,)),
  ("data_year_99999", ("data.year=99999",)),
  ("train_years_99999", ("data.train_years=99999",)),
  ("steps_float", ("train.steps=2.5",)),
  ("steps_exponent", ("train.steps=1e3",)),
  ("steps_hex", ("train.steps=0x10",)),
  ("steps_empty", ("train.steps=",)),
  ("steps_5000_digits", ("train.steps=" + "9" * 5000,)),
  ("batch_true", ("train.batch_size=true",)),
  ("no_equals", ("train.steps",)),
  ("empty_key", ("=3",)),
  ("unknown_key", ("nosuch.key=1",)),
  ("section_as_key", ("train=3",)),
  ("two_equals", ("train.steps=3=4",)),
  ("eval_batch_1e15", ("eval.batch_size=1000000000000000", "train.eval_examples=2")),
  ("remat_unknown", ("model.remat=sometimes",)),
  ("dtype_unknown", ("model.dtype=float7",)),
  ("preset_unknown", ("model.preset=../../etc",)),
  ("keep_best_unknown_metric", ("train.keep_best=nonsense",)),
  ("loss_factor_inf", ("train.loss_normalizing_factor=inf",)),
  ("news_to_templama_nan", ("data.news_to_templama=nan",)),
  ("warmup_beyond", ("train.warmup_steps=4294967296",)),
]


def _logged(rel, field):
  """check: some record of the metrics file REL holds `field`."""

  def check(ctx, run):
    path = ctx.path(rel)
    if not os.path.isfile(path):
      return f"no {rel}"
    with open(path, encoding="utf-8") as f:
      if any(field in json.loads(line) for line in f if line.strip()):
        return None
    return f"no {field} in {rel}"

  return check


# (name, --sets of a fresh training, check): settings at their limit that must train.
TRAIN_SETS_OK = [
  (
    "seed_2_64_minus_1",
    ("train.seed=18446744073709551615", "data.seed=18446744073709551615"),
    trained("w", 2),
  ),
  ("batch_1", ("train.batch_size=1",), trained("w", 2)),
  ("profile_window", ("train.profile_steps=1,2",), files_exist("w/profile", "w/checkpoints/2")),
  # train.eval_examples is "at most this many" (tlm.eval.heldout.spread: all of them if
  # there are fewer): a huge one is a legitimate "every validation example", not a refusal.
  (
    "eval_examples_huge",
    ("train.eval_examples=1000000000000000000", "train.eval_every=2", "eval.max_decode_length=4"),
    both(trained("w", 2), _logged("w/metrics.jsonl", "templama_f1")),
  ),
]
# (name, --sets of reproduce); each is an error naming the first set's key.
REPRODUCE_SETS = [
  ("seeds_minus_1", ("reproduce.seeds=-1",)),
  ("seeds_2_64", ("reproduce.seeds=18446744073709551616",)),
  ("seeds_empty", ("reproduce.seeds=",)),
  ("seeds_string", ("reproduce.seeds=a,b",)),
  ("world_scale_zero", ("data.world_scale=0",)),
  ("world_scale_nan", ("data.world_scale=nan",)),
  ("world_scale_inf", ("data.world_scale=inf",)),
  ("world_scale_1e308", ("data.world_scale=1e308",)),
  ("steps_zero", ("train.steps=0",)),
  ("batch_1e12", ("train.batch_size=1000000000000",)),
  ("cache_dir_remote", ("data.cache_dir=gs://b/c",)),
]
# (name, --sets of adapt on a copy of the base's workdir); each is an error naming the key.
ADAPT_SETS = [
  ("alphas_empty", ("adapt.alphas=",)),
  ("alphas_nan", ("adapt.alphas=nan",)),
  ("steps_zero", ("adapt.steps=0",)),
  ("eval_points_zero", ("adapt.eval_points=0",)),
  ("new_year_99999", ("adapt.new_year=99999",)),
]
# (name, flags of build_world); each is an error naming the first flag.
BUILD_WORLD_FLAGS = [
  ("seed_minus_1", ("--seed=-1",)),
  ("seed_2_64", ("--seed=18446744073709551616",)),
  ("scale_zero", ("--scale=0",)),
  ("scale_nan", ("--scale=nan",)),
  ("scale_1e308", ("--scale=1e308",)),
  ("scale_not_a_number", ("--scale=big",)),
]
# (name, flags of predict, expect).
PREDICT_FLAGS = [
  ("batch_zero", ("--batch_size=0",), "error"),
  ("batch_negative", ("--batch_size=-1",), "error"),
  ("batch_1e12", ("--batch_size=1000000000000",), "either"),
  ("batch_beyond_int64", ("--batch_size=" + "9" * 30,), "error"),
  ("batch_float", ("--batch_size=1.5",), "error"),
  ("max_decode_1e9", ("--max_decode_length=1000000000",), "error"),
  ("max_decode_zero", ("--max_decode_length=0",), "error"),
  ("beam_1e6", ("--beam_size=1000000",), "error"),
  ("beam_zero", ("--beam_size=0",), "error"),
  (
    "process_id_beyond",
    ("--coordinator_address=localhost:1", "--num_processes=2", "--process_id=5"),
    "error",
  ),
  ("num_processes_alone", ("--num_processes=2",), "error"),
  ("unknown_set_key", ("--set=train.steps=3",), "error"),
  ("set_mesh_nan", ("--set=mesh.data=nan",), "error"),
]


def _key(setting):
  return setting.partition("=")[0]


def _sets(sets):
  return [f"--set={s}" for s in sets]


def _adapt(sets):
  def setup(ctx):
    ctx.copy("W0", W)
    return ["--mode=adapt", f"--workdir={ctx.path(W)}", *_sets(sets)]

  return setup


CASES = [
  *(
    case(
      f"extreme_train_{name}",
      SURFACE,
      lambda ctx, sets=sets: fresh(ctx, *sets),
      mentions=(_key(sets[0]),) if "." in _key(sets[0]) else (),
      timeout=180,
    )
    for name, sets in TRAIN_SETS
  ),
  *(
    case(
      f"extreme_train_{name}",
      SURFACE,
      lambda ctx, s=sets: fresh(ctx, *s),
      **ok(check, "w"),
      timeout=400,  # they train (eval_examples_huge also decodes): 205 s under load 13
    )
    for name, sets, check in TRAIN_SETS_OK
  ),
  *(
    case(
      f"extreme_reproduce_{name}",
      SURFACE,
      lambda ctx, sets=sets: ["--mode=reproduce", f"--workdir={ctx.path('r')}", *_sets(sets)],
      mentions=(_key(sets[0]),),
      hide=("gcsfs",),
      timeout=120,
    )
    for name, sets in REPRODUCE_SETS
  ),
  *(
    case(
      f"extreme_adapt_{name}",
      SURFACE,
      _adapt(sets),
      mentions=(_key(sets[0]),),
      workdirs=(W,),
    )
    for name, sets in ADAPT_SETS
  ),
  *(
    case(
      f"extreme_build_world_{name}",
      SURFACE,
      lambda ctx, flags=flags: ["--mode=build_world", f"--output_dir={ctx.path('out')}", *flags],
      mentions=(_key(flags[0]),),
      timeout=120,
    )
    for name, flags in BUILD_WORLD_FLAGS
  ),
  *(
    # The error names the flag set last (--process_id=5 beyond 2).
    predict_case(f"extreme_predict_{name}", SURFACE, flags, expect)
    for name, flags, expect in PREDICT_FLAGS
  ),
]
