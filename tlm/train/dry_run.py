"""`--mode=train --dry_run`: compile the real train step on the configured mesh, allocate nothing.

So that a user can size `large_temporal` or `xxl_temporal` (parameters, memory per device,
FLOPs per step; `train.microbatches`, `model.remat`, `mesh.model`) before reserving a pod slice:
the state and the batch are `jax.ShapeDtypeStruct`s carrying their shardings, the step is the
one `tlm.train.loop` runs, lowered and compiled ahead of time by XLA for the devices present,
and the figures come from XLA's own `memory_analysis()` and `cost_analysis()` of the compiled
SPMD program (one device's share).

Before reserving hardware, simulate its device count on a CPU host:
  XLA_FLAGS=--xla_force_host_platform_device_count=32 python run.py --mode=train \
    --config=large_temporal --dry_run --set=mesh.data=32
The parameter count and FLOPs are exact; the memory figures then come from XLA's CPU buffer
assignment, which schedules differently from TPU/GPU compilers (treat them as approximate).
XLA's CPU compiler takes about 10 minutes for `large` on 2 cores (1 for `small`).
"""

import time
from collections.abc import Callable

import jax
from flax import linen as nn

from tlm.configs import Config
from tlm.models.t5 import Transformer, get_preset
from tlm.train import partitioning
from tlm.train.loop import configured_train_step, log_line, lower_train_step
from tlm.train.optim import make_optimizer
from tlm.train.state import model_config, param_count, state_layout


def _gib(n: float) -> str:
  return f"{n / 2**30:.2f} GiB"


def dry_run(config: Config, log: Callable[[str], None] = log_line, compile: bool = True) -> dict:
  """Lowers and compiles the train step of `config` on the current devices, abstractly.

  The vocabulary size is the preset's (the real run uses its SentencePiece model's, rounded
  up to a multiple of 128 for the tiny presets), so no data or checkpoint is read.

  Args:
    config: the experiment config (its mesh, batch, lengths, microbatches, model).
    log: where the summary lines go.
    compile: run XLA's compiler (memory and optimised FLOPs); False stops after lowering
      and reports XLA's cost analysis of the unoptimised program and no memory (XLA's CPU
      compiler needs ~10 minutes for `large` on 2 cores; accelerators are far faster).

  Returns:
    {"config", "parameters", "devices", "mesh", "batch_size", "microbatches",
     "tokens_per_step", "flops_per_step" (all devices), "flops_per_device",
     "memory_per_device" (bytes: arguments, outputs, temporaries, aliased, peak estimate;
     None without compiling), "lower_seconds", "compile_seconds"}.
  """
  tc = config.train
  mesh = partitioning.make_mesh(config.mesh.data, config.mesh.model)
  partitioning.check_batch(mesh, tc.batch_size, tc.microbatches)
  t5 = model_config(config.model, get_preset(config.model.preset).vocab_size)
  model = Transformer(t5)
  optimizer = make_optimizer(tc.schedule, tc.learning_rate, tc.warmup_steps)
  t0 = time.perf_counter()
  with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.AXIS_RULES):
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
    cost = compiled.cost_analysis()
    memory = compiled.memory_analysis()
    mem = {
      "arguments": int(memory.argument_size_in_bytes),
      "outputs": int(memory.output_size_in_bytes),
      "temporaries": int(memory.temp_size_in_bytes),
      "aliased": int(memory.alias_size_in_bytes),
    }
    # The donated state is aliased to the output: count it once.
    mem["peak_estimate"] = mem["arguments"] + mem["outputs"] + mem["temporaries"] - mem["aliased"]
    flops_per_device = _flops(cost)
  else:
    # Before SPMD partitioning the program is the whole (global) step.
    flops_per_device = _flops(lowered.cost_analysis()) / devices
  seconds = time.perf_counter() - t1
  report = {
    "config": config.name,
    "parameters": param_count(layout.abstract.params),
    "devices": int(devices),
    "mesh": {k: int(v) for k, v in mesh.shape.items()},
    "batch_size": tc.batch_size,
    "microbatches": tc.microbatches,
    "tokens_per_step": tc.batch_size * (config.data.input_length + config.data.target_length),
    "flops_per_device": flops_per_device,
    "flops_per_step": flops_per_device * devices,
    "memory_per_device": mem,
    "lower_seconds": t1 - t0,
    "compile_seconds": seconds if compile else None,
  }
  log(
    f"{config.name}: {report['parameters']:,} parameters ({t5.dtype} activations, remat "
    f"{t5.remat}) on {devices} x {jax.devices()[0].platform} devices, mesh {report['mesh']}"
  )
  log(
    f"step: batch {tc.batch_size} x ({config.data.input_length} + {config.data.target_length}) "
    f"tokens in {tc.microbatches} microbatch(es); {report['flops_per_step']:.3e} FLOPs per step "
    f"({flops_per_device:.3e} per device)"
  )
  if mem is None:
    log(f"traced and lowered in {t1 - t0:.1f}s; not compiled, so no memory figures")
  else:
    log(
      f"memory per device: {_gib(mem['peak_estimate'])} peak estimate (arguments "
      f"{_gib(mem['arguments'])}, temporaries {_gib(mem['temporaries'])}, outputs "
      f"{_gib(mem['outputs'])}, aliased {_gib(mem['aliased'])}); traced and lowered in "
      f"{t1 - t0:.1f}s, compiled in {seconds:.1f}s"
    )
  return report


def _flops(cost) -> float:
  if isinstance(cost, list):  # older jax returned one dict per computation
    cost = cost[0]
  return float((cost or {}).get("flops", 0.0))
