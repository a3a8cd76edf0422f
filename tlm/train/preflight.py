"""Preflight of a training run: what is known to fail is checked before the data is built and
the step compiled, so that a run that cannot work costs seconds, not a world build and a compile.

The config's own limits (lengths, steps, seeds, tokens per step) are `tlm.configs.validate`'s,
checked when the config is made; this module adds what needs the workdir and the devices:

- `check_run` / `check_runs`: what a run needs before anything is built, each checked once:
  the keys the config requires (`tlm.configs.check_required`) and the layout of every workdir
  it trains in (`check_workdir`). `--mode=train` calls `check_runs` before jax starts;
  `tlm.train.loop.train` and `tlm.train.loop.run` call them for their other callers.
- `check_workdir`: the workdir's layout (`tlm.files.check_layout`): the workdir and its
  subdirectories (checkpoints/, tensorboard/, and as configured best/ and profile/) are
  writable directories, and the files it writes there (config.json, model_config.json,
  spiece.model, metrics.jsonl) are absent or regular files.
- `check_memory`: a floor of the bytes a train step holds on one device, against the device's
  memory, and of the host's batch against the host's memory. The floor counts only what must
  be resident whatever XLA schedules: the step's batch and the held-out batches (which stay on
  the devices), one layer's float32 attention logits of one microbatch (XLA materialises them;
  no sequence parallelism here), and the parameters with their gradients; each split over
  every device it can be split over. A run above it cannot fit; a run below it may still not
  (activations, optimizer state, XLA's buffers): `--dry_run` measures the compiled step.
- `check_eval_batch`: an evaluation batch, padded to `eval.batch_size` rows, against the
  host's memory (the evaluation modes check it before they start).
"""

import os

from tlm import configs, files
from tlm.configs import Config
from tlm.errors import ConfigError

# The files a Trainer writes into its workdir (tlm.train.loop), and its subdirectories: those
# of `checkpointing.checkpoints_dir`, `tensorboard_writer.tensorboard_dir`, `best.best_dir`
# (with train.keep_best) and `profiling.profile_dir` (with train.profile_steps). Named here,
# not imported, so that `check_workdir` runs before jax is imported.
WORKDIR_FILES = ("config.json", "model_config.json", "spiece.model", "metrics.jsonl")
WORKDIR_DIRS = ("checkpoints", "tensorboard")
# Per row of `tlm.sharding.partitioning.abstract_batch`: 3 int32 arrays of the input length
# (tokens, segment ids, positions), 5 of 4 bytes of the target length (tokens, inputs, segment
# ids, positions, loss weights).
_INPUT_ARRAYS, _TARGET_ARRAYS, _BYTES = 3, 5, 4


def check_workdir(config: Config, workdir: str) -> None:
  """Raises UserError unless the training run can write `workdir` and its layout."""
  dirs = WORKDIR_DIRS + ("best",) * bool(config.train.keep_best)
  dirs += ("profile",) * bool(config.train.profile_steps)
  files.check_layout(workdir, WORKDIR_FILES, dirs)


def check_run(config: Config, workdir: str) -> None:
  """Raises UserError unless the config has every key it requires and the run can write
  `workdir` (one model: a Yearly expert's own workdir)."""
  configs.check_required(config)
  check_workdir(config, workdir)


def check_runs(config: Config, workdir: str) -> list[tuple[Config, str]]:
  """`check_run` of every model `config` trains (`tlm.configs.expert_runs`: one, or each Yearly
  expert in WORKDIR/year=YYYY/), and of WORKDIR itself; returns those (config, workdir) pairs.

  Raises:
    UserError: the first unset required key or unwritable workdir, before anything is built.
  """
  check_run(config, workdir)
  runs = configs.expert_runs(config, workdir)
  for expert_config, expert_workdir in runs:
    if expert_workdir != workdir:  # Yearly: every expert's workdir, at once
      check_workdir(expert_config, expert_workdir)
  return runs


def _size(n: float) -> str:
  for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
    if n >= scale:
      return f"{n / scale:.1f} {unit}"
  return f"{n / 2**10:.1f} KiB"


def _parameters_floor(config: Config) -> int:
  """Parameters of the model's weight matrices (norms and position biases left out), with the
  smallest embedding table the preset can have (the vocabulary is known only after the data)."""
  from tlm.models.shapes import model_config

  t5 = model_config(config.model, 1)
  e, inner, mlp = t5.emb_dim, t5.num_heads * t5.head_dim, t5.mlp_dim
  ffn = (len(t5.mlp_activations) + 1) * e * mlp
  encoder = t5.num_encoder_layers * (4 * e * inner + ffn)
  decoder = t5.num_decoder_layers * (8 * e * inner + ffn)
  tables = t5.vocab_size * e * (1 if t5.logits_via_embedding else 2)
  return encoder + decoder + tables


def memory_floor(config: Config, data_devices: int, devices: int) -> dict[str, int]:
  """Bytes one device holds at least during a train step (see the module docstring).

  Args:
    config: the experiment config.
    data_devices: the mesh's data-axis size (the batch is split over it).
    devices: all devices of the mesh.

  Returns:
    {"batches", "attention", "parameters", "total"} in bytes per device.
  """
  from tlm.models.shapes import model_config

  tc, dc = config.train, config.data
  t5 = model_config(config.model, 1)
  row = _BYTES * (_INPUT_ARRAYS * dc.input_length + _TARGET_ARRAYS * dc.target_length)
  held = 1 + (tc.eval_batches if tc.eval_every > 0 else 0)
  batches = held * -(-tc.batch_size // data_devices) * row
  longest = max(dc.input_length, dc.target_length)
  rows = tc.batch_size // tc.microbatches
  attention = 4 * rows * t5.num_heads * longest * longest // devices
  parameters = 2 * 4 * _parameters_floor(config) // devices  # float32, and the gradients
  out = {"batches": batches, "attention": attention, "parameters": parameters}
  out["total"] = sum(out.values())
  return out


def host_memory() -> int:
  """Bytes of the host's physical memory."""
  return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def device_memory(device, local_devices: int) -> tuple[int, str]:
  """Bytes one device can hold and what that figure is: the runtime's limit on an
  accelerator; on CPU the host's memory shared by its `local_devices`."""
  stats = device.memory_stats()
  if stats and stats.get("bytes_limit"):
    return int(stats["bytes_limit"]), f"each {device.device_kind} device"
  return host_memory() // local_devices, f"each of {local_devices} CPU device(s) of this host"


# The model keys that size the parameters and the attention logits (0 keeps the preset's).
_MODEL_SIZES = ("num_layers", "emb_dim", "num_heads", "head_dim", "mlp_dim")


def _model_keys(config: Config) -> str:
  """The preset and the sizes the config sets, as `key=value`s: with the batch's keys, what a
  memory floor depends on (a huge model.num_layers is named, not only the batch)."""
  mc = config.model
  sizes = [f"model.{k}={getattr(mc, k)}" for k in _MODEL_SIZES if getattr(mc, k)]
  return ", ".join([f"model.preset={mc.preset}", *sizes])


def check_memory(config: Config, mesh, host_rows: int) -> None:
  """Raises ConfigError if a train step cannot fit the devices' (or the host's) memory.

  Args:
    config: the experiment config.
    mesh: the training mesh.
    host_rows: rows of the global batch this process assembles.
  """
  import jax

  if config.train.eval_every > 0 and config.train.eval_examples > 0:
    check_eval_batch(config)
  floor = memory_floor(config, mesh.shape["data"], mesh.devices.size)
  have, which = device_memory(jax.local_devices()[0], jax.local_device_count())
  tc, dc = config.train, config.data
  shape = (
    f"train.batch_size={tc.batch_size} (train.microbatches={tc.microbatches}), "
    f"data.input_length={dc.input_length}, data.target_length={dc.target_length}"
  )
  fix = "lower them, raise train.microbatches or add devices; --dry_run measures the step"
  if floor["total"] > have:
    parts = ", ".join(f"{_size(floor[k])} of {k}" for k in ("batches", "attention", "parameters"))
    raise ConfigError(
      f"{shape}, {_model_keys(config)}: a train step needs at least {_size(floor['total'])} "
      f"per device ({parts}), more than the {_size(have)} of {which}; {fix}"
    )
  row = _BYTES * (_INPUT_ARRAYS * dc.input_length + _TARGET_ARRAYS * dc.target_length)
  host = host_rows * row
  if host > host_memory():
    raise ConfigError(
      f"{shape}: this process assembles {_size(host)} of batch per step, more than the "
      f"{_size(host_memory())} of its host; {fix}"
    )


# `tlm.infer.predictor` pads every batch to eval.batch_size rows of at least this many int32
# input tokens (its lengths are powers of two >= 8).
_EVAL_MIN_INPUT = 8


def check_eval_batch(config: Config, origin: str = "") -> None:
  """Raises ConfigError if one padded evaluation batch cannot fit the host's memory.

  Evaluations (eval, eval_future, adapt, cronquestions, and training with
  `train.eval_examples`) pad every batch to `eval.batch_size` rows, however few examples
  there are: each holds at least 8 int32 input tokens on the host.

  Args:
    config: the experiment config.
    origin: the file the value was read from (a workdir's config.json), named first.
  """
  ec = config.eval
  need = ec.batch_size * _EVAL_MIN_INPUT * _BYTES
  if need > host_memory():
    raise ConfigError(
      f"{origin + ': ' if origin else ''}eval.batch_size={ec.batch_size}: every evaluation "
      "batch is padded to that many rows, "
      f"at least {_size(need)} on the host, more than its {_size(host_memory())}"
    )
