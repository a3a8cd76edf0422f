"""Surface `paths`: every path flag and path config key given as a careless or hostile user
would: URIs without a bucket, unknown schemes, schemes whose filesystem package is missing,
`file://`, NUL / newline / control characters, relative, dotted and symlinked paths, special
files (FIFOs, devices, directories where a file belongs).
"""

import os

from tests.hostile.probe import FIXTURE_DATA, TINY, train_args

from .common import (
  ON_W,
  STORE_FIX,
  W,
  case,
  convert_args,
  edit_json,
  either,
  error,
  files_exist,
  fresh,
  ok,
  score_args,
  scores_equal,
  trained,
  value,
)

SURFACE = "paths"


def _symlinked_dir(ctx):
  os.makedirs(ctx.path("real"))
  return ctx.symlink("link", ctx.path("real"))


# --workdir of a training: (name, --workdir or the function making it, expectation).
TRAIN_WORKDIRS = [
  ("gs_no_bucket", "gs://", error("--workdir", "bucket")),
  ("gs_no_bucket_key", "gs:///run", error("--workdir", "bucket")),
  ("gs_missing_slash", "gs:/bucket/run", error("--workdir")),
  ("gs_missing_package", "gs://bucket/run", error("--workdir", "gcsfs", hide=("gcsfs",))),
  ("s3_missing_package", "s3://bucket/run", error("--workdir", "s3fs", hide=("s3fs",))),
  ("az_missing_package", "az://bucket/run", error("--workdir", "adlfs", hide=("adlfs",))),
  ("http_scheme", "http://example.com/run", error("--workdir", "http")),
  ("unknown_scheme", "foo://bucket/run", error("--workdir", "foo")),
  ("file_uri_no_path", "file://", error("--workdir")),
  ("gs_dotdot_key", "gs://bucket/a/../b", error("--workdir")),
  ("gs_empty_component", "gs://bucket/a//b", error("--workdir")),
  (
    "uppercase_scheme_missing_package",
    "GS://bucket/run",
    error("--workdir", "gcsfs", hide=("gcsfs",)),
  ),
  ("newline", "w\nx", error("--workdir")),
  ("tab", "w\tx", error("--workdir")),
  ("escape_char", "w\x1b[2Jx", error("--workdir")),
  ("name_too_long", "a" * 300, error("--workdir")),
  ("dev_null", "/dev/null", error("/dev/null")),
  ("backslash", "a\\b", error("--workdir", "backslash")),
  ("hf_offline", "hf://someone/run", error(timeout=180)),
  ("file_uri", lambda ctx: f"file://{ctx.path('w')}", ok(trained("w", 2), "w")),
  ("dotted_relative", "./a/../w", ok(trained("cwd/w", 2), "cwd/w")),
  ("parent_relative", "../w", ok(trained("w", 2), "w")),
  ("through_symlink", _symlinked_dir, ok(trained("real", 2), "link")),
  ("symlink_loop", lambda ctx: ctx.symlink("loop", ctx.path("loop")), error("loop")),
  (
    "dangling_symlink",
    lambda ctx: ctx.symlink("dangling", ctx.path("nowhere/deeper")),
    either(trained("nowhere/deeper", 2), "dangling", "nowhere"),
  ),
  ("is_a_file", lambda ctx: ctx.write("wfile", "not a dir"), error("wfile")),
  ("under_a_file", lambda ctx: ctx.write("f", "x") + "/w", error("f")),
  ("is_a_fifo", lambda ctx: ctx.fifo("wfifo"), error("wfifo")),
]

# The config's path keys through --set: (key, value, hidden packages, what the error names
# besides the key), named by key and value.
HOSTILE_SETS = [
  ("data.ssm_dir", "gs://", (), ()),
  ("data.templama_dir", "ftp://host/x", (), ("ftp",)),
  ("data.vocab", "s3://b/spiece.model", ("s3fs",), ("s3fs",)),
  ("model.init_checkpoint", "gs://b/ckpt", ("gcsfs",), ("gcsfs",)),
  ("data.cache_dir", "gs://b/cache", (), ()),
  ("data.pretrain_corpus", "a\nb", (), ()),
  ("eval.future_relations", "zz://x/y", (), ()),
  ("data.ssm_dir", "gs:/b/ssm", (), ()),
  ("data.templama_dir", "file://", (), ()),
  ("data.vocab", "x" * 5000, (), ()),
]
# (name, the --set or the function making it, expectation).
NAMED_SETS = [
  ("vocab_file_uri", f"data.vocab=file://{TINY}/spiece.model", ok(trained("w", 2), "w")),
  ("ssm_dir_dotted", f"data.ssm_dir={TINY}/templama/../ssm/.", ok(trained("w", 2), "w")),
  ("vocab_is_dev_zero", "data.vocab=/dev/zero", error("/dev/zero", writes=("w",))),
  (
    "ssm_dir_is_a_fifo",
    lambda ctx: f"data.ssm_dir={ctx.fifo('ssm')}",
    error("ssm", writes=("w",)),
  ),
  (
    "templama_dir_missing",
    lambda ctx: f"data.templama_dir={ctx.path('nothing')}",
    error("nothing", writes=("w",)),
  ),
]

# The same keys from a saved config.json (argv cannot hold a NUL; a file can): (key, value,
# the mode that reads it). Training never reads the saved config.json (the run's own config
# rewrites it): the hostile value is not input there, and the resumed run must reach step 3.
SAVED_CONFIGS = [
  ("data.ssm_dir", "a\0b", "eval"),
  ("data.vocab", "x\0", "train"),
  ("eval.future_relations", "\0", "eval"),
  ("data.ssm_dir", "gs://", "eval"),
  ("data.templama_dir", "zz://b/x", "eval"),
  ("data.vocab", "w\nx", "train"),
  ("model.init_checkpoint", "\0", "score"),
  ("data.ssm_dir", "gs://bucket/ssm", "eval"),
]


def _saved_config(key, given, mode="eval"):
  def setup(ctx):
    ctx.copy("W0", W)
    section, field = key.split(".")
    edit_json(ctx.path("W/config.json"), lambda c: c[section].__setitem__(field, given))
    return ON_W["resume" if mode == "train" else mode](ctx)

  return setup


def _w0(ctx):
  return ctx.base["W0"]


def _copied_w(ctx, checkpoint_rel):
  """W copied from the base; `checkpoint_rel` as given (relative to the case's cwd)."""
  ctx.copy("W0", "W")
  return checkpoint_rel


def _output_symlink(ctx):
  os.makedirs(ctx.path("elsewhere"))
  ctx.symlink("out.jsonl", ctx.path("elsewhere/target.jsonl"))
  return ctx.path("out.jsonl")


def _checkpoint_symlink(ctx):
  ctx.copy("W0", "W")
  return ctx.symlink("Wlink", ctx.path("W"))


def _some_output(ctx, run):
  return (
    None
    if any(os.path.isfile(ctx.path(p)) for p in ("out.jsonl", "elsewhere/target.jsonl"))
    else "no output"
  )


def _score(checkpoint=_w0, out="out.jsonl", *extra):
  """score of the base's input; each argument as given or made by a function of the case, the
  output relative to the case unless it is a URI or absolute."""
  return lambda ctx: score_args(
    ctx, value(ctx, checkpoint), value(ctx, out), "score", *(value(ctx, e) for e in extra)
  )


def _score_input(given, out="o.jsonl"):
  """score of the base's W0 with this --input_file (or the function making it)."""
  return lambda ctx: [
    "--mode=score",
    f"--checkpoint={ctx.base['W0']}",
    f"--input_file={value(ctx, given)}",
    f"--output_file={ctx.path(out)}",
  ]


def _convert_from_w(output_rel, fmt, alias=None):
  """convert of a copy W of the base's workdir into `output_rel` (through a link `alias` to W
  when given)."""

  def setup(ctx):
    ctx.copy("W0", "W")
    if alias:
      ctx.symlink(alias, ctx.path("W"))
    return convert_args(ctx.path(W), ctx.path(output_rel), fmt)

  return setup


def _convert_relative(ctx):
  ctx.copy("W0", "W")
  return convert_args("../W", "../out", "tlm")


# The path flags of predict / score / convert / the builders / the other modes:
# (name, setup -> argv, expectation).
FLAGS = [
  (
    "score_output_file_uri",
    _score(_w0, lambda ctx: f"file://{ctx.path('out.jsonl')}"),
    ok(scores_equal("ref2"), "out.jsonl"),
  ),
  ("score_output_file_missing_slash", _score(_w0, "file:out.jsonl"), error("--output_file")),
  ("score_output_file_gs_no_bucket", _score(_w0, "gs://"), error("--output_file")),
  (
    "score_output_file_is_a_dir",
    _score(_w0, lambda ctx: os.path.dirname(ctx.write("od/x", ""))),
    error("od"),
  ),
  (
    "score_output_file_in_missing_dir",
    _score(_w0, "missing/deeper/out.jsonl"),
    either(scores_equal("ref2", "missing/deeper/out.jsonl"), "missing"),
  ),
  (
    "score_output_file_is_a_symlink",
    _score(_w0, _output_symlink),
    either(_some_output, "out.jsonl", "elsewhere/target.jsonl"),
  ),
  (
    "score_checkpoint_file_uri",
    _score(lambda ctx: f"file://{ctx.base['W0']}"),
    ok(scores_equal("ref2"), "out.jsonl"),
  ),
  (
    "score_checkpoint_relative",
    _score(lambda ctx: _copied_w(ctx, "../W")),
    ok(scores_equal("ref2"), "out.jsonl", workdirs=(W,)),
  ),
  (
    "score_step_relative",
    _score(lambda ctx: _copied_w(ctx, "../W/checkpoints/1")),
    ok(scores_equal("ref1"), "out.jsonl", workdirs=(W,)),
  ),
  (
    "score_checkpoint_through_symlink",
    _score(_checkpoint_symlink),
    ok(scores_equal("ref2"), "out.jsonl", workdirs=(W,)),
  ),
  (
    "score_checkpoint_gs_missing_package",
    _score("gs://bucket/ckpt"),
    error("--checkpoint", "gcsfs", hide=("gcsfs",)),
  ),
  ("score_checkpoint_dev_zero", _score("/dev/zero"), error("/dev/zero")),
  ("score_checkpoint_fifo", _score(lambda ctx: ctx.fifo("ck")), error("ck")),
  (
    "score_input_file_s3_missing_package",
    _score_input("s3://b/in.jsonl", "out.jsonl"),
    error("--input_file", "s3fs", hide=("s3fs",)),
  ),
  ("score_input_file_fifo", _score_input(lambda ctx: ctx.fifo("in.jsonl")), error(timeout=120)),
  ("score_input_file_dev_zero", _score_input("/dev/zero"), error(timeout=120)),
  (
    "score_input_file_dir",
    _score_input(lambda ctx: os.path.dirname(ctx.write("indir/x", ""))),
    error(timeout=120),
  ),
  (
    "score_input_file_sparse_2g",
    _score_input(lambda ctx: ctx.sparse("big.jsonl", 2 << 30)),
    error(timeout=120),
  ),
  (
    "score_vocab_unknown_scheme",
    _score(_w0, "out.jsonl", "--vocab=ftp://h/s.model"),
    error("--vocab"),
  ),
  ("score_vocab_dev_zero", _score(_w0, "out.jsonl", "--vocab=/dev/zero"), error("/dev/zero")),
  (
    "score_vocab_fifo",
    _score(_w0, "out.jsonl", lambda ctx: f"--vocab={ctx.fifo('v.model')}"),
    error("v.model"),
  ),
  (
    "convert_output_dir_file_uri",
    lambda ctx: convert_args(ctx.base["W0"], f"file://{ctx.path('out')}", "hf"),
    ok(files_exist("out/config.json", "out/model.safetensors"), "out"),
  ),
  (
    "convert_relative_paths",
    _convert_relative,
    ok(files_exist("out/model_config.json", "out/params"), "out", workdirs=(W,)),
  ),
  (
    "convert_output_dir_is_a_file",
    lambda ctx: convert_args(ctx.base["W0"], ctx.write("out", "mine"), "hf"),
    error("out"),
  ),
  (
    "convert_output_inside_checkpoint",
    _convert_from_w("W/sub", "hf"),
    either(files_exist("W/sub/config.json"), "W/sub", workdirs=(W,)),
  ),
  (
    "convert_output_is_the_checkpoint_via_symlink",
    _convert_from_w("alias", "tlm", alias="alias"),
    error("alias", workdirs=(W,)),
  ),
  (
    "build_ssm_news_list_bad_uri",
    lambda ctx: [
      "--mode=build_ssm",
      f"--news={STORE_FIX}/news_sample.jsonl,gs://",
      f"--output_dir={ctx.path('out')}",
    ],
    error("--news"),
  ),
  (
    "build_ssm_news_file_uri",
    lambda ctx: [
      "--mode=build_ssm",
      f"--news=file://{STORE_FIX}/news_sample.jsonl",
      f"--output_dir=file://{ctx.path('out')}",
    ],
    ok(files_exist("out/manifest.json"), "out"),
  ),
  (
    "build_ssm_news_glob_matches_nothing",
    lambda ctx: [
      "--mode=build_ssm",
      f"--news={ctx.path('none-*.jsonl')}",
      f"--output_dir={ctx.path('out')}",
    ],
    error("none-"),
  ),
  (
    "build_templama_facts_newline",
    lambda ctx: [
      "--mode=build_templama",
      "--facts=a\nb",
      f"--entities={FIXTURE_DATA}/x",
      f"--output_dir={ctx.path('out')}",
    ],
    error("--facts"),
  ),
  (
    "build_templama_file_uris",
    lambda ctx: [
      "--mode=build_templama",
      f"--facts=file://{FIXTURE_DATA}/templama_facts.tsv",
      f"--entities=file://{FIXTURE_DATA}/templama_entities.tsv",
      f"--output_dir=file://{ctx.path('out')}",
    ],
    ok(files_exist("out/train.json", "out/test.json"), "out"),
  ),
  (
    "build_templama_facts_fifo",
    lambda ctx: [
      "--mode=build_templama",
      f"--facts={ctx.fifo('facts.tsv')}",
      f"--entities={FIXTURE_DATA}/templama_entities.tsv",
      f"--output_dir={ctx.path('out')}",
    ],
    error("facts.tsv"),
  ),
  (
    "build_ssm_news_dev_zero",
    lambda ctx: ["--mode=build_ssm", "--news=/dev/zero", f"--output_dir={ctx.path('out')}"],
    error("/dev/zero", timeout=120),
  ),
  (
    "tables_workdirs_bad_uri",
    lambda ctx: [
      "--mode=tables",
      f"--workdirs={ctx.base['W0']},zz://x",
      f"--output_dir={ctx.path('out')}",
    ],
    error("--workdirs"),
  ),
  (
    "check_store_file_uri",
    lambda ctx: ["--mode=check_store", f"--data=file://{ctx.base['store']}"],
    ok(None),
  ),
  (
    "check_store_data_empty_file_uri",
    lambda ctx: ["--mode=check_store", "--data=file://"],
    error("--data"),
  ),
  (
    "build_world_output_dir_gs",
    lambda ctx: ["--mode=build_world", "--output_dir=gs://b/world"],
    error("--output_dir", hide=("gcsfs",)),
  ),
  (
    "build_world_output_dir_newline",
    lambda ctx: ["--mode=build_world", "--output_dir=a\nb"],
    error("--output_dir"),
  ),
  (
    "eval_workdir_unknown_scheme",
    lambda ctx: ["--mode=eval", "--workdir=zz://b/w"],
    error("--workdir"),
  ),
  (
    "combine_seeds_workdirs_nul_free_bad_uri",
    lambda ctx: ["--mode=combine_seeds", "--workdirs=gs://", f"--output_dir={ctx.path('out')}"],
    error("--workdirs"),
  ),
  (
    "cronquestions_data_unknown_scheme",
    lambda ctx: ["--mode=cronquestions", f"--workdir={ctx.base['W0']}", "--data=zz://x/y"],
    error("--data"),
  ),
]


CASES = [
  *(
    case(
      f"train_workdir_{name}",
      SURFACE,
      lambda ctx, given=given: train_args(value(ctx, given)),
      **expectation,
    )
    for name, given, expectation in TRAIN_WORKDIRS
  ),
  *(
    case(
      f"set_{key}_{given[:12]!r}",
      SURFACE,
      lambda ctx, s=f"{key}={given}": fresh(ctx, s),
      **error(key, *mentions, hide=hide),
    )
    for key, given, hide, mentions in HOSTILE_SETS
  ),
  *(
    case(f"set_{name}", SURFACE, lambda ctx, s=s: fresh(ctx, value(ctx, s)), **expectation)
    for name, s, expectation in NAMED_SETS
  ),
  *(
    case(
      f"saved_config_{key}_{given[:10]!r}_{mode}",
      SURFACE,
      _saved_config(key, given, mode),
      expect={"score": "either", "train": "ok"}.get(mode, "error"),
      mentions=("config.json",),
      check=scores_equal("ref2") if mode == "score" else trained(W, 3),
      writes=(W, "out.jsonl"),
      workdirs=(W,),
      hide=("gcsfs",),
    )
    for key, given, mode in SAVED_CONFIGS
  ),
  case(
    "saved_config_vocab_file_uri_eval",
    SURFACE,
    _saved_config("data.vocab", f"file://{TINY}/spiece.model"),
    **ok(files_exist("W/results/eval.json"), W, workdirs=(W,)),
  ),
  *(case(name, SURFACE, setup, **expectation) for name, setup, expectation in FLAGS),
]
