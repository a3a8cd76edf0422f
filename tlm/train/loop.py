"""The training loop: loss, the sharded jit step, logging, checkpoints, preemption, Yearly runs.

Mirrors T5X's `trainer.py` / `models.py` and big_vision's `train.py`, cut into sections (mesh,
data, state/restore, compile, loop):

- Loss (T5X `losses.compute_weighted_cross_entropy`): token cross-entropy weighted by
  `decoder_loss_weights`, plus T5X's auxiliary z-loss `z_loss * log(Z)^2` (1e-4), summed over
  tokens and divided by `train.loss_normalizing_factor`: T5X's "NUM_REAL_TARGET_TOKENS" (0, the
  global batch's real target tokens) or a constant (233472 = 2048 * 114, T5X's advice when
  finetuning checkpoints pre-trained in Mesh TensorFlow, as the paper's are). Adafactor is
  nearly invariant to this scale; the logged `loss` is always per real target token.
- Microbatching: the global batch is split into `train.microbatches` interleaved parts (rows m,
  m + M, ..., so every device keeps its own rows) whose summed gradients are accumulated in a
  `lax.scan` before one normalisation and one update: batch 2048 fits any memory, and the
  result does not depend on M beyond float rounding (and the dropout masks).
- Dropout keys: `fold_in(key(train.seed), step)` (and the microbatch index), so a resumed run
  draws the same masks as an uninterrupted one.
- One jit-compiled step (ahead of time, on the mesh) with input/output shardings and the state
  donated; a non-finite loss stops the run (UserError, non-zero exit) before anything is saved
  after it, so the last checkpoint is the last good one; SIGTERM saves the current step.
- Only process 0 prints (step, loss, tokens/s, ETA) and writes WORKDIR files; all processes
  take part in checkpointing.
"""

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from jax.sharding import NamedSharding, PartitionSpec

from tlm import configs
from tlm.configs import Config
from tlm.errors import ConfigError, UserError
from tlm.files import atomic_output_file, read_jsonl, write_json, write_jsonl
from tlm.models.t5 import Transformer
from tlm.train import partitioning
from tlm.train.checkpointing import CheckpointManager, load_init_params
from tlm.train.optim import Adafactor, make_optimizer
from tlm.train.state import (
  TrainState,
  init_state,
  model_config,
  param_count,
  state_from_params,
  state_layout,
)

_SUMS = ("loss", "z_loss", "weight", "correct")


class NonFiniteLossError(UserError):
  """The loss became NaN or infinite."""


class Preempted(UserError):
  """The run received SIGTERM and saved a checkpoint at the current step."""


def log_line(text: str) -> None:
  """Prints a progress line at once, also when stdout is a pipe or a file (cluster logs)."""
  print(text, flush=True)


def loss_sums(logits: jax.Array, targets: jax.Array, weights: jax.Array, z_loss: float) -> dict:
  """Weighted sums of T5X's loss terms over all tokens.

  Args:
    logits: `[batch, length, vocab]` float32.
    targets: `[batch, length]` token ids.
    weights: `[batch, length]` loss weights (0 on padding).
    z_loss: coefficient of log(Z)^2.

  Returns:
    {"loss": sum(w * (xent + z)), "z_loss": sum(w * z), "weight": sum(w),
     "correct": sum(w * [argmax == target])}.
  """
  logits = logits.astype(jnp.float32)
  log_z = jax.nn.logsumexp(logits, axis=-1)
  target_logit = jnp.take_along_axis(logits, targets[..., None].astype(jnp.int32), -1)[..., 0]
  z_term = z_loss * jnp.square(log_z)
  weights = weights.astype(jnp.float32)
  correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
  return {
    "loss": jnp.sum((log_z - target_logit + z_term) * weights),
    "z_loss": jnp.sum(z_term * weights),
    "weight": jnp.sum(weights),
    "correct": jnp.sum(correct * weights),
  }


def _logits(model: Transformer, params, batch, enable_dropout: bool, rng=None):
  return model.apply(
    {"params": params},
    batch["encoder_input_tokens"],
    batch["decoder_input_tokens"],
    batch["encoder_segment_ids"],
    batch["decoder_segment_ids"],
    batch["encoder_positions"],
    batch["decoder_positions"],
    enable_dropout=enable_dropout,
    rngs={"dropout": rng} if enable_dropout else None,
  )


def make_train_step(
  model: Transformer,
  optimizer: Adafactor,
  *,
  microbatches: int = 1,
  z_loss: float = 1e-4,
  loss_normalizing_factor: float = 0.0,
  seed: int = 0,
) -> Callable[[TrainState, dict], tuple[TrainState, dict]]:
  """The (unjitted) train step: (state, global batch) -> (new state, metric sums)."""
  dropout = model.config.dropout_rate > 0

  def loss_fn(params, batch, rng):
    sums = loss_sums(
      _logits(model, params, batch, dropout, rng),
      batch["decoder_target_tokens"],
      batch["decoder_loss_weights"],
      z_loss,
    )
    return sums["loss"], sums

  grad_fn = jax.grad(loss_fn, has_aux=True)

  def step(state: TrainState, batch: dict) -> tuple[TrainState, dict]:
    rng = jax.random.fold_in(jax.random.key(seed), state.step)
    if microbatches == 1:
      grads, sums = grad_fn(state.params, batch, rng)
    else:

      def split(x):
        # [B, L] -> [M, B / M, L] with microbatch m = rows m, m + M, ...: each device's rows
        # stay on it ("batch", i.e. the data axis, shards the second dim).
        x = x.reshape((x.shape[0] // microbatches, microbatches) + x.shape[1:]).swapaxes(0, 1)
        return nn.with_logical_constraint(x, (None, "batch") + (None,) * (x.ndim - 2))

      def body(acc, xs):
        index, micro = xs
        g, s = grad_fn(state.params, micro, jax.random.fold_in(rng, index))
        return jax.tree.map(jnp.add, acc, (g, s)), None

      zeros = (
        jax.tree.map(jnp.zeros_like, state.params),
        {k: jnp.zeros((), jnp.float32) for k in _SUMS},
      )
      parts = (jnp.arange(microbatches), jax.tree.map(split, batch))
      (grads, sums), _ = jax.lax.scan(body, zeros, parts)
    if loss_normalizing_factor > 0:
      denominator = jnp.float32(loss_normalizing_factor)
    else:
      denominator = jnp.maximum(sums["weight"], 1.0)
    grads = jax.tree.map(lambda g: g / denominator, grads)
    params, opt_state = optimizer.update(grads, state.opt_state, state.params)
    metrics = dict(sums)
    metrics["grad_norm"] = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grads)))
    metrics["learning_rate"] = optimizer.learning_rate(state.step)
    metrics["tokens"] = jnp.sum(batch["encoder_segment_ids"] > 0) + jnp.sum(
      batch["decoder_segment_ids"] > 0
    )
    return TrainState(state.step + 1, params, opt_state), metrics

  return step


def make_eval_step(model: Transformer, z_loss: float = 1e-4) -> Callable[[Any, dict], dict]:
  """(params, global batch) -> loss sums without dropout."""

  def step(params, batch):
    logits = _logits(model, params, batch, enable_dropout=False)
    return loss_sums(logits, batch["decoder_target_tokens"], batch["decoder_loss_weights"], z_loss)

  return step


def configured_train_step(model: Transformer, optimizer, tc):
  """`make_train_step` with a TrainConfig's settings (the trainer and the dry run share it)."""
  return make_train_step(
    model,
    optimizer,
    microbatches=tc.microbatches,
    z_loss=tc.z_loss,
    loss_normalizing_factor=tc.loss_normalizing_factor,
    seed=tc.seed,
  )


def lower_train_step(step_fn, layout, abstract_batch, mesh):
  """Lowers the step for the mesh: state and batch shardings in and out, the state donated."""
  replicated = NamedSharding(mesh, PartitionSpec())
  batch_sharding = NamedSharding(mesh, partitioning.BATCH_SPEC)
  jitted = jax.jit(
    step_fn,
    in_shardings=(layout.shardings, batch_sharding),
    out_shardings=(layout.shardings, replicated),
    donate_argnums=(0,),
  )
  return jitted.lower(layout.abstract, abstract_batch)


def compile_train_step(step_fn, layout, abstract_batch, mesh):
  """Lowers and compiles the step ahead of time (see `lower_train_step`)."""
  return lower_train_step(step_fn, layout, abstract_batch, mesh).compile()


def _format_seconds(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  h, rest = divmod(seconds, 3600)
  m, s = divmod(rest, 60)
  return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


@dataclasses.dataclass
class _Window:
  """Host-side sums of the metrics since the last log line."""

  sums: dict = dataclasses.field(default_factory=lambda: dict.fromkeys(_SUMS, 0.0))
  tokens: float = 0.0
  steps: int = 0
  grad_norm: float = 0.0
  learning_rate: float = 0.0
  start: float = dataclasses.field(default_factory=time.perf_counter)

  def add(self, m: dict) -> None:
    for k in _SUMS:
      self.sums[k] += float(m[k])
    self.tokens += float(m["tokens"])
    self.grad_norm += float(m["grad_norm"])
    self.learning_rate = float(m["learning_rate"])
    self.steps += 1


class _Preemption:
  """SIGTERM -> save and stop at the next step boundary, agreed by every process."""

  def __init__(self):
    self.requested = False
    self._previous = None
    self._multi = jax.process_count() > 1
    if not self._multi and threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, signum, frame):
    self.requested = True

  def reached(self, step: int) -> bool:
    if self._multi:
      # jax.distributed's preemption service turns a SIGTERM on any host into the same
      # sync point on all of them.
      from jax.experimental import multihost_utils

      return multihost_utils.reached_preemption_sync_point(step)
    return self.requested

  def close(self) -> None:
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)


def _data_state(config: Config, step: int) -> dict:
  return {
    "step": step,
    "batch_size": config.train.batch_size,
    "data": configs.to_dict(config)["data"],
  }


def _check_data_state(saved: dict, config: Config, path: str) -> None:
  current = _data_state(config, int(saved.get("step", -1)))
  diff = [k for k in ("batch_size",) if saved.get(k) != current[k]]
  saved_data = saved.get("data", {})
  # Where the synthetic world is cached does not change it (world_seed / world_scale do).
  diff += [
    f"data.{k}" for k, v in current["data"].items() if k != "cache_dir" and saved_data.get(k) != v
  ]
  if diff:
    raise ConfigError(
      f"{path} was trained with other {', '.join(diff)}; resuming would change the data "
      "stream. Use the original settings or a new workdir"
    )


def _resume_metrics(path: str, step: int) -> list[dict]:
  if not os.path.isfile(path):
    return []
  try:
    return [r for r in read_jsonl(path, required=("step",)) if r["step"] <= step]
  except UserError:
    return []  # a torn file from a crash: it is rewritten from the restored step


class Trainer:
  """One training run in one workdir: `__init__` builds the mesh, data, state (restored,
  imported or random) and the compiled steps; `fit` runs the loop.

  Args:
    config: the resolved experiment config.
    workdir: where config.json, model_config.json, spiece.model, metrics.jsonl and
      checkpoints/ go (shared by all processes).
    data: a batch source with `vocab`, `train_batch(step, start, stop)` and
      `eval_batches(start, stop)` (`tlm.train.data.TrainingData`, built from the config when
      None).
    log: where process 0's progress lines go.

  Raises:
    UserError: bad config, data or checkpoint.
  """

  def __init__(self, config: Config, workdir: str, *, data=None, log: Callable = log_line):
    from tlm.train.data import TrainingData

    configs.check_required(config)
    tc = config.train
    if min(tc.steps, tc.log_every, tc.checkpoint_every) < 1:
      raise ConfigError("train.steps, train.log_every and train.checkpoint_every must be >= 1")
    self.config, self.log = config, log
    self.workdir = os.path.abspath(workdir)
    self.main = jax.process_index() == 0
    self.metrics_path = os.path.join(self.workdir, "metrics.jsonl")
    # --- Mesh and data ---
    self.mesh = partitioning.make_mesh(config.mesh.data, config.mesh.model)
    self.rules = partitioning.axis_rules(config.mesh.fsdp)
    partitioning.check_batch(self.mesh, tc.batch_size, tc.microbatches)
    self.rows = partitioning.process_rows(self.mesh, tc.batch_size)
    self.data = data if data is not None else TrainingData(config)
    # --- Model, optimizer, state ---
    self.model_config = model_config(config.model, self.data.vocab.vocab_size)
    model = Transformer(self.model_config)
    optimizer = make_optimizer(tc.schedule, tc.learning_rate, tc.warmup_steps)
    self.manager = CheckpointManager(self.workdir, keep=tc.keep_checkpoints)
    try:
      with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
        self.layout = state_layout(model, optimizer, self.mesh)
        self.parameters = param_count(self.layout.abstract.params)
        self.state, self.start, origin = self._restore_or_init(model, optimizer)
        # --- Compile (nothing to do for a finished run, e.g. a Yearly expert rerun) ---
        t0 = time.perf_counter()
        self.train_step = self.eval_step = None
        if self.start < tc.steps:
          batch = partitioning.abstract_batch(
            self.mesh, tc.batch_size, config.data.input_length, config.data.target_length
          )
          step_fn = configured_train_step(model, optimizer, tc)
          self.train_step = compile_train_step(step_fn, self.layout, batch, self.mesh)
          if tc.eval_every > 0:
            eval_fn = jax.jit(make_eval_step(model, tc.z_loss))
            self.eval_step = eval_fn.lower(self.layout.abstract.params, batch).compile()
        compile_seconds = time.perf_counter() - t0
    except BaseException:
      self.manager.close()
      raise
    self.history = _resume_metrics(self.metrics_path, self.start) if self.main else []
    if self.main:
      write_json(os.path.join(self.workdir, "config.json"), configs.to_dict(config))
      write_json(os.path.join(self.workdir, "model_config.json"), self.model_config.to_dict())
      with atomic_output_file(os.path.join(self.workdir, "spiece.model"), "wb") as f:
        f.write(self.data.vocab.serialized_model)
      write_jsonl(self.metrics_path, self.history)
      todo = (
        f"compiled in {compile_seconds:.1f}s; training to step {tc.steps}"
        if self.train_step is not None
        else f"already trained to step {tc.steps}"
      )
      log(
        f"{config.name}: {self.parameters:,} parameters, mesh {dict(self.mesh.shape)}, "
        f"{jax.process_count()} process(es), {origin}; {todo}"
      )
      if getattr(self.data, "eval_note", ""):
        log(self.data.eval_note)

  def _restore_or_init(self, model, optimizer):
    latest = self.manager.latest_step()
    abstract = self.layout.abstract
    if latest is not None:
      params, opt_state, saved = self.manager.restore(latest, abstract.params, abstract.opt_state)
      _check_data_state(saved, self.config, f"{self.manager.directory}/{latest}")
      step = jax.device_put(jnp.int32(latest), self.layout.shardings.step)
      return TrainState(step, params, opt_state), latest, f"resumed from step {latest}"
    path = self.config.model.init_checkpoint
    if path:
      params = load_init_params(path, self.model_config, abstract.params)
      return state_from_params(params, optimizer, self.layout), 0, f"initialised from {path}"
    state = init_state(model, optimizer, self.layout, self.config.train.seed)
    return state, 0, "random initialisation"

  def fit(self) -> dict:
    """Trains from the restored step to `train.steps`.

    Returns:
      {"step", "loss" (last logged), "eval_loss" (last, or None), "parameters", "workdir"}.

    Raises:
      NonFiniteLossError: the loss became NaN/inf (nothing saved after the last good step).
      Preempted: SIGTERM; a checkpoint of the current step was saved.
    """
    preemption = _Preemption()
    try:
      return self._loop(preemption)
    finally:
      preemption.close()
      self.manager.close()

  def _global(self, local: dict) -> dict:
    return partitioning.global_batch(self.mesh, local, self.config.train.batch_size)

  def _loop(self, preemption: "_Preemption") -> dict:
    tc = self.config.train
    manager = self.manager
    last_saved = manager.latest_step()
    pending: list[tuple[int, dict]] = []
    window = _Window()
    last = {"loss": None, "eval_loss": None}
    eval_batches = None

    def consume(item):
      step, metrics = item
      m = jax.device_get(metrics)
      if not np.isfinite(m["loss"]):
        where = f"step {last_saved} in {manager.directory}" if last_saved is not None else "none"
        raise NonFiniteLossError(
          f"non-finite loss ({float(m['loss'])}) at step {step + 1}; stopped with nothing saved "
          f"after it; last good checkpoint: {where}. Lower train.learning_rate or check the data"
        )
      window.add(m)

    def flush():
      while pending:
        consume(pending.pop(0))

    def save(step):
      nonlocal last_saved
      manager.save(step, self.state.params, self.state.opt_state, _data_state(self.config, step))
      last_saved = step

    for step in range(self.start, tc.steps):
      if preemption.reached(step):
        flush()
        if last_saved != step:
          save(step)
        manager.wait()
        raise Preempted(
          f"SIGTERM: saved a checkpoint at step {step} in {manager.directory}; run the same "
          "command again to resume"
        )
      local, _ = self.data.train_batch(step, *self.rows)
      self.state, metrics = self.train_step(self.state, self._global(local))
      pending.append((step, metrics))
      if len(pending) > 1:
        consume(pending.pop(0))  # one step behind: the device keeps working meanwhile
      done = step + 1
      is_eval = self.eval_step is not None and (done % tc.eval_every == 0 or done == tc.steps)
      is_log = done % tc.log_every == 0 or done == tc.steps or is_eval
      is_save = done % tc.checkpoint_every == 0 or done == tc.steps
      if not (is_log or is_save):
        continue
      flush()
      record = None
      if is_log:
        record = self._record(done, window)
        last["loss"] = record["loss"]
        if is_eval:
          if eval_batches is None:
            eval_batches = [self._global(b) for b in self.data.eval_batches(*self.rows)]
          if eval_batches:
            sums = [jax.device_get(self.eval_step(self.state.params, b)) for b in eval_batches]
            weight = max(sum(float(s["weight"]) for s in sums), 1.0)
            record["eval_loss"] = last["eval_loss"] = sum(float(s["loss"]) for s in sums) / weight
        window = _Window()
      if is_save:
        save(done)
      if record is not None and self.main:
        self._write(record)
    manager.wait()
    return {"step": tc.steps, "parameters": self.parameters, "workdir": self.workdir, **last}

  @staticmethod
  def _record(done: int, window: "_Window") -> dict:
    elapsed = time.perf_counter() - window.start
    weight = max(window.sums["weight"], 1.0)
    return {
      "step": done,
      "loss": window.sums["loss"] / weight,
      "z_loss": window.sums["z_loss"] / weight,
      "accuracy": window.sums["correct"] / weight,
      "learning_rate": window.learning_rate,
      "tokens_per_second": window.tokens / max(elapsed, 1e-9),
      "seconds_per_step": elapsed / max(window.steps, 1),
      "grad_norm": window.grad_norm / max(window.steps, 1),
    }

  def _write(self, record: dict) -> None:
    steps = self.config.train.steps
    self.history.append(record)
    write_jsonl(self.metrics_path, self.history)
    eta = (steps - record["step"]) * record["seconds_per_step"]
    extra = f" eval_loss {record['eval_loss']:.4f}" if "eval_loss" in record else ""
    self.log(
      f"step {record['step']}/{steps} loss {record['loss']:.4f}{extra} "
      f"lr {record['learning_rate']:.3g} {record['tokens_per_second']:,.0f} tokens/s "
      f"ETA {_format_seconds(eta)}"
    )


def train(config: Config, workdir: str, *, data=None, log: Callable = log_line) -> dict:
  """Trains (or resumes) one model in `workdir`; see `Trainer` and `Trainer.fit`."""
  return Trainer(config, workdir, data=data, log=log).fit()


def expert_runs(config: Config, workdir: str) -> list[tuple[Config, str]]:
  """The (config, workdir) of each model a config trains: one, or one per Yearly expert.

  Yearly experts train in WORKDIR/year=YYYY/, on `data.year` alone if set, else each year of
  `data.train_years` in turn.
  """
  if config.variant != "yearly":
    return [(config, workdir)]
  years = (config.data.year,) if config.data.year else tuple(config.data.train_years)
  return [
    (configs.replace(config, "data.year", y), os.path.join(workdir, f"year={y}")) for y in years
  ]


def run(config: Config, workdir: str, log: Callable[[str], None] = log_line) -> list[dict]:
  """Trains every model of `config` (see `expert_runs`); returns their summaries."""
  results = []
  for sub_config, sub_workdir in expert_runs(config, workdir):
    if jax.process_index() == 0 and sub_workdir != workdir:
      log(f"Yearly expert {sub_config.data.year}: {sub_workdir}")
    results.append(train(sub_config, sub_workdir, log=log))
  return results
