"""A process's Trainers of one shape share their traced programs (tlm.train.step_programs): the
same compiled step, the same numbers as a fresh cache; anything the trace depends on keys a
program of its own; the cache is bounded."""

import dataclasses
import json

import jax
import pytest
from flax import linen as nn

from tests.helpers import tiny_config
from tlm.input.mixture import TrainingData
from tlm.models.shapes import model_config
from tlm.sharding import partitioning
from tlm.train import loop
from tlm.train import step_programs as programs


def _losses(workdir) -> list:
  with open(workdir / "metrics.jsonl", encoding="utf-8") as f:
    return [json.loads(line)["loss"] for line in f]


def _key(config, vocab_size=100, mesh=None, rules=partitioning.AXIS_RULES):
  mesh = mesh or partitioning.make_mesh(1, 1, jax.devices()[:1])
  d = config.data
  return programs.program_key(
    model_config(config.model, vocab_size),
    config.train,
    mesh,
    rules,
    d.input_length,
    d.target_length,
  )


def test_equal_trainers_share_one_compiled_step_and_train_alike(tmp_path):
  config = tiny_config("model.num_layers=1", "train.steps=3", "train.log_every=1")
  programs.clear()
  first = loop.Trainer(config, str(tmp_path / "a"), log=lambda _: None)
  first.fit()
  second = loop.Trainer(config, str(tmp_path / "b"), log=lambda _: None)
  assert second.programs is first.programs
  assert second.train_step is first.train_step  # not traced, lowered or compiled again
  second.fit()  # the first run's donated state does not reach the second's program
  programs.clear()
  fresh = loop.Trainer(config, str(tmp_path / "c"), log=lambda _: None)
  assert fresh.train_step is not first.train_step
  fresh.fit()
  losses = _losses(tmp_path / "a")
  assert len(losses) == 3
  assert _losses(tmp_path / "b") == losses == _losses(tmp_path / "c")  # bit for bit


@pytest.mark.parametrize(
  "change",
  [
    "train.z_loss=0.001",
    "train.microbatches=2",
    "train.learning_rate=0.5",
    "train.schedule=rsqrt",
    "train.loss_normalizing_factor=233472",
    "train.seed=7",
    "train.batch_size=16",
    "data.input_length=48",
    "data.target_length=12",
    "model.num_layers=2",
    "model.dtype=bfloat16",
  ],
)
def test_anything_the_trace_reads_keys_its_own_program(change):
  base = tiny_config("model.num_layers=1")
  assert _key(tiny_config("model.num_layers=1", change)) != _key(base)
  assert _key(tiny_config("model.num_layers=1")) == _key(base)


def test_mesh_rules_vocabulary_and_jax_settings_are_in_the_key():
  config = tiny_config("model.num_layers=1")
  base = _key(config)
  assert _key(config, vocab_size=300) != base
  assert _key(config, rules=partitioning.axis_rules(fsdp=True)) != base
  if len(jax.devices()) > 1:
    assert _key(config, mesh=partitioning.make_mesh(1, 1, jax.devices()[1:2])) != base
  with jax.default_matmul_precision("highest"):
    assert _key(config) != base


def test_the_cache_is_bounded_least_recently_used_out(monkeypatch):
  built = []

  class Stub:
    def __init__(self, key):
      built.append(key)

  monkeypatch.setattr(programs, "Programs", Stub)
  monkeypatch.setattr(programs, "MAX_ENTRIES", 2)
  programs.clear()
  base = tiny_config("model.num_layers=1")
  keys = [dataclasses.replace(_key(base), seed=s) for s in range(3)]
  a = programs.programs_for(keys[0])
  programs.programs_for(keys[1])
  assert programs.programs_for(keys[0]) is a  # a hit, and now the most recent
  programs.programs_for(keys[2])  # evicts keys[1]
  assert programs.cached_keys() == [keys[0], keys[2]]
  programs.programs_for(keys[1])
  assert built == [keys[0], keys[1], keys[2], keys[1]]
  programs.clear()


def test_programs_build_under_the_trainers_mesh_and_rules():
  """The layout a Programs holds is the one `state_layout` gives under the same context."""
  from tlm.train.state import state_layout

  config = tiny_config("model.num_layers=1")
  data = TrainingData(config)
  data.close()
  key = _key(config, vocab_size=data.vocab.vocab_size)
  with jax.set_mesh(key.mesh), nn.logical_axis_rules(key.rules):
    built = programs.Programs(key)
    direct = state_layout(built.model, built.optimizer, key.mesh)
  assert jax.tree.structure(built.layout.abstract) == jax.tree.structure(direct.abstract)
  assert jax.tree.leaves(built.layout.abstract) == jax.tree.leaves(direct.abstract)
