"""`--dry_run` of inference: the Predictor's programs compiled on the configured mesh, abstractly.

`eval_dry_run(...)` (`--mode=eval | eval_future | predict | score`, and beside the train step's
`tlm.train.train_dry_run` for `adapt` / `cronquestions`, which train too) lowers and compiles the
decoding (greedy, beam search or sampling) and scoring of one batch that
`tlm.infer.predictor.Predictor` runs: the same programs (`tlm.infer.query_programs`), rows and
length buckets,
with parameters and batch as `jax.ShapeDtypeStruct`s carrying their shardings: parameter bytes
per device are exact; activation memory (`temporaries`) comes from XLA's `memory_analysis()` of
the compiled SPMD program (one device's share). Nothing is allocated and no weights are read
(`saved_model_config` reads a checkpoint's config alone).
"""

import time
from collections.abc import Callable

import jax
import numpy as np
from flax import linen as nn
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tlm import safe_read, storage
from tlm.configs import Config
from tlm.console import log_line
from tlm.errors import CheckpointError, ConfigError
from tlm.infer.query_programs import Decoding, bucket, decode_program, padded_rows, score_program
from tlm.models.formats.hf_config import from_hf_config
from tlm.models.shapes import abstract_params, model_config, param_count
from tlm.models.t5 import T5Config, get_preset
from tlm.sharding import partitioning
from tlm.sharding.cost import compiled_memory, gib

_PARAM_DTYPES = {"float32": np.float32, "bfloat16": jax.numpy.bfloat16}


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
  decoding: Decoding | None = None,
  compile: bool = True,
  log: Callable[[str], None] = log_line,
) -> dict:
  """Lowers (and compiles) the Predictor's decoding and scoring of one batch on `mesh`,
  abstractly: the programs of `tlm.infer.query_programs`, on the rows and length buckets the
  Predictor would run.

  Args:
    t5: the model's architecture.
    mesh: the mesh the predictor would run on.
    fsdp: the FSDP axis rules (`mesh.fsdp`).
    param_dtype: "float32" or "bfloat16" (`eval.param_dtype`).
    batch_size: rows per batch (rounded up to the data axis, as the predictor does).
    input_length: encoder tokens per row (padded to its bucket, as the predictor does).
    target_length: decoded tokens per row, and scored ones (padded to their bucket).
    beam_size: 1 for greedy decoding, else beam search (when `decoding` is not given).
    decoding: the Predictor's decoding settings (sampling included); default greedy or beam
      search of `target_length` tokens.
    compile: compile (activation memory) or only lower (parameter bytes only).
    log: where the summary lines go.

  Returns:
    {"parameters", "devices", "mesh", "fsdp", "param_dtype", "batch_size",
     "parameter_bytes_per_device" (exact), "memory_per_device" ({"decode": ..., "score": ...}
     as in `tlm.train.train_dry_run.dry_run`, None without compiling), "lower_seconds",
     "compile_seconds"}.
  """
  rules = partitioning.axis_rules(fsdp)
  rows = padded_rows(batch_size, mesh)
  d = decoding or Decoding(max_decode_length=target_length, beam_size=beam_size)
  input_length, target_length = bucket(input_length), bucket(target_length)
  batch = NamedSharding(mesh, partitioning.BATCH_SPEC)
  t0 = time.perf_counter()
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    params = abstract_params(t5, mesh, rules, _PARAM_DTYPES[param_dtype])
    inputs = jax.ShapeDtypeStruct((rows, input_length), np.int32, sharding=batch)
    targets = jax.ShapeDtypeStruct((rows, target_length), np.int32, sharding=batch)
    decode_args = (params, inputs)
    if d.sampled:  # each row's sampling key comes from its example id
      ids = NamedSharding(mesh, PartitionSpec(partitioning.DATA_AXIS))
      decode_args += (jax.ShapeDtypeStruct((rows,), np.int32, sharding=ids),)
    lowered = {
      "decode": jax.jit(decode_program(t5, d)).lower(*decode_args),
      "score": jax.jit(score_program(t5)).lower(params, inputs, targets),
    }
  t1 = time.perf_counter()
  mem = None
  if compile:
    mem = {name: compiled_memory(program.compile()) for name, program in lowered.items()}
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
  log(f"per device: parameters {gib(report['parameter_bytes_per_device'])}")
  if mem is None:
    log(f"traced and lowered in {t1 - t0:.1f}s; not compiled, so no activation figures")
  for name, m in (mem or {}).items():
    log(
      f"{name}: {gib(m['peak_estimate'])} peak estimate per device (activations "
      f"{gib(m['temporaries'])}, arguments {gib(m['arguments'])}, outputs "
      f"{gib(m['outputs'])})"
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
    hf = safe_read.read_json_object(  # bounded size and depth
      config_path, guards.MAX_JSON_BYTES, error=CheckpointError, what="the model config"
    )
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
