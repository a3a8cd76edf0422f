"""The hostile-input probe's harness: runs `run.py` as a careless or hostile user would, one case
per subprocess in a directory of its own, and classifies how each case ends. The cases are
tables by surface in tests/hostile/cases/; tests/hostile/test_probe.py runs them (a fast sample
by default, all under `pytest -m hostile`; tests/hostile/conftest.py has the options).

The goal: every case over these surfaces ends in a one-line error or a correct recovery: 0
tracebacks, 0 hangs, 0 files outside the given locations, 0 checkpoints lost. The surfaces:
paths and URIs on every path flag and path config key (paths.py), the project's own state files
read back (state_*.py), the workdir's layout (layout.py), settings at their extremes
(extremes.py), the builders (builders.py), checkpoints verified on every load (checkpoints.py),
the example store, T5X checkpoints and sampling flags (store.py, t5x.py, sampling.py), files
damaged while a run reads them (midrun.py: a store truncated, rewritten or replaced while
training draws from it, a checkpoint deleted while it is restored) and a disk that fills up
(disk_full.py).

What cases copy from is built with the CLI itself, once per session and only the parts the
chosen cases ask for (`Base`: a tiny training workdir with steps 1 and 2 on the tests' fixture
data, its evaluation, one with `best/`, the tlm / HF / T5X conversions of it, an example store,
reference scores of each step, a seed's results as reproduce writes them). Every case gets
`CASE/` with an empty `CASE/cwd` (the process's working directory), `CASE/tmp` ($TMPDIR) and
`CASE/home` ($HOME, so `~/.cache/tlm` is the case's own), copies what it needs from the base,
and runs `python run.py ARGS` with a timeout and a capped address space.

Outcome of a case (its class, one of):
- `one_line_error`: exit status > 0, no traceback, and exactly one non-empty stderr line left
  after dropping the library noise listed in BENIGN, starting "error: " (tlm's form) or "FATAL
  Flags parsing error:" (absl's, for a flag value argv cannot hold); where the case names what
  the line must mention (the flag, key or file), every such fragment is in it, else the class
  is `unnamed_error`;
- `ok`: exit status 0 and the case's check of the output passed (the output is where it was
  asked for and right: e.g. the scores equal a reference run's; a recovery's warning present);
- `wrong_output`: exit status 0, the check failed;
- `accepted`: exit status 0 where the case expects a refusal (hostile input used silently);
- `refused`: a one-line error where the case expects success or recovery;
- `multi_line_error`: exit status > 0, no traceback, more or fewer than one line left;
- `traceback`: a Python traceback (or a fatal interpreter / XLA abort message) in the output;
- `hang`: still running at the timeout (the process group is killed);
- `signal`: killed by a signal (e.g. SIGABRT from XLA);
- `skipped`: the case could not be set up here (a tmpfs needs root); neither passed nor failed.
And two checks on every case whatever its class:
- `outside`: files written, changed or removed in the case's directory outside the locations
  the case gives on its command line (the workdir, output file or directory, and the lock
  `.NAME.tlm.lock` beside an output directory, `tlm.workdir_lock.WorkdirLock.beside`); this
  includes the empty cwd, $TMPDIR leftovers, the parents of the targets (all inside the case's
  directory) and `$HOME/.cache/tlm`;
- `lost`: a checkpoint step directory of the case's workdir(s) that was intact before (every
  file hashed after the case's setup, its deliberately damaged steps excluded) is missing or
  changed after; or what the case's own `after` check found lost, whatever the outcome (the
  midrun cases: the run's newest checkpoint must match its checksum manifest).
A case passes iff its class is `one_line_error` or `ok` and neither check found anything.
"""

import collections
import dataclasses
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_PY = os.path.join(ROOT, "run.py")
# Resolved: a copy of the tree whose tests/fixtures links to the original trains on the same
# paths as a base built there (a resumed run refuses data paths other than its own).
FIXTURES = os.path.realpath(os.path.join(ROOT, "tests", "fixtures"))
TINY = os.path.join(FIXTURES, "train", "tiny_data")
FIXTURE_DATA = os.path.join(FIXTURES, "data")

# Library noise dropped from stderr before counting lines, each with why it is not tlm's
# message. Nothing else is dropped: a tlm warning beside an error counts as a second line.
BENIGN = (
  # absl's hint after its own one-line flag error ("FATAL Flags parsing error: ...").
  re.compile(r"^Pass --helpshort or --helpfull to see help on flags\.$"),
  # XLA's slow-compile alarm on a loaded machine (a timing notice, four lines: the log line,
  # a rule of stars, the message, a rule of stars).
  re.compile(r"^E\d{4} [\d:.]+\s+\d+ slow_operation_alarm\.cc:\d+\]\s*$"),
  re.compile(r"^\*{8,}$"),
  re.compile(r"^\[Compiling module \S+ for \w+\] Very slow compile\?"),
)
_TRACEBACK = re.compile(
  r"Traceback \(most recent call last\)|Fatal Python error|Check failed|^F\d{4} ", re.M
)
# The launcher hides packages from the child (`sys.modules[name] = None`), so that "the
# filesystem package is missing" is probed whether or not this machine has it (as
# tests/helpers.py `run_tlm` does).
_LAUNCH = (
  "import runpy, sys; [sys.modules.__setitem__(n, None) for n in sys.argv[1].split(',') if n]; "
  "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)

# The `--set`s that point a tiny config at the tests' committed fixture data
# (tests/helpers.py `FIXTURE_DATA_SETS`), and a two-step training on it.
FIXTURE_SETS = (
  "data.synthetic=false",
  f"data.ssm_dir={TINY}/ssm",
  f"data.templama_dir={TINY}/templama",
  f"data.vocab={TINY}/spiece.model",
  "data.input_length=32",
  "data.target_length=8",
)
TRAIN_SETS = FIXTURE_SETS + (
  "train.steps=2",
  "train.checkpoint_every=1",
  "train.batch_size=4",
  "train.keep_checkpoints=5",
  "eval.years=2010,2011",
  "eval.max_examples=2",
)


def train_args(workdir: str, *sets: str, config: str = "tiny_temporal") -> list[str]:
  """`--mode=train` of a tiny config on the fixture data (later `--set`s win)."""
  return [
    "--mode=train",
    f"--config={config}",
    f"--workdir={workdir}",
    *(f"--set={s}" for s in TRAIN_SETS + sets),
  ]


@dataclasses.dataclass
class Case:
  """One probe case.

  Attributes:
    name: unique, short.
    surface: which surface it probes (a module of tests/hostile/cases/).
    setup: `setup(ctx)` prepares the case's files and returns the run.py arguments.
    expect: "error" (a refusal is right), "ok" (success or recovery is right; `check` says
      whether the output is), or "either" (both are right; `check` judges a success).
    mentions: fragments the one-line error must hold (the flag, key or file it names).
    check: `check(ctx, proc)` -> None if the output of a success is right, else why not.
    writes: paths relative to the case directory where the case may write (its workdir,
      output file or directory), resolved after setup.
    workdirs: workdirs (relative) whose intact checkpoints must survive the case.
    hide: packages the child must see as not installed.
    timeout: seconds (None: the probe's default).
    stdin_null: stdin is /dev/null (always); kept for clarity.
    after: `after(ctx, proc)` -> None, or what the run lost, checked whatever the outcome
      (an error included): e.g. that a run whose files were damaged while it read them kept
      its last checkpoint intact. What it returns counts as `lost`.
  """

  name: str
  surface: str
  setup: Callable
  expect: str = "error"
  mentions: tuple[str, ...] = ()
  check: Callable | None = None
  writes: tuple[str, ...] = ()
  workdirs: tuple[str, ...] = ()
  hide: tuple[str, ...] = ()
  timeout: float | None = None
  after: Callable | None = None


class Skip(Exception):
  """A case this machine cannot set up (a tmpfs without root)."""


class Ctx:
  """A case's directory and the base it copies from."""

  def __init__(self, directory: str, base: dict):
    self.dir = directory
    self.cwd = os.path.join(directory, "cwd")
    self.base = base  # a `Base`: what `copy` reads is built on first use
    self.damaged: set[str] = set()  # step dirs (relative) damaged on purpose
    self.immutable: list[str] = []  # chattr +i'd paths, undone after the case
    self.mounts: list[str] = []  # tmpfs mount points, unmounted after the case
    self.data: dict = {}  # anything setup hands to check

  def path(self, rel: str) -> str:
    return os.path.join(self.dir, rel)

  def copy(self, name: str, rel: str | None = None) -> str:
    """A copy of the base's `name` at `rel` (default: the same name); its absolute path."""
    dst = self.path(rel or name)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    src = self.base[name]
    if os.path.isdir(src):
      shutil.copytree(src, dst, symlinks=True)
    else:
      shutil.copy2(src, dst)
    return dst

  def write(self, rel: str, content: bytes | str) -> str:
    path = self.path(rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
      f.write(content.encode() if isinstance(content, str) else content)
    return path

  def fifo(self, rel: str) -> str:
    path = self.path(rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
      if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
      else:
        os.remove(path)
    os.mkfifo(path)
    return path

  def sparse(self, rel: str, size: int) -> str:
    """A file of `size` bytes of zeros taking no disk space."""
    path = self.path(rel)
    with open(path, "wb") as f:
      f.truncate(size)
    return path

  def symlink(self, rel: str, target: str) -> str:
    path = self.path(rel)
    if os.path.lexists(path):
      if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
      else:
        os.remove(path)
    os.symlink(target, path)
    return path

  def tmpfs(self, rel: str, size: str) -> str:
    """A tmpfs of `size` (e.g. "1m") mounted at `rel`: a disk that fills up. Needs root; a
    case whose mount fails is classified `skipped` (nothing is claimed about it)."""
    path = self.path(rel)
    os.makedirs(path)
    proc = subprocess.run(
      ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True, text=True
    )
    if proc.returncode != 0:
      raise Skip(f"cannot mount a tmpfs: {proc.stderr.strip()[:200]}")
    self.mounts.append(path)
    return path

  def fill(self, rel: str) -> None:
    """Fills the file system holding `rel` (a file of zeros until ENOSPC)."""
    with open(self.path(rel), "wb") as f:
      try:
        while True:
          f.write(b"\0" * (1 << 16))
          f.flush()
      except OSError:
        pass

  def make_immutable(self, rel: str) -> str:
    """`chattr +i`: not even root may write into it (the probe runs as root here)."""
    path = self.path(rel)
    subprocess.run(["chattr", "+i", path], check=True)
    self.immutable.append(path)
    return path


# ---- snapshots ---------------------------------------------------------------------------------


def snapshot(root: str) -> dict[str, tuple]:
  """Every entry under `root`: (kind, size, mtime_ns) for files, kind for the rest. Directories'
  mtimes are left out (adding an allowed entry changes its parent's); $HOME outside
  .cache/tlm is left out (matplotlib and friends keep their caches there)."""
  out = {}
  home = os.path.join(root, "home")
  for top, dirs, names in os.walk(root):
    if top == home:
      dirs[:] = [d for d in dirs if d == ".cache"]
      names = []
    elif top == os.path.join(home, ".cache"):
      dirs[:] = [d for d in dirs if d == "tlm"]
      names = []
    for name in dirs + names:
      path = os.path.join(top, name)
      try:
        st = os.lstat(path)
      except FileNotFoundError:
        continue
      rel = os.path.relpath(path, root)
      if stat.S_ISREG(st.st_mode):
        out[rel] = ("file", st.st_size, st.st_mtime_ns)
      elif stat.S_ISDIR(st.st_mode):
        out[rel] = ("dir",)
      elif stat.S_ISLNK(st.st_mode):
        out[rel] = ("link", os.readlink(path))
      else:
        out[rel] = ("special", stat.S_IFMT(st.st_mode))
  return out


def _under(rel: str, allowed: list[str]) -> bool:
  return any(rel == a or rel.startswith(a + os.sep) for a in allowed)


def outside_changes(before: dict, after: dict, allowed: list[str]) -> list[str]:
  """Entries added, changed or removed outside the allowed locations."""
  out = []
  for rel in sorted(set(before) | set(after)):
    if before.get(rel) == after.get(rel) or _under(rel, allowed):
      continue
    what = "added" if rel not in before else "removed" if rel not in after else "changed"
    out.append(f"{what} {rel}")
  return out


def _sha256(path: str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      h.update(chunk)
  return h.hexdigest()


def checkpoint_hashes(case_dir: str, workdirs: tuple[str, ...], damaged: set[str]) -> dict:
  """{step dir (relative): {file: sha256}} of every checkpoint step of the workdirs (their
  checkpoints/ and best/checkpoints/), leaving out the damaged ones and anything that is not a
  plain directory of regular files (the case made it hostile)."""
  out = {}
  for workdir in workdirs:
    for sub in ("checkpoints", os.path.join("best", "checkpoints")):
      steps = os.path.join(case_dir, workdir, sub)
      if not os.path.isdir(steps) or os.path.islink(steps):
        continue
      for name in os.listdir(steps):
        step = os.path.join(steps, name)
        rel = os.path.relpath(step, case_dir)
        if not name.isdigit() or rel in damaged or os.path.islink(step):
          continue
        if not os.path.isdir(step):
          continue
        files, regular = {}, True
        for top, _, names in os.walk(step):
          for n in names:
            p = os.path.join(top, n)
            if not stat.S_ISREG(os.lstat(p).st_mode):
              regular = False
              break
            files[os.path.relpath(p, step)] = _sha256(p)
        if regular:
          out[rel] = files
  return out


def lost_checkpoints(case_dir: str, before: dict) -> list[str]:
  out = []
  for rel, files in before.items():
    step = os.path.join(case_dir, rel)
    if not os.path.isdir(step):
      out.append(f"{rel} is gone")
      continue
    for name, digest in files.items():
      path = os.path.join(step, name)
      if not os.path.isfile(path):
        out.append(f"{rel}/{name} is gone")
      elif _sha256(path) != digest:
        out.append(f"{rel}/{name} changed")
  return out


# ---- running and classifying -------------------------------------------------------------------


# The address space a case may take (RLIMIT_AS, `--hostile-memory-gib`): a case that reads a
# device or a huge file whole then fails inside itself (a MemoryError, classified like any
# traceback) instead of driving the shared machine into the kernel's OOM killer, which may pick
# any process. A two-step tiny training needs under 3 GiB.
MEMORY_LIMIT = [4 << 30]


def _limit_memory() -> None:
  resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT[0], MEMORY_LIMIT[0]))


def launch(args: list[str], cwd: str, env: dict, timeout: float, hide=()) -> dict:
  """Runs run.py with `args` in `cwd`; returns rc (None on timeout), stdout, stderr, seconds."""
  command = [sys.executable, "-c", _LAUNCH, ",".join(hide), RUN_PY, *args]
  t0 = time.perf_counter()
  proc = subprocess.Popen(
    command,
    cwd=cwd,
    env=env,
    stdin=subprocess.DEVNULL,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    start_new_session=True,
    preexec_fn=_limit_memory,
  )
  try:
    out, err = proc.communicate(timeout=timeout)
    rc = proc.returncode
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)  # the case's own process group only
    out, err = proc.communicate()
    rc = None
  return {
    "rc": rc,
    "stdout": out.decode(errors="replace"),
    "stderr": err.decode(errors="replace"),
    "seconds": round(time.perf_counter() - t0, 1),
  }


def error_lines(stderr: str) -> list[str]:
  """The stderr lines that count: non-empty, not in BENIGN."""
  lines = [ln for ln in stderr.splitlines() if ln.strip()]
  return [ln for ln in lines if not any(p.search(ln) for p in BENIGN)]


def classify(case: Case, ctx: Ctx, run: dict) -> tuple[str, str]:
  """(class, detail)."""
  rc, text = run["rc"], run["stdout"] + run["stderr"]
  if rc is None:
    return "hang", f"still running after {run['seconds']}s"
  if rc < 0:
    return "signal", f"killed by {signal.Signals(-rc).name}"
  if _TRACEBACK.search(text):
    lines = [ln for ln in run["stderr"].splitlines() if ln.strip()]
    return "traceback", (lines[-1] if lines else "")[:300]
  lines = error_lines(run["stderr"])
  if rc == 0:
    if case.expect == "error":
      return "accepted", "exit 0 " + (f"(stderr: {lines[-1][:200]})" if lines else "")
    why = case.check(ctx, run) if case.check else None
    return ("wrong_output", why) if why else ("ok", lines[-1][:200] if lines else "")
  if len(lines) == 1 and lines[0].startswith(("error: ", "FATAL Flags parsing error:")):
    missing = [m for m in case.mentions if m not in lines[0]]
    if case.expect == "ok":
      return "refused", lines[0][:300]
    if missing:
      return "unnamed_error", f"does not name {missing}: {lines[0][:300]}"
    return "one_line_error", lines[0][:300]
  return "multi_line_error", " | ".join(lines)[-400:]


def run_case(case: Case, base, root: str, default_timeout: float) -> dict:
  """Sets up, runs and classifies `case` in ROOT/NAME; its record (`passed` says it all)."""
  # Plain characters only: a case's own directory must not be hostile (a backslash in it made
  # tensorstore write elsewhere, which the case named `train_workdir_backslash` probes).
  directory = os.path.join(root, re.sub(r"[^A-Za-z0-9._-]", "_", case.name))
  for sub in ("cwd", "tmp", "home"):
    os.makedirs(os.path.join(directory, sub))
  ctx = Ctx(directory, base)
  record = {"name": case.name, "surface": case.surface, "expect": case.expect, "dir": directory}
  try:
    args = case.setup(ctx)
    record["args"] = args
    allowed = []
    for rel in case.writes:
      real = os.path.relpath(os.path.realpath(os.path.join(directory, rel)), directory)
      allowed += [rel, real]
      for name in {rel, real}:  # the lock beside an output directory
        parent, base_name = os.path.split(name)
        allowed.append(os.path.join(parent, f".{base_name}.tlm.lock"))
    before = snapshot(directory)
    hashes = checkpoint_hashes(directory, case.workdirs, ctx.damaged)
    env = dict(
      os.environ,
      JAX_PLATFORMS="cpu",
      PYTHONPATH=ROOT,
      HOME=ctx.path("home"),
      TMPDIR=ctx.path("tmp"),
      PYTHONDONTWRITEBYTECODE="1",
      MPLCONFIGDIR=os.path.join(root, "mplconfig"),
    )
    run = launch(args, ctx.cwd, env, case.timeout or default_timeout, case.hide)
    for path in ctx.immutable:
      subprocess.run(["chattr", "-i", path], check=False)
    ctx.immutable = []
    record.update(rc=run["rc"], seconds=run["seconds"], stderr_tail=run["stderr"][-3000:])
    record["class"], record["detail"] = classify(case, ctx, run)
    record["outside"] = outside_changes(before, snapshot(directory), allowed)
    record["lost"] = lost_checkpoints(directory, hashes)
    if case.after is not None and (why := case.after(ctx, run)) is not None:
      record["lost"].append(why)
  except Skip as e:
    record.update(**{"class": "skipped", "detail": str(e), "outside": [], "lost": []})
  except Exception as e:  # the probe's own failure in setting up a case: reported, not hidden
    record.update(
      **{"class": "probe_error", "detail": f"{type(e).__name__}: {e}", "outside": [], "lost": []}
    )
  finally:
    for path in ctx.immutable:
      subprocess.run(["chattr", "-i", path], check=False)
    for path in ctx.mounts:
      subprocess.run(["umount", "-l", path], check=False)
  record["passed"] = (
    record["class"] in ("one_line_error", "ok") and not record["outside"] and not record["lost"]
  )
  return record


# ---- the base ----------------------------------------------------------------------------------


class Base:
  """What cases copy from, built with the CLI under `root` on first use of each name (a case
  needing only the fixture data costs no training): `base[name]` is its absolute path.

  W0: a two-step training (checkpoints 1 and 2) with its evaluation (results/eval.json);
  Wbest: one keeping `best/`; tlm, hf, t5x: W0 converted; store: an example store of the
  fixture's news; in.jsonl: three inputs; ref1.jsonl, ref2.jsonl: their scores by step 1 and 2;
  seed: a seed's results as reproduce writes them (tests/test_state_files.py `seed_dir`)."""

  def __init__(self, root: str, timeout: float):
    self.root = root
    self.timeout = timeout
    self.env = dict(
      os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT, MPLCONFIGDIR=os.path.join(root, "mpl")
    )
    self.built: dict[str, str] = {}
    self.seconds: dict[str, float] = {}
    os.makedirs(root, exist_ok=True)

  def __getitem__(self, name: str) -> str:
    if name not in self.built:
      build = getattr(self, "_" + name.replace(".", "_"), None)
      if build is None:
        raise KeyError(name)
      t0 = time.perf_counter()
      path = os.path.join(self.root, name)
      build(path)
      self.built[name] = path
      self.seconds[name] = round(time.perf_counter() - t0, 1)
    return self.built[name]

  def _cli(self, *args: str) -> None:
    run = launch(list(args), self.root, self.env, self.timeout)
    if run["rc"] != 0:  # the harness's own failure, reported by the case that asked for it
      raise RuntimeError(f"base: run.py {' '.join(args)} failed:\n{run['stderr'][-3000:]}")

  def _W0(self, path):
    self._cli(*train_args(path))
    self._cli("--mode=eval", f"--workdir={path}")

  def _Wbest(self, path):
    self._cli(*train_args(path, "train.keep_best=eval_loss", "train.eval_every=1"))

  def _tlm(self, path):
    w0 = self["W0"]
    self._cli(
      "--mode=convert", f"--checkpoint={w0}/checkpoints/1", f"--output_dir={path}", "--format=tlm"
    )

  def _hf(self, path):
    self._cli("--mode=convert", f"--checkpoint={self['W0']}", f"--output_dir={path}", "--format=hf")

  def _t5x(self, path):
    self._cli(
      "--mode=convert", f"--checkpoint={self['W0']}", f"--output_dir={path}", "--format=t5x"
    )

  def _store(self, path):
    self._cli(
      "--mode=build_ssm",
      f"--news={FIXTURE_DATA}/store/news_sample.jsonl",
      f"--entities={FIXTURE_DATA}/store/entities_sample.tsv",
      f"--output_dir={path}",
    )

  def _in_jsonl(self, path):
    rows = [
      {"input": "year: 2014 Ana Berg plays for <extra_id_0>.", "target": "<extra_id_0> Gold Hawks"},
      {"input": "year: 2011 Ana Berg plays for <extra_id_0>.", "target": "<extra_id_0> Red Lions"},
      {"input": "Kai Lund scored again.", "target": "<extra_id_0> Blue Owls"},
    ]
    with open(path, "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in rows)

  def _score(self, path, step):
    self._cli(
      "--mode=score",
      f"--checkpoint={self['W0']}/checkpoints/{step}",
      f"--input_file={self['in.jsonl']}",
      f"--output_file={path}",
    )

  def _ref1_jsonl(self, path):
    self._score(path, 1)

  def _ref2_jsonl(self, path):
    self._score(path, 2)

  def _seed(self, path):
    from tlm.miniature import measurements

    with open(os.path.join(self["W0"], "results", "eval.json")) as f:
      result = json.load(f)
    results = os.path.join(path, "results")
    os.makedirs(results)
    files = {
      "per_query.json": measurements.collect(0, {"temporal": result}),
      "eval.json": {
        "tiny_temporal": {k: result[k] for k in ("templama", "news", "answer_baselines")}
      },
      "seed_summary.json": {"configs": {"temporal": {"name": "tiny_temporal"}}},
    }
    for name, content in files.items():
      with open(os.path.join(results, name), "w") as f:
        json.dump(content, f)


# ---- the goal's figures --------------------------------------------------------------------------


def summary(records: list[dict]) -> dict:
  """Counts per class and per surface: tracebacks, hangs, files outside, checkpoints lost."""

  def counts(rs):
    return {
      "cases": len(rs),
      "passed": sum(r["passed"] for r in rs),
      "classes": dict(collections.Counter(r["class"] for r in rs)),
      "cases_with_files_outside": sum(bool(r["outside"]) for r in rs),
      "cases_with_checkpoints_lost": sum(bool(r["lost"]) for r in rs),
    }

  classes = collections.Counter(r["class"] for r in records)
  surfaces = dict.fromkeys(r["surface"] for r in records)
  return {
    **counts(records),
    "failed": sum(not r["passed"] and r["class"] != "skipped" for r in records),
    "skipped": classes["skipped"],
    "tracebacks": classes["traceback"],
    "hangs": classes["hang"],
    "signals": classes["signal"],
    "by_surface": {s: counts([r for r in records if r["surface"] == s]) for s in surfaces},
    "benign_stderr_patterns": [p.pattern for p in BENIGN],
  }


def surface_table(summary: dict) -> str:
  """Counts per surface and class (Markdown)."""
  classes = sorted({c for s in summary["by_surface"].values() for c in s["classes"]})
  rows = [
    "| surface | cases | passed | " + " | ".join(classes) + " | outside | lost |",
    "|---" * (len(classes) + 5) + "|",
  ]
  for surface, s in [*summary["by_surface"].items(), ("all", summary)]:
    counts = " | ".join(str(s["classes"].get(c, 0)) for c in classes)
    rows.append(
      f"| {surface} | {s['cases']} | {s['passed']} | {counts} | "
      f"{s['cases_with_files_outside']} | {s['cases_with_checkpoints_lost']} |"
    )
  return "\n".join(rows)
