"""`--dry_run`: compile the real programs on the configured mesh, allocate nothing, read no weights.

So that a user can size `large_temporal` or `xxl_temporal` (parameters, memory per device,
FLOPs per step; `train.microbatches`, `model.remat`, `mesh.model`, `mesh.fsdp`) before
reserving a pod slice: `dry_run(config)` (`--mode=train`) sizes the train step `tlm.train.loop`
runs. The inference programs' dry run is `tlm.infer.eval_dry_run`.
Parameters, optimizer state and batch are `jax.ShapeDtypeStruct`s carrying their shardings.
Their bytes per device are exact (summed over each device's shards); activation memory
(`temporaries`) comes from XLA's own `memory_analysis()` of the compiled SPMD program (one
device's share), FLOPs from its `cost_analysis()`.

Before reserving hardware, simulate its device count on a CPU host:
  XLA_FLAGS=--xla_force_host_platform_device_count=32 python run.py --mode=train \
    --config=large_temporal --dry_run --set=mesh.data=32
The parameter count, parameter and optimizer bytes and FLOPs are exact; the activation figures
come from XLA's CPU buffer assignment, which schedules differently from TPU/GPU compilers
(treat them as approximate). XLA's CPU compiler is slow for the larger models (docs/sizing.md
has the measured times).
"""

import time
from collections.abc import Callable

import jax
import numpy as np
from flax import linen as nn

from tlm.configs import Config
from tlm.console import log_line
from tlm.models.shapes import model_config, param_count
from tlm.models.t5 import Transformer, get_preset
from tlm.sharding import partitioning
from tlm.sharding.cost import compiled_flops, compiled_memory, gib
from tlm.train.optim import make_optimizer
from tlm.train.state import state_layout
from tlm.train.step import configured_train_step, lower_train_step

_PARAM_DTYPES = {"float32": np.float32, "bfloat16": jax.numpy.bfloat16}


def dry_run(config: Config, log: Callable[[str], None] = log_line, compile: bool = True) -> dict:
  """Lowers and compiles the train step of `config` on the current devices, abstractly.

  The vocabulary size is the preset's (the real run uses its SentencePiece model's, rounded
  up to a multiple of 128 for the tiny presets), so no data or checkpoint is read.

  Args:
    config: the experiment config (its mesh, batch, lengths, microbatches, model).
    log: where the summary lines go.
    compile: run XLA's compiler (memory and optimised FLOPs); False stops after lowering
      and reports XLA's cost analysis of the unoptimised program and no compiled memory
      (XLA's CPU compiler is slow for `large`: docs/sizing.md; accelerators are far faster).
      Parameter and optimizer bytes are reported either way.

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
    mem = compiled_memory(compiled)
    flops_per_device = compiled_flops(compiled) or 0.0
  else:
    # Before SPMD partitioning the program is the whole (global) step.
    flops_per_device = (compiled_flops(lowered) or 0.0) / devices
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
    f"per device: parameters {gib(report['parameter_bytes_per_device'])} (float32), "
    f"optimizer state {gib(report['optimizer_bytes_per_device'])}"
  )
  if mem is None:
    log(f"traced and lowered in {t1 - t0:.1f}s; not compiled, so no activation figures")
  else:
    log(
      f"memory per device: {gib(mem['peak_estimate'])} peak estimate (arguments "
      f"{gib(mem['arguments'])}, temporaries {gib(mem['temporaries'])}, outputs "
      f"{gib(mem['outputs'])}, aliased {gib(mem['aliased'])}); traced and lowered in "
      f"{t1 - t0:.1f}s, compiled in {seconds:.1f}s"
    )
  return report
