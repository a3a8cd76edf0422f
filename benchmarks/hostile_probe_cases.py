"""The cases of benchmarks/hostile_probe.py, written from issue 22's description as a careless
or hostile user would try them: `CASES`, a list of `Case` (hostile_probe.py says what each field
means and how an outcome is classified).

Surfaces: `paths` (every path flag and path config key: URIs, schemes, NUL / newline, relative,
dotted and symlinked paths, special files), `state` (the project's own files read back:
checksum manifests, best.json, lock files, config.json / model_config.json, data state,
metrics.jsonl, results read by tables / combine_seeds), `layout` (the workdir's entries of the
wrong kind, unwritable), `extremes` (settings at and beyond their limits), `builders`
(build_templama, build_ssm, build_world), `checkpoints` (damaged training checkpoints loaded by
every mode; a named step against a workdir), `store` (the example store: check_store,
convert_ssm, training on a damaged store), `t5x` (T5X checkpoints through --checkpoint and
model.init_checkpoint) and `sampling` (predict's sampling flags).
"""

import glob
import hashlib
import json
import os

import numpy as np
from hostile_probe import FIXTURE_DATA, TINY, Case, train_args

STORE_FIX = os.path.join(FIXTURE_DATA, "store")
CASES: list[Case] = []


def case(name, surface, setup, **kw):
  CASES.append(Case(name, surface, setup, **kw))


# ---- helpers -----------------------------------------------------------------------------------


def _read_jsonl(path):
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def trained(rel, step):
  """check: REL/checkpoints/STEP exists with its manifest."""

  def check(ctx, run):
    path = ctx.path(os.path.join(rel, "checkpoints", str(step), "tlm_checksums.json"))
    return None if os.path.isfile(path) else f"no {rel}/checkpoints/{step}/tlm_checksums.json"

  return check


def scores_equal(ref, out="out.jsonl", tol=1e-4, warning=None):
  """check: the scores in OUT equal the base's reference scores REF (and stderr warned)."""

  def check(ctx, run):
    path = ctx.path(out)
    if not os.path.isfile(path):
      return f"no {out}"
    got, want = _read_jsonl(path), _read_jsonl(ctx.base[f"{ref}.jsonl"])
    if len(got) != len(want):
      return f"{len(got)} rows, {len(want)} expected"
    for g, w in zip(got, want):
      if abs(g["log_likelihood"] - w["log_likelihood"]) > tol * max(1, abs(w["log_likelihood"])):
        return f"log_likelihood {g['log_likelihood']} != {ref}'s {w['log_likelihood']}"
    if warning and warning not in run["stderr"]:
      return f"no warning holding {warning!r}"
    return None

  return check


def predictions(n=3, out="out.jsonl"):
  def check(ctx, run):
    path = ctx.path(out)
    if not os.path.isfile(path):
      return f"no {out}"
    rows = _read_jsonl(path)
    if len(rows) != n or not all(isinstance(r.get("prediction"), str) for r in rows):
      return f"{out}: not {n} rows with a prediction"
    return None

  return check


def files_exist(*rels, warning=None):
  def check(ctx, run):
    missing = [r for r in rels if not os.path.exists(ctx.path(r))]
    if missing:
      return f"missing {missing}"
    if warning and warning not in run["stderr"]:
      return f"no warning holding {warning!r}"
    return None

  return check


def both(*checks):
  def check(ctx, run):
    for c in checks:
      if (why := c(ctx, run)) is not None:
        return why
    return None

  return check


def warned(fragment):
  def check(ctx, run):
    return None if fragment in run["stderr"] else f"no warning holding {fragment!r}"

  return check


def score_args(ctx, checkpoint, out="out.jsonl", mode="score", *extra):
  """predict / score of the base's input; `out` relative to the case directory unless it is a
  URI or absolute (then as given)."""
  out = out if out.startswith("/") or ":" in out else ctx.path(out)
  return [
    f"--mode={mode}",
    f"--checkpoint={checkpoint}",
    f"--input_file={ctx.copy('in.jsonl')}",
    f"--output_file={out}",
    *extra,
  ]


def edit_json(path, edit):
  with open(path) as f:
    value = json.load(f)
  value = edit(value) or value
  with open(path, "w") as f:
    json.dump(value, f)


def manifest(ctx, step_rel):
  return ctx.path(os.path.join(step_rel, "tlm_checksums.json"))


def rehash(ctx, step_rel, name):
  """Makes the manifest agree with a file edited on purpose (a hostile user who knows it)."""
  step = ctx.path(step_rel)
  with open(os.path.join(step, name), "rb") as f:
    data = f.read()

  def edit(m):
    m["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}

  edit_json(manifest(ctx, step_rel), edit)


def largest_param_file(step_dir):
  found = glob.glob(os.path.join(step_dir, "params", "**", "d", "*"), recursive=True)
  return max(found, key=os.path.getsize)


def random_bytes(ctx, step_rel):
  """4 KiB of random bytes into a parameter file (the issue's probe)."""
  path = largest_param_file(ctx.path(step_rel))
  with open(path, "r+b") as f:
    f.seek(64)
    f.write(np.random.RandomState(0).bytes(4096))
  ctx.damaged.add(step_rel)


def truncate_param(ctx, step_rel):
  path = largest_param_file(ctx.path(step_rel))
  os.truncate(path, os.path.getsize(path) // 2)
  ctx.damaged.add(step_rel)


W, S1, S2 = "W", "W/checkpoints/1", "W/checkpoints/2"


def resume(ctx, *sets):
  """Copies the base workdir to W and resumes it to step 3."""
  ctx.copy("W0", W)
  return train_args(ctx.path(W), "train.steps=3", *sets)


def fresh(ctx, *sets, workdir="w"):
  return train_args(ctx.path(workdir), *sets)


# ---- paths and URIs ----------------------------------------------------------------------------

for name, uri, hide, mentions in [
  ("gs_no_bucket", "gs://", (), ("--workdir", "bucket")),
  ("gs_no_bucket_key", "gs:///run", (), ("--workdir", "bucket")),
  ("gs_missing_slash", "gs:/bucket/run", (), ("--workdir",)),
  ("gs_missing_package", "gs://bucket/run", ("gcsfs",), ("--workdir", "gcsfs")),
  ("s3_missing_package", "s3://bucket/run", ("s3fs",), ("--workdir", "s3fs")),
  ("az_missing_package", "az://bucket/run", ("adlfs",), ("--workdir", "adlfs")),
  ("http_scheme", "http://example.com/run", (), ("--workdir", "http")),
  ("unknown_scheme", "foo://bucket/run", (), ("--workdir", "foo")),
  ("file_uri_no_path", "file://", (), ("--workdir",)),
  ("gs_dotdot_key", "gs://bucket/a/../b", (), ("--workdir",)),
  ("gs_empty_component", "gs://bucket/a//b", (), ("--workdir",)),
  ("uppercase_scheme_missing_package", "GS://bucket/run", ("gcsfs",), ("--workdir", "gcsfs")),
  ("newline", "w\nx", (), ("--workdir",)),
  ("tab", "w\tx", (), ("--workdir",)),
  ("escape_char", "w\x1b[2Jx", (), ("--workdir",)),
  ("name_too_long", "a" * 300, (), ("--workdir",)),
  ("dev_null", "/dev/null", (), ("/dev/null",)),
  ("backslash", "a\\b", (), ("--workdir", "backslash")),
]:
  case(
    f"train_workdir_{name}",
    "paths",
    lambda ctx, uri=uri: train_args(uri),
    hide=hide,
    mentions=mentions,
  )

case("train_workdir_hf_offline", "paths", lambda ctx: train_args("hf://someone/run"), timeout=180)
case(
  "train_workdir_file_uri",
  "paths",
  lambda ctx: train_args(f"file://{ctx.path('w')}"),
  expect="ok",
  check=trained("w", 2),
  writes=("w",),
)
case(
  "train_workdir_dotted_relative",
  "paths",
  lambda ctx: train_args("./a/../w"),
  expect="ok",
  check=trained("cwd/w", 2),
  writes=("cwd/w",),
)
case(
  "train_workdir_parent_relative",
  "paths",
  lambda ctx: train_args("../w"),
  expect="ok",
  check=trained("w", 2),
  writes=("w",),
)


def _symlinked_workdir(ctx):
  os.makedirs(ctx.path("real"))
  ctx.symlink("link", ctx.path("real"))
  return train_args(ctx.path("link"))


case(
  "train_workdir_through_symlink",
  "paths",
  _symlinked_workdir,
  expect="ok",
  check=trained("real", 2),
  writes=("link",),
)


def _symlink_loop(ctx):
  ctx.symlink("loop", ctx.path("loop"))
  return train_args(ctx.path("loop"))


case("train_workdir_symlink_loop", "paths", _symlink_loop, mentions=("loop",))


def _dangling(ctx):
  ctx.symlink("dangling", ctx.path("nowhere/deeper"))
  return train_args(ctx.path("dangling"))


case(
  "train_workdir_dangling_symlink",
  "paths",
  _dangling,
  expect="either",
  check=trained("nowhere/deeper", 2),
  writes=("dangling", "nowhere"),
)
case(
  "train_workdir_is_a_file",
  "paths",
  lambda ctx: train_args(ctx.write("wfile", "not a dir")),
  mentions=("wfile",),
)
case(
  "train_workdir_under_a_file",
  "paths",
  lambda ctx: train_args(ctx.write("f", "x") + "/w"),
  mentions=("f",),
)
case(
  "train_workdir_is_a_fifo", "paths", lambda ctx: train_args(ctx.fifo("wfifo")), mentions=("wfifo",)
)

# The config's path keys, through --set.
for key, value, hide, mentions in [
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
]:
  case(
    f"set_{key}_{value[:12]!r}",
    "paths",
    lambda ctx, key=key, value=value: fresh(ctx, f"{key}={value}"),
    hide=hide,
    mentions=(key, *mentions),
  )

case(
  "set_vocab_file_uri",
  "paths",
  lambda ctx: fresh(ctx, f"data.vocab=file://{TINY}/spiece.model"),
  expect="ok",
  check=trained("w", 2),
  writes=("w",),
)
case(
  "set_ssm_dir_dotted",
  "paths",
  lambda ctx: fresh(ctx, f"data.ssm_dir={TINY}/templama/../ssm/."),
  expect="ok",
  check=trained("w", 2),
  writes=("w",),
)
case(
  "set_vocab_is_dev_zero",
  "paths",
  lambda ctx: fresh(ctx, "data.vocab=/dev/zero"),
  mentions=("/dev/zero",),
  writes=("w",),
)
case(
  "set_ssm_dir_is_a_fifo",
  "paths",
  lambda ctx: fresh(ctx, f"data.ssm_dir={ctx.fifo('ssm')}"),
  mentions=("ssm",),
  writes=("w",),
)
case(
  "set_templama_dir_missing",
  "paths",
  lambda ctx: fresh(ctx, f"data.templama_dir={ctx.path('nothing')}"),
  mentions=("nothing",),
  writes=("w",),
)


# The same keys from a saved config.json (argv cannot hold a NUL; a file can).
def _saved_config(key, value, mode="eval"):
  def setup(ctx):
    ctx.copy("W0", W)
    section, field = key.split(".")
    edit_json(ctx.path("W/config.json"), lambda c: c[section].__setitem__(field, value))
    if mode == "eval":
      return ["--mode=eval", f"--workdir={ctx.path(W)}"]
    if mode == "score":
      return score_args(ctx, ctx.path(W))
    return train_args(ctx.path(W), "train.steps=3")

  return setup


for key, value, mode in [
  ("data.ssm_dir", "a\0b", "eval"),
  ("data.vocab", "x\0", "train"),
  ("eval.future_relations", "\0", "eval"),
  ("data.ssm_dir", "gs://", "eval"),
  ("data.templama_dir", "zz://b/x", "eval"),
  ("data.vocab", "w\nx", "train"),
  ("model.init_checkpoint", "\0", "score"),
  ("data.ssm_dir", "gs://bucket/ssm", "eval"),
]:
  case(
    f"saved_config_{key}_{value[:10]!r}_{mode}",
    "paths",
    _saved_config(key, value, mode),
    # Training never reads the saved config.json (the run's own config rewrites it): the
    # hostile value is not input there, and the resumed run must reach step 3.
    expect={"score": "either", "train": "ok"}.get(mode, "error"),
    mentions=("config.json",),
    check=scores_equal("ref2") if mode == "score" else trained(W, 3),
    writes=(W, "out.jsonl"),
    workdirs=(W,),
    hide=("gcsfs",),
  )

case(
  "saved_config_vocab_file_uri_eval",
  "paths",
  _saved_config("data.vocab", f"file://{TINY}/spiece.model"),
  expect="ok",
  check=files_exist("W/results/eval.json"),
  writes=(W,),
  workdirs=(W,),
)

# Output and input paths of predict / score / convert / builders.
case(
  "score_output_file_uri",
  "paths",
  lambda ctx: score_args(ctx, ctx.base["W0"], f"file://{ctx.path('out.jsonl')}"),
  expect="ok",
  check=scores_equal("ref2"),
  writes=("out.jsonl",),
)
case(
  "score_output_file_missing_slash",
  "paths",
  lambda ctx: score_args(ctx, ctx.base["W0"], "file:out.jsonl"),
  mentions=("--output_file",),
)
case(
  "score_output_file_gs_no_bucket",
  "paths",
  lambda ctx: score_args(ctx, ctx.base["W0"], "gs://"),
  mentions=("--output_file",),
)
case(
  "score_output_file_is_a_dir",
  "paths",
  lambda ctx: score_args(ctx, ctx.base["W0"], os.path.dirname(ctx.write("od/x", ""))),
  mentions=("od",),
)
case(
  "score_output_file_in_missing_dir",
  "paths",
  lambda ctx: score_args(ctx, ctx.base["W0"], "missing/deeper/out.jsonl"),
  expect="either",
  check=scores_equal("ref2", "missing/deeper/out.jsonl"),
  writes=("missing",),
)


def _output_symlink(ctx):
  os.makedirs(ctx.path("elsewhere"))
  ctx.symlink("out.jsonl", ctx.path("elsewhere/target.jsonl"))
  return score_args(ctx, ctx.base["W0"])


case(
  "score_output_file_is_a_symlink",
  "paths",
  _output_symlink,
  expect="either",
  check=lambda ctx, run: (
    None
    if any(os.path.isfile(ctx.path(p)) for p in ("out.jsonl", "elsewhere/target.jsonl"))
    else "no output"
  ),
  writes=("out.jsonl", "elsewhere/target.jsonl"),
)
case(
  "score_checkpoint_file_uri",
  "paths",
  lambda ctx: score_args(ctx, f"file://{ctx.base['W0']}"),
  expect="ok",
  check=scores_equal("ref2"),
  writes=("out.jsonl",),
)


def _relative_checkpoint(ctx):
  ctx.copy("W0", "W")
  return score_args(ctx, "../W")


case(
  "score_checkpoint_relative",
  "paths",
  _relative_checkpoint,
  expect="ok",
  check=scores_equal("ref2"),
  writes=("out.jsonl",),
  workdirs=(W,),
)


def _relative_step(ctx):
  ctx.copy("W0", "W")
  return score_args(ctx, "../W/checkpoints/1")


case(
  "score_step_relative",
  "paths",
  _relative_step,
  expect="ok",
  check=scores_equal("ref1"),
  writes=("out.jsonl",),
  workdirs=(W,),
)


def _checkpoint_symlink(ctx):
  ctx.copy("W0", "W")
  ctx.symlink("Wlink", ctx.path("W"))
  return score_args(ctx, ctx.path("Wlink"))


case(
  "score_checkpoint_through_symlink",
  "paths",
  _checkpoint_symlink,
  expect="ok",
  check=scores_equal("ref2"),
  writes=("out.jsonl",),
  workdirs=(W,),
)
case(
  "score_checkpoint_gs_missing_package",
  "paths",
  lambda ctx: score_args(ctx, "gs://bucket/ckpt"),
  hide=("gcsfs",),
  mentions=("--checkpoint", "gcsfs"),
)
case(
  "score_checkpoint_dev_zero",
  "paths",
  lambda ctx: score_args(ctx, "/dev/zero"),
  mentions=("/dev/zero",),
)
case(
  "score_checkpoint_fifo", "paths", lambda ctx: score_args(ctx, ctx.fifo("ck")), mentions=("ck",)
)
case(
  "score_input_file_s3_missing_package",
  "paths",
  lambda ctx: [
    "--mode=score",
    f"--checkpoint={ctx.base['W0']}",
    "--input_file=s3://b/in.jsonl",
    f"--output_file={ctx.path('out.jsonl')}",
  ],
  hide=("s3fs",),
  mentions=("--input_file", "s3fs"),
)
for name, make in [
  ("fifo", lambda ctx: ctx.fifo("in.jsonl")),
  ("dev_zero", lambda ctx: "/dev/zero"),
  ("dir", lambda ctx: os.path.dirname(ctx.write("indir/x", ""))),
  ("sparse_2g", lambda ctx: ctx.sparse("big.jsonl", 2 << 30)),
]:
  case(
    f"score_input_file_{name}",
    "paths",
    lambda ctx, make=make: [
      "--mode=score",
      f"--checkpoint={ctx.base['W0']}",
      f"--input_file={make(ctx)}",
      f"--output_file={ctx.path('o.jsonl')}",
    ],
    timeout=120,
  )
case(
  "score_vocab_unknown_scheme",
  "paths",
  lambda ctx: score_args(ctx, ctx.base["W0"], "out.jsonl", "score", "--vocab=ftp://h/s.model"),
  mentions=("--vocab",),
)
case(
  "score_vocab_dev_zero",
  "paths",
  lambda ctx: score_args(ctx, ctx.base["W0"], "out.jsonl", "score", "--vocab=/dev/zero"),
  mentions=("/dev/zero",),
)
case(
  "score_vocab_fifo",
  "paths",
  lambda ctx: score_args(
    ctx, ctx.base["W0"], "out.jsonl", "score", f"--vocab={ctx.fifo('v.model')}"
  ),
  mentions=("v.model",),
)
case(
  "convert_output_dir_file_uri",
  "paths",
  lambda ctx: [
    "--mode=convert",
    f"--checkpoint={ctx.base['W0']}",
    f"--output_dir=file://{ctx.path('out')}",
    "--format=hf",
  ],
  expect="ok",
  check=files_exist("out/config.json", "out/model.safetensors"),
  writes=("out",),
)


def _convert_relative(ctx):
  ctx.copy("W0", "W")
  return ["--mode=convert", "--checkpoint=../W", "--output_dir=../out", "--format=tlm"]


case(
  "convert_relative_paths",
  "paths",
  _convert_relative,
  expect="ok",
  check=files_exist("out/model_config.json", "out/params"),
  writes=("out",),
  workdirs=(W,),
)
case(
  "convert_output_dir_is_a_file",
  "paths",
  lambda ctx: [
    "--mode=convert",
    f"--checkpoint={ctx.base['W0']}",
    f"--output_dir={ctx.write('out', 'mine')}",
    "--format=hf",
  ],
  mentions=("out",),
)


def _convert_into_itself(ctx):
  ctx.copy("W0", "W")
  return [
    "--mode=convert",
    f"--checkpoint={ctx.path(W)}",
    f"--output_dir={ctx.path('W/sub')}",
    "--format=hf",
  ]


case(
  "convert_output_inside_checkpoint",
  "paths",
  _convert_into_itself,
  expect="either",
  check=files_exist("W/sub/config.json"),
  writes=("W/sub",),
  workdirs=(W,),
)


def _convert_onto_itself_via_link(ctx):
  ctx.copy("W0", "W")
  ctx.symlink("alias", ctx.path("W"))
  return [
    "--mode=convert",
    f"--checkpoint={ctx.path(W)}",
    f"--output_dir={ctx.path('alias')}",
    "--format=tlm",
  ]


case(
  "convert_output_is_the_checkpoint_via_symlink",
  "paths",
  _convert_onto_itself_via_link,
  mentions=("alias",),
  workdirs=(W,),
)
case(
  "build_ssm_news_list_bad_uri",
  "paths",
  lambda ctx: [
    "--mode=build_ssm",
    f"--news={STORE_FIX}/news_sample.jsonl,gs://",
    f"--output_dir={ctx.path('out')}",
  ],
  mentions=("--news",),
)
case(
  "build_ssm_news_file_uri",
  "paths",
  lambda ctx: [
    "--mode=build_ssm",
    f"--news=file://{STORE_FIX}/news_sample.jsonl",
    f"--output_dir=file://{ctx.path('out')}",
  ],
  expect="ok",
  check=files_exist("out/manifest.json"),
  writes=("out",),
)
case(
  "build_ssm_news_glob_matches_nothing",
  "paths",
  lambda ctx: [
    "--mode=build_ssm",
    f"--news={ctx.path('none-*.jsonl')}",
    f"--output_dir={ctx.path('out')}",
  ],
  mentions=("none-",),
)
case(
  "build_templama_facts_newline",
  "paths",
  lambda ctx: [
    "--mode=build_templama",
    "--facts=a\nb",
    f"--entities={FIXTURE_DATA}/x",
    f"--output_dir={ctx.path('out')}",
  ],
  mentions=("--facts",),
)
case(
  "build_templama_file_uris",
  "paths",
  lambda ctx: [
    "--mode=build_templama",
    f"--facts=file://{FIXTURE_DATA}/templama_facts.tsv",
    f"--entities=file://{FIXTURE_DATA}/templama_entities.tsv",
    f"--output_dir=file://{ctx.path('out')}",
  ],
  expect="ok",
  check=files_exist("out/train.json", "out/test.json"),
  writes=("out",),
)
case(
  "build_templama_facts_fifo",
  "paths",
  lambda ctx: [
    "--mode=build_templama",
    f"--facts={ctx.fifo('facts.tsv')}",
    f"--entities={FIXTURE_DATA}/templama_entities.tsv",
    f"--output_dir={ctx.path('out')}",
  ],
  mentions=("facts.tsv",),
)
case(
  "build_ssm_news_dev_zero",
  "paths",
  lambda ctx: ["--mode=build_ssm", "--news=/dev/zero", f"--output_dir={ctx.path('out')}"],
  mentions=("/dev/zero",),
  timeout=120,
)
case(
  "tables_workdirs_bad_uri",
  "paths",
  lambda ctx: [
    "--mode=tables",
    f"--workdirs={ctx.base['W0']},zz://x",
    f"--output_dir={ctx.path('out')}",
  ],
  mentions=("--workdirs",),
)
case(
  "check_store_file_uri",
  "paths",
  lambda ctx: ["--mode=check_store", f"--data=file://{ctx.base['store']}"],
  expect="ok",
)
case(
  "check_store_data_empty_file_uri",
  "paths",
  lambda ctx: ["--mode=check_store", "--data=file://"],
  mentions=("--data",),
)
case(
  "build_world_output_dir_gs",
  "paths",
  lambda ctx: ["--mode=build_world", "--output_dir=gs://b/world"],
  hide=("gcsfs",),
  mentions=("--output_dir",),
)
case(
  "build_world_output_dir_newline",
  "paths",
  lambda ctx: ["--mode=build_world", "--output_dir=a\nb"],
  mentions=("--output_dir",),
)
case(
  "eval_workdir_unknown_scheme",
  "paths",
  lambda ctx: ["--mode=eval", "--workdir=zz://b/w"],
  mentions=("--workdir",),
)
case(
  "combine_seeds_workdirs_nul_free_bad_uri",
  "paths",
  lambda ctx: ["--mode=combine_seeds", "--workdirs=gs://", f"--output_dir={ctx.path('out')}"],
  mentions=("--workdirs",),
)
case(
  "cronquestions_data_unknown_scheme",
  "paths",
  lambda ctx: ["--mode=cronquestions", f"--workdir={ctx.base['W0']}", "--data=zz://x/y"],
  mentions=("--data",),
)


# ---- the project's own state files -------------------------------------------------------------


def _with_manifest(edit, step=S2):
  """W with step's manifest edited by `edit(ctx, manifest_dict) -> dict|None`, or `edit(ctx)`
  doing anything to the step (raw)."""

  def apply(ctx):
    ctx.copy("W0", W)
    ctx.damaged.add(step)
    path = manifest(ctx, step)
    with open(path) as f:
      m = json.load(f)
    out = edit(ctx, m)
    if out is not None:
      with open(path, "w") as f:
        json.dump(out, f)

  return apply


def _add_entry(name, size=10):
  def edit(ctx, m):
    m["files"][name] = {"size": size, "sha256": "0" * 64}
    return m

  return edit


def _outside_fifo(ctx, m):
  ctx.fifo("outside_fifo")
  m["files"]["../../../outside_fifo"] = {"size": 10, "sha256": "0" * 64}
  return m


def _device_link(ctx, m):
  path = largest_param_file(ctx.path(S2))
  os.remove(path)
  os.symlink("/dev/zero", path)


def _raw(fn):
  def edit(ctx, m):
    fn(ctx, manifest(ctx, S2))

  return edit


def _set(path_fn):
  return lambda ctx, m: path_fn(ctx, m) or m


def _first_entry(m):
  return m["files"][sorted(m["files"])[0]]


MANIFESTS = {
  "dotdot_fifo_outside": _outside_fifo,
  "absolute_dev_zero": _add_entry("/dev/zero"),
  "dotdot_params": _add_entry("params/../../../../etc/passwd", 100),
  "device_in_place_of_a_param_file": _device_link,
  "huge_sparse_manifest": _raw(lambda ctx, p: ctx.sparse(os.path.relpath(p, ctx.dir), 100 << 20)),
  "manifest_is_a_fifo": _raw(lambda ctx, p: ctx.fifo(os.path.relpath(p, ctx.dir))),
  "manifest_links_to_dev_zero": _raw(
    lambda ctx, p: ctx.symlink(os.path.relpath(p, ctx.dir), "/dev/zero")
  ),
  "files_is_a_list": lambda ctx, m: dict(m, files=[]),
  "size_is_a_string": _set(lambda ctx, m: _first_entry(m).__setitem__("size", "10")),
  "sha_is_an_int": _set(lambda ctx, m: _first_entry(m).__setitem__("sha256", 123)),
  "entry_is_null": _set(lambda ctx, m: m["files"].__setitem__(sorted(m["files"])[0], None)),
  "nul_in_a_name": _add_entry("params/\0x"),
  "size_huge": _set(lambda ctx, m: _first_entry(m).__setitem__("size", 10**30)),
  "size_negative": _set(lambda ctx, m: _first_entry(m).__setitem__("size", -1)),
  "truncated": _raw(lambda ctx, p: os.truncate(p, 100)),
  "deeply_nested": _raw(lambda ctx, p: ctx.write(os.path.relpath(p, ctx.dir), "[" * 100_000)),
  "wrong_format": lambda ctx, m: dict(m, format="something-else/9"),
  "not_utf8": _raw(lambda ctx, p: ctx.write(os.path.relpath(p, ctx.dir), b"\xff\xfe{}")),
  "big_int": _raw(
    lambda ctx, p: ctx.write(os.path.relpath(p, ctx.dir), '{"format": 1' + "0" * 6000 + "}")
  ),
  "entry_names_a_directory": _add_entry("params"),
}
# Each manifest in each mode: a workdir falls back to step 1 (with a warning), a named step
# fails in one line.
MANIFEST_MODES = {
  "resume": lambda ctx: train_args(ctx.path(W), "train.steps=3"),
  "score_workdir": lambda ctx: score_args(ctx, ctx.path(W)),
  "score_step": lambda ctx: score_args(ctx, ctx.path(S2)),
  "eval": lambda ctx: ["--mode=eval", f"--workdir={ctx.path(W)}"],
  "convert_step": lambda ctx: [
    "--mode=convert",
    f"--checkpoint={ctx.path(S2)}",
    f"--output_dir={ctx.path('out')}",
    "--format=tlm",
  ],
  "init_checkpoint_workdir": lambda ctx: fresh(ctx, f"model.init_checkpoint={ctx.path(W)}"),
  "predict_workdir": lambda ctx: score_args(ctx, ctx.path(W), "out.jsonl", "predict"),
}
MODE_EXPECT = {
  "resume": ("ok", trained(W, 3)),
  "score_workdir": ("ok", scores_equal("ref1", warning="checkpoints/2")),
  "score_step": ("error", None),
  "eval": ("ok", files_exist("W/results/eval.json", warning="checkpoints/2")),
  "convert_step": ("error", None),
  "init_checkpoint_workdir": ("ok", both(trained("w", 2), warned("checkpoints/2"))),
  "predict_workdir": ("ok", both(predictions(), warned("checkpoints/2"))),
}
_MODES_OF = {
  "dotdot_fifo_outside": (
    "resume",
    "score_workdir",
    "score_step",
    "eval",
    "convert_step",
    "init_checkpoint_workdir",
    "predict_workdir",
  ),
  "absolute_dev_zero": ("resume", "score_step", "eval", "init_checkpoint_workdir"),
  "device_in_place_of_a_param_file": ("resume", "score_workdir", "score_step", "convert_step"),
  "huge_sparse_manifest": ("resume", "score_step"),
  "manifest_is_a_fifo": ("resume", "score_workdir", "score_step", "eval"),
  "manifest_links_to_dev_zero": ("score_workdir", "convert_step"),
}
for what, edit in MANIFESTS.items():
  for mode in _MODES_OF.get(what, ("score_workdir", "score_step")):
    expect, check = MODE_EXPECT[mode]

    def setup(ctx, edit=edit, mode=mode):
      _with_manifest(edit)(ctx)
      return MANIFEST_MODES[mode](ctx)

    case(
      f"manifest_{what}_{mode}",
      "state",
      setup,
      expect=expect,
      check=check,
      mentions=("checkpoints/2",) if expect == "error" else (),
      writes=(W, "out", "out.jsonl", "w"),
      workdirs=(W,),
      timeout=240,
    )


def _all_bad(ctx):
  ctx.copy("W0", W)
  for step in (S1, S2):
    random_bytes(ctx, step)
  return score_args(ctx, ctx.path(W))


case("manifest_every_step_corrupt_score_workdir", "state", _all_bad, mentions=("W",), workdirs=(W,))


# best.json of a workdir trained with train.keep_best.
def _best(content, mode="resume"):
  def setup(ctx):
    ctx.copy("Wbest", W)
    path = ctx.path("W/best/best.json")
    if content == "fifo":
      ctx.fifo("W/best/best.json")
    elif content == "sparse":
      ctx.sparse("W/best/best.json", 1 << 30)
    elif content == "dir":
      os.remove(path)
      os.makedirs(path)
    else:
      ctx.write("W/best/best.json", content)
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


for name, content in [
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
  ("fifo", "fifo"),
  ("sparse", "sparse"),
  ("dir", "dir"),
]:
  case(
    f"best_json_{name}_resume",
    "state",
    _best(content),
    expect="either",
    check=trained(W, 3),
    mentions=("best.json",),
    writes=(W,),
    workdirs=(W,),
  )
for name, content in [("truncated", '{"metric'), ("fifo", "fifo")]:
  case(
    f"best_json_{name}_eval_best",
    "state",
    _best(content, "eval_best"),
    expect="either",
    check=files_exist("W/best/results/eval.json"),
    mentions=("best.json",),
    writes=(W,),
    workdirs=(W,),
  )
  case(
    f"best_json_{name}_score_best",
    "state",
    _best(content, "score"),
    expect="either",
    check=scores_equal("ref2"),
    mentions=("best.json",),
    writes=("out.jsonl",),
    workdirs=(W,),
  )


# Lock files.
def _lock(content, mode="resume"):
  def setup(ctx):
    ctx.copy("W0", W)
    rel = "W/.tlm.lock"
    if content == "fifo":
      ctx.fifo(rel)
    elif content == "sparse":
      ctx.sparse(rel, 1 << 30)
    elif content == "dir":
      os.makedirs(ctx.path(rel))
    elif content == "live":
      import socket

      from tlm.workdir_lock import _process_start_time

      ctx.write(
        rel,
        json.dumps(
          {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "process_start": _process_start_time(os.getpid()),
            "mode": "train",
            "since": "now",
            "token": "t",
          }
        ),
      )
    else:
      ctx.write(rel, content)
    if mode == "resume":
      return train_args(ctx.path(W), "train.steps=3")
    return ["--mode=eval", f"--workdir={ctx.path(W)}"]

  return setup


def _lock_json(pid, **extra):
  import socket

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


for name, content, expect in [
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
  ("fifo", "fifo", "either"),
  ("sparse", "sparse", "either"),
  ("dir", "dir", "either"),
  ("live", "live", "error"),
]:
  case(
    f"lock_{name}_resume",
    "state",
    _lock(content),
    expect=expect,
    check=trained(W, 3),
    mentions=(".tlm.lock",) if expect != "error" else (str(os.getpid()),),
    writes=(W,),
    workdirs=(W,),
  )
case(
  "lock_fifo_eval",
  "state",
  _lock("fifo", "eval"),
  expect="either",
  check=files_exist("W/results/eval.json"),
  mentions=(".tlm.lock",),
  writes=(W,),
  workdirs=(W,),
)


def _lock_beside(content):
  def setup(ctx):
    if content == "fifo":
      ctx.fifo(".out.tlm.lock")
    else:
      ctx.write(".out.tlm.lock", content)
    return [
      "--mode=convert",
      f"--checkpoint={ctx.base['W0']}",
      f"--output_dir={ctx.path('out')}",
      "--format=hf",
    ]

  return setup


case(
  "lock_beside_output_fifo_convert",
  "state",
  _lock_beside("fifo"),
  expect="either",
  check=files_exist("out/config.json"),
  mentions=(".out.tlm.lock",),
  writes=("out",),
)
case(
  "lock_beside_output_pid_huge_convert",
  "state",
  _lock_beside(_lock_json(2**63)),
  expect="either",
  check=files_exist("out/config.json"),
  mentions=(".out.tlm.lock",),
  writes=("out",),
)


# The saved config.json and model_config.json.
def _tamper(rel, content, mode):
  def setup(ctx):
    ctx.copy("W0", W)
    path = ctx.path(rel)
    if content == "fifo":
      ctx.fifo(rel)
    elif content == "sparse":
      ctx.sparse(rel, 2 << 30)
    elif content == "dev_zero":
      ctx.symlink(rel, "/dev/zero")
    elif content == "missing":
      os.remove(path)
    elif callable(content):
      edit_json(path, content)
    else:
      ctx.write(rel, content)
    if mode == "eval":
      return ["--mode=eval", f"--workdir={ctx.path(W)}"]
    if mode == "resume":
      return train_args(ctx.path(W), "train.steps=3")
    if mode == "convert":
      return [
        "--mode=convert",
        f"--checkpoint={ctx.path(W)}",
        f"--output_dir={ctx.path('out')}",
        "--format=tlm",
      ]
    if mode == "predict":
      return score_args(ctx, ctx.path(W), "out.jsonl", "predict")
    return score_args(ctx, ctx.path(W))

  return setup


def _section(section, key, value):
  return lambda c: c[section].__setitem__(key, value)


for name, content, mode, expect in [
  ("unknown_key", _section("train", "nonsense", 1), "eval", "error"),
  ("section_is_a_list", lambda c: c.__setitem__("train", []), "eval", "error"),
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
  ("fifo", "fifo", "eval", "error"),
  ("sparse_2g", "sparse", "eval", "error"),
  ("dev_zero", "dev_zero", "eval", "error"),
  ("not_utf8", b"\xff\xfe", "eval", "error"),
  ("unknown_key", _section("train", "nonsense", 1), "resume", "either"),
  ("fifo", "fifo", "resume", "either"),
  ("name_differs", lambda c: c.__setitem__("name", "tiny_uniform"), "resume", "either"),
  ("fifo", "fifo", "score", "either"),
  ("sparse_2g", "sparse", "score", "either"),
  ("dev_zero", "dev_zero", "predict", "either"),
]:
  check = {
    "eval": files_exist("W/results/eval.json"),
    "resume": trained(W, 3),
    "score": scores_equal("ref2"),
    "predict": predictions(),
  }[mode]
  case(
    f"config_json_{name}_{mode}",
    "state",
    _tamper("W/config.json", content, mode),
    expect=expect,
    check=check,
    mentions=("config.json",),
    writes=(W, "out.jsonl"),
    workdirs=(W,),
    timeout=240,
  )

for name, content, mode in [
  ("vocab_negative", lambda c: c.__setitem__("vocab_size", -1), "score"),
  ("emb_dim_huge", lambda c: c.__setitem__("emb_dim", 10**12), "score"),
  ("emb_dim_beyond_int64", lambda c: c.__setitem__("emb_dim", 2**70), "score"),
  ("num_layers_is_a_string", lambda c: c.__setitem__("num_encoder_layers", "x"), "convert"),
  ("num_heads_zero", lambda c: c.__setitem__("num_heads", 0), "score"),
  ("buckets_huge", lambda c: c.__setitem__("relative_attention_num_buckets", 10**9), "score"),
  ("unknown_key", lambda c: c.__setitem__("nonsense", 1), "score"),
  ("dtype_unknown", lambda c: c.__setitem__("dtype", "float7"), "predict"),
  ("not_json", "not json", "eval"),
  ("fifo", "fifo", "score"),
  ("missing", "missing", "score"),
  ("dev_zero", "dev_zero", "resume"),
  ("vocab_smaller", lambda c: c.__setitem__("vocab_size", 10), "score"),
]:
  check = {
    "eval": files_exist("W/results/eval.json"),
    "resume": trained(W, 3),
    "score": scores_equal("ref2"),
    "predict": predictions(),
    "convert": files_exist("out/params"),
  }[mode]
  case(
    f"model_config_{name}_{mode}",
    "state",
    _tamper("W/model_config.json", content, mode),
    expect="error",
    check=check,
    # A vocabulary smaller than the saved embedding is a shape mismatch: the line names the
    # parameters that do not match the model (W/checkpoints/2/params: ... token_embedder).
    mentions=("checkpoints/2/params",) if name == "vocab_smaller" else ("model_config.json",),
    writes=(W, "out.jsonl", "out"),
    workdirs=(W,),
    timeout=240,
  )

for name, content, mode in [
  ("garbage", b"\x00garbage", "score"),
  ("fifo", "fifo", "score"),
  ("dev_zero", "dev_zero", "eval"),
  ("missing", "missing", "resume"),
]:
  check = {
    "eval": files_exist("W/results/eval.json"),
    "resume": trained(W, 3),
    "score": scores_equal("ref2"),
  }[mode]
  case(
    f"spiece_model_{name}_{mode}",
    "state",
    _tamper("W/spiece.model", content, mode),
    expect="either",
    check=check,
    mentions=("spiece.model",),
    writes=(W, "out.jsonl"),
    workdirs=(W,),
    timeout=240,
  )


# The data state saved with a checkpoint (its manifest made to agree: a deliberate edit).
def _data_state(edit):
  def setup(ctx):
    ctx.copy("W0", W)
    ctx.damaged.add(S2)
    rel = os.path.join(S2, "data_state", "metadata")
    if edit == "fifo":
      ctx.fifo(rel)
    else:
      edit_json(ctx.path(rel), edit)
      rehash(ctx, S2, "data_state/metadata")
    return train_args(ctx.path(W), "train.steps=3")

  return setup


for name, edit in [
  ("step_is_a_string", lambda d: d.__setitem__("step", "2")),
  ("step_other", lambda d: d.__setitem__("step", 7)),
  ("batch_negative", lambda d: d.__setitem__("batch_size", -1)),
  ("data_is_a_list", lambda d: d.__setitem__("data", [])),
  ("seed_beyond", lambda d: d["data"].__setitem__("seed", 2**70)),
  ("not_an_object", lambda d: [1, 2]),
  ("fifo", "fifo"),
]:
  case(
    f"data_state_{name}_resume",
    "state",
    _data_state(edit),
    expect="either",
    check=trained(W, 3),
    mentions=("checkpoints/2",),
    writes=(W,),
    workdirs=(W,),
  )


# metrics.jsonl read back on resume.
def _metrics(content):
  def setup(ctx):
    ctx.copy("W0", W)
    rel = "W/metrics.jsonl"
    with open(ctx.path(rel), "rb") as f:
      good = f.read()
    if content == "fifo":
      ctx.fifo(rel)
    elif content == "sparse":
      ctx.sparse(rel, 1 << 30)
    else:
      ctx.write(rel, good + content if isinstance(content, bytes) else content)
    return train_args(ctx.path(W), "train.steps=3")

  return setup


for name, content, expect in [
  ("torn_last_line", b'{"step": 3, "lo', "ok"),
  ("garbage_line", b"garbage\n" + b'{"step": 2}\n', "ok"),
  ("not_utf8", b"\xff\xfe\n", "ok"),
  ("nul_bytes", b"\x00" * 100, "ok"),
  ("huge_int", b'{"step": ' + b"9" * 10000 + b"}\n", "ok"),
  ("deep", b"[" * 100000 + b"\n", "ok"),
  ("fifo", "fifo", "either"),
  ("sparse_1g", "sparse", "either"),
]:
  case(
    f"metrics_jsonl_{name}_resume",
    "state",
    _metrics(content),
    expect=expect,
    check=trained(W, 3),
    mentions=("metrics.jsonl",),
    writes=(W,),
    workdirs=(W,),
    timeout=300,
  )


# Results read back: tables (WORKDIR/results/eval.json), combine_seeds (a seed's results/).
def _eval_json(content):
  def setup(ctx):
    ctx.copy("W0", W)
    rel = "W/results/eval.json"
    if content == "fifo":
      ctx.fifo(rel)
    elif content == "sparse":
      ctx.sparse(rel, 2 << 30)
    elif callable(content):
      edit_json(ctx.path(rel), content)
    else:
      ctx.write(rel, content)
    return ["--mode=tables", f"--workdirs={ctx.path(W)}", f"--output_dir={ctx.path('out')}"]

  return setup


case(
  "tables_intact",
  "state",
  _eval_json(lambda r: r),
  expect="ok",
  check=files_exist("out/table3.md"),
  writes=("out",),
  workdirs=(W,),
)
for name, content in [
  ("truncated", '{"templama": {"metr'),
  ("templama_is_a_number", lambda r: r.__setitem__("templama", 3)),
  ("metrics_nan_strings", lambda r: r["templama"].__setitem__("metrics", {"f1": "NaN"})),
  ("config_is_a_list", lambda r: r.__setitem__("config", [])),
  ("config_name_nul", lambda r: r["config"].__setitem__("name", "a\0b")),
  ("records_huge_list", lambda r: r["templama"].__setitem__("records", [[]] * 100000)),
  ("fifo", "fifo"),
  ("sparse_2g", "sparse"),
  ("deep", "[" * 100000),
]:
  case(
    f"tables_eval_json_{name}",
    "state",
    _eval_json(content),
    mentions=("eval.json",),
    writes=("out",),
    workdirs=(W,),
    timeout=180,
  )
case(
  "tables_results_missing",
  "state",
  lambda ctx: (
    ["--mode=tables", f"--workdirs={ctx.path('empty')}", f"--output_dir={ctx.path('out')}"]
    if os.makedirs(ctx.path("empty")) is None
    else []
  ),
  mentions=("empty",),
)


def _seed(name, content):
  def setup(ctx):
    ctx.copy("seed", "seed")
    rel = f"seed/results/{name}"
    if content == "fifo":
      ctx.fifo(rel)
    elif content == "sparse":
      ctx.sparse(rel, 2 << 30)
    elif content == "missing":
      os.remove(ctx.path(rel))
    elif callable(content):
      edit_json(ctx.path(rel), content)
    else:
      ctx.write(rel, content)
    return [
      "--mode=combine_seeds",
      f"--workdirs={ctx.path('seed')}",
      f"--output_dir={ctx.path('out')}",
    ]

  return setup


case(
  "combine_seeds_intact",
  "state",
  _seed("eval.json", lambda r: r),
  expect="ok",
  check=files_exist("out/summary.json", "out/claims.md"),
  writes=("out",),
  timeout=300,
)
for name, content in [
  ("per_query.json", lambda m: m.__setitem__("seed", "0")),
  ("per_query.json", lambda m: m.__setitem__("seed", 2**70)),
  ("per_query.json", lambda m: m.__setitem__("seed", -1)),
  ("per_query.json", "fifo"),
  ("per_query.json", "sparse"),
  ("per_query.json", "missing"),
  ("per_query.json", '{"seed": 0, "models": {"temporal": {"templama": {"f1": [NaN, Infinity]'),
  (
    "per_query.json",
    lambda m: m["models"]["temporal"]["templama"].__setitem__(
      "f1", [float("nan")] * len(m["models"]["temporal"]["templama"]["f1"])
    ),
  ),
  ("eval.json", lambda r: r.__setitem__("tiny_temporal", [])),
  ("eval.json", "[" * 100000),
  ("seed_summary.json", lambda s: s["configs"].__setitem__("temporal", {"name": "\0"})),
  ("seed_summary.json", "fifo"),
]:
  label = (
    name.split(".")[0]
    + "_"
    + (content if isinstance(content, str) and len(content) < 10 else "edited")
  )
  case(
    f"combine_seeds_{label}_{len(CASES)}",
    "state",
    _seed(name, content),
    mentions=(name,),
    writes=("out",),
    timeout=180,
  )


# ---- the workdir's layout ----------------------------------------------------------------------


def _layout(entry, kind, *sets, mode="resume"):
  def setup(ctx):
    ctx.copy("W0", W)
    rel = os.path.join(W, entry)
    if os.path.lexists(ctx.path(rel)) and kind != "immutable":
      if os.path.isdir(ctx.path(rel)) and not os.path.islink(ctx.path(rel)):
        import shutil

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


for entry, kind, sets in [
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
]:
  case(
    f"layout_{entry or 'workdir'}_{kind}_resume",
    "layout",
    _layout(entry, kind, *sets),
    mentions=(entry or W,),
    writes=(W,),
    workdirs=(W,),
  )
for entry, kind in [("results", "file"), ("results", "immutable"), ("results", "fifo")]:
  case(
    f"layout_{entry}_{kind}_eval",
    "layout",
    _layout(entry, kind, mode="eval"),
    mentions=(entry,),
    writes=(W,),
    workdirs=(W,),
  )


def _step_entry(kind):
  def setup(ctx):
    ctx.copy("W0", W)
    if kind == "step_is_a_file":
      import shutil

      shutil.rmtree(ctx.path(S2))
      ctx.write(S2, "x")
    elif kind == "empty_newer_step":
      os.makedirs(ctx.path("W/checkpoints/999"))
    elif kind == "non_numeric_entry":
      os.makedirs(ctx.path("W/checkpoints/abc"))
      ctx.write("W/checkpoints/readme", "x")
    elif kind == "fifo_step":
      ctx.fifo("W/checkpoints/5")
    elif kind == "huge_step_number":
      os.makedirs(ctx.path("W/checkpoints/" + "9" * 30))
    return train_args(ctx.path(W), "train.steps=3")

  return setup


for kind in (
  "step_is_a_file",
  "empty_newer_step",
  "non_numeric_entry",
  "fifo_step",
  "huge_step_number",
):
  case(
    f"layout_checkpoints_{kind}_resume",
    "layout",
    _step_entry(kind),
    expect="either",
    check=trained(W, 3),
    mentions=("checkpoints",),
    writes=(W,),
    workdirs=(W,),
  )


def _immutable_parent(ctx):
  os.makedirs(ctx.path("ro"))
  ctx.make_immutable("ro")
  return train_args(ctx.path("ro/w"))


case("layout_workdir_in_unwritable_parent", "layout", _immutable_parent, mentions=("ro",))


# ---- settings at their extremes ----------------------------------------------------------------

for name, sets in [
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
  ("eval_examples_huge", ("train.eval_examples=1000000000000000000",)),
  ("remat_unknown", ("model.remat=sometimes",)),
  ("dtype_unknown", ("model.dtype=float7",)),
  ("preset_unknown", ("model.preset=../../etc",)),
  ("keep_best_unknown_metric", ("train.keep_best=nonsense",)),
  ("loss_factor_inf", ("train.loss_normalizing_factor=inf",)),
  ("news_to_templama_nan", ("data.news_to_templama=nan",)),
  ("warmup_beyond", ("train.warmup_steps=4294967296",)),
]:
  key = sets[0].partition("=")[0]
  case(
    f"extreme_train_{name}",
    "extremes",
    lambda ctx, sets=sets: fresh(ctx, *sets),
    mentions=(key,) if key and "." in key else (),
    timeout=180,
  )

case(
  "extreme_train_seed_2_64_minus_1",
  "extremes",
  lambda ctx: fresh(ctx, "train.seed=18446744073709551615", "data.seed=18446744073709551615"),
  expect="ok",
  check=trained("w", 2),
  writes=("w",),
)
case(
  "extreme_train_batch_1",
  "extremes",
  lambda ctx: fresh(ctx, "train.batch_size=1"),
  expect="ok",
  check=trained("w", 2),
  writes=("w",),
)
case(
  "extreme_train_profile_window",
  "extremes",
  lambda ctx: fresh(ctx, "train.profile_steps=1,2"),
  expect="ok",
  check=files_exist("w/profile", "w/checkpoints/2"),
  writes=("w",),
)

for name, sets in [
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
]:
  case(
    f"extreme_reproduce_{name}",
    "extremes",
    lambda ctx, sets=sets: [
      "--mode=reproduce",
      f"--workdir={ctx.path('r')}",
      *(f"--set={s}" for s in sets),
    ],
    mentions=(sets[0].partition("=")[0],),
    hide=("gcsfs",),
    timeout=120,
  )

for name, sets in [
  ("alphas_empty", ("adapt.alphas=",)),
  ("alphas_nan", ("adapt.alphas=nan",)),
  ("steps_zero", ("adapt.steps=0",)),
  ("eval_points_zero", ("adapt.eval_points=0",)),
  ("new_year_99999", ("adapt.new_year=99999",)),
]:

  def _adapt(ctx, sets=sets):
    ctx.copy("W0", W)
    return ["--mode=adapt", f"--workdir={ctx.path(W)}", *(f"--set={s}" for s in sets)]

  case(
    f"extreme_adapt_{name}",
    "extremes",
    _adapt,
    mentions=(sets[0].partition("=")[0],),
    workdirs=(W,),
  )

for name, flags in [
  ("seed_minus_1", ("--seed=-1",)),
  ("seed_2_64", ("--seed=18446744073709551616",)),
  ("scale_zero", ("--scale=0",)),
  ("scale_nan", ("--scale=nan",)),
  ("scale_1e308", ("--scale=1e308",)),
  ("scale_not_a_number", ("--scale=big",)),
]:
  case(
    f"extreme_build_world_{name}",
    "extremes",
    lambda ctx, flags=flags: ["--mode=build_world", f"--output_dir={ctx.path('out')}", *flags],
    mentions=(flags[0].partition("=")[0],),
    timeout=120,
  )

for name, flags, expect in [
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
]:
  case(
    f"extreme_predict_{name}",
    "extremes",
    lambda ctx, flags=flags: score_args(ctx, ctx.base["W0"], "out.jsonl", "predict", *flags),
    expect=expect,
    check=predictions(),
    mentions=(flags[-1].partition("=")[0],),  # the flag set last (--process_id=5 beyond 2)
    writes=("out.jsonl",),
    timeout=180,
  )


# ---- builders ----------------------------------------------------------------------------------


def templama(*flags, facts=None, entities=None):
  def setup(ctx):
    f = facts(ctx) if facts else f"{FIXTURE_DATA}/templama_facts.tsv"
    e = entities(ctx) if entities else f"{FIXTURE_DATA}/templama_entities.tsv"
    return [
      "--mode=build_templama",
      f"--facts={f}",
      f"--entities={e}",
      f"--output_dir={ctx.path('out')}",
      *flags,
    ]

  return setup


def _facts_with(line):
  def make(ctx):
    with open(f"{FIXTURE_DATA}/templama_facts.tsv", "rb") as f:
      good = f.read()
    return ctx.write("facts.tsv", good + (line if isinstance(line, bytes) else line.encode()))

  return make


case(
  "build_templama_intact",
  "builders",
  templama(),
  expect="ok",
  check=files_exist("out/train.json", "out/val.json", "out/test.json"),
  writes=("out",),
)
for name, flags in [
  ("max_year_99999", ("--max_year=99999",)),
  ("min_year_minus_5", ("--min_year=-5",)),
  ("years_reversed", ("--min_year=2020", "--max_year=2010")),
  ("max_subjects_zero", ("--max_subjects_per_relation=0",)),
  ("max_subjects_negative", ("--max_subjects_per_relation=-1",)),
  ("seed_minus_1", ("--seed=-1",)),
  ("seed_2_64", ("--seed=18446744073709551616",)),
  ("min_year_0", ("--min_year=0", "--max_year=5")),
]:
  case(
    f"build_templama_{name}",
    "builders",
    templama(*flags),
    mentions=(flags[0].partition("=")[0].lstrip("-"),),  # its messages say "min_year must ..."
  )
for name, line in [
  ("year_99999", "P54\tQ1\tQ12\tP580=99999\tP582=100000\n"),
  ("year_not_a_number", "P54\tQ1\tQ12\tP580=20x1\n"),
  ("year_negative", "P54\tQ1\tQ12\tP580=-2011\n"),
  ("nul", "P54\tQ1\tQ1\x002\tP580=2011\n"),
  ("not_utf8", b"P54\tQ1\t\xff\xfe\tP580=2011\n"),
  ("too_few_fields", "P54\n"),
  ("huge_line", "P54\tQ1\tQ" + "9" * 5_000_000 + "\tP580=2011\n"),
]:
  case(
    f"build_templama_facts_{name}",
    "builders",
    templama(facts=_facts_with(line)),
    expect="either",
    check=files_exist("out/train.json"),
    mentions=("facts.tsv",),
    writes=("out",),
  )


def ssm(*flags, news=None, entities=None, out="out"):
  def setup(ctx):
    n = news(ctx) if news else f"{STORE_FIX}/news_sample.jsonl"
    args = ["--mode=build_ssm", f"--news={n}", f"--output_dir={ctx.path(out)}", *flags]
    if entities:
      args.append(f"--entities={entities(ctx)}")
    return args

  return setup


def _news_with(line):
  def make(ctx):
    with open(f"{STORE_FIX}/news_sample.jsonl", "rb") as f:
      good = f.read()
    return ctx.write("news.jsonl", good + (line if isinstance(line, bytes) else line.encode()))

  return make


case(
  "build_ssm_intact",
  "builders",
  ssm(),
  expect="ok",
  check=files_exist("out/manifest.json"),
  writes=("out",),
)
for name, flags, expect in [
  ("workers_zero", ("--num_workers=0",), "error"),
  ("workers_negative", ("--num_workers=-1",), "error"),
  ("workers_1e6", ("--num_workers=1000000",), "either"),
  ("seed_minus_1", ("--seed=-1",), "error"),
  ("seed_2_64", ("--seed=18446744073709551616",), "error"),
  ("vocab_garbage", None, "error"),
  ("vocab_fifo", None, "error"),
]:
  if flags is None:
    maker = {
      "vocab_garbage": lambda ctx: ctx.write("v.model", b"\x00garbage"),
      "vocab_fifo": lambda ctx: ctx.fifo("v.model"),
    }[name]

    def setup(ctx, maker=maker):
      return ssm(f"--vocab={maker(ctx)}")(ctx)

    case(f"build_ssm_{name}", "builders", setup, mentions=("v.model",))
  else:
    case(
      f"build_ssm_{name}",
      "builders",
      ssm(*flags),
      expect=expect,
      check=files_exist("out/manifest.json"),
      mentions=(flags[0].partition("=")[0],),
      writes=("out",),
      timeout=300,
    )
for name, line in [
  ("date_99999", '{"date": "99999-01-01", "text": "Ana Berg plays for Gold Hawks."}\n'),
  ("date_invalid", '{"date": "2010-13-45", "text": "Ana Berg plays for Gold Hawks."}\n'),
  ("date_year_0", '{"date": "0000-01-01", "text": "Ana Berg plays for Gold Hawks."}\n'),
  ("text_is_a_number", '{"date": "2010-01-01", "text": 123}\n'),
  ("text_nul", '{"date": "2010-01-01", "text": "Ana\\u0000 Berg"}\n'),
  ("text_lone_surrogate", '{"date": "2010-01-01", "text": "Ana \\ud800 Berg"}\n'),
  ("not_utf8", b'{"date": "2010-01-01", "text": "\xff\xfe"}\n'),
  ("not_an_object", "[1, 2]\n"),
  ("deep", "[" * 100000 + "\n"),
  ("huge_int", '{"date": "2010-01-01", "text": "x", "n": ' + "9" * 10000 + "}\n"),
  ("huge_text", '{"date": "2010-01-01", "text": "' + "Ana Berg plays. " * 200000 + '"}\n'),
  ("sentinel_in_text", '{"date": "2010-01-01", "text": "Ana <extra_id_0> Berg in 2010."}\n'),
]:
  case(
    f"build_ssm_news_{name}",
    "builders",
    ssm(news=_news_with(line)),
    expect="either",
    check=files_exist("out/manifest.json"),
    mentions=("news.jsonl",),
    writes=("out",),
    timeout=300,
  )


def _gz(content):
  def make(ctx):
    return ctx.write("news.jsonl.gz", content)

  return make


def _truncated_gzip(ctx):
  import gzip

  with open(f"{STORE_FIX}/news_sample.jsonl", "rb") as f:
    data = gzip.compress(f.read())
  return ctx.write("news.jsonl.gz", data[: len(data) // 2])


case(
  "build_ssm_gz_not_gzip",
  "builders",
  ssm(news=_gz(b"plain text, not gzip\n")),
  mentions=("news.jsonl.gz",),
)
case("build_ssm_gz_truncated", "builders", ssm(news=_truncated_gzip), mentions=("news.jsonl.gz",))
case(
  "build_ssm_gz_bomb_ratio",
  "builders",
  ssm(
    news=lambda ctx: ctx.write(
      "news.jsonl.gz",
      __import__("gzip").compress(
        b'{"date": "2010-01-01", "text": "' + b"a" * (64 << 20) + b'"}\n'
      ),
    )
  ),
  expect="either",
  check=files_exist("out/manifest.json"),
  mentions=("news.jsonl.gz",),
  writes=("out",),
  timeout=300,
)
case(
  "build_ssm_news_is_a_dir",
  "builders",
  ssm(news=lambda ctx: os.path.dirname(ctx.write("nd/x", ""))),
  mentions=("nd",),
)
case(
  "build_ssm_entities_garbage",
  "builders",
  ssm(entities=lambda ctx: ctx.write("e.tsv", b"\xff\x00\tnot\tan entities file\n")),
  mentions=("e.tsv",),
)


def _output_is_user_dir(ctx):
  ctx.write("out/my_thesis.tex", "precious")
  return ssm()(ctx)


case("build_ssm_output_dir_holds_user_files", "builders", _output_is_user_dir, mentions=("out",))
case(
  "build_ssm_output_dir_is_a_file",
  "builders",
  lambda ctx: ssm()(ctx) if ctx.write("out", "mine") else [],
  mentions=("out",),
)


def _templama_user_dir(ctx):
  ctx.write("out/notes.txt", "precious")
  return templama()(ctx)


case(
  "build_templama_output_dir_holds_user_files", "builders", _templama_user_dir, mentions=("out",)
)


def _convert_user_dir(ctx):
  ctx.write("out/notes.txt", "precious")
  return [
    "--mode=convert",
    f"--checkpoint={ctx.base['W0']}",
    f"--output_dir={ctx.path('out')}",
    "--format=hf",
  ]


case("convert_output_dir_holds_user_files", "builders", _convert_user_dir, mentions=("out",))


# ---- checkpoints, loaded by every mode ---------------------------------------------------------


def _damaged(damage, mode, steps=(S2,)):
  def setup(ctx):
    ctx.copy("W0", W)
    for step in steps:
      damage(ctx, step)
    return MANIFEST_MODES[mode](ctx) if mode in MANIFEST_MODES else mode(ctx)

  return setup


for damage_name, damage in (("random_bytes", random_bytes), ("truncated_param", truncate_param)):
  for mode in MANIFEST_MODES:
    expect, check = MODE_EXPECT[mode]
    case(
      f"ckpt_{damage_name}_{mode}",
      "checkpoints",
      _damaged(damage, mode),
      expect=expect,
      check=check,
      mentions=("checkpoints/2",) if expect == "error" else (),
      writes=(W, "out", "out.jsonl", "w"),
      workdirs=(W,),
      timeout=240,
    )
case(
  "ckpt_random_bytes_convert_workdir",
  "checkpoints",
  _damaged(
    random_bytes,
    lambda ctx: [
      "--mode=convert",
      f"--checkpoint={ctx.path(W)}",
      f"--output_dir={ctx.path('out')}",
      "--format=hf",
    ],
  ),
  expect="ok",
  check=files_exist("out/config.json", warning="checkpoints/2"),
  writes=("out",),
  workdirs=(W,),
)
case(
  "ckpt_random_bytes_init_checkpoint_step",
  "checkpoints",
  _damaged(random_bytes, lambda ctx: fresh(ctx, f"model.init_checkpoint={ctx.path(S2)}")),
  mentions=("checkpoints/2",),
  workdirs=(W,),
)
case(
  "ckpt_random_bytes_eval_future",
  "checkpoints",
  _damaged(random_bytes, lambda ctx: ["--mode=eval_future", f"--workdir={ctx.path(W)}"]),
  expect="either",
  check=warned("checkpoints/2"),
  writes=(W,),
  workdirs=(W,),
)
case(
  "ckpt_random_bytes_adapt",
  "checkpoints",
  _damaged(
    random_bytes,
    lambda ctx: [
      "--mode=adapt",
      f"--workdir={ctx.path(W)}",
      "--set=adapt.alphas=0.5",
      "--set=adapt.steps=1",
      "--set=adapt.eval_points=1",
    ],
  ),
  expect="either",
  check=warned("checkpoints/2"),
  writes=(W,),
  workdirs=(W,),
  timeout=400,
)
case(
  "ckpt_every_step_random_bytes_resume",
  "checkpoints",
  _damaged(random_bytes, "resume", steps=(S1, S2)),
  mentions=("W",),
  writes=(W,),
  workdirs=(W,),
)
case(
  "ckpt_missing_step_named",
  "checkpoints",
  lambda ctx: score_args(ctx, ctx.base["W0"] + "/checkpoints/7"),
  mentions=("checkpoints/7",),
)
case(
  "ckpt_step_dir_empty",
  "checkpoints",
  lambda ctx: score_args(ctx, os.path.dirname(ctx.write("W/checkpoints/3/x", ""))),
  mentions=("checkpoints/3",),
)


def _tlm_model(damage):
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


case(
  "ckpt_tlm_model_intact",
  "checkpoints",
  _tlm_model(None),
  expect="ok",
  check=scores_equal("ref1"),
  writes=("out.jsonl",),
)
case("ckpt_tlm_model_random_bytes", "checkpoints", _tlm_model("random_bytes"), mentions=("M",))
case(
  "ckpt_tlm_model_no_manifest",
  "checkpoints",
  _tlm_model("no_manifest"),
  expect="ok",
  check=scores_equal("ref1", warning="tlm_checksums.json"),
  writes=("out.jsonl",),
)
case("ckpt_tlm_model_manifest_fifo", "checkpoints", _tlm_model("manifest_fifo"), mentions=("M",))


def _hf(damage):
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
    return score_args(ctx, ctx.path("H"))

  return setup


case(
  "ckpt_hf_intact",
  "checkpoints",
  _hf(None),
  expect="ok",
  check=scores_equal("ref2"),
  writes=("out.jsonl",),
)
for damage in ("header_huge", "truncated", "fifo"):
  case(f"ckpt_hf_{damage}", "checkpoints", _hf(damage), mentions=("model.safetensors",))


# ---- the example store -------------------------------------------------------------------------


def _store(damage, mode="check"):  # noqa: C901 (one branch per damage)
  def setup(ctx):  # noqa: C901
    ctx.copy("store", "S")
    path = ctx.path("S/manifest.json")
    with open(path) as f:
      m = json.load(f)
    names = sorted(m["files"])
    bin_name = next(n for n in names if n.endswith(".bin"))
    idx_name = next(n for n in names if n.endswith(".idx"))
    if damage == "truncated_bin":
      os.truncate(ctx.path("S/" + bin_name), 3)
    elif damage == "random_bytes_bin":
      with open(ctx.path("S/" + bin_name), "r+b") as f:
        f.write(b"\xff" * 4)
    elif damage == "manifest_lies_size":
      m["files"][bin_name]["bytes"] += 10
    elif damage == "manifest_dotdot":
      m["files"]["../../etc/passwd"] = {"bytes": 10, "sha256": "0" * 64}
    elif damage == "manifest_absolute":
      m["files"]["/dev/zero"] = {"bytes": 10, "sha256": "0" * 64}
    elif damage == "listed_file_fifo":
      ctx.fifo("S/" + bin_name)
    elif damage == "listed_file_dev_zero":
      ctx.symlink("S/" + bin_name, "/dev/zero")
    elif damage == "manifest_missing":
      os.remove(path)
      m = None
    elif damage == "manifest_sparse":
      ctx.sparse("S/manifest.json", 2 << 30)
      m = None
    elif damage == "manifest_fifo":
      ctx.fifo("S/manifest.json")
      m = None
    elif damage == "tables_is_a_list":
      m["tables"] = []
    elif damage == "examples_string":
      m["tables"][next(iter(m["tables"]))]["examples"] = "3"
    elif damage == "examples_huge":
      m["tables"][next(iter(m["tables"]))]["examples"] = 10**18
    elif damage == "examples_negative":
      m["tables"][next(iter(m["tables"]))]["examples"] = -1
    elif damage == "token_dtype_unknown":
      m["token_dtype"] = "float64"
    elif damage == "version_future":
      m["version"] = 99
    elif damage == "idx_offsets_beyond_rehashed":
      idx = ctx.path("S/" + idx_name)
      arr = np.fromfile(idx, dtype=np.uint64)
      arr[-1] = 2**62
      arr.tofile(idx)
      with open(idx, "rb") as f:
        data = f.read()
      m["files"][idx_name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    elif damage == "idx_decreasing_rehashed":
      idx = ctx.path("S/" + idx_name)
      arr = np.fromfile(idx, dtype=np.uint64)
      arr[1:] = arr[1:][::-1].copy()
      arr.tofile(idx)
      with open(idx, "rb") as f:
        data = f.read()
      m["files"][idx_name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    elif damage == "unlisted_extra_file":
      ctx.write("S/train/extra.bin", "x")
    if m is not None and damage not in (
      "truncated_bin",
      "random_bytes_bin",
      "listed_file_fifo",
      "listed_file_dev_zero",
      "unlisted_extra_file",
    ):
      with open(path, "w") as f:
        json.dump(m, f)
    if mode == "check":
      return ["--mode=check_store", f"--data={ctx.path('S')}"]
    return fresh(ctx, f"data.ssm_dir={ctx.path('S')}", f"data.vocab={TINY}/spiece.model")

  return setup


case("store_check_intact", "store", _store(None), expect="ok")
for damage in (
  "truncated_bin",
  "random_bytes_bin",
  "manifest_lies_size",
  "manifest_dotdot",
  "manifest_absolute",
  "listed_file_fifo",
  "listed_file_dev_zero",
  "manifest_missing",
  "manifest_sparse",
  "manifest_fifo",
  "tables_is_a_list",
  "examples_string",
  "examples_huge",
  "examples_negative",
  "token_dtype_unknown",
  "version_future",
  "idx_offsets_beyond_rehashed",
  "idx_decreasing_rehashed",
):
  case(f"store_check_{damage}", "store", _store(damage), mentions=("S",), timeout=120)
case(
  "store_check_unlisted_extra_file",
  "store",
  _store("unlisted_extra_file"),
  expect="either",
  mentions=("S",),
)


# The fixture store (tokenized) trained on, damaged.
def _train_store(damage):
  def setup(ctx):
    import shutil

    shutil.copytree(f"{TINY}/ssm", ctx.path("S"))
    m_path = ctx.path("S/manifest.json")
    with open(m_path) as f:
      m = json.load(f)
    tok = next(n for n in sorted(m["files"]) if n.startswith("train/") and n.endswith("tokens.bin"))
    idx = tok.replace(".bin", ".idx")
    if damage == "truncated_tokens":
      os.truncate(ctx.path("S/" + tok), 2)
    elif damage == "idx_beyond_rehashed":
      arr = np.fromfile(ctx.path("S/" + idx), dtype=np.uint64)
      arr[-1] = 2**40
      arr.tofile(ctx.path("S/" + idx))
      data = open(ctx.path("S/" + idx), "rb").read()
      m["files"][idx] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    elif damage == "token_ids_beyond_vocab_rehashed":
      arr = np.fromfile(ctx.path("S/" + tok), dtype=np.uint16)
      arr[:] = 60000
      arr.tofile(ctx.path("S/" + tok))
      data = open(ctx.path("S/" + tok), "rb").read()
      m["files"][tok] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    elif damage == "vocab_sha_differs":
      m["vocab"]["sha256"] = "0" * 64
    elif damage == "manifest_lies_examples":
      m["tables"][tok[: -len(".tokens.bin")]]["examples"] += 5
    with open(m_path, "w") as f:
      json.dump(m, f)
    return fresh(ctx, f"data.ssm_dir={ctx.path('S')}")

  return setup


for damage in (
  "truncated_tokens",
  "idx_beyond_rehashed",
  "token_ids_beyond_vocab_rehashed",
  "vocab_sha_differs",
  "manifest_lies_examples",
):
  case(
    f"store_train_{damage}",
    "store",
    _train_store(damage),
    mentions=("S",),
    writes=("w",),
    timeout=180,
  )

case(
  "convert_ssm_intact",
  "store",
  lambda ctx: [
    "--mode=convert_ssm",
    f"--data={STORE_FIX}/tiny_ssm_jsonl",
    f"--output_dir={ctx.path('out')}",
    f"--vocab={TINY}/spiece.model",
  ],
  expect="ok",
  check=files_exist("out/manifest.json"),
  writes=("out",),
)


def _convert_ssm(line=None, mode=None):
  def setup(ctx):
    import shutil

    shutil.copytree(f"{STORE_FIX}/tiny_ssm_jsonl", ctx.path("J"))
    target = ctx.path("J/train/2010.jsonl")
    if mode == "fifo":
      ctx.fifo("J/train/2010.jsonl")
    elif mode == "sparse":
      ctx.sparse("J/train/2010.jsonl", 1 << 30)
    elif mode == "dotdot_year":
      ctx.write("J/train/..2010.jsonl", "{}\n")
    elif mode == "year_name":
      ctx.write("J/train/99999.jsonl", open(target).read())
    elif line is not None:
      with open(target, "ab") as f:
        f.write(line if isinstance(line, bytes) else line.encode())
    return ["--mode=convert_ssm", f"--data={ctx.path('J')}", f"--output_dir={ctx.path('out')}"]

  return setup


for name, line, mode in [
  ("garbage_line", "garbage\n", None),
  (
    "inputs_not_a_string",
    '{"inputs": 3, "targets": "x", "date": "2010-01-01", "year": 2010}\n',
    None,
  ),
  ("year_mismatch", '{"inputs": "a", "targets": "x", "date": "2010-01-01", "year": 2077}\n', None),
  ("nul", '{"inputs": "a\\u0000", "targets": "x", "date": "2010-01-01", "year": 2010}\n', None),
  ("not_utf8", b'{"inputs": "\xff", "targets": "x", "date": "2010-01-01", "year": 2010}\n', None),
  ("file_fifo", None, "fifo"),
  ("file_sparse_1g", None, "sparse"),
  ("odd_file_name", None, "dotdot_year"),
  ("year_file_99999", None, "year_name"),
]:
  case(
    f"convert_ssm_{name}",
    "store",
    _convert_ssm(line, mode),
    expect="either",
    check=files_exist("out/manifest.json"),
    mentions=("J",),
    writes=("out",),
    timeout=180,
  )
case(
  "convert_ssm_data_is_a_store",
  "store",
  lambda ctx: [
    "--mode=convert_ssm",
    f"--data={ctx.base['store']}",
    f"--output_dir={ctx.path('out')}",
  ],
  mentions=("store",),
)


# ---- T5X checkpoints ---------------------------------------------------------------------------


def _t5x(damage, mode="score"):  # noqa: C901 (one branch per damage)
  def setup(ctx):  # noqa: C901
    ctx.copy("t5x", "T")
    step = ctx.path("T/checkpoint_0")
    msgpack = os.path.join(step, "checkpoint")
    # The parameters' arrays (target.*) first: the optimizer's (state.*) are not read by
    # score / convert / init, so damage there is rightly not noticed.
    zarrays = sorted(
      glob.glob(os.path.join(step, "**", ".zarray"), recursive=True),
      key=lambda p: (os.sep + "target." not in p, p),
    )
    if damage == "msgpack_truncated":
      os.truncate(msgpack, os.path.getsize(msgpack) // 2)
    elif damage == "msgpack_random":
      ctx.write(os.path.relpath(msgpack, ctx.dir), np.random.RandomState(0).bytes(4096))
    elif damage == "msgpack_fifo":
      ctx.fifo(os.path.relpath(msgpack, ctx.dir))
    elif damage == "zarray_shape_huge":
      edit_json(zarrays[0], lambda z: z.__setitem__("shape", [10**12, 10**12]))
    elif damage == "zarray_fifo":
      ctx.fifo(os.path.relpath(zarrays[0], ctx.dir))
    elif damage == "zarray_dtype_unknown":
      edit_json(zarrays[0], lambda z: z.__setitem__("dtype", "<q16"))
    elif damage == "chunk_fifo":
      d = os.path.dirname(zarrays[0])
      chunk = next(n for n in sorted(os.listdir(d)) if not n.startswith("."))
      ctx.fifo(os.path.relpath(os.path.join(d, chunk), ctx.dir))
    elif damage == "chunk_random":
      d = os.path.dirname(zarrays[0])
      chunk = next(n for n in sorted(os.listdir(d)) if not n.startswith("."))
      ctx.write(
        os.path.relpath(os.path.join(d, chunk), ctx.dir), np.random.RandomState(2).bytes(512)
      )
    elif damage == "chunk_missing":
      d = os.path.dirname(zarrays[0])
      chunk = next(n for n in sorted(os.listdir(d)) if not n.startswith("."))
      os.remove(os.path.join(d, chunk))
    elif damage == "empty_newer_step":
      os.makedirs(ctx.path("T/checkpoint_5"))
    elif damage == "huge_step_number":
      os.makedirs(ctx.path("T/checkpoint_" + "9" * 40))
    elif damage == "zarray_links_out":
      d = os.path.dirname(zarrays[0])
      import shutil

      shutil.rmtree(d)
      os.symlink("/etc", d)
    if mode == "score":
      return score_args(ctx, ctx.path("T"))
    if mode == "score_step":
      return score_args(ctx, ctx.path("T/checkpoint_0"))
    if mode == "convert":
      return [
        "--mode=convert",
        f"--checkpoint={ctx.path('T')}",
        f"--output_dir={ctx.path('out')}",
        "--format=tlm",
      ]
    if mode == "init":
      return fresh(ctx, f"model.init_checkpoint={ctx.path('T')}")
    return score_args(ctx, ctx.path("T"), "out.jsonl", "predict")

  return setup


case(
  "t5x_score_model_dir",
  "t5x",
  _t5x(None),
  expect="ok",
  check=scores_equal("ref2"),
  writes=("out.jsonl",),
)
case(
  "t5x_score_step_dir",
  "t5x",
  _t5x(None, "score_step"),
  expect="ok",
  check=scores_equal("ref2"),
  writes=("out.jsonl",),
)
case(
  "t5x_convert",
  "t5x",
  _t5x(None, "convert"),
  expect="ok",
  check=files_exist("out/params", "out/model_config.json"),
  writes=("out",),
)
case(
  "t5x_init_checkpoint",
  "t5x",
  _t5x(None, "init"),
  expect="ok",
  check=trained("w", 2),
  writes=("w",),
)
for damage, mode, expect in [
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
]:
  case(
    f"t5x_{damage}_{mode}",
    "t5x",
    _t5x(damage, mode),
    expect=expect,
    check={"score": scores_equal("ref2"), "init": trained("w", 2)}.get(mode),
    mentions=("T",),
    writes=("out.jsonl", "out", "w"),
    timeout=180,
  )


# ---- sampling ----------------------------------------------------------------------------------


def _predict(*flags):
  return lambda ctx: score_args(ctx, ctx.base["W0"], "out.jsonl", "predict", *flags)


case(
  "sampling_intact",
  "sampling",
  _predict("--temperature=1", "--top_k=5", "--top_p=0.9", "--seed=3"),
  expect="ok",
  check=predictions(),
  writes=("out.jsonl",),
)
for name, flags, expect in [
  ("temperature_nan", ("--temperature=nan",), "error"),
  ("temperature_inf", ("--temperature=inf",), "error"),
  ("temperature_negative", ("--temperature=-1",), "error"),
  ("temperature_tiny", ("--temperature=1e-300",), "either"),
  ("temperature_huge", ("--temperature=1e308",), "either"),
  ("temperature_subnormal", ("--temperature=5e-324",), "either"),
  ("top_p_zero", ("--temperature=1", "--top_p=0"), "error"),
  ("top_p_nan", ("--temperature=1", "--top_p=nan"), "error"),
  ("top_p_above_1", ("--temperature=1", "--top_p=1.5"), "error"),
  ("top_p_tiny", ("--temperature=1", "--top_p=1e-300"), "either"),
  ("top_k_negative", ("--temperature=1", "--top_k=-1"), "error"),
  ("top_k_1e12", ("--temperature=1", "--top_k=1000000000000"), "either"),
  ("top_k_beyond_int64", ("--temperature=1", "--top_k=" + "9" * 30), "error"),
  ("top_k_1", ("--temperature=1", "--top_k=1"), "either"),
  ("seed_2_32", ("--temperature=1", "--seed=4294967296"), "error"),
  ("seed_minus_1", ("--temperature=1", "--seed=-1"), "error"),
  ("seed_2_64", ("--temperature=1", "--seed=18446744073709551616"), "error"),
  ("beam_with_temperature", ("--temperature=1", "--beam_size=4"), "error"),
  ("top_k_without_temperature", ("--top_k=5",), "error"),
  ("top_p_without_temperature", ("--top_p=0.5",), "error"),
  ("temperature_string", ("--temperature=hot",), "error"),
]:
  case(
    f"sampling_{name}",
    "sampling",
    _predict(*flags),
    expect=expect,
    check=predictions(),
    mentions=(flags[-1].partition("=")[0],),
    writes=("out.jsonl",),
    timeout=180,
  )


# ---- a disk that fills up (a small tmpfs; root only, else `skipped`) ---------------------------


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
    return [
      "--mode=convert",
      f"--checkpoint={ctx.base['W0']}",
      f"--output_dir={ctx.path('disk/out')}",
      f"--format={fmt}",
    ]

  return setup


def _score_to_full_disk(ctx):
  ctx.tmpfs("disk", "64k")
  ctx.fill("disk/filler")
  return score_args(ctx, ctx.base["W0"], "disk/out.jsonl")


def _build_ssm_to_full_disk(ctx):
  ctx.tmpfs("disk", "64k")
  ctx.fill("disk/filler")
  return ssm(out="disk/out")(ctx)


case(
  "disk_full_train_first_checkpoint",
  "disk_full",
  _train_on_full_disk,
  mentions=("disk/w",),
  writes=("disk/w",),
)
case(
  "disk_full_resume_step_3",
  "disk_full",
  _resume_on_full_disk,
  mentions=("disk/W",),
  writes=("disk/W",),
  workdirs=("disk/W",),
)
for fmt in ("tlm", "hf", "t5x"):
  case(
    f"disk_full_convert_{fmt}",
    "disk_full",
    _convert_to_full_disk(fmt),
    mentions=("disk/out",),
    writes=("disk/out",),
  )
case(
  "disk_full_score_output",
  "disk_full",
  _score_to_full_disk,
  mentions=("disk/out.jsonl",),
  writes=("disk/out.jsonl",),
)
case(
  "disk_full_build_ssm",
  "disk_full",
  _build_ssm_to_full_disk,
  mentions=("disk/",),  # the output or the lock beside it (disk/.out.tlm.lock)
  writes=("disk/out",),
)
