"""A training's programs (state layout, initialiser, train and eval steps), shared in a process.

Building a `Trainer` traces T5 several times (the state's abstract layout, its random
initialisation, the train step, the eval step) and lowers and compiles two programs. JAX's
persistent compilation cache saves the compiling, not the tracing and lowering: its key is
computed from the lowered program. A process that trains several models of one shape paid
all of it again for each: a worker of `--mode=reproduce` trains the nine Yearly experts, the
test suite builds hundreds of tiny Trainers (docs/benchmarks.md measured 32.8 s to construct
nine Trainers of a few steps, 18.8 s of it tracing).

So the programs are kept here, keyed by everything the traced functions close over: the model
config, the optimizer's schedule, the step's settings (microbatches, z-loss, loss normaliser,
dropout seed), the mesh, the logical axis rules, the batch shape and the JAX settings that
change a trace. Two Trainers with equal keys run the same compiled executable, so their
numbers are those of two fresh processes. A key that differs in anything builds its own.
Bounded (`MAX_ENTRIES`, least recently used out): a compiled program holds its buffers'
layouts and code, a few MB for the tiny models, more for a large one.
"""

import collections
import dataclasses
from typing import Any

import jax
from jax.sharding import Mesh

from tlm.models.t5 import T5Config, Transformer
from tlm.sharding import cost, partitioning
from tlm.train.optim import Adafactor, make_optimizer
from tlm.train.state import StateLayout, TrainState, seed_key, state_initializer, state_layout
from tlm.train.step import (
  compile_train_step,
  configured_train_step,
  lower_train_step,
  make_eval_step,
)

MAX_ENTRIES = 8

# JAX settings read while tracing: a process that changes one between two Trainers (a test,
# say) must not get the other setting's program.
_TRACE_SETTINGS = (
  "jax_enable_x64",
  "jax_default_matmul_precision",
  "jax_default_prng_impl",
  "jax_threefry_partitionable",
  "jax_numpy_dtype_promotion",
)


@dataclasses.dataclass(frozen=True)
class ProgramKey:
  """Everything a training's traced programs depend on (hashable: the cache's key)."""

  model: T5Config
  schedule: str
  learning_rate: float
  warmup_steps: int
  microbatches: int
  z_loss: float
  loss_normalizing_factor: float
  seed: int  # the dropout keys' seed, a constant of the train step
  mesh: Mesh
  rules: tuple
  batch_size: int
  input_length: int
  target_length: int
  jax_settings: tuple


def program_key(model: T5Config, tc, mesh: Mesh, rules, input_length: int, target_length: int):
  """The key of a TrainConfig's programs for `model` on `mesh` with the axis `rules`."""
  return ProgramKey(
    model=model,
    schedule=tc.schedule,
    learning_rate=float(tc.learning_rate),
    warmup_steps=int(tc.warmup_steps),
    microbatches=int(tc.microbatches),
    z_loss=float(tc.z_loss),
    loss_normalizing_factor=float(tc.loss_normalizing_factor),
    seed=int(tc.seed),
    mesh=mesh,
    rules=tuple(tuple(rule) for rule in rules),
    batch_size=int(tc.batch_size),
    input_length=int(input_length),
    target_length=int(target_length),
    jax_settings=tuple(getattr(jax.config, name) for name in _TRACE_SETTINGS),
  )


class Programs:
  """One key's model, optimizer, state layout and programs; the steps compile on first use.

  Built and used under the mesh and the axis rules of the key (`jax.set_mesh`,
  `nn.logical_axis_rules`), as the Trainer does.
  """

  def __init__(self, key: ProgramKey):
    self.key = key
    self.model = Transformer(key.model)
    self.optimizer: Adafactor = make_optimizer(key.schedule, key.learning_rate, key.warmup_steps)
    self.layout: StateLayout = state_layout(self.model, self.optimizer, key.mesh)
    self._initialise = state_initializer(self.model, self.optimizer, self.layout)
    self._train_step = self._eval_step = None
    self._step_flops: float | None = None
    self._flops_known = False

  def init_state(self, seed: int) -> TrainState:
    """Random parameters and a fresh optimizer state (`tlm.train.state.init_state`)."""
    return self._initialise(seed_key(seed))

  def abstract_batch(self) -> dict:
    k = self.key
    return partitioning.abstract_batch(k.mesh, k.batch_size, k.input_length, k.target_length)

  def _step_fn(self, microbatches: int):
    # The key carries the TrainConfig fields `configured_train_step` reads, under their names.
    settings = dataclasses.replace(self.key, microbatches=microbatches)
    return configured_train_step(self.model, self.optimizer, settings)

  def train_step(self):
    """The train step, lowered and compiled ahead of time on the mesh (`tlm.train.step`)."""
    if self._train_step is None:
      step_fn = self._step_fn(self.key.microbatches)
      batch = self.abstract_batch()
      self._train_step = compile_train_step(step_fn, self.layout, batch, self.key.mesh)
    return self._train_step

  def eval_step(self):
    """(params, batch) -> loss sums without dropout, compiled for the training batch's shape."""
    if self._eval_step is None:
      eval_fn = jax.jit(make_eval_step(self.model, self.key.z_loss))
      self._eval_step = eval_fn.lower(self.layout.abstract.params, self.abstract_batch()).compile()
    return self._eval_step

  def step_flops(self) -> float | None:
    """FLOPs per device of one train step (XLA's cost analysis), for MFU."""
    if not self._flops_known:
      self._step_flops, self._flops_known = self._count_flops(), True
    return self._step_flops

  def _count_flops(self) -> float | None:
    if self.key.microbatches == 1:
      return cost.compiled_flops(self.train_step())
    # XLA counts a loop's body once, so the compiled microbatch scan would count 1/M of the
    # step: count the same step without microbatches, lowered (before SPMD partitioning, so
    # for the whole mesh) but not compiled.
    lowered = lower_train_step(self._step_fn(1), self.layout, self.abstract_batch(), self.key.mesh)
    flops = cost.compiled_flops(lowered)
    return flops / self.key.mesh.devices.size if flops else None


_CACHE: "collections.OrderedDict[ProgramKey, Programs]" = collections.OrderedDict()


def programs_for(key: ProgramKey) -> Programs:
  """The process's Programs for `key`, built on first use (least recently used out)."""
  programs = _CACHE.pop(key, None)
  if programs is None:
    programs = Programs(key)
  _CACHE[key] = programs
  while len(_CACHE) > MAX_ENTRIES:
    _CACHE.popitem(last=False)
  return programs


def clear() -> None:
  """Drops every kept program (their memory goes with the last reference)."""
  _CACHE.clear()


def cached_keys() -> list[Any]:
  """The keys kept now, least recently used first."""
  return list(_CACHE)
