"""The training loop: logging, evaluation, checkpoints, preemption, Yearly runs.

Mirrors T5X's `trainer.py` and big_vision's `train.py`, cut into sections (mesh, data,
state/restore, compile, loop); the step itself (loss, microbatches, dropout keys, sharded jit)
is `tlm.train.step`.

- The loop only dispatches steps; their metrics stay on the device until a log, eval or save
  boundary fetches them all at once (no host sync per step). A non-finite loss found
  there stops the run (UserError, non-zero exit) before anything is saved after it, so the last
  checkpoint is the last good one; SIGTERM saves the current step.
- The loop's sections: `_step` (dispatch), `_fetch` (metrics to the host, NaN check), `_log`
  (the record: loss, z-loss, accuracy, learning rate, tokens/s, MFU), `_evaluate` (held-out
  loss, then the evaluators the caller hands it: `tlm.train.evaluators`), `_save`
  (checkpoint, and the best one with `train.keep_best`, `tlm.train.best`) and `_write`.
- Only process 0 prints (step, loss, tokens/s, MFU, ETA) and writes WORKDIR files:
  metrics.jsonl (appended: `tlm.train.run_records.MetricsLog`), TensorBoard scalars in
  tensorboard/ (`tlm.train.tensorboard_writer`) and a `train.profile_steps` trace in profile/
  (`tlm.train.profiling`); all processes take part in checkpointing and evaluation.
- Beside it: `tlm.train.run_records` (the metrics.jsonl record, its window of sums, the progress
  line), `tlm.train.preemption` (SIGTERM) and `tlm.train.data_state` (what a checkpoint
  records of the data stream, checked on resume).
"""

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from tlm import configs, storage
from tlm.configs import Config
from tlm.console import log_line
from tlm.errors import CheckpointError, ConfigError, OutputError, UserError
from tlm.files import absent_dirs, atomic_output_file, remove_empty_dirs, write_json
from tlm.models.shapes import model_config, param_count
from tlm.sharding import partitioning
from tlm.train import mfu, preflight, step_programs
from tlm.train.best import BestKeeper, check_metric
from tlm.train.checkpointing import CheckpointManager, checkpoints_dir, load_init_params
from tlm.train.data_state import check_data_state, data_state
from tlm.train.evaluators import Evaluator, fields_of
from tlm.train.preemption import Preempted, Preemption
from tlm.train.profiling import ProfileWindow, check_window
from tlm.train.run_records import MetricsLog, Window, logged_fields, progress_line
from tlm.train.state import TrainState, state_from_params
from tlm.train.tensorboard_writer import ScalarWriter

# Steps whose metrics may wait on the device for the next log or save boundary.
_MAX_PENDING = 256


class NonFiniteLossError(UserError):
  """The loss became NaN or infinite."""


@dataclasses.dataclass
class _Run:
  """What one `fit` carries from step to step."""

  last_saved: int | None
  # (step, metrics still on the device): dispatched steps not yet checked.
  pending: list = dataclasses.field(default_factory=list)
  window: Window = dataclasses.field(default_factory=Window)
  last: dict = dataclasses.field(default_factory=lambda: {"loss": None, "eval_loss": None})
  eval_batches: list | None = None


class Trainer:
  """One training run in one workdir: `__init__` builds the mesh, data, state (restored,
  imported or random) and the compiled steps; `fit` runs the loop.

  The config's required keys and the workdir's layout are checked before, once, by the caller
  (`tlm.train.preflight.check_run`: `train` and `run` do it; `--mode=train` before jax starts).

  Args:
    config: the resolved experiment config.
    workdir: where config.json, model_config.json, spiece.model, metrics.jsonl,
      checkpoints/ and, as configured, tensorboard/, best/ and profile/ go (shared by all
      processes).
    data: a batch source with `vocab`, `train_batch(step, start, stop)` and
      `eval_batches(start, stop)`, and optionally `stream_record()` (the store and sampler a
      checkpoint records, checked on resume) (`tlm.input.mixture.TrainingData`, built from
      the config when None).
    evaluators: called at each evaluation step after the held-out loss
      (`tlm.train.evaluators.Evaluator`; `tlm.eval.during_training.evaluators(config)` builds
      the paper's task metrics for `train.eval_examples`).
    log: where process 0's progress lines go.

  Raises:
    UserError: bad config, data or checkpoint.
  """

  def __init__(
    self,
    config: Config,
    workdir: str,
    *,
    data=None,
    evaluators: Sequence[Evaluator] = (),
    log: Callable = log_line,
  ):
    from tlm.input.mixture import training_data

    tc = config.train
    if min(tc.steps, tc.log_every, tc.checkpoint_every) < 1:
      raise ConfigError("train.steps, train.log_every and train.checkpoint_every must be >= 1")
    if tc.eval_examples < 0:
      raise ConfigError(f"train.eval_examples must be >= 0, got {tc.eval_examples}")
    if config.model.init_optimizer_state and not config.model.init_checkpoint:
      raise ConfigError("model.init_optimizer_state needs model.init_checkpoint (a T5X checkpoint)")
    if tc.eval_every > 0 and tc.eval_examples > 0 and not evaluators:
      raise ConfigError(
        f"train.eval_examples={tc.eval_examples} needs evaluators: build them with "
        "tlm.eval.during_training.evaluators(config), as run.py --mode=train does"
      )
    check_window(tc.profile_steps, tc.steps)
    check_metric(tc.keep_best, logged_fields(tc, evaluators))
    self.config, self.log = config, log
    self.workdir = storage.abspath(workdir)
    self.main = jax.process_index() == 0
    self.metrics_path = self.workdir / "metrics.jsonl"
    # --- Mesh and data ---
    self.mesh = partitioning.make_mesh(config.mesh.data, config.mesh.model)
    self.rules = partitioning.axis_rules(config.mesh.fsdp)
    partitioning.check_batch(self.mesh, tc.batch_size, tc.microbatches)
    self.rows = partitioning.process_rows(self.mesh, tc.batch_size)
    preflight.check_memory(config, self.mesh, self.rows[1] - self.rows[0])
    self.data = data if data is not None else training_data(config)
    # The store and sampler parameters a checkpoint records (None: a batch source without).
    record = getattr(self.data, "stream_record", None)
    self.stream = record() if record is not None else None
    # --- Model, optimizer, state ---
    self.model_config = model_config(config.model, self.data.vocab.vocab_size)
    # The directories the manager creates (a fresh workdir and its checkpoints/): removed
    # again, while still empty, if the start fails (a damaged model.init_checkpoint, say).
    created = absent_dirs(checkpoints_dir(self.workdir))
    self.manager = CheckpointManager(self.workdir, keep=tc.keep_checkpoints)
    try:
      with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
        # One process's Trainers of one shape share their traced programs (tlm.train.step_programs).
        key = step_programs.program_key(
          self.model_config,
          tc,
          self.mesh,
          self.rules,
          config.data.input_length,
          config.data.target_length,
        )
        self.programs = step_programs.programs_for(key)
        self.layout = self.programs.layout
        self.parameters = param_count(self.layout.abstract.params)
        self.state, self.start, origin = self._restore_or_init()
        # --- Compile (nothing to do for a finished run, e.g. a Yearly expert rerun) ---
        t0 = time.perf_counter()
        self.train_step = self.eval_step = self.step_flops = None
        if self.start < tc.steps:
          self.train_step = self.programs.train_step()
          self.step_flops = self.programs.step_flops()
          if tc.eval_every > 0:
            self.eval_step = self.programs.eval_step()
        compile_seconds = time.perf_counter() - t0
    except BaseException:
      self.manager.close()
      remove_empty_dirs(created)
      raise
    self.peak_flops = mfu.peak_flops(jax.local_devices()[0].device_kind)
    self.evaluators = tuple(evaluators) if self.eval_step is not None else ()
    self.metrics = None
    if self.main:
      write_json(self.workdir / "config.json", configs.to_dict(config))
      write_json(self.workdir / "model_config.json", self.model_config.to_dict())
      with atomic_output_file(self.workdir / "spiece.model", "wb") as f:
        f.write(self.data.vocab.serialized_model)
      self.metrics = MetricsLog(self.metrics_path, self.start)
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

  def _restore_or_init(self):
    optimizer = self.programs.optimizer
    latest = self.manager.latest_step()
    abstract = self.layout.abstract
    if latest is not None:
      params, opt_state, saved = self.manager.restore(latest, abstract.params, abstract.opt_state)
      check_data_state(saved, self.config, f"{self.manager.directory}/{latest}", self.stream)
      step = jax.device_put(jnp.int32(latest), self.layout.shardings.step)
      return TrainState(step, params, opt_state), latest, f"resumed from step {latest}"
    path = self.config.model.init_checkpoint
    if path:
      params = load_init_params(path, self.model_config, abstract.params)
      state = state_from_params(params, optimizer, self.layout)
      if not self.config.model.init_optimizer_state:
        return state, 0, f"initialised from {path}"
      from tlm.train.t5x_optimizer import load_t5x_opt_state

      opt_state = load_t5x_opt_state(path, optimizer, params, self.layout.shardings.opt_state)
      state = state.replace(opt_state=opt_state)
      return state, 0, f"initialised from {path}, with its T5X Adafactor state"
    state = self.programs.init_state(self.config.train.seed)
    return state, 0, "random initialisation"

  def fit(self) -> dict:
    """Trains from the restored step to `train.steps`.

    Returns:
      {"step", "from_step" (the step it started or resumed from: above "step" when the workdir
      was trained further before, and nothing ran), "loss" (last logged), "eval_loss" (last, or
      None), "parameters", "workdir"}.

    Raises:
      NonFiniteLossError: the loss became NaN/inf (nothing saved after the last good step).
      Preempted: SIGTERM; a checkpoint of the current step was saved.
    """
    tc = self.config.train
    preemption = Preemption()
    self.profile = ProfileWindow(check_window(tc.profile_steps, tc.steps), self.workdir, self.main)
    self.best = None
    self.scalars = None
    self.at_step = self.start
    failed = True
    try:
      if self.train_step is not None:
        if tc.keep_best:
          self.best = BestKeeper(self.workdir, tc.keep_best, self.main)
        if self.main:
          eval_fields = ("eval_loss",) + fields_of(self.evaluators)
          self.scalars = ScalarWriter(self.workdir, self.start, self.log, eval_fields)
      result = self._loop(preemption)
      failed = False
    except (OSError, OutputError, CheckpointError) as e:  # a store gone, a disk full
      raise self._write_failure(e) from None
    finally:
      self._close(preemption, quiet=failed)
    return result

  def _close(self, preemption: Preemption, quiet: bool) -> None:
    """Ends what the run started: the pending save completed, the last events uploaded. After a
    failure (`quiet`), what fails while closing (the store that made the run fail, say) is not
    reported again: the run's error is the one line."""
    close_data = getattr(self.data, "close", None)
    closers = [close_data, preemption.close, self.profile.stop]  # the data: its prefetching
    closers += [self.scalars and self.scalars.close, self.best and self.best.close]
    closers.append(self.manager.close)
    for close in closers:
      if close is None:
        continue
      if not quiet:
        try:
          close()
        except (OSError, OutputError, CheckpointError) as e:
          raise self._write_failure(e) from None
        continue
      with contextlib.suppress(Exception):
        close()

  def _write_failure(self, e: Exception) -> UserError:
    """A file operation of the run that failed (a write of the workdir, mostly: a store gone, a
    full disk) as one line that says which step the run had reached and which checkpoint it can
    resume from: a checkpoint's (CheckpointError, naming the checkpoint), or another file's
    (metrics, TensorBoard events, a best checkpoint's copy: an OSError or OutputError, naming
    the object)."""
    complete = self.manager.complete_step
    kept = (
      f"the last complete checkpoint is {self.manager.directory}/{complete}"
      if complete is not None
      else "no checkpoint was completed"
    )
    if isinstance(e, CheckpointError):
      return CheckpointError(f"{e}; {kept}")
    if isinstance(e, OSError):
      why = " ".join(str(e.strerror or e).split())[:300] or type(e).__name__
      e = f"{e.filename or self.workdir}: {why}"
    return OutputError(f"{e}; at step {self.at_step}, {kept}")

  def _global(self, local: dict) -> dict:
    return partitioning.global_batch(self.mesh, local, self.config.train.batch_size)

  def _loop(self, preemption: Preemption) -> dict:
    tc = self.config.train
    run = _Run(last_saved=self.manager.latest_step())
    for step in range(self.start, tc.steps):
      self.at_step = step + 1  # as the progress lines count
      if preemption.reached(step):
        self._preempt(run, step)
      self._step(run, step)
      done = step + 1
      is_eval = self.eval_step is not None and (done % tc.eval_every == 0 or done == tc.steps)
      is_log = done % tc.log_every == 0 or done == tc.steps or is_eval
      is_save = done % tc.checkpoint_every == 0 or done == tc.steps
      if not (is_log or is_save):
        if len(run.pending) >= _MAX_PENDING:
          self._fetch(run)  # bounded device memory for small scalars whatever log_every is
        continue
      self._fetch(run)
      record = self._log(run, done) if is_log else None
      if is_eval:
        self._evaluate(run, record)
      if is_save:
        self._save(run, done)
      if record is not None:
        self._keep_best(record)
        if self.main:
          self._write(record)
      if is_save and self.metrics is not None:
        self.metrics.flush()  # gs://: the records up to this checkpoint, uploaded whole
    if self.metrics is not None:
      self.metrics.flush()
    self.manager.wait()
    if self.best is not None:
      self.best.wait()
    return {
      "step": tc.steps,
      "from_step": self.start,
      "parameters": self.parameters,
      "workdir": self.workdir,
      **run.last,
    }

  # ---- the loop's sections ---------------------------------------------------------------

  def _step(self, run: _Run, step: int) -> None:
    """Dispatches one update; its metrics stay on the device until `_fetch`."""
    t0 = time.perf_counter()
    local, _ = self.data.train_batch(step, *self.rows)
    run.window.input_wait += time.perf_counter() - t0
    with self.profile.step(step):
      self.state, metrics = self.train_step(self.state, self._global(local))
    self.profile.after(step, metrics)
    run.pending.append((step, metrics))

  def _fetch(self, run: _Run) -> None:
    """Brings the pending steps' metrics to the host in one transfer and adds them to the
    window; a non-finite loss stops the run here, before any later save."""
    if not run.pending:
      return
    steps = [step for step, _ in run.pending]
    fetched = jax.device_get([metrics for _, metrics in run.pending])
    run.pending = []
    for step, m in zip(steps, fetched):
      if not np.isfinite(m["loss"]):
        where = (
          f"step {run.last_saved} in {self.manager.directory}"
          if run.last_saved is not None
          else "none"
        )
        raise NonFiniteLossError(
          f"non-finite loss ({float(m['loss'])}) at step {step + 1}; stopped with nothing saved "
          f"after it; last good checkpoint: {where}. Lower train.learning_rate or check the data"
        )
      run.window.add(m)

  def _log(self, run: _Run, done: int) -> dict:
    """The window's record (`Window.record`), MFU added where the device's peak is known."""
    record = run.window.record(done)
    utilisation = mfu.utilisation(self.step_flops, record["seconds_per_step"], self.peak_flops)
    if utilisation is not None:
      record["mfu"] = utilisation
    run.last["loss"] = record["loss"]
    run.window = Window()
    return record

  def _evaluate(self, run: _Run, record: dict) -> None:
    """Held-out loss, and the task metrics with `train.eval_examples`, into `record`."""
    t0 = time.perf_counter()
    if run.eval_batches is None:
      run.eval_batches = [self._global(b) for b in self.data.eval_batches(*self.rows)]
    if run.eval_batches:
      sums = [jax.device_get(self.eval_step(self.state.params, b)) for b in run.eval_batches]
      weight = max(sum(float(s["weight"]) for s in sums), 1.0)
      record["eval_loss"] = run.last["eval_loss"] = sum(float(s["loss"]) for s in sums) / weight
    for evaluate in self.evaluators:
      with jax.set_mesh(self.mesh):
        record.update(evaluate(self.state.params, self.model_config, self.data.vocab))
    # Evaluation time is not training time: the next window starts after it.
    run.window.start += time.perf_counter() - t0

  def _save(self, run: _Run, done: int) -> None:
    """Starts the (asynchronous) checkpoint of step `done`."""
    state = data_state(self.config, done, self.stream)
    self.manager.save(done, self.state.params, self.state.opt_state, state)
    run.last_saved = done

  def _keep_best(self, record: dict) -> None:
    if self.best is not None and self.best.update(
      record,
      self.state.params,
      self.state.opt_state,
      data_state(self.config, record["step"], self.stream),
    ):
      record["best_step"] = record["step"]

  def _preempt(self, run: _Run, step: int) -> None:
    self._fetch(run)
    if run.last_saved != step:
      self._save(run, step)
    if self.metrics is not None:
      self.metrics.flush()
    self.manager.wait()
    raise Preempted(
      f"SIGTERM: saved a checkpoint at step {step} in {self.manager.directory}; run the same "
      "command again to resume"
    )

  def _write(self, record: dict) -> None:
    self.metrics.append(record)
    if self.scalars is not None:
      self.scalars.write(record)
    best_metric = self.best.metric if self.best is not None else None
    percent = fields_of(self.evaluators)
    self.log(progress_line(record, self.config.train.steps, best_metric, percent))


def train(
  config: Config,
  workdir: str,
  *,
  data=None,
  evaluators: Sequence[Evaluator] = (),
  log: Callable = log_line,
) -> dict:
  """Trains (or resumes) one model in `workdir`, checked first (`preflight.check_run`); see
  `Trainer` and `Trainer.fit`."""
  preflight.check_run(config, workdir)
  return Trainer(config, workdir, data=data, evaluators=evaluators, log=log).fit()


def run(
  config: Config,
  workdir: str,
  *,
  make_evaluators: Callable[[Config], Sequence[Evaluator]] = lambda config: (),
  log: Callable[[str], None] = log_line,
) -> list[dict]:
  """Trains every model of `config` (`tlm.configs.expert_runs`: one, or each Yearly expert
  in turn); returns their summaries.

  `make_evaluators(config)` builds each model's evaluators from its own config: a Yearly
  expert is evaluated on its own year (`tlm.eval.during_training.evaluators`).
  """
  runs = preflight.check_runs(config, workdir)
  return train_runs(runs, make_evaluators=make_evaluators, log=log)


def train_runs(
  runs: Sequence[tuple[Config, str]],
  *,
  make_evaluators: Callable[[Config], Sequence[Evaluator]] = lambda config: (),
  log: Callable[[str], None] = log_line,
) -> list[dict]:
  """Trains each (config, workdir) of `runs` in turn, as `preflight.check_runs` checked and
  returned them; returns their summaries (see `run`)."""
  results = []
  for sub_config, sub_workdir in runs:
    if jax.process_index() == 0 and sub_config.variant == "yearly":
      log(f"Yearly expert {sub_config.data.year}: {sub_workdir}")
    evaluators = make_evaluators(sub_config)
    trainer = Trainer(sub_config, sub_workdir, evaluators=evaluators, log=log)
    results.append(trainer.fit())
  return results
