"""Mesh, logical-axis rules and sharded placement; loss parity of meshes on 8 simulated devices."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tests.helpers import run_fixture
from tlm.errors import ConfigError
from tlm.sharding import partitioning


def test_axis_rules_map_t5_axes():
  logical = {
    "embedding": P("vocab", "embed"),
    "query": P("embed", "joined_kv"),
    "out": P("joined_kv", "embed"),
    "wi": P("embed", "mlp"),
    "wo": P("mlp", "embed"),
    "rel": P("heads", "relpos_buckets"),
    "scale": P("embed"),
    "logits": P("batch", "length", "vocab"),
    "hidden": P("batch", "length", "embed"),
  }
  mesh = partitioning.logical_to_mesh(logical)
  assert mesh == {
    "embedding": P("model", None),
    "query": P(None, "model"),
    "out": P("model", None),
    "wi": P(None, "model"),
    "wo": P("model", None),
    "rel": P("model", None),
    "scale": P(None),
    "logits": P("data", None, "model"),
    "hidden": P("data", None, None),
  }
  names = [name for name, _ in partitioning.AXIS_RULES]
  assert len(names) == len(set(names))  # one rule per logical axis


def test_fsdp_rules_split_parameters_not_activations_over_data():
  logical = {
    "wi": P("embed", "mlp"),
    "embedding": P("vocab", "embed"),
    "scale": P("embed"),
    "rel": P("heads", "relpos_buckets"),
    "hidden": P("batch", "length", "embed"),
    "logits": P("batch", "length", "vocab"),
  }
  assert partitioning.axis_rules(False) == partitioning.AXIS_RULES
  mesh = partitioning.logical_to_mesh(logical, partitioning.axis_rules(True))
  assert mesh == {
    "wi": P("data", "model"),
    "embedding": P("model", "data"),
    "scale": P("data"),
    "rel": P("model", None),
    "hidden": P("data", None, None),  # "batch" took "data" first
    "logits": P("data", None, "model"),
  }
  # Without explicit rules, those of the enclosing context apply.
  with nn.logical_axis_rules(partitioning.axis_rules(True)):
    assert partitioning.logical_to_mesh(logical)["wi"] == P("data", "model")
  assert partitioning.logical_to_mesh(logical)["wi"] == P(None, "model")


def test_bytes_per_device_counts_each_devices_shards():
  one = partitioning.make_mesh(1, 1, jax.devices()[:1])
  tree = {
    "a": jax.ShapeDtypeStruct((6, 4), np.float32, sharding=NamedSharding(one, P())),
    "b": jax.ShapeDtypeStruct((3,), jnp.bfloat16, sharding=NamedSharding(one, P())),
  }
  assert partitioning.bytes_per_device(tree) == 6 * 4 * 4 + 3 * 2


def test_mesh_sizes_are_checked():
  one = jax.devices()[:1]
  mesh = partitioning.make_mesh(-1, 1, one)
  assert dict(mesh.shape) == {"data": 1, "model": 1}
  for data, model in ((2, 1), (1, 2), (-1, -1), (-1, 3)):
    with pytest.raises(ConfigError, match="mesh"):
      partitioning.make_mesh(data, model, one)
  with pytest.raises(ConfigError, match="train.microbatches"):
    partitioning.check_batch(mesh, 10, 3)
  partitioning.check_batch(mesh, 12, 3)
  assert partitioning.process_rows(mesh, 12) == (0, 12)


def test_global_batch_from_local_rows():
  mesh = partitioning.make_mesh(1, 1, jax.devices()[:1])
  local = {"encoder_input_tokens": np.arange(12, dtype=np.int32).reshape(4, 3)}
  out = partitioning.global_batch(mesh, local, 4)
  np.testing.assert_array_equal(
    np.asarray(out["encoder_input_tokens"]), local["encoder_input_tokens"]
  )
  assert out["encoder_input_tokens"].sharding.spec == partitioning.BATCH_SPEC
  abstract = partitioning.abstract_batch(mesh, 4, 7, 3)
  assert abstract["encoder_positions"].shape == (4, 7)
  assert abstract["decoder_loss_weights"].dtype == np.float32
  assert abstract["decoder_input_tokens"].shape == (4, 3)


@pytest.fixture(scope="module")
def parity(tmp_path_factory):
  out = tmp_path_factory.mktemp("parity") / "parity.json"
  run_fixture("mesh_parity.py", 8, str(out))
  return json.loads(out.read_text())


@pytest.mark.slow
def test_meshes_give_the_single_device_loss(parity):
  ref = parity["runs"]["1x1"]
  assert len(ref["losses"]) == 5
  for name in ("8x1", "2x4", "4x2"):
    run = parity["runs"][name]
    np.testing.assert_allclose(run["losses"], ref["losses"], rtol=1e-5, err_msg=name)
    keys = sorted(ref["params"])
    np.testing.assert_allclose(
      [run["params"][k] for k in keys], [ref["params"][k] for k in keys], rtol=1e-5, err_msg=name
    )
  assert len(set(ref["losses"])) == 5  # the parameters changed at every step


@pytest.mark.slow
def test_parameters_are_created_sharded_as_the_rules_say(parity):
  created = parity["created"]
  want = {
    "['token_embedder']['embedding']": ("('model', None)", 4, 0),
    "['encoder']['layers_0']['attention']['query']['kernel']": ("(None, 'model')", 4, 1),
    "['encoder']['layers_0']['attention']['out']['kernel']": ("('model', None)", 4, 0),
    "['decoder']['layers_0']['mlp']['wi_0']['kernel']": ("(None, 'model')", 4, 1),
    "['decoder']['layers_0']['mlp']['wo']['kernel']": ("('model', None)", 4, 0),
    "['encoder']['relpos_bias']['rel_embedding']": ("('model', None)", 4, 0),
    "['decoder']['layers_0']['encoder_decoder_attention']['key']['kernel']": (
      "(None, 'model')",
      4,
      1,
    ),
    "['encoder']['encoder_norm']['scale']": ("(None,)", 1, 0),
  }
  for name, (spec, split, dim) in want.items():
    got = created[name]
    assert got["spec"] == spec, name
    assert got["shard"][dim] * split == got["shape"][dim], name  # each device holds 1/split
  for name, got in created.items():  # every parameter sharded as its logical axes map
    assert got["spec"] == parity["layout_specs"][name], name
  # Factored slots keep the kept dims' sharding; full slots the parameter's.
  opt = parity["opt_specs"]
  assert opt["v['encoder']['layers_0']['attention']['query']['kernel']"] == "(None, 'model')"
  assert opt["v_row['encoder']['layers_0']['attention']['query']['kernel']"] == "()"
