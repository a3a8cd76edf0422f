"""Helpers the test modules share: one module, so that no test module imports another.

- paths: `ROOT`, `FIXTURES` (tests/fixtures/train), `DATA` and `FIXTURE_DATA_SETS` (the `--set`
  overrides that point a tiny config at the committed fixture data in tiny_data/, written by
  make_tiny_data.py; the subprocess fixture scripts use them too); `NEWS_YEARS` of the
  evaluation fixtures (conftest.py);
- models: `random_params` (T5X-scaled, EOS reachable) and `inputs`, with `VOCAB`, `BATCH`,
  `INPUT_LEN`, `MAX_DECODE` (the decoding, parity and mesh tests share these configs and shapes,
  so the compiled programs are shared);
- checkpoints: `normal_params` (unscaled), `assert_same_params`, and the public formats' names
  written out by hand (`hf_names_by_hand`, `flax_names_by_hand`, `ATTENTION_NAMES`,
  `mlp_names`), `write_hf_dir` (an HF model directory);
- the synthetic world: `read_facts` (an independent reader of facts.tsv), `primaries`,
  `group`, `TEMPLAMA` (its relations), `WINDOW` (its change window);
- training: `tiny_config` (tiny_temporal on the fixture data), `SamplerFace` (a sampler seen
  through its public methods alone);
- the example store's builds: `STORE_FIXTURES` with `NEWS_SAMPLE` and `ENTITIES_SAMPLE` (every
  40th article of the world's news, its entities) and `SPIECE_MODEL` (the fixture vocabulary);
  `file_hashes` (every file under a directory with its SHA-256), `fail_on_call` (a function
  that raises `Crash`, a lost worker, on one call), `beam_or_skip` and `BEAM_MULTI_PROCESS`
  (Beam's runner in multi-process mode, every bundle run twice), `gcs_or_skip` (gcsfs and the
  GCS emulator);
- processes: `subprocess_env` and `run_fixture` (a child python on simulated CPU devices),
  `free_port`, `train_command` / `tiny_train_argv`, `run_child`, `full_disk_training`, and
  `run_tlm` / `one_error` / `tree`: `run.py` as a user runs it, and the one-line error rule
  (`hide` makes packages look uninstalled in the child, `sys.modules[name] = None`, so that
  "gcsfs is missing" is tested whether or not the machine has it);
- files: `write_file`, `fake_step` (a checkpoint step with its manifest), `varint`.

tlm and jax are imported inside the functions: the subprocess fixture scripts import this
module after setting `XLA_FLAGS`.
"""

import datetime
import hashlib
import json
import os
import re
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
NEWS_YEARS = (2012, 2013, 2019)  # the news of the evaluation fixtures (conftest.py's `data`)

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


# ---- checkpoints: the public name maps written out by hand -------------------------------------

ATTENTION_NAMES = {"query": "q", "key": "k", "value": "v", "out": "o"}  # tlm -> HF and Mesh-TF


def normal_params(cfg, seed=0):
  """Params of `cfg` drawn from a standard normal (unscaled: for the name maps and loaders,
  where only equality counts)."""
  from tlm.models import checkpoints

  rs = np.random.RandomState(seed)
  shapes = checkpoints.param_shapes(cfg)
  return checkpoints.unflatten({k: rs.randn(*s).astype(np.float32) for k, s in shapes.items()})


def assert_same_params(a, b):
  """Asserts that two param trees hold the same names and equal arrays."""
  from tlm.models import checkpoints

  a, b = dict(checkpoints.flatten(a)), dict(checkpoints.flatten(b))
  assert sorted(a) == sorted(b)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def mlp_names(cfg):
  """The MLP's kernels: gated (T5 1.1) or not."""
  return ["wi", "wo"] if len(cfg.mlp_activations) == 1 else ["wi_0", "wi_1", "wo"]


def hf_names_by_hand(params, cfg):
  """HF PyTorch tensors of tlm params, spelled out independently of param_map.PARAM_MAP."""
  out = {"shared.weight": params["token_embedder"]["embedding"]}
  for stack, norm_names in (
    ("encoder", ["pre_attention_layer_norm", "pre_mlp_layer_norm"]),
    (
      "decoder",
      ["pre_self_attention_layer_norm", "pre_cross_attention_layer_norm", "pre_mlp_layer_norm"],
    ),
  ):
    p = params[stack]
    rel = f"{stack}.block.{{}}.layer.0.SelfAttention.relative_attention_bias.weight"
    if "relpos_bias" in p:  # T5: in block 0, shared by the stack
      out[rel.format(0)] = p["relpos_bias"]["rel_embedding"].T
    out[f"{stack}.final_layer_norm.weight"] = p[f"{stack}_norm"]["scale"]
    for i in range(2):
      layer = p[f"layers_{i}"]
      if "relpos_bias" in layer:  # HF UMT5: every block's own
        out[rel.format(i)] = layer["relpos_bias"]["rel_embedding"].T
      for j, norm in enumerate(norm_names):
        out[f"{stack}.block.{i}.layer.{j}.layer_norm.weight"] = layer[norm]["scale"]
      attention = ["attention"]
      if stack == "decoder":
        attention = ["self_attention", "encoder_decoder_attention"]
      for j, (a, hf) in enumerate(zip(attention, ["SelfAttention", "EncDecAttention"])):
        for ours, theirs in ATTENTION_NAMES.items():
          out[f"{stack}.block.{i}.layer.{j}.{hf}.{theirs}.weight"] = layer[a][ours]["kernel"].T
      j = len(attention)
      for m in mlp_names(cfg):
        out[f"{stack}.block.{i}.layer.{j}.DenseReluDense.{m}.weight"] = layer["mlp"][m]["kernel"].T
  if not cfg.logits_via_embedding:
    out["lm_head.weight"] = params["decoder"]["logits_dense"]["kernel"].T
  return out


def flax_names_by_hand(hf_tensors):
  """HF Flax (`flax_model.msgpack`) names and layouts of HF PyTorch tensors."""
  flax = {}
  for name, value in hf_tensors.items():
    if name == "shared.weight":
      flax["shared.embedding"] = value
    elif "relative_attention_bias" in name:  # an nn.Embed: [buckets, heads] like PyTorch
      flax[name.replace(".weight", ".embedding")] = value
    elif "layer_norm" in name:
      flax[name] = value
    else:  # nn.Dense kernels are [in, out]
      flax[name.replace(".weight", ".kernel")] = value.T
  return flax


def write_hf_dir(directory, cfg, tensors, filename):
  """An HF model directory: config.json of `cfg` and `tensors` in `filename` (a PyTorch .bin,
  which skips the test without torch, or a Flax .msgpack; any other name: no weights file)."""
  import pytest

  from tlm.models import checkpoints
  from tlm.models.formats.hf_config import to_hf_config

  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(to_hf_config(cfg), f)
  path = os.path.join(directory, filename)
  if filename.endswith(".bin"):
    torch = pytest.importorskip("torch")
    torch.save({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tensors.items()}, path)
  elif filename.endswith(".msgpack"):
    from flax import serialization

    tree = checkpoints.unflatten({k.replace(".", "/"): v for k, v in tensors.items()})
    with open(path, "wb") as f:
      f.write(serialization.msgpack_serialize(tree))


# ---- the synthetic world: an independent reader of facts.tsv -----------------------------------

TEMPLAMA = ("P54", "P39", "P108", "P102", "P286", "P69", "P488", "P6", "P127")  # its relations
WINDOW = (datetime.date(2004, 1, 1), datetime.date(2022, 12, 31))  # where its facts change


def parse_date(value: str, end: bool) -> datetime.date:
  """P580/P582 value -> the first (start) or last (end) day it can denote."""
  assert re.fullmatch(r"\d{4}(\d{2}(\d{2})?)?", value), value
  y = int(value[:4])
  if len(value) == 4:
    return datetime.date(y, 12, 31) if end else datetime.date(y, 1, 1)
  m = int(value[4:6])
  if len(value) == 6:
    if not end:
      return datetime.date(y, m, 1)
    return datetime.date(y + m // 12, m % 12 + 1, 1) - datetime.timedelta(days=1)
  return datetime.date(y, m, int(value[6:]))


def read_facts(path):
  """The facts of a facts.tsv, checked against its documented format, as dicts (rel, s, o,
  start, end, digits: the qualifiers' lengths)."""
  facts = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      cols = line.rstrip("\n").split("\t")
      assert len(cols) >= 3 and all(re.fullmatch(r"[PQ]\d+", c) for c in cols[:3]), line
      quals = {}
      for q in cols[3:]:
        key, value = q.split("=")
        assert key in ("P580", "P582") and key not in quals, line
        quals[key] = value
      start = parse_date(quals["P580"], False) if "P580" in quals else None
      end = parse_date(quals["P582"], True) if "P582" in quals else None
      assert start is None or end is None or start <= end, line
      digits = [len(v) for v in quals.values()]
      facts.append(dict(rel=cols[0], s=cols[1], o=cols[2], start=start, end=end, digits=digits))
  return facts


def primaries(facts):
  """Drops the facts whose span lies inside another fact of the same subject (loans...)."""
  lo = lambda f: f["start"] or datetime.date.min
  hi = lambda f: f["end"] or datetime.date.max
  return [
    f for f in facts if not any(g is not f and lo(g) <= lo(f) and hi(f) <= hi(g) for g in facts)
  ]


def group(facts, rel):
  """The facts of relation `rel`, by subject."""
  out = {}
  for f in facts:
    if f["rel"] == rel:
      out.setdefault(f["s"], []).append(f)
  return out


# ---- training ----------------------------------------------------------------------------------


def tiny_config(*overrides):
  """tiny_temporal on the fixture data, batches of 8, no evaluation, no dropout; `overrides`
  are `--set` strings applied last."""
  from tlm import configs

  return configs.override(
    configs.get("tiny_temporal"),
    [
      *FIXTURE_DATA_SETS,
      "train.batch_size=8",
      "train.eval_every=0",
      "model.dropout_rate=0.0",
      *overrides,
    ],
  )


# What a reader of the sampler (tlm.input.packing.Batcher, tlm.input.block_sampling.BlockSampler)
# may ask of it: tlm/input/sampling.py's public methods.
SAMPLER_METHODS = (
  "flat_ids",
  "flat_of",
  "locate",
  "slots",
  "slot_probs",
  "key",
  "slice_count",
  "slice_sizes",
  "slice_year",
  "is_tokenized",
  "is_remote",
  "read",
  "read_run",
  "check_vocabulary",
)


class SamplerFace:
  """A `MixtureSampler` through `SAMPLER_METHODS` alone: reaching for anything else (its slices,
  a table, a private field) is an AttributeError naming it."""

  def __init__(self, sampler):
    self._sampler = sampler

  def __getattr__(self, name):
    if name not in SAMPLER_METHODS:
      raise AttributeError(f"the sampler's reader reached sampler.{name}")
    return getattr(self._sampler, name)


# ---- the example store's builds ----------------------------------------------------------------

STORE_FIXTURES = os.path.join(ROOT, "tests", "fixtures", "data", "store")
NEWS_SAMPLE = os.path.join(STORE_FIXTURES, "news_sample.jsonl")  # every 40th article of the news
ENTITIES_SAMPLE = os.path.join(STORE_FIXTURES, "entities_sample.tsv")
SPIECE_MODEL = os.path.join(DATA, "spiece.model")


def file_hashes(path: str) -> dict:
  """{relative path: sha256} of every file under `path`."""
  out = {}
  for d, _, files in os.walk(path):
    for name in files:
      with open(os.path.join(d, name), "rb") as f:
        out[os.path.relpath(os.path.join(d, name), path)] = hashlib.sha256(f.read()).hexdigest()
  return out


class Crash(Exception):
  """A worker lost half-way (preempted, out of memory)."""


def fail_on_call(monkeypatch, module, name, call):
  """Makes `module.name` raise Crash on its `call`-th call (1-based) only."""
  real, calls = getattr(module, name), []

  def flaky(*args, **kwargs):
    calls.append(1)
    if len(calls) == call:
      raise Crash(f"{name}: simulated failure")
    return real(*args, **kwargs)

  monkeypatch.setattr(module, name, flaky)
  return calls


def beam_or_skip():
  """Skips the test where apache_beam is missing, unless the environment requires Beam."""
  import pytest

  if os.environ.get("TLM_REQUIRE_BEAM") != "1":  # .ci/run's Beam environment sets it
    pytest.importorskip("apache_beam")


def gcs_or_skip():
  """Skips the calling test module where gcsfs or the GCS emulator is missing, unless the
  environment requires them (.ci/run's GCS step sets TLM_REQUIRE_GCS=1)."""
  import importlib.util

  import pytest

  if os.environ.get("TLM_REQUIRE_GCS") == "1":
    return
  # Looked for, not imported: gcsfs chooses its class when imported, after tlm's settings.
  missing = [p for p in ("gcsfs", "gcp_storage_emulator") if importlib.util.find_spec(p) is None]
  if missing:
    pytest.skip(
      f"gs:// through the real clients needs {', '.join(missing)} (pip install -r "
      "requirements-gcs.txt)",
      allow_module_level=True,
    )


# Beam's DirectRunner in multi-process mode, every bundle run twice. Beam 2.77's DirectRunner
# hands this pipeline to Prism, which takes no --direct_running_mode (its workers are threads of
# the launching process), so the runner behind that mode, the FnApiRunner, is named: two worker
# processes that receive the stages pickled, as a distributed runner's workers do.
BEAM_MULTI_PROCESS = (
  "--runner=FnApiRunner --direct_running_mode=multi_processing --direct_num_workers=2 "
  "--direct_runner_bundle_repeat=1"
)


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
    env.update(compilation_cache(cache_dir))
  return env


def compilation_cache(directory: str) -> dict:
  """The environment of a child's persistent compilation cache: the test run's own (set by
  tests/conftest.py or the caller), so that a program compiled by one test is loaded by the
  next whatever its module; `directory` where there is none. Every program is cached."""
  return {
    "JAX_COMPILATION_CACHE_DIR": os.environ.get("JAX_COMPILATION_CACHE_DIR") or directory,
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
  }


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
  env.update(compilation_cache(cache))
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
