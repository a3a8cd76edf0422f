"""`--dry_run`: compile the real programs on the configured mesh, allocate nothing, read no weights.

So that a user can size `large_temporal` or `xxl_temporal` (parameters, memory per device,
FLOPs per step; `train.microbatches`, `model.remat`, `mesh.model`, `mesh.fsdp`,
`eval.param_dtype`) before reserving a pod slice:
- `dry_run(config)` (`--mode=train`): the train step `tlm.train.loop` runs;
- `eval_dry_run(...)` (`--mode=eval | eval_future | predict | score`, and with the train step
  for `adapt` / `cronquestions`, which train too): greedy (or beam) decoding and scoring of one
  batch, the programs of `tlm.eval.predictor.Predictor`.
Parameters, optimizer state and batch are `jax.ShapeDtypeStruct`s carrying their shardings.
Their bytes per device are exact (summed over each device's shards); activation memory
(`temporaries`) comes from XLA's own `memory_analysis()` of the compiled SPMD program (one
device's share), FLOPs from its `cost_analysis()`.

Before reserving hardware, simulate its device count on a CPU host:
  XLA_FLAGS=--xla_force_host_platform_device_count=32 python run.py --mode=train \
    --config=large_temporal --dry_run --set=mesh.data=32
The parameter count, parameter and optimizer bytes and FLOPs are exact; the activation figures
come from XLA's CPU buffer assignment, which schedules differently from TPU/GPU compilers
(treat them as approximate). XLA's CPU compiler takes about 10 minutes for the `large` train
step on 2 cores (1 for `small`).
"""

import time
from collections.abc import Callable

import jax
import numpy as np
from flax import linen as nn
from jax.sharding import Mesh, NamedSharding

from tlm import storage
from tlm.configs import Config
from tlm.errors import CheckpointError, ConfigError
from tlm.models import decoding
from tlm.models.formats.hf_config import from_hf_config
from tlm.models.t5 import T5Config, Transformer, get_preset
from tlm.train import partitioning
from tlm.train.loop import configured_train_step, log_line, lower_train_step
from tlm.train.optim import make_optimizer
from tlm.train.state import model_config, param_count, state_layout

_PARAM_DTYPES = {"float32": np.float32, "bfloat16": jax.numpy.bfloat16}


def _gib(n: float) -> str:
  return f"{n / 2**30:.2f} GiB"


def _memory(compiled) -> dict:
  """Bytes per device of a compiled program (XLA's memory analysis)."""
  memory = compiled.memory_analysis()
  mem = {
    "arguments": int(memory.argument_size_in_bytes),
    "outputs": int(memory.output_size_in_bytes),
    "temporaries": int(memory.temp_size_in_bytes),
    "aliased": int(memory.alias_size_in_bytes),
  }
  # A donated argument is aliased to an output: count it once.
  mem["peak_estimate"] = mem["arguments"] + mem["outputs"] + mem["temporaries"] - mem["aliased"]
  return mem


def dry_run(config: Config, log: Callable[[str], None] = log_line, compile: bool = True) -> dict:
  """Lowers and compiles the train step of `config` on the current devices, abstractly.

  The vocabulary size is the preset's (the real run uses its SentencePiece model's, rounded
  up to a multiple of 128 for the tiny presets), so no data or checkpoint is read.

  Args:
    config: the experiment config (its mesh, batch, lengths, microbatches, model).
    log: where the summary lines go.
    compile: run XLA's compiler (memory and optimised FLOPs); False stops after lowering
      and reports XLA's cost analysis of the unoptimised program and no compiled memory
      (XLA's CPU compiler needs ~10 minutes for `large` on 2 cores; accelerators are far
      faster). Parameter and optimizer bytes are reported either way.

  Returns:
    {"config", "parameters", "devices", "mesh", "fsdp", "batch_size", "microbatches",
     "tokens_per_step", "flops_per_step" (all devices), "flops_per_device",
     "parameter_bytes_per_device", "optimizer_bytes_per_device" (exact, from the shardings),
     "memory_per_device" (bytes: arguments, outputs, temporaries (the activations), aliased,
     peak estimate; None without compiling), "lower_seconds", "compile_seconds"}.
  """
  tc = config.train
  mesh = partitioning.make_mesh(config.mesh.data, config.mesh.model)
  partitioning.check_batch(mesh, tc.batch_size, tc.microbatches)
  t5 = model_config(config.model, get_preset(config.model.preset).vocab_size)
  model = Transformer(t5)
  optimizer = make_optimizer(tc.schedule, tc.learning_rate, tc.warmup_steps)
  t0 = time.perf_counter()
  with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.axis_rules(config.mesh.fsdp)):
    layout = state_layout(model, optimizer, mesh)
    batch = partitioning.abstract_batch(
      mesh, tc.batch_size, config.data.input_length, config.data.target_length
    )
    step_fn = configured_train_step(model, optimizer, tc)
    lowered = lower_train_step(step_fn, layout, batch, mesh)
  t1 = time.perf_counter()
  devices = mesh.devices.size
  mem = None
  if compile:
    compiled = lowered.compile()
    mem = _memory(compiled)
    flops_per_device = _flops(compiled.cost_analysis())
  else:
    # Before SPMD partitioning the program is the whole (global) step.
    flops_per_device = _flops(lowered.cost_analysis()) / devices
  seconds = time.perf_counter() - t1
  report = {
    "config": config.name,
    "parameters": param_count(layout.abstract.params),
    "devices": int(devices),
    "mesh": {k: int(v) for k, v in mesh.shape.items()},
    "fsdp": config.mesh.fsdp,
    "batch_size": tc.batch_size,
    "microbatches": tc.microbatches,
    "tokens_per_step": tc.batch_size * (config.data.input_length + config.data.target_length),
    "flops_per_device": flops_per_device,
    "flops_per_step": flops_per_device * devices,
    "parameter_bytes_per_device": partitioning.bytes_per_device(layout.abstract.params),
    "optimizer_bytes_per_device": partitioning.bytes_per_device(layout.abstract.opt_state),
    "memory_per_device": mem,
    "lower_seconds": t1 - t0,
    "compile_seconds": seconds if compile else None,
  }
  log(
    f"{config.name}: {report['parameters']:,} parameters ({t5.dtype} activations, remat "
    f"{t5.remat}) on {devices} x {jax.devices()[0].platform} devices, mesh {report['mesh']}"
    f"{', FSDP' if config.mesh.fsdp else ''}"
  )
  log(
    f"step: batch {tc.batch_size} x ({config.data.input_length} + {config.data.target_length}) "
    f"tokens in {tc.microbatches} microbatch(es); {report['flops_per_step']:.3e} FLOPs per step "
    f"({flops_per_device:.3e} per device)"
  )
  log(
    f"per device: parameters {_gib(report['parameter_bytes_per_device'])} (float32), "
    f"optimizer state {_gib(report['optimizer_bytes_per_device'])}"
  )
  if mem is None:
    log(f"traced and lowered in {t1 - t0:.1f}s; not compiled, so no activation figures")
  else:
    log(
      f"memory per device: {_gib(mem['peak_estimate'])} peak estimate (arguments "
      f"{_gib(mem['arguments'])}, temporaries {_gib(mem['temporaries'])}, outputs "
      f"{_gib(mem['outputs'])}, aliased {_gib(mem['aliased'])}); traced and lowered in "
      f"{t1 - t0:.1f}s, compiled in {seconds:.1f}s"
    )
  return report


def eval_dry_run(
  t5: T5Config,
  mesh: Mesh,
  *,
  fsdp: bool = False,
  param_dtype: str = "float32",
  batch_size: int = 64,
  input_length: int = 128,
  target_length: int = 32,
  beam_size: int = 1,
  compile: bool = True,
  log: Callable[[str], None] = log_line,
) -> dict:
  """Lowers (and compiles) decoding and scoring of one batch on `mesh`, abstractly.

  Args:
    t5: the model's architecture.
    mesh: the mesh the predictor would run on.
    fsdp: the FSDP axis rules (`mesh.fsdp`).
    param_dtype: "float32" or "bfloat16" (`eval.param_dtype`).
    batch_size: rows per batch (rounded up to the data axis, as the predictor does).
    input_length: encoder tokens per row.
    target_length: decoded / scored tokens per row.
    beam_size: 1 for greedy decoding, else beam search.
    compile: compile (activation memory) or only lower (parameter bytes only).
    log: where the summary lines go.

  Returns:
    {"parameters", "devices", "mesh", "fsdp", "param_dtype", "batch_size",
     "parameter_bytes_per_device" (exact), "memory_per_device" ({"decode": ..., "score": ...}
     as in `dry_run`, None without compiling), "lower_seconds", "compile_seconds"}.
  """
  rules = partitioning.axis_rules(fsdp)
  data = mesh.shape[partitioning.DATA_AXIS]
  rows = -(-batch_size // data) * data
  batch = NamedSharding(mesh, partitioning.BATCH_SPEC)
  t0 = time.perf_counter()
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    params = partitioning.abstract_params(t5, mesh, rules, _PARAM_DTYPES[param_dtype])
    inputs = jax.ShapeDtypeStruct((rows, input_length), np.int32, sharding=batch)
    targets = jax.ShapeDtypeStruct((rows, target_length), np.int32, sharding=batch)
    if beam_size == 1:
      decode = jax.jit(lambda p, x: decoding.greedy_decode(t5, p, x, target_length))
    else:
      decode = jax.jit(
        lambda p, x: decoding.beam_search(t5, p, x, target_length, beam_size=beam_size)
      )
    score = jax.jit(lambda p, x, y: decoding.score(t5, p, x, y)[0])
    lowered = {
      "decode": decode.lower(params, inputs),
      "score": score.lower(params, inputs, targets),
    }
  t1 = time.perf_counter()
  mem = {name: _memory(program.compile()) for name, program in lowered.items()} if compile else None
  t2 = time.perf_counter()
  report = {
    "parameters": param_count(params),
    "devices": int(mesh.devices.size),
    "mesh": {k: int(v) for k, v in mesh.shape.items()},
    "fsdp": fsdp,
    "param_dtype": param_dtype,
    "batch_size": rows,
    "parameter_bytes_per_device": partitioning.bytes_per_device(params),
    "memory_per_device": mem,
    "lower_seconds": t1 - t0,
    "compile_seconds": t2 - t1 if compile else None,
  }
  log(
    f"inference: {report['parameters']:,} parameters ({param_dtype}) on {mesh.devices.size} x "
    f"{jax.devices()[0].platform} devices, mesh {report['mesh']}{', FSDP' if fsdp else ''}; "
    f"batch {rows} x {input_length} input tokens, {target_length} target tokens"
  )
  log(f"per device: parameters {_gib(report['parameter_bytes_per_device'])}")
  if mem is None:
    log(f"traced and lowered in {t1 - t0:.1f}s; not compiled, so no activation figures")
  for name, m in (mem or {}).items():
    log(
      f"{name}: {_gib(m['peak_estimate'])} peak estimate per device (activations "
      f"{_gib(m['temporaries'])}, arguments {_gib(m['arguments'])}, outputs "
      f"{_gib(m['outputs'])})"
    )
  return report


def config_eval_dry_run(config: Config, compile: bool = True, log=log_line) -> dict:
  """`eval_dry_run` with an experiment config's model, mesh and eval settings."""
  t5 = model_config(config.model, get_preset(config.model.preset).vocab_size)
  ec = config.eval
  return eval_dry_run(
    t5,
    partitioning.make_mesh(config.mesh.data, config.mesh.model),
    fsdp=config.mesh.fsdp,
    param_dtype=ec.param_dtype,
    batch_size=ec.batch_size,
    input_length=config.data.input_length,
    target_length=ec.max_decode_length,
    beam_size=ec.beam_size,
    compile=compile,
    log=log,
  )


def saved_model_config(path: str) -> T5Config:
  """The architecture of a tlm or HF checkpoint, read from its config alone (no weights).

  Raises:
    CheckpointError: for other layouts (a Mesh-TF checkpoint: convert it first).
  """
  from tlm.models.checkpoints import read_model_config
  from tlm.models.formats import guards

  def hf_config(config_path: str) -> T5Config:
    hf = guards.load_json(config_path)  # bounded size and depth
    if not isinstance(hf, dict):
      raise CheckpointError(f"{config_path}: cannot read the model config (not a JSON object)")
    try:
      return from_hf_config(hf)  # dimensions checked
    except ConfigError as e:
      raise CheckpointError(f"{config_path}: cannot read the model config ({e})") from None

  path = storage.abspath(path)
  candidates = [(storage.join(path, "model_config.json"), read_model_config)]
  if storage.dirname(path).endswith("/checkpoints"):  # WORKDIR/checkpoints/STEP
    workdir = storage.dirname(storage.dirname(path))
    candidates.append((storage.join(workdir, "model_config.json"), read_model_config))
  candidates.append((storage.join(path, "config.json"), hf_config))
  for config_path, read in candidates:
    if storage.isfile(config_path):
      return read(config_path)
  raise CheckpointError(
    f"{path}: --dry_run reads the model config of a tlm or HF checkpoint (model_config.json "
    "or config.json); convert other checkpoints first (--mode=convert)"
  )


def _flops(cost) -> float:
  if isinstance(cost, list):  # older jax returned one dict per computation
    cost = cost[0]
  return float((cost or {}).get("flops", 0.0))
