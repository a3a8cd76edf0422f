"""Surface `state`, part 2: the files a workdir keeps beside its checkpoints, read back
hostile: best.json (train.keep_best), the lock file, the saved config.json, model_config.json
and spiece.model, the data state saved with a step, metrics.jsonl.
"""

import json
import os
import socket

from tests.hostile.probe import train_args

from .common import (
  CHECK_ON_W,
  DEV_ZERO,
  DIR,
  FIFO,
  MISSING,
  ON_W,
  S2,
  Append,
  Kind,
  W,
  case,
  convert_args,
  either,
  files_exist,
  put,
  rehash,
  score_args,
  scores_equal,
  sparse,
  trained,
)

SURFACE = "state"


# ---- best.json of a workdir trained with train.keep_best --------------------------------------


def _best(content, mode="resume"):
  def setup(ctx):
    ctx.copy("Wbest", W)
    put(ctx, "W/best/best.json", content)
    if mode == "resume":
      # keep_best keeps one best checkpoint: the resumed run may replace step 2's by step 3's
      # (a better value than best.json's), which is no loss; the check wants step 3 trained.
      ctx.damaged.add("W/best/checkpoints/2")
      return train_args(
        ctx.path(W), "train.steps=3", "train.keep_best=eval_loss", "train.eval_every=1"
      )
    if mode == "eval_best":
      return ["--mode=eval", f"--workdir={ctx.path('W/best')}"]
    return score_args(ctx, ctx.path("W/best"))

  return setup


# (name, content) of best.json when the training resumes.
BEST_JSONS = [
  ("truncated", '{"metric": "eval_loss", "mo'),
  ("step_is_a_string", '{"metric": "eval_loss", "mode": "min", "value": 4.7, "step": "2"}'),
  ("value_is_nan", '{"metric": "eval_loss", "mode": "min", "value": NaN, "step": 2}'),
  ("value_is_a_list", '{"metric": "eval_loss", "mode": "min", "value": [], "step": 2}'),
  ("step_beyond", '{"metric": "eval_loss", "mode": "min", "value": 4.7, "step": 99999999999999}'),
  ("other_metric", '{"metric": "templama_f1", "mode": "max", "value": 0.1, "step": 2}'),
  ("mode_unknown", '{"metric": "eval_loss", "mode": "sideways", "value": 4.7, "step": 2}'),
  ("a_list", "[1, 2]"),
  ("empty", ""),
  ("not_utf8", b"\xff\xfe"),
  ("fifo", FIFO),
  ("sparse", sparse(1 << 30)),
  ("dir", DIR),
]
# (name, content) of best.json read by eval and score of W/best.
BEST_JSONS_READ = [("truncated", '{"metric'), ("fifo", FIFO)]
BEST_READS = {  # mode -> (check, writes)
  "eval_best": (files_exist("W/best/results/eval.json"), W),
  "score_best": (scores_equal("ref2"), "out.jsonl"),
}


def _best_read(name, content, mode):
  check, writes = BEST_READS[mode]
  setup = _best(content, "eval_best" if mode == "eval_best" else "score")
  expectation = either(check, writes, mentions=("best.json",), workdirs=(W,))
  return case(f"best_json_{name}_{mode}", SURFACE, setup, **expectation)


# ---- the workdir's lock file ------------------------------------------------------------------

LIVE = Kind("live")  # the lock of a live process: this one


def _lock(content, mode="resume"):
  def setup(ctx):
    ctx.copy("W0", W)
    rel = "W/.tlm.lock"
    if content == LIVE:
      from tlm.workdir_lock import process_start_time

      ctx.write(
        rel,
        json.dumps(
          {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "process_start": process_start_time(os.getpid()),
            "mode": "train",
            "since": "now",
            "token": "t",
          }
        ),
      )
    else:
      put(ctx, rel, content)
    return ON_W[mode](ctx)

  return setup


def _lock_json(pid, **extra):
  value = {
    "pid": pid,
    "host": socket.gethostname(),
    "process_start": "1",
    "mode": "train",
    "since": "x",
    "token": "t",
  }
  value.update(extra)
  return json.dumps(value)


# (name, content of W/.tlm.lock, expect) when the training resumes.
LOCKS = [
  ("pid_beyond_range", _lock_json(2**40), "either"),
  ("pid_beyond_64_bits", _lock_json(2**70), "either"),
  ("pid_negative", _lock_json(-1), "either"),
  ("pid_zero", _lock_json(0), "either"),
  ("pid_is_a_string", _lock_json("12"), "either"),
  ("pid_is_a_float", _lock_json(1.5), "either"),
  ("pid_dead", _lock_json(2**22 + 5), "ok"),
  ("host_with_newline", _lock_json(2**22 + 5, host="a\nb"), "either"),
  ("garbage", "\x00\xff garbage", "either"),
  ("empty", "", "either"),
  ("fifo", FIFO, "either"),
  ("sparse", sparse(1 << 30), "either"),
  ("dir", DIR, "either"),
  ("live", LIVE, "error"),
]


def _lock_beside(content):
  """convert into `out` with the lock beside it (.out.tlm.lock) hostile."""

  def setup(ctx):
    put(ctx, ".out.tlm.lock", content)
    return convert_args(ctx.base["W0"], ctx.path("out"), "hf")

  return setup


# ---- the saved config.json, model_config.json and spiece.model ---------------------------------


def _tamper(rel, content, mode):
  def setup(ctx):
    ctx.copy("W0", W)
    put(ctx, rel, content)
    return ON_W[mode](ctx)

  return setup


def _section(section, key, value):
  return lambda c: c[section].__setitem__(key, value)


def _top(key, value):
  return lambda c: c.__setitem__(key, value)


# (name, content of W/config.json, mode, expect).
CONFIG_JSONS = [
  ("unknown_key", _section("train", "nonsense", 1), "eval", "error"),
  ("section_is_a_list", _top("train", []), "eval", "error"),
  ("steps_is_a_string", _section("train", "steps", "abc"), "eval", "error"),
  ("batch_beyond", _section("train", "batch_size", 10**12), "eval", "error"),
  ("years_empty", _section("eval", "years", []), "eval", "either"),
  ("year_huge", _section("eval", "years", [99999]), "eval", "error"),
  ("eval_batch_huge", _section("eval", "batch_size", 10**15), "eval", "error"),
  ("seed_beyond_64_bits", _section("data", "seed", 2**70), "eval", "error"),
  ("float_nan", _section("train", "learning_rate", float("nan")), "eval", "error"),
  ("not_an_object", lambda c: [1], "eval", "error"),
  ("truncated", '{"name": "tiny_temporal", "model": {', "eval", "error"),
  ("deeply_nested", "[" * 100_000, "eval", "error"),
  ("fifo", FIFO, "eval", "error"),
  ("sparse_2g", sparse(2 << 30), "eval", "error"),
  ("dev_zero", DEV_ZERO, "eval", "error"),
  ("not_utf8", b"\xff\xfe", "eval", "error"),
  ("unknown_key", _section("train", "nonsense", 1), "resume", "either"),
  ("fifo", FIFO, "resume", "either"),
  ("name_differs", _top("name", "tiny_uniform"), "resume", "either"),
  ("fifo", FIFO, "score", "either"),
  ("sparse_2g", sparse(2 << 30), "score", "either"),
  ("dev_zero", DEV_ZERO, "predict", "either"),
]
# (name, content of W/model_config.json, mode); each is an error.
MODEL_CONFIGS = [
  ("vocab_negative", _top("vocab_size", -1), "score"),
  ("emb_dim_huge", _top("emb_dim", 10**12), "score"),
  ("emb_dim_beyond_int64", _top("emb_dim", 2**70), "score"),
  ("num_layers_is_a_string", _top("num_encoder_layers", "x"), "convert"),
  ("num_heads_zero", _top("num_heads", 0), "score"),
  ("buckets_huge", _top("relative_attention_num_buckets", 10**9), "score"),
  ("unknown_key", _top("nonsense", 1), "score"),
  ("dtype_unknown", _top("dtype", "float7"), "predict"),
  ("not_json", "not json", "eval"),
  ("fifo", FIFO, "score"),
  ("missing", MISSING, "score"),
  ("dev_zero", DEV_ZERO, "resume"),
  ("vocab_smaller", _top("vocab_size", 10), "score"),
]
# (name, content of W/spiece.model, mode); an error or a success.
SPIECE_MODELS = [
  ("garbage", b"\x00garbage", "score"),
  ("fifo", FIFO, "score"),
  ("dev_zero", DEV_ZERO, "eval"),
  ("missing", MISSING, "resume"),
]


def _saved_file(prefix, rel, name, content, mode, expect, mentions, writes=(W, "out.jsonl")):
  """The case `PREFIX_NAME_MODE`: W's `rel` made hostile, then W read by `mode`."""
  return case(
    f"{prefix}_{name}_{mode}",
    SURFACE,
    _tamper(rel, content, mode),
    expect=expect,
    check=CHECK_ON_W[mode],
    mentions=mentions,
    writes=writes,
    workdirs=(W,),
    timeout=240,
  )


# ---- the data state saved with a checkpoint (its manifest made to agree: a deliberate edit) ----


def _data_state(edit):
  def setup(ctx):
    ctx.copy("W0", W)
    ctx.damaged.add(S2)
    rel = os.path.join(S2, "data_state", "metadata")
    put(ctx, rel, edit)
    if edit != FIFO:
      rehash(ctx, S2, "data_state/metadata")
    return ON_W["resume"](ctx)

  return setup


# (name, edit of step 2's data state) when the training resumes.
DATA_STATES = [
  ("step_is_a_string", lambda d: d.__setitem__("step", "2")),
  ("step_other", lambda d: d.__setitem__("step", 7)),
  ("batch_negative", lambda d: d.__setitem__("batch_size", -1)),
  ("data_is_a_list", lambda d: d.__setitem__("data", [])),
  ("seed_beyond", lambda d: d["data"].__setitem__("seed", 2**70)),
  ("not_an_object", lambda d: [1, 2]),
  ("fifo", FIFO),
]


# ---- metrics.jsonl read back on resume --------------------------------------------------------

# (name, content of W/metrics.jsonl, expect) when the training resumes.
METRICS = [
  ("torn_last_line", Append(b'{"step": 3, "lo'), "ok"),
  ("garbage_line", Append(b"garbage\n" + b'{"step": 2}\n'), "ok"),
  ("not_utf8", Append(b"\xff\xfe\n"), "ok"),
  ("nul_bytes", Append(b"\x00" * 100), "ok"),
  ("huge_int", Append(b'{"step": ' + b"9" * 10000 + b"}\n"), "ok"),
  ("deep", Append(b"[" * 100000 + b"\n"), "ok"),
  ("fifo", FIFO, "either"),
  ("sparse_1g", sparse(1 << 30), "either"),
]


CASES = [
  *(
    case(
      f"best_json_{name}_resume",
      SURFACE,
      _best(content),
      **either(trained(W, 3), W, mentions=("best.json",), workdirs=(W,)),
    )
    for name, content in BEST_JSONS
  ),
  *(
    _best_read(name, content, mode)
    for name, content in BEST_JSONS_READ
    for mode in ("eval_best", "score_best")
  ),
  *(
    case(
      f"lock_{name}_resume",
      SURFACE,
      _lock(content),
      expect=expect,
      check=trained(W, 3),
      mentions=(".tlm.lock",) if expect != "error" else (str(os.getpid()),),
      writes=(W,),
      workdirs=(W,),
    )
    for name, content, expect in LOCKS
  ),
  case(
    "lock_fifo_eval",
    SURFACE,
    _lock(FIFO, "eval"),
    **either(files_exist("W/results/eval.json"), W, mentions=(".tlm.lock",), workdirs=(W,)),
  ),
  *(
    case(
      f"lock_beside_output_{name}_convert",
      SURFACE,
      _lock_beside(content),
      **either(files_exist("out/config.json"), "out", mentions=(".out.tlm.lock",)),
    )
    for name, content in [("fifo", FIFO), ("pid_huge", _lock_json(2**63))]
  ),
  *(
    _saved_file("config_json", "W/config.json", name, content, mode, expect, ("config.json",))
    for name, content, mode, expect in CONFIG_JSONS
  ),
  *(
    _saved_file(
      "model_config",
      "W/model_config.json",
      name,
      content,
      mode,
      "error",
      # A vocabulary smaller than the saved embedding is a shape mismatch: the line names the
      # parameters that do not match the model (W/checkpoints/2/params: ... token_embedder).
      ("checkpoints/2/params",) if name == "vocab_smaller" else ("model_config.json",),
      writes=(W, "out.jsonl", "out"),
    )
    for name, content, mode in MODEL_CONFIGS
  ),
  *(
    _saved_file("spiece_model", "W/spiece.model", name, content, mode, "either", ("spiece.model",))
    for name, content, mode in SPIECE_MODELS
  ),
  *(
    case(
      f"data_state_{name}_resume",
      SURFACE,
      _data_state(edit),
      **either(trained(W, 3), W, mentions=("checkpoints/2",), workdirs=(W,)),
    )
    for name, edit in DATA_STATES
  ),
  *(
    case(
      f"metrics_jsonl_{name}_resume",
      SURFACE,
      _tamper("W/metrics.jsonl", content, "resume"),
      expect=expect,
      check=trained(W, 3),
      mentions=("metrics.jsonl",),
      writes=(W,),
      workdirs=(W,),
      timeout=300,
    )
    for name, content, expect in METRICS
  ),
]
