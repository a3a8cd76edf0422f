"""Checkpoint readers against hostile and corrupt files.

Every file here is small and written by the test: the bombs declare huge sizes, they do not
hold them. Each case must end in one `UserError` (a `CheckpointError` for checkpoints) whose
message is one line naming the file, with nothing else opened, allocated or leaked: index and
state files may not lead outside the checkpoint directory, declared sizes are checked against
the bytes present (in Python integers) before anything is allocated, JSON nesting is bounded,
values of the wrong type are refused, and config dimensions are within `CHECKPOINT_LIMITS`.
"""

import collections
import io
import json
import os
import pickle
import shutil
import struct
import zipfile

import numpy as np
import pytest
import torch

from tests.helpers import varint
from tlm.data.vocab import Vocabulary
from tlm.errors import CheckpointError, DataError, UserError
from tlm.models import checkpoints, t5
from tlm.models.formats import flax_msgpack, safetensors, tensorbundle, torch_pickle
from tlm.models.formats.hf_config import check_checkpoint_limits, to_hf_config

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "meshtf")


def _one_line_error(exc_info, path) -> str:
  """The message, checked to be one line that starts with `path`."""
  message = str(exc_info.value)
  assert message.startswith(str(path)), message
  assert "\n" not in message and len(message) < 600, message
  return message


# ---------------------------------------------------------------------------------------------
# Sharded HF checkpoints: weight_map names stay inside the directory.


def _tiny_hf_config() -> dict:
  return to_hf_config(t5.get_preset("tiny", vocab_size=32))


def _sharded_dir(tmp_path, weight_map: dict) -> str:
  directory = tmp_path / "hf"
  directory.mkdir()
  (directory / "config.json").write_text(json.dumps(_tiny_hf_config()))
  index = {"metadata": {}, "weight_map": weight_map}
  (directory / "model.safetensors.index.json").write_text(json.dumps(index))
  return str(directory)


@pytest.fixture
def reads(monkeypatch):
  """The paths safetensors.read is called with (after recording, it reads as usual)."""
  seen, read = [], safetensors.read

  def spy(path):
    seen.append(path)
    return read(path)

  monkeypatch.setattr(safetensors, "read", spy)
  return seen


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "dotdot-inside-name"])
def test_weight_map_cannot_leave_the_directory(tmp_path, reads, kind):
  outside = tmp_path / "outside"
  outside.mkdir()
  secret = outside / "x.safetensors"
  safetensors.write(str(secret), {"shared.weight": np.zeros((2, 2), np.float32)})
  name = {
    "dotdot": "../outside/x.safetensors",
    "absolute": str(secret),
    "dotdot-inside-name": "sub/../../outside/x.safetensors",
  }[kind]
  directory = _sharded_dir(tmp_path, {"shared.weight": name})
  with pytest.raises(CheckpointError, match="leads outside the checkpoint directory") as e:
    checkpoints.load_checkpoint(directory)
  _one_line_error(e, os.path.join(directory, "model.safetensors.index.json"))
  assert reads == []  # nothing was opened


def test_weight_map_etc_passwd_is_never_opened(tmp_path, reads, monkeypatch):
  opened = []
  real_open = open

  def spy_open(file, *args, **kwargs):
    opened.append(str(file))
    return real_open(file, *args, **kwargs)

  directory = _sharded_dir(tmp_path, {"shared.weight": "/etc/passwd"})
  monkeypatch.setattr("builtins.open", spy_open)
  with pytest.raises(CheckpointError) as e:
    checkpoints.load_checkpoint(directory)
  index = os.path.join(directory, "model.safetensors.index.json")
  message = _one_line_error(e, index)
  assert "/etc/passwd" not in opened and reads == []
  # Nothing of the file in the message (it used to show its first 8 bytes as a length).
  assert message == f"{index}: file name '/etc/passwd' leads outside the checkpoint directory"


def test_weight_map_symlink_out_of_the_directory(tmp_path, reads):
  outside = tmp_path / "elsewhere.safetensors"
  safetensors.write(str(outside), {"shared.weight": np.zeros((2, 2), np.float32)})
  directory = _sharded_dir(tmp_path, {"shared.weight": "model-00001-of-00001.safetensors"})
  os.symlink(outside, os.path.join(directory, "model-00001-of-00001.safetensors"))
  with pytest.raises(CheckpointError, match="is a link that leads outside") as e:
    checkpoints.load_checkpoint(directory)
  _one_line_error(e, os.path.join(directory, "model.safetensors.index.json"))
  assert reads == []


def test_weight_map_hf_hub_cache_symlinks_are_followed(tmp_path, reads):
  # The HF hub cache keeps files in models--x/blobs and links them from snapshots/REV.
  repo = tmp_path / "models--t5" / "snapshots" / "abc123"
  blobs = tmp_path / "models--t5" / "blobs"
  blobs.mkdir(parents=True)
  repo.mkdir(parents=True)
  safetensors.write(str(blobs / "f00d"), {"shared.weight": np.ones((2, 2), np.float32)})
  os.symlink("../../blobs/f00d", repo / "model-00001-of-00001.safetensors")
  index = repo / "model.safetensors.index.json"
  index.write_text(
    json.dumps({"weight_map": {"shared.weight": "model-00001-of-00001.safetensors"}})
  )
  tensors, source, _ = checkpoints._read_hf_tensors(str(repo))
  np.testing.assert_array_equal(tensors["shared.weight"], np.ones((2, 2), np.float32))
  assert source == str(index) and reads == [str(repo / "model-00001-of-00001.safetensors")]


@pytest.mark.parametrize("value", [7, None, ["a.safetensors"], {"f": "a.safetensors"}])
def test_weight_map_value_of_the_wrong_type(tmp_path, reads, value):
  directory = _sharded_dir(tmp_path, {"shared.weight": value})
  with pytest.raises(
    CheckpointError, match=r"weight_map\['shared.weight'\] is a .*not a file"
  ) as e:
    checkpoints.load_checkpoint(directory)
  _one_line_error(e, os.path.join(directory, "model.safetensors.index.json"))
  assert reads == []


def test_weight_map_tensor_in_two_shards(tmp_path):
  directory = _sharded_dir(tmp_path, {"a": "one.safetensors", "b": "two.safetensors"})
  for shard in ("one", "two"):
    safetensors.write(f"{directory}/{shard}.safetensors", {"a": np.zeros(2, np.float32)})
  with pytest.raises(CheckpointError, match="tensor 'a' is in two shards") as e:
    checkpoints.load_checkpoint(directory)
  _one_line_error(e, os.path.join(directory, "two.safetensors"))


# ---------------------------------------------------------------------------------------------
# JSON: depth, size, types; config.json dimensions.


@pytest.mark.parametrize("depth", [100, 100_000])
def test_deeply_nested_config_json(tmp_path, depth):
  directory = tmp_path / "hf"
  directory.mkdir()
  config = _tiny_hf_config()
  text = json.dumps(config)[:-1] + ', "task": ' + "[" * depth + "]" * depth + "}"
  (directory / "config.json").write_text(text)
  with pytest.raises(CheckpointError, match=r"cannot read JSON \(nested") as e:
    checkpoints.load_checkpoint(str(directory))
  _one_line_error(e, directory / "config.json")


@pytest.mark.parametrize("depth", [100, 100_000])
def test_deeply_nested_safetensors_header(tmp_path, depth):
  raw = b'{"a": ' + b"[" * depth + b"]" * depth + b"}"
  raw += b" " * (-len(raw) % 8)
  path = tmp_path / "model.safetensors"
  path.write_bytes(struct.pack("<Q", len(raw)) + raw)
  with pytest.raises(CheckpointError, match=r"corrupt safetensors header: .*nested") as e:
    safetensors.read(str(path))
  _one_line_error(e, path)


def test_safetensors_header_with_a_huge_integer(tmp_path):
  raw = b'{"a": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 0]}}'
  path = tmp_path / "model.safetensors"
  path.write_bytes(struct.pack("<Q", len(raw)) + raw)
  with pytest.raises(CheckpointError, match="cannot read JSON") as e:
    safetensors.read(str(path))
  _one_line_error(e, path)


@pytest.mark.parametrize(
  "key,value,match",
  [
    ("num_layers", 200_000, "num_layers 200000 is above the limit of 256"),
    ("num_decoder_layers", 10**6, "num_decoder_layers 1000000 is above the limit"),
    ("d_model", 1 << 20, "d_model 1048576 is above the limit of 65536"),
    ("vocab_size", 10**9, "vocab_size 1000000000 is above the limit"),
    ("num_heads", 100_000, "num_heads 100000 is above the limit of 1024"),
    ("d_ff", 1 << 30, "d_ff 1073741824 is above the limit"),
    ("d_kv", 1 << 20, "d_kv 1048576 is above the limit"),
    ("relative_attention_num_buckets", 1 << 30, "relative_attention_num_buckets .* limit"),
    ("num_layers", "6", "num_layers must be a positive integer, got '6'"),
    ("num_layers", True, "num_layers must be a positive integer"),
    ("d_model", 64.0, "d_model must be a positive integer"),
    ("dropout_rate", "high", "dropout_rate must be a number"),
    ("layer_norm_epsilon", [1e-6], "layer_norm_epsilon must be a number"),
    ("feed_forward_proj", ["relu"], "feed_forward_proj .* is not supported"),
  ],
)
def test_config_json_dimensions_and_types(tmp_path, key, value, match):
  directory = tmp_path / "hf"
  directory.mkdir()
  config = _tiny_hf_config()
  config[key] = value
  (directory / "config.json").write_text(json.dumps(config))
  with pytest.raises(CheckpointError, match=match) as e:
    checkpoints.load_checkpoint(str(directory))
  _one_line_error(e, directory / "config.json")


def test_model_config_json_dimensions(tmp_path):
  cfg = t5.get_preset("tiny", vocab_size=32).to_dict()
  cfg["num_encoder_layers"] = 200_000
  (tmp_path / "model_config.json").write_text(json.dumps(cfg))
  with pytest.raises(CheckpointError, match="num_encoder_layers 200000 is above the limit") as e:
    checkpoints.load_checkpoint(str(tmp_path))
  _one_line_error(e, tmp_path / "model_config.json")


def test_limits_admit_every_published_t5():
  for name in t5.PRESETS:
    check_checkpoint_limits(t5.get_preset(name))
  mt5_xxl = dict(vocab_size=250112, emb_dim=4096, num_heads=64, head_dim=64, mlp_dim=10240)
  check_checkpoint_limits(t5.T5Config(**mt5_xxl))


# ---------------------------------------------------------------------------------------------
# safetensors: sizes in Python integers.


def _safetensors_file(path, header: dict, data: bytes = b""):
  raw = json.dumps(header).encode()
  path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


@pytest.mark.parametrize(
  "shape", [[2**32, 2**32], [2**16, 2**16, 2**16, 2**16], [2**63, 2], [1] * 65]
)
def test_safetensors_shape_that_wraps_int64(tmp_path, shape):
  # 2**64 elements (or 2**65 bytes) is 0 in int64 arithmetic: it must not pass as 0 bytes.
  path = tmp_path / "model.safetensors"
  _safetensors_file(path, {"w": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}})
  with pytest.raises(CheckpointError, match="tensor 'w'") as e:
    safetensors.read(str(path))
  _one_line_error(e, path)


def test_safetensors_bool_dimension_and_odd_names(tmp_path):
  path = tmp_path / "model.safetensors"
  header = {"w\nfake line": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}
  _safetensors_file(path, header, b"\0" * 4)
  with pytest.raises(CheckpointError, match="malformed header entry") as e:
    safetensors.read(str(path))
  assert "'w\\nfake line'" in _one_line_error(e, path)


# ---------------------------------------------------------------------------------------------
# torch pickles: storages, strides and pickle opcodes checked against the bytes present.


class _StorageRef:
  def __init__(self, key: str, numel: int, storage_type=torch.FloatStorage, view=None):
    self.pid = ("storage", storage_type, key, "cpu", numel) + ((view,) if view else ())


class _Tensor:
  """Pickled as torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)."""

  def __init__(self, storage, offset, size, stride):
    self.args = (storage, offset, size, stride, False, collections.OrderedDict())

  def __reduce__(self):
    return (torch._utils._rebuild_tensor_v2, self.args)


class _Pickler(pickle.Pickler):
  def persistent_id(self, obj):
    return obj.pid if isinstance(obj, _StorageRef) else None


def _pickled(obj) -> bytes:
  buf = io.BytesIO()
  _Pickler(buf, protocol=2).dump(obj)
  return buf.getvalue()


def _torch_zip(path, state=None, storages=None, data_pkl=None, compress=zipfile.ZIP_STORED):
  """A torch.save zip archive made by hand (storages: {key: raw little-endian bytes})."""
  with zipfile.ZipFile(path, "w") as z:
    z.writestr("archive/data.pkl", data_pkl if data_pkl is not None else _pickled(state))
    z.writestr("archive/byteorder", "little")
    for key, raw in (storages or {}).items():
      z.writestr(zipfile.ZipInfo(f"archive/data/{key}"), raw, compress_type=compress)
  return str(path)


def _four_floats():
  return {"0": np.arange(4, dtype="<f4").tobytes()}


def test_hand_made_torch_zip_is_read(tmp_path):
  # The valid file every hostile variant below is made from; a size-1 dimension may carry
  # any stride (it never moves), even one numpy could not represent in bytes.
  state = {
    "w": _Tensor(_StorageRef("0", 4), 0, (2, 2), (2, 1)),
    "t": _Tensor(_StorageRef("0", 4), 1, (1, 3), (2**62, 1)),
  }
  got = torch_pickle.read(_torch_zip(tmp_path / "m.bin", state, _four_floats()))
  np.testing.assert_array_equal(got["w"], [[0, 1], [2, 3]])
  np.testing.assert_array_equal(got["t"], [[1, 2, 3]])


def test_torch_expanded_storage_bomb(tmp_path):
  # 4 bytes viewed as (2**21, 2**21) with stride (0, 0): 16 TiB if it were copied out.
  state = {"w": _Tensor(_StorageRef("0", 1), 0, (2**21, 2**21), (0, 0))}
  path = _torch_zip(tmp_path / "m.bin", state, {"0": b"\0" * 4})
  with pytest.raises(CheckpointError, match="4398046511104 elements from a storage of 1") as e:
    torch_pickle.read(path)
  _one_line_error(e, path)


def test_torch_expand_saved_by_torch_is_refused(tmp_path):
  path = str(tmp_path / "m.bin")
  torch.save({"w": torch.ones(1).expand(2**20, 2**20)}, path)
  assert os.path.getsize(path) < 4096
  with pytest.raises(CheckpointError, match="expanded tensors are not supported") as e:
    torch_pickle.read(path)
  _one_line_error(e, path)


@pytest.mark.parametrize(
  "offset,size,stride",
  [
    (0, (2, 2), "ab"),
    (0, (2, 2), None),
    (0, (2, 2), (2.0, 1)),
    (0, (2, 2), (2, True)),
    (0, (2, 2), (2,)),
    (0, 4, (1,)),
    (0, (2, -2), (2, 1)),
    ("0", (2, 2), (2, 1)),
    (-1, (2,), (1,)),
    (0, (1,) * 65, (1,) * 65),
  ],
)
def test_torch_size_and_stride_of_the_wrong_type(tmp_path, offset, size, stride):
  state = {"w": _Tensor(_StorageRef("0", 4), offset, size, stride)}
  path = _torch_zip(tmp_path / "m.bin", state, _four_floats())
  with pytest.raises(CheckpointError, match=r"tensor 'w': bad size .* / stride") as e:
    torch_pickle.read(path)
  _one_line_error(e, path)


def test_torch_shape_that_wraps_int64(tmp_path):
  state = {"w": _Tensor(_StorageRef("0", 4), 0, (2**32, 2**32), (2**32, 1))}
  path = _torch_zip(tmp_path / "m.bin", state, _four_floats())
  with pytest.raises(CheckpointError, match="reads element") as e:
    torch_pickle.read(path)
  _one_line_error(e, path)


# A protocol-4 BINBYTES8 opcode declaring 2**40 bytes (1 TiB), followed by three.
_HUGE_BYTES = b"\x80\x04\x8e" + struct.pack("<Q", 2**40) + b"abc"
# LONG_BINPUT to memo slot 2**32 - 1: the C unpickler would size its memo table to it.
_HUGE_MEMO = b"\x80\x02}r" + struct.pack("<I", 2**32 - 1) + b"."


@pytest.mark.parametrize(
  "data_pkl,match",
  [(_HUGE_BYTES, "bytes8, but only 3 remain"), (_HUGE_MEMO, "memo index 4294967295")],
  ids=["bytes", "memo"],
)
def test_torch_data_pkl_bombs(tmp_path, data_pkl, match):
  path = _torch_zip(tmp_path / "m.bin", data_pkl=data_pkl)
  with pytest.raises(CheckpointError, match=match) as e:
    torch_pickle.read(path)
  _one_line_error(e, path)


# A protocol-4 FRAME of 2**40 bytes (a file object's read(n) allocates n before reading).
_HUGE_FRAME = b"\x80\x04\x95" + struct.pack("<Q", 2**40) + b"}."


@pytest.mark.parametrize(
  "bomb,match",
  [(_HUGE_BYTES, "bytes8, but only 3 remain"), (_HUGE_FRAME, "frame at byte 17 past the end")],
  ids=["bytes", "frame"],
)
def test_torch_legacy_pickle_bombs(tmp_path, bomb, match):
  # The legacy format is read from the file itself, a stream of pickles: the second is a bomb.
  path = tmp_path / "legacy.bin"
  path.write_bytes(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + bomb)
  with pytest.raises(CheckpointError, match=match) as e:
    torch_pickle.read(str(path))
  _one_line_error(e, path)


def test_torch_legacy_storage_larger_than_the_file(tmp_path):
  # Storage "0" declares 2**40 floats (4 TiB), consistently in the pickle and its header.
  path = tmp_path / "legacy.bin"
  numel = 2**40
  with open(path, "wb") as f:
    for header in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}):
      pickle.dump(header, f, protocol=2)
    _Pickler(f, protocol=2).dump({"w": _Tensor(_StorageRef("0", numel), 0, (4,), (1,))})
    pickle.dump(["0"], f, protocol=2)
    f.write(struct.pack("<q", numel) + b"\0" * 16)
  with pytest.raises(CheckpointError, match="truncated file") as e:
    torch_pickle.read(str(path))
  _one_line_error(e, path)


def test_torch_zip_storage_bombs(tmp_path):
  # A storage declared larger than its member, and a compressed member (a deflate bomb
  # expands about a thousandfold; torch never compresses).
  state = {"w": _Tensor(_StorageRef("0", 2**40), 0, (4,), (1,))}
  path = _torch_zip(tmp_path / "a.bin", state, _four_floats())
  with pytest.raises(CheckpointError, match="is not 4398046511104 bytes") as e:
    torch_pickle.read(path)
  _one_line_error(e, path)
  state = {"w": _Tensor(_StorageRef("0", 2**20), 0, (4,), (1,))}
  path = _torch_zip(tmp_path / "b.bin", state, {"0": bytes(4 << 20)}, compress=zipfile.ZIP_DEFLATED)
  assert os.path.getsize(path) < 16384
  with pytest.raises(CheckpointError, match="is compressed") as e:
    torch_pickle.read(path)
  _one_line_error(e, path)


def test_torch_nested_rebuild_and_dicts(tmp_path):
  # _rebuild_from_type_v2 nested in itself, and dicts nested 10000 deep.
  class Nested:
    def __init__(self, depth):
      self.depth = depth

    def __reduce__(self):
      inner = Nested(self.depth - 1) if self.depth else 0
      return (
        torch._tensor._rebuild_from_type_v2,
        (torch._tensor._rebuild_from_type_v2, 0, (inner,), None),
      )

  path = _torch_zip(tmp_path / "a.bin", data_pkl=_pickled({"w": Nested(3)}))
  with pytest.raises(CheckpointError, match="other than a tensor") as e:
    torch_pickle.read(path)
  _one_line_error(e, path)
  # {"k": {"k": ...}} 10000 deep, as opcodes (pickle.dumps itself would recurse too deeply).
  deep = b"\x80\x02}" + b"X\x01\x00\x00\x00k}" * 10_000 + b"s" * 10_000 + b"."
  path = _torch_zip(tmp_path / "b.bin", data_pkl=deep)
  with pytest.raises(CheckpointError, match="nested more than 32 deep") as e:
    torch_pickle.read(path)
  _one_line_error(e, path)


@pytest.mark.parametrize("depth", [100, 1010, 100_000])
def test_flax_msgpack_nested_maps(tmp_path, depth):
  # {"k": {"k": ... None}} as msgpack fixmaps.
  path = tmp_path / "flax_model.msgpack"
  path.write_bytes(b"\x81\xa1k" * depth + b"\xc0")
  with pytest.raises(CheckpointError, match="nested more than 32 deep|corrupt or truncated") as e:
    flax_msgpack.read(str(path))
  _one_line_error(e, path)


def _safetensors_declaring_12g(path):
  # A header declaring one tensor as large as the file, which is sparse: gigabytes of nothing.
  header = json.dumps(
    {"shared.weight": {"dtype": "F32", "shape": [3 << 30], "data_offsets": [0, 12 << 30]}}
  ).encode()
  with open(path, "wb") as f:
    f.write(len(header).to_bytes(8, "little") + header)
    f.truncate(8 + len(header) + (12 << 30))


def _sparse_12g(path):
  with open(path, "wb") as f:
    f.truncate(12 << 30)


@pytest.mark.parametrize(
  "name, make",
  [
    ("model.safetensors", _safetensors_declaring_12g),
    ("pytorch_model.bin", _sparse_12g),
    ("flax_model.msgpack", _sparse_12g),
  ],
)
def test_hf_weights_bounded_by_the_parameters_the_config_declares(tmp_path, name, make):
  # Refused by their size, unread: the readers allocate what a header declares.
  directory = tmp_path / "hf"
  directory.mkdir()
  (directory / "config.json").write_text(json.dumps(_tiny_hf_config()))
  make(directory / name)
  match = "bytes of weights, more than the parameters config.json declares can take"
  with pytest.raises(CheckpointError, match=match) as e:
    checkpoints.load_checkpoint(str(directory))
  _one_line_error(e, directory / name)


def test_flax_msgpack_read_alone_is_bounded_too(tmp_path):
  path = tmp_path / "flax_model.msgpack"
  _sparse_12g(path)
  with pytest.raises(CheckpointError, match="cannot read a Flax msgpack checkpoint \\(larger"):
    flax_msgpack.read(str(path), max_bytes=1 << 20)


# ---------------------------------------------------------------------------------------------
# TensorBundle: index entries checked against the data files before anything is allocated.


def _pb(field: int, value) -> bytes:
  if isinstance(value, int):
    return varint(field << 3) + varint(value % (1 << 64))
  return varint(field << 3 | 2) + varint(len(value)) + value


def _entry(dtype=1, shape=(), offset=0, size=0, slices=()) -> bytes:
  """A BundleEntryProto (dtype 1: DT_FLOAT) in shard 0."""
  out = _pb(1, dtype) + _pb(2, b"".join(_pb(2, _pb(1, d)) for d in shape)) + _pb(3, 0)
  out += _pb(4, offset) + _pb(5, size)
  for extents in slices:
    out += _pb(7, b"".join(_pb(1, _pb(1, s) + _pb(2, n)) for s, n in extents))
  return out


def _block(entries) -> bytes:
  """A LevelDB block without key sharing, one restart point."""
  out = b"".join(varint(0) + varint(len(k)) + varint(len(v)) + k + v for k, v in entries)
  return out + struct.pack("<II", 0, 1)


def _with_trailer(contents: bytes) -> bytes:
  crc = tensorbundle.crc32c(contents + b"\0")
  masked = ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
  return contents + b"\0" + struct.pack("<I", masked)


def _bundle(prefix, entries: dict[bytes, bytes], data: bytes) -> str:
  """A one-shard TensorBundle: PREFIX.index (header + entries) and PREFIX.data-00000-of-00001."""
  header = _pb(1, 1) + _pb(3, _pb(1, 1))  # num_shards 1, version {producer 1}
  block = _block(sorted({b"": header, **entries}.items()))
  file = _with_trailer(block)
  index = _block([(b"\xff", varint(0) + varint(len(block)))])
  index_offset = len(file)
  file += _with_trailer(index)
  footer = varint(0) + varint(0) + varint(index_offset) + varint(len(index))
  file += footer + bytes(40 - len(footer)) + struct.pack("<Q", 0xDB4775248B80FB57)
  with open(f"{prefix}.index", "wb") as f:
    f.write(file)
  with open(f"{prefix}.data-00000-of-00001", "wb") as f:
    f.write(data)
  return str(prefix)


def test_hand_made_bundle_is_read(tmp_path):
  # The valid file the hostile variants are made from: a plain variable and a partitioned one.
  data = np.arange(10, dtype="<f4").tobytes()
  slices = [[(0, 1), (0, 2)], [(1, 1), (0, 2)]]
  entries = {
    b"plain": _entry(shape=(2, 3), offset=0, size=24),
    b"sliced": _entry(shape=(2, 2), slices=slices),
    tensorbundle.slice_key("sliced", slices[0]): _entry(shape=(1, 2), offset=24, size=8),
    tensorbundle.slice_key("sliced", slices[1]): _entry(shape=(1, 2), offset=32, size=8),
  }
  got = tensorbundle.read(_bundle(tmp_path / "model.ckpt-1", entries, data))
  np.testing.assert_array_equal(got["plain"], np.arange(6).reshape(2, 3))
  np.testing.assert_array_equal(got["sliced"], [[6, 7], [8, 9]])


@pytest.mark.parametrize("shape", [(2**32, 2**32), (2**16,) * 4])
def test_bundle_shape_that_wraps_int64(tmp_path, shape):
  prefix = _bundle(tmp_path / "model.ckpt-1", {b"w": _entry(shape=shape, size=0)}, b"")
  with pytest.raises(CheckpointError, match=r"'w' has 0 bytes, its shape .* need \d{20}") as e:
    tensorbundle.read(prefix)
  _one_line_error(e, prefix + ".index")


def test_bundle_variable_larger_than_its_data_file(tmp_path):
  # 2**40 floats declared consistently (4 TiB), 16 bytes present.
  entries = {b"w": _entry(shape=(2**20, 2**20), size=2**42)}
  prefix = _bundle(tmp_path / "model.ckpt-1", entries, b"\0" * 16)
  with pytest.raises(CheckpointError, match="truncated checkpoint data .*'w' needs bytes") as e:
    tensorbundle.read(prefix)
  _one_line_error(e, prefix + ".data-00000-of-00001")


@pytest.mark.parametrize(
  "extents,match",
  [
    ([[(0, 1), (0, 1)]], "slices hold 1 elements, its shape .* needs 1099511627776"),
    ([[(2**20 - 1, 2), (0, 1)]], "lies outside its shape"),
    ([[(0, 1)]], "has the wrong rank"),
  ],
)
def test_bundle_partitioned_variable_checked_before_allocating(tmp_path, extents, match):
  # A (2**20, 2**20) float variable (4 TiB) declared partitioned into slices that cannot
  # tile it: refused before the full tensor is allocated.
  entries = {b"big": _entry(shape=(2**20, 2**20), slices=extents)}
  for ext in extents:
    entries[tensorbundle.slice_key("big", ext)] = _entry(shape=(1, 1), offset=0, size=4)
  prefix = _bundle(tmp_path / "model.ckpt-1", entries, b"\0" * 4)
  with pytest.raises(CheckpointError, match=match) as e:
    tensorbundle.read(prefix)
  _one_line_error(e, prefix + ".index")


def test_bundle_overlapping_slices_and_entries(tmp_path):
  # Two slices that overlap at [0, 0]: their volumes add up, [1, 1] is left uncovered.
  slices = [[(0, 1), (0, 2)], [(0, 2), (0, 1)]]
  entries = {
    b"sliced": _entry(shape=(2, 2), slices=slices),
    tensorbundle.slice_key("sliced", slices[0]): _entry(shape=(1, 2), offset=0, size=8),
    tensorbundle.slice_key("sliced", slices[1]): _entry(shape=(2, 1), offset=8, size=8),
  }
  prefix = _bundle(tmp_path / "a", entries, b"\0" * 16)
  with pytest.raises(CheckpointError, match="slices of 'sliced' overlap") as e:
    tensorbundle.read(prefix)
  _one_line_error(e, prefix + ".index")
  # Many variables reading the same bytes: one file's bytes would be allocated many times.
  entries = {f"w{i}".encode(): _entry(shape=(4,), offset=0, size=16) for i in range(3)}
  prefix = _bundle(tmp_path / "b", entries, b"\0" * 16)
  with pytest.raises(CheckpointError, match="'w1' overlaps the bytes of 'w0'") as e:
    tensorbundle.read(prefix)
  _one_line_error(e, prefix + ".data-00000-of-00001")


def test_bundle_entry_field_of_the_wrong_wire_type(tmp_path):
  entries = {b"w": _pb(1, b"not a varint") + _pb(2, b"")}
  prefix = _bundle(tmp_path / "model.ckpt-1", entries, b"")
  with pytest.raises(CheckpointError, match="corrupt entry for key b'w'") as e:
    tensorbundle.read(prefix)
  _one_line_error(e, prefix + ".index")


# ---------------------------------------------------------------------------------------------
# TF `checkpoint` state files.


def _mesh_tf_dir(tmp_path) -> str:
  directory = tmp_path / "mesh"
  shutil.copytree(os.path.join(FIXTURES, "t5_1_0"), directory)
  return str(directory)


@pytest.mark.parametrize(
  "path,match",
  [
    ("../elsewhere/model.ckpt-1", "leads outside the checkpoint directory"),
    ("/etc/model.ckpt-1", "is outside this directory; pass the checkpoint prefix itself"),
    ("gs://bucket/model.ckpt-1", "is outside this directory"),
  ],
)
def test_state_file_cannot_leave_the_directory(tmp_path, path, match):
  directory = _mesh_tf_dir(tmp_path)
  state = os.path.join(directory, "checkpoint")
  with open(state, "w") as f:
    f.write(f'model_checkpoint_path: "{path}"\n')
  with pytest.raises(CheckpointError, match=match) as e:
    checkpoints.load_checkpoint(directory)
  _one_line_error(e, state)


def test_state_file_paths_inside_the_directory(tmp_path):
  directory = _mesh_tf_dir(tmp_path)
  state = os.path.join(directory, "checkpoint")
  prefix = os.path.join(directory, "model.ckpt-1000700")
  for written in (prefix, "model.ckpt-1000700", "./model.ckpt-1000700"):
    with open(state, "w") as f:
      f.write(f'model_checkpoint_path: "{written}"\n')
    assert os.path.normpath(checkpoints._mesh_tf_prefix(directory)) == prefix


def test_state_file_not_utf8(tmp_path):
  directory = _mesh_tf_dir(tmp_path)
  state = os.path.join(directory, "checkpoint")
  with open(state, "wb") as f:
    f.write(b'model_checkpoint_path: "model.ckpt-1000700\xff\xfe"\n')
  with pytest.raises(CheckpointError, match="not UTF-8 at byte 42") as e:
    checkpoints.load_checkpoint(directory)
  _one_line_error(e, state)


def test_mesh_tf_shapes_of_the_wrong_rank(tmp_path):
  shapes = {"shared/embedding": (24,)}
  with pytest.raises(CheckpointError, match="shared/embedding has shape .24., not 2-D") as e:
    checkpoints.infer_mesh_tf_config(shapes, "model.ckpt-1")
  _one_line_error(e, "model.ckpt-1")


# ---------------------------------------------------------------------------------------------
# --vocab


def test_vocab_that_is_not_a_sentencepiece_model_names_the_file(tmp_path):
  path = tmp_path / "spiece.model"
  path.write_bytes(b"\x0a\xff\xff\xff\xff\x0f not a model")
  with pytest.raises(DataError, match="not a SentencePiece model") as e:
    Vocabulary(str(path))
  _one_line_error(e, path)
  assert isinstance(e.value, UserError)
