"""What the probe's case modules share: the names of a case's files, the expectations (`ok`,
`either`, `error`), the checks of a success's output, argv builders, and `put`, which makes a
file hostile (a FIFO, a sparse giant, a directory, a link to /dev/zero, gone, edited or
replaced) in one place for every state file the cases tamper with.

Every case module is a set of tables, one row per case, and one builder per table that turns a
row into a `Case` (tests/hostile/probe.py defines it and says how an outcome is classified).
"""

import dataclasses
import glob
import hashlib
import json
import os

import numpy as np

from tests.hostile.probe import FIXTURE_DATA, Case, train_args

STORE_FIX = os.path.join(FIXTURE_DATA, "store")
# The workdir a case copies from the base's W0 (two steps trained) and its two steps.
W, S1, S2 = "W", "W/checkpoints/1", "W/checkpoints/2"


def case(name: str, surface: str, setup, **kw) -> Case:
  return Case(name, surface, setup, **kw)


def value(ctx, given):
  """A row's value: as given, or `given(ctx)` where the case's files decide it."""
  return given(ctx) if callable(given) else given


# ---- expectations: the keyword arguments of a Case beside its name, surface and setup --------


def ok(check, *writes, **kw) -> dict:
  """Success (or recovery) is right; `check` says whether the output is."""
  return dict(expect="ok", check=check, writes=writes, **kw)


def either(check, *writes, **kw) -> dict:
  """A one-line error or a success whose output `check` accepts."""
  return dict(expect="either", check=check, writes=writes, **kw)


def error(*mentions, **kw) -> dict:
  """A one-line error holding every fragment of `mentions`."""
  return dict(expect="error", mentions=mentions, **kw)


# ---- checks of a success's output ------------------------------------------------------------


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


# ---- argv ------------------------------------------------------------------------------------


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


def convert_args(checkpoint, output_dir, fmt):
  return [
    "--mode=convert",
    f"--checkpoint={checkpoint}",
    f"--output_dir={output_dir}",
    f"--format={fmt}",
  ]


def fresh(ctx, *sets, workdir="w"):
  """A new two-step training into `w` with these `--set`s."""
  return train_args(ctx.path(workdir), *sets)


# What a case runs on its copy W of the base's W0, by mode, and the check of its success.
ON_W = {
  "eval": lambda ctx: ["--mode=eval", f"--workdir={ctx.path(W)}"],
  "resume": lambda ctx: train_args(ctx.path(W), "train.steps=3"),
  "score": lambda ctx: score_args(ctx, ctx.path(W)),
  "predict": lambda ctx: score_args(ctx, ctx.path(W), "out.jsonl", "predict"),
  "convert": lambda ctx: convert_args(ctx.path(W), ctx.path("out"), "tlm"),
}
CHECK_ON_W = {
  "eval": files_exist("W/results/eval.json"),
  "resume": trained(W, 3),
  "score": scores_equal("ref2"),
  "predict": predictions(),
  "convert": files_exist("out/params"),
}

# Each load of W's checkpoints, by mode, after its step 2 was damaged: a workdir falls back to
# step 1 (with a warning naming step 2), a named step fails in one line.
LOADS = {
  "resume": ON_W["resume"],
  "score_workdir": ON_W["score"],
  "score_step": lambda ctx: score_args(ctx, ctx.path(S2)),
  "eval": ON_W["eval"],
  "convert_step": lambda ctx: convert_args(ctx.path(S2), ctx.path("out"), "tlm"),
  "init_checkpoint_workdir": lambda ctx: fresh(ctx, f"model.init_checkpoint={ctx.path(W)}"),
  "predict_workdir": ON_W["predict"],
}
LOAD_EXPECT = {
  "resume": ("ok", trained(W, 3)),
  "score_workdir": ("ok", scores_equal("ref1", warning="checkpoints/2")),
  "score_step": ("error", None),
  "eval": ("ok", files_exist("W/results/eval.json", warning="checkpoints/2")),
  "convert_step": ("error", None),
  "init_checkpoint_workdir": ("ok", both(trained("w", 2), warned("checkpoints/2"))),
  "predict_workdir": ("ok", both(predictions(), warned("checkpoints/2"))),
}


def load_case(name, surface, damage, mode) -> Case:
  """A case that copies the base's W0 to W, damages it (`damage(ctx)`), and loads it by `mode`
  (a key of LOADS), expecting what LOAD_EXPECT says."""
  expect, check = LOAD_EXPECT[mode]

  def setup(ctx):
    ctx.copy("W0", W)
    damage(ctx)
    return LOADS[mode](ctx)

  return case(
    name,
    surface,
    setup,
    expect=expect,
    check=check,
    mentions=("checkpoints/2",) if expect == "error" else (),
    writes=(W, "out", "out.jsonl", "w"),
    workdirs=(W,),
    timeout=240,
  )


# ---- hostile files ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Kind:
  """A file replaced by something that is not its content: see `put`."""

  what: str  # "fifo", "dir", "dev_zero" (a link to it), "missing", "sparse"
  size: int = 0  # of a sparse file


FIFO, DIR, DEV_ZERO, MISSING = Kind("fifo"), Kind("dir"), Kind("dev_zero"), Kind("missing")


def sparse(size: int) -> Kind:
  """A file of `size` zero bytes taking no disk space."""
  return Kind("sparse", size)


@dataclasses.dataclass(frozen=True)
class Append:
  """The file as it was, with this text or these bytes after it."""

  data: bytes | str


def put(ctx, rel, content) -> None:
  """Makes the case's file `rel` hostile: `content` is a `Kind`, an `Append`, a function that
  edits the file's JSON value (in place, or returning the new value), or the bytes / text to
  write in its place."""
  path = ctx.path(rel)
  if content == FIFO:
    ctx.fifo(rel)
  elif content == DIR:
    if os.path.lexists(path):
      os.remove(path)
    os.makedirs(path)
  elif content == DEV_ZERO:
    ctx.symlink(rel, "/dev/zero")
  elif content == MISSING:
    os.remove(path)
  elif isinstance(content, Kind):
    if content.what != "sparse":
      raise ValueError(f"put: no such kind {content.what!r}")
    ctx.sparse(rel, content.size)
  elif isinstance(content, Append):
    data = content.data.encode() if isinstance(content.data, str) else content.data
    with open(path, "rb") as f:
      ctx.write(rel, f.read() + data)
  elif callable(content):
    edit_json(path, content)
  else:
    ctx.write(rel, content)


def edit_json(path, edit):
  with open(path) as f:
    value = json.load(f)
  value = edit(value) or value
  with open(path, "w") as f:
    json.dump(value, f)


def sha_entry(path, size_key="bytes"):
  """A manifest entry that agrees with the file (a hostile user who knows the format)."""
  with open(path, "rb") as f:
    data = f.read()
  return {size_key: len(data), "sha256": hashlib.sha256(data).hexdigest()}


def manifest(ctx, step_rel):
  return ctx.path(os.path.join(step_rel, "tlm_checksums.json"))


def rehash(ctx, step_rel, name):
  """Makes a checkpoint's manifest agree with a file edited on purpose."""
  entry = sha_entry(os.path.join(ctx.path(step_rel), name), "size")
  edit_json(manifest(ctx, step_rel), lambda m: m["files"].__setitem__(name, entry))


def largest_param_file(step_dir):
  found = glob.glob(os.path.join(step_dir, "params", "**", "d", "*"), recursive=True)
  return max(found, key=os.path.getsize)


def random_bytes(ctx, step_rel):
  """4 KiB of random bytes into a parameter file."""
  path = largest_param_file(ctx.path(step_rel))
  with open(path, "r+b") as f:
    f.seek(64)
    f.write(np.random.RandomState(0).bytes(4096))
  ctx.damaged.add(step_rel)


def truncate_param(ctx, step_rel):
  path = largest_param_file(ctx.path(step_rel))
  os.truncate(path, os.path.getsize(path) // 2)
  ctx.damaged.add(step_rel)


def predict_case(name, surface, flags, expect) -> Case:
  """predict of the base's input with `flags`: a success writes a prediction for each of its 3
  inputs, an error names the flag given last."""
  return case(
    name,
    surface,
    lambda ctx: score_args(ctx, ctx.base["W0"], "out.jsonl", "predict", *flags),
    expect=expect,
    check=predictions(),
    mentions=(flags[-1].partition("=")[0],),
    writes=("out.jsonl",),
    timeout=180,
  )
