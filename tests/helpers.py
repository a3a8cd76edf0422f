"""Helpers the test modules share: one module, so that no test module imports another.

- paths: `ROOT`, `FIXTURES` (tests/fixtures/train), `DATA` and `FIXTURE_DATA_SETS` (the `--set`
  overrides that point a tiny config at the committed fixture data in tiny_data/, written by
  make_tiny_data.py; the subprocess fixture scripts use them too);
- models: `random_params` (T5X-scaled, EOS reachable) and `inputs`, with `VOCAB`, `BATCH`,
  `INPUT_LEN`, `MAX_DECODE` (the decoding, parity and mesh tests share these configs and shapes,
  so the compiled programs are shared);
- processes: `subprocess_env` and `run_fixture` (a child python on simulated CPU devices),
  `free_port`, `train_command` / `tiny_train_argv`, `run_child`, `full_disk_training`, and
  `run_tlm` / `one_error` / `tree`: `run.py` as a user runs it, and the one-line error rule
  (`hide` makes packages look uninstalled in the child, `sys.modules[name] = None`, so that
  "gcsfs is missing" is tested whether or not the machine has it);
- files: `write_file`, `fake_step` (a checkpoint step with its manifest), `varint`.

tlm and jax are imported inside the functions: the subprocess fixture scripts import this
module after setting `XLA_FLAGS`.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "train")
DATA = os.path.join(FIXTURES, "tiny_data")

FIXTURE_DATA_SETS = (
  "data.synthetic=false",
  f"data.ssm_dir={DATA}/ssm",
  f"data.templama_dir={DATA}/templama",
  f"data.vocab={DATA}/spiece.model",
  "data.input_length=32",
  "data.target_length=8",
)

# ---- models ------------------------------------------------------------------------------------

VOCAB, BATCH, INPUT_LEN, MAX_DECODE = 300, 16, 12, 10


def random_params(cfg, seed=0, embedding_scale=0.05, out_scale=3.0, eos_scale=5.0):
  """Random T5X-scaled params, shaped so that greedy outputs vary and sometimes end early.

  Small embeddings and larger attention/MLP output kernels keep a random tied model from
  repeating its input token (the decoder norm scale restores the logits' spread); a larger
  EOS row (or logits column) makes EOS reachable.
  """
  from tlm.models import checkpoints

  rs = np.random.RandomState(seed)
  flat = {}
  for path, shape in checkpoints.param_shapes(cfg).items():
    if path.endswith("scale"):
      value = 1.0 + 0.2 * rs.randn(*shape)
      if path == "decoder/decoder_norm/scale" and cfg.logits_via_embedding:
        value /= embedding_scale
    elif path == "token_embedder/embedding":
      value = embedding_scale * rs.randn(*shape)
      value[0] *= 0.05
      value[1] *= eos_scale if cfg.logits_via_embedding else 1.0
    elif path.endswith("rel_embedding"):
      value = rs.randn(*shape)
    else:
      value = rs.randn(*shape) / np.sqrt(shape[0])
      if path.endswith(("out/kernel", "wo/kernel")):
        value *= out_scale
      if path.endswith("query/kernel"):
        value /= np.sqrt(cfg.head_dim)
      if path == "decoder/logits_dense/kernel":
        value[:, 0] *= 0.05  # like a trained model, never predict padding
        value[:, 1] *= eos_scale / 2
    flat[path] = value.astype(np.float32)
  return checkpoints.unflatten(flat)


def inputs(seed=1, batch=BATCH, length=INPUT_LEN):
  """Token batches of varied lengths (at least 2 real tokens), 0-padded."""
  rs = np.random.RandomState(seed)
  x = rs.randint(2, VOCAB, (batch, length))
  for b in range(batch):
    x[b, rs.randint(2, length + 1) :] = 0
  return x


# ---- processes ---------------------------------------------------------------------------------


def subprocess_env(devices: int, cache_dir: str | None = None) -> dict:
  """Environment for a child python: simulated CPU devices set before jax is imported."""
  env = dict(os.environ)
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  env["JAX_PLATFORMS"] = "cpu"
  # Unoptimised LLVM code generation: XLA's CPU compile time dominates these runs.
  env["XLA_FLAGS"] = (
    f"--xla_force_host_platform_device_count={devices} --xla_backend_optimization_level=0"
  )
  if cache_dir:
    env["JAX_COMPILATION_CACHE_DIR"] = cache_dir
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"
  return env


def run_fixture(script: str, devices: int, *args) -> None:
  """Runs tests/fixtures/train/`script` with `args` in a child python on `devices` simulated
  CPU devices (`subprocess_env`); a non-zero exit fails the test."""
  subprocess.run(
    [sys.executable, os.path.join(FIXTURES, script), *map(str, args)],
    cwd=ROOT,
    env=subprocess_env(devices),
    check=True,
    timeout=900,
  )


def environment(devices, cache):
  """Environment for a child `run.py` of a multi-process run: simulated CPU devices, a shared
  compilation cache."""
  env = dict(os.environ)
  env["JAX_PLATFORMS"] = "cpu"
  env["XLA_FLAGS"] = (
    f"--xla_force_host_platform_device_count={devices} --xla_backend_optimization_level=0"
  )
  env["JAX_COMPILATION_CACHE_DIR"] = cache
  env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
  env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"
  return env


def free_port() -> int:
  """A free local TCP port (for a multi-process coordinator)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def train_command(workdir, *overrides):
  """`python run.py --mode=train` of a 1-layer tiny_temporal on the fixture data, 20 steps."""
  sets = [
    *FIXTURE_DATA_SETS,
    "train.batch_size=8",
    "train.checkpoint_every=4",
    "train.keep_checkpoints=3",
    "train.log_every=1",
    "train.eval_every=10",
    "model.dropout_rate=0.1",  # resumed runs must draw the same dropout masks
    "model.num_layers=1",  # the mechanics, not the model, are under test: compile less
    *overrides,
  ]
  return tiny_train_argv(workdir, sets)


def tiny_train_argv(workdir, sets, *flags) -> list[str]:
  """`python run.py --mode=train --config=tiny_temporal --workdir=W FLAGS --set=...` (from the
  repository root)."""
  head = [sys.executable, "run.py", "--mode=train", "--config=tiny_temporal"]
  return head + [f"--workdir={workdir}", *flags] + [f"--set={s}" for s in sets]


def run_child(command: list[str], env: dict, timeout: float = 600):
  """`command` in a child process from the repository root; returns the CompletedProcess."""
  return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def full_disk_training(tmpfs):
  """`train_command` of 4 steps in a workdir on a 600 KB tmpfs (the `tmpfs` fixture), which
  holds the run's files but not a checkpoint; returns (the workdir, the CompletedProcess)."""
  workdir = os.path.join(tmpfs("600k"), "w")
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1 --xla_backend_optimization_level=0"
  return workdir, run_child(train_command(workdir, "train.steps=4"), env)


RUN_PY = os.path.join(ROOT, "run.py")
_LAUNCH = (
  "import runpy, sys; [sys.modules.__setitem__(n, None) for n in sys.argv[1].split(',') if n]; "
  "sys.argv = sys.argv[2:]; "
  "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def run_tlm(*args: str, cwd: str, hide: tuple[str, ...] = (), timeout: float = 300):
  """`python run.py ARGS` in `cwd` (CPU only); returns the CompletedProcess."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  command = [sys.executable, "-c", _LAUNCH, ",".join(hide), RUN_PY, *args]
  return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def one_error(proc, *fragments: str) -> str:
  """Asserts the one-line error rule and that the line holds every fragment; returns it."""
  assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
  assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
  for fragment in fragments:
    assert fragment in lines[0], (fragment, lines[0])
  return lines[0]


def tree(root: str) -> list[str]:
  """Every file and directory under `root`, relative to it, sorted."""
  out = []
  for top, dirs, names in os.walk(root):
    for name in dirs + names:
      out.append(os.path.relpath(os.path.join(top, name), root))
  return sorted(out)


# ---- files -------------------------------------------------------------------------------------


def write_file(path, content: bytes | str) -> None:
  """Writes `content` to `path`, making its directory."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "wb") as f:
    f.write(content.encode() if isinstance(content, str) else content)


def fake_step(root, step: int = 1) -> str:
  """A checkpoint step with orbax's item markers and a data file per item, and its manifest
  (plain files: `checksums.check` needs no orbax)."""
  from tlm import checksums

  step_dir = os.path.join(str(root), "checkpoints", str(step))
  rs = np.random.RandomState(step)
  for item in ("params", "opt_state"):
    write_file(os.path.join(step_dir, item, "_METADATA"), '{"tree": {}}')
    write_file(os.path.join(step_dir, item, "d", "abc"), rs.bytes(1024))
  write_file(os.path.join(step_dir, "data_state", "metadata"), json.dumps({"step": step}))
  checksums.write_manifest(step_dir)
  return step_dir


def varint(n: int) -> bytes:
  """`n` as a protobuf varint."""
  out = bytearray()
  while True:
    out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
    n >>= 7
    if not n:
      return bytes(out)
