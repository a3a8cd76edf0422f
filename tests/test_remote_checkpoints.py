"""Public checkpoint formats read from an object store (`--checkpoint gs://...`): HF
safetensors (single and sharded), pytorch_model.bin, flax_model.msgpack and Mesh-TF
TensorBundles, put on gs://bucket (tests/objstore.py: no network) and loaded with
`load_checkpoint`, equal to the same checkpoint loaded from local disk; names read from inside
a checkpoint (a `weight_map`, a TF `checkpoint` state file) stay confined to its prefix."""

import json
import os
import shutil

import pytest

from tests.helpers import (
  assert_same_params,
  flax_names_by_hand,
  hf_names_by_hand,
  normal_params,
  write_hf_dir,
)
from tlm import storage
from tlm.data.vocab import find_spiece_model
from tlm.errors import CheckpointError
from tlm.models import checkpoints, t5
from tlm.models.formats import safetensors

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "meshtf")


@pytest.fixture(scope="module")
def model():
  cfg = t5.get_preset("tiny-v1_1", vocab_size=40)
  return cfg, normal_params(cfg)


def _upload(local_dir: str, uri: str) -> str:
  storage.upload_tree(local_dir, uri)
  return uri


def _one_line(exc_info, start: str) -> str:
  message = str(exc_info.value)
  assert message.startswith(start) and "\n" not in message, message
  return message


@pytest.mark.parametrize("kind", ["safetensors", "sharded", "bin", "msgpack"])
def test_hf_checkpoint_on_gs_loads_as_locally(bucket, tmp_path, model, kind):
  cfg, params = model
  tensors = hf_names_by_hand(params, cfg)
  local = str(tmp_path / "local")
  if kind == "safetensors":
    write_hf_dir(local, cfg, {}, "none")
    safetensors.write(os.path.join(local, "model.safetensors"), tensors)
  elif kind == "sharded":
    write_hf_dir(local, cfg, {}, "none")
    names = sorted(tensors)
    shards = {"model-1.safetensors": names[:7], "model-2.safetensors": names[7:]}
    for shard, keys in shards.items():
      safetensors.write(os.path.join(local, shard), {k: tensors[k] for k in keys})
    weight_map = {k: shard for shard, keys in shards.items() for k in keys}
    with open(os.path.join(local, "model.safetensors.index.json"), "w") as f:
      json.dump({"weight_map": weight_map}, f)
  elif kind == "bin":
    write_hf_dir(local, cfg, tensors, "pytorch_model.bin")
  else:
    write_hf_dir(local, cfg, flax_names_by_hand(tensors), "flax_model.msgpack")
  with open(os.path.join(local, "spiece.model"), "wb") as f:
    f.write(b"vocab")
  uri = _upload(local, f"{bucket}/hf/{kind}")

  remote_cfg, remote = checkpoints.load_checkpoint(uri)
  local_cfg, expected = checkpoints.load_checkpoint(local)
  assert remote_cfg == local_cfg == cfg
  assert_same_params(remote, expected)
  assert_same_params(remote, params)
  assert find_spiece_model(uri) == f"{uri}/spiece.model"


@pytest.mark.parametrize("name", ["t5_1_0", "t5_1_1"])
def test_mesh_tf_checkpoint_on_gs_loads_as_locally(bucket, name):
  # t5_1_0: a directory with a TF `checkpoint` state file; t5_1_1: two data shards, bfloat16.
  local = os.path.join(FIXTURES, name)
  uri = _upload(local, f"{bucket}/pretrained_models/{name}")
  expected_cfg, expected = checkpoints.load_checkpoint(local)
  for path in (uri, f"{uri}/model.ckpt-1000700"):
    cfg, params = checkpoints.load_checkpoint(path)
    assert cfg == expected_cfg
    assert_same_params(params, expected)


def test_mesh_tf_state_file_on_gs(bucket, tmp_path):
  local = str(tmp_path / "mesh")
  shutil.copytree(os.path.join(FIXTURES, "t5_1_0"), local)
  uri, state = f"{bucket}/mesh", f"{bucket}/mesh/checkpoint"
  _upload(local, uri)
  # TF saving to GCS may write the prefix as a URI: inside this directory, it is followed.
  storage.write_object(state, f'model_checkpoint_path: "{uri}/model.ckpt-1000700"\n'.encode())
  assert checkpoints._mesh_tf_prefix(uri) == f"{uri}/model.ckpt-1000700"
  for prefix, match in (
    ("gs://other-bucket/mesh/model.ckpt-1000700", "is outside this directory"),
    ("/mesh/model.ckpt-1000700", "is outside this directory"),
    ("../elsewhere/model.ckpt-1000700", "leads outside the checkpoint directory"),
    (f"{uri}/../elsewhere/model.ckpt-1000700", "leads outside the checkpoint directory"),
  ):
    storage.write_object(state, f'model_checkpoint_path: "{prefix}"\n'.encode())
    with pytest.raises(CheckpointError, match=match) as e:
      checkpoints.load_checkpoint(uri)
    _one_line(e, f"{state}: ")


@pytest.mark.parametrize("name", ["../outside/x.safetensors", "gs://other-bucket/x.safetensors"])
def test_weight_map_on_gs_cannot_leave_the_directory(bucket, tmp_path, model, monkeypatch, name):
  cfg, params = model
  seen, read = [], safetensors.read
  monkeypatch.setattr(safetensors, "read", lambda path: seen.append(path) or read(path))
  outside = str(tmp_path / "outside")
  os.makedirs(outside)
  safetensors.write(os.path.join(outside, "x.safetensors"), hf_names_by_hand(params, cfg))
  _upload(outside, f"{bucket}/outside")
  local = str(tmp_path / "hf")
  write_hf_dir(local, cfg, {}, "none")
  with open(os.path.join(local, "model.safetensors.index.json"), "w") as f:
    json.dump({"weight_map": {"shared.weight": name}}, f)
  uri = _upload(local, f"{bucket}/hf")
  index = f"{uri}/model.safetensors.index.json"
  with pytest.raises(CheckpointError) as e:
    checkpoints.load_checkpoint(uri)
  assert _one_line(e, index) == (
    f"{index}: file name {name!r} leads outside the checkpoint directory"
  )
  assert seen == []  # nothing was opened


def test_missing_and_truncated_files_on_gs(bucket, tmp_path, model):
  cfg, params = model
  with pytest.raises(CheckpointError, match="no such checkpoint"):
    checkpoints.load_checkpoint(f"{bucket}/nothing")
  local = str(tmp_path / "hf")
  write_hf_dir(local, cfg, {}, "none")
  path = os.path.join(local, "model.safetensors")
  safetensors.write(path, hf_names_by_hand(params, cfg))
  with open(path, "r+b") as f:
    f.truncate(os.path.getsize(path) - 4)
  uri = _upload(local, f"{bucket}/hf")
  with pytest.raises(CheckpointError, match="truncated file") as e:
    checkpoints.load_checkpoint(uri)
  _one_line(e, f"{uri}/model.safetensors: ")
