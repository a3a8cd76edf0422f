"""The TensorBundle (TensorFlow / Mesh-TF checkpoint) reader against files TensorFlow wrote.

The fixtures under tests/fixtures/meshtf/ were written once by TensorFlow 2.21's own savers
(`tf.compat.v1.train.Saver`, as Mesh TensorFlow uses it, and `tf.train.Checkpoint`) in a
throwaway venv by tests/fixtures/meshtf/make_fixture.py; see the README there. Every value read
here must equal the `expected.npz` written by the same script, bit for bit. The CRC32C and the
OrderedCode slice keys are checked against the published test vectors and TF's own keys; the
snappy path, which TensorFlow no longer writes, against a hand-made table.
"""

import json
import os
import shutil
import struct

import ml_dtypes
import numpy as np
import pytest

from tests.helpers import varint
from tlm.errors import CheckpointError
from tlm.models.formats import protowire, sstable, tensorbundle

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "meshtf")
CHECKPOINTS = {
  "t5_1_0": "model.ckpt-1000700",
  "t5_1_1": "model.ckpt-1000700",
  "misc": "model.ckpt-42",
  "object": "ckpt",
}


def _prefix(name):
  return os.path.join(FIXTURES, name, CHECKPOINTS[name])


def _expected(name):
  with open(os.path.join(FIXTURES, name, "expected_dtypes.json")) as f:
    dtypes = json.load(f)
  npz = np.load(os.path.join(FIXTURES, name, "expected.npz"))
  out = {}
  for key, dtype in dtypes.items():
    value = npz[key]
    out[key] = value.view(ml_dtypes.bfloat16) if dtype == "bfloat16" else value
    assert str(out[key].dtype) == dtype
  return out


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_values_equal_what_tensorflow_saved(name):
  got = tensorbundle.read(_prefix(name))
  want = _expected(name)
  extra = {"_CHECKPOINTABLE_OBJECT_GRAPH"} if name == "object" else set()
  assert set(got) == set(want) | extra
  for key, value in want.items():
    assert got[key].dtype == value.dtype, key
    assert got[key].shape == value.shape, key
    np.testing.assert_array_equal(
      got[key].reshape(-1).view(np.uint8), value.reshape(-1).view(np.uint8), key
    )
  assert list(got) == sorted(got)


def test_mesh_tf_t5_names_and_orientation():
  v10 = tensorbundle.read(_prefix("t5_1_0"))
  v11 = tensorbundle.read(_prefix("t5_1_1"))
  d_model, inner, d_ff, vocab, heads, buckets = 8, 6, 10, 24, 2, 32
  for ckpt in (v10, v11):
    assert ckpt["shared/embedding"].shape == (vocab, d_model)
    assert ckpt["encoder/block_001/layer_000/SelfAttention/q"].shape == (d_model, inner)
    assert ckpt["decoder/block_001/layer_001/EncDecAttention/o"].shape == (inner, d_model)
    assert ckpt["decoder/block_000/layer_002/layer_norm/scale"].shape == (d_model,)
    assert ckpt["encoder/final_layer_norm/scale"].shape == (d_model,)
    for tower in ("encoder", "decoder"):
      bias = f"{tower}/block_000/layer_000/SelfAttention/relative_attention_bias"
      assert ckpt[bias].shape == (heads, buckets)
      assert f"{tower}/block_001/layer_000/SelfAttention/relative_attention_bias" not in ckpt
    assert ckpt["global_step"].dtype == np.int64 and int(ckpt["global_step"]) == 1000700
    # Adafactor slots come back like any other variable.
    assert ckpt["encoder/block_000/layer_000/SelfAttention/q_slot_vc"].shape == (d_model,)
    assert ckpt["encoder/block_000/layer_000/SelfAttention/q_slot_vr"].shape == (inner,)
    assert ckpt["encoder/final_layer_norm/scale_slot_v"].shape == (d_model,)
  assert v10["encoder/block_000/layer_001/DenseReluDense/wi/kernel"].shape == (d_model, d_ff)
  assert "decoder/logits/kernel" not in v10
  assert v11["encoder/block_000/layer_001/DenseReluDense/wi_1/kernel"].shape == (d_model, d_ff)
  assert v11["decoder/logits/kernel"].shape == (d_model, vocab)
  assert v11["shared/embedding"].dtype == ml_dtypes.bfloat16
  assert v11["shared/embedding_slot_vr"].dtype == ml_dtypes.bfloat16


def test_two_shards_are_both_used():
  entries = dict(sstable.read_table(_prefix("t5_1_1") + ".index"))
  header = protowire.proto_fields(entries[b""])
  assert header[1] == [2]  # num_shards
  shards = {tensorbundle._entry(v)["shard_id"] for k, v in entries.items() if k}
  assert shards == {0, 1}


def test_partitioned_variables_slice_keys_match_tensorflow():
  keys = [k for k, _ in sstable.read_table(_prefix("misc") + ".index")]
  tf_slice_keys = {k for k in keys if k.startswith(b"\x00")}
  ours = {
    tensorbundle.slice_key("sliced/rows", [(0, 3), (0, 3)]),
    tensorbundle.slice_key("sliced/rows", [(3, 2), (0, 3)]),
    tensorbundle.slice_key("sliced/rows", [(5, 2), (0, 3)]),
    tensorbundle.slice_key("sliced/cols", [(0, 4), (0, 3)]),
    tensorbundle.slice_key("sliced/cols", [(0, 4), (3, 3)]),
  }
  assert tf_slice_keys == ours


def test_ordered_code_signed_numbers():
  # The worked examples of tensorflow/core/lib/strings/ordered_code.cc.
  assert tensorbundle._ordered_signed(0x424242) == bytes.fromhex("f0424242")
  assert tensorbundle._ordered_signed(-0x800) == bytes.fromhex("3800")
  assert tensorbundle._ordered_signed(0) == b"\x80"
  assert tensorbundle._ordered_signed(-1) == b"\x7f"  # kFullExtent
  assert tensorbundle._ordered_signed(63) == b"\xbf"
  assert tensorbundle._ordered_signed(64) == bytes.fromhex("c040")
  assert tensorbundle._ordered_signed(2**62) == bytes.fromhex("ffc04000000000000000")


# ---------------------------------------------------------------------------------------------
# CRC32C


def _crc32c_bitwise(data: bytes, crc: int = 0) -> int:
  """Bit-at-a-time CRC32C (reflected polynomial 0x82F63B78): independent of the tables."""
  crc ^= 0xFFFFFFFF
  for byte in data:
    crc ^= byte
    for _ in range(8):
      crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
  return crc ^ 0xFFFFFFFF


def test_crc32c_vectors():
  # RFC 3720 (iSCSI) appendix B.4 and the usual check value.
  assert tensorbundle.crc32c(b"123456789") == 0xE3069283
  assert tensorbundle.crc32c(bytes(32)) == 0x8A9136AA
  assert tensorbundle.crc32c(b"\xff" * 32) == 0x62A8AB43
  assert tensorbundle.crc32c(bytes(range(32))) == 0x46DD794E
  assert tensorbundle.crc32c(b"") == 0


@pytest.mark.parametrize("size", [65535, 65536, 70_003, 200_001])
def test_crc32c_vectorized_equals_bitwise(size):
  data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
  assert tensorbundle.crc32c(data) == _crc32c_bitwise(data.tobytes())
  # Extending a crc (TF's crc32c::Extend) equals the crc of the concatenation.
  head, tail = data[: size // 3], data[size // 3 :]
  assert tensorbundle.crc32c(tail, tensorbundle.crc32c(head)) == tensorbundle.crc32c(data)


def test_crc_unmask_inverts_tf_mask():
  for crc in (0, 1, 0xE3069283, 0xFFFFFFFF):
    masked = ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    assert tensorbundle.unmask_crc(masked) == crc


# ---------------------------------------------------------------------------------------------
# SSTable details: snappy blocks, restarts.


def test_snappy_golden_block():
  # "abcd" literal, copy(offset 4, length 8) overlapping its own output, "X" literal.
  block = bytes([13, 0x0C]) + b"abcd" + bytes([0x11, 0x04, 0x00]) + b"X"
  assert sstable._snappy_decompress(block) == b"abcdabcdabcdX"
  # 2-byte-offset copy, and a literal with a 1-byte length (61 bytes).
  literal = bytes(range(61))
  block = bytes([66, 60 << 2, 60]) + literal + bytes([(5 - 1) << 2 | 2, 61, 0])
  assert sstable._snappy_decompress(block) == literal + literal[:5]
  with pytest.raises(ValueError):
    sstable._snappy_decompress(bytes([5, 0x01, 0x09]))  # copy before any output


def _block(entries, restart_interval=2) -> bytes:
  """A LevelDB block with prefix-compressed keys and a restart every `restart_interval`."""
  out, restarts, previous = bytearray(), [], b""
  for i, (key, value) in enumerate(entries):
    shared = 0
    if i % restart_interval:
      while shared < min(len(key), len(previous)) and key[shared] == previous[shared]:
        shared += 1
    else:
      restarts.append(len(out))
    out += varint(shared) + varint(len(key) - shared) + varint(len(value))
    out += key[shared:] + value
    previous = key
  return bytes(out) + b"".join(struct.pack("<I", r) for r in restarts + [len(restarts)])


def _snappy_literal(data: bytes) -> bytes:
  # Valid snappy with no copies: one literal element with a 2-byte length.
  return varint(len(data)) + bytes([61 << 2]) + struct.pack("<H", len(data) - 1) + data


def _with_trailer(contents: bytes, kind: int) -> bytes:
  crc = _crc32c_bitwise(contents + bytes([kind]))
  masked = ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
  return contents + bytes([kind]) + struct.pack("<I", masked)


def test_table_with_snappy_blocks_and_restarts(tmp_path):
  entries = [(b"", b"header"), (b"layer/a", b"1"), (b"layer/ab", b"22"), (b"layer/b", b"333")]
  data_block = _snappy_literal(_block(entries))
  file = _with_trailer(data_block, 1)
  handle = varint(0) + varint(len(data_block))
  index = _block([(b"layer/b", handle)])
  index_offset = len(file)
  file += _with_trailer(index, 0)
  metaindex_offset = len(file)
  file += _with_trailer(_block([]), 0)
  footer = varint(metaindex_offset) + varint(4) + varint(index_offset) + varint(len(index))
  file += footer + bytes(40 - len(footer)) + struct.pack("<Q", 0xDB4775248B80FB57)
  path = str(tmp_path / "t.index")
  open(path, "wb").write(file)
  assert sstable.read_table(path) == entries
  # One flipped bit in the compressed block fails its checksum.
  corrupt = bytearray(file)
  corrupt[10] ^= 1
  open(path, "wb").write(bytes(corrupt))
  with pytest.raises(CheckpointError, match="checksum mismatch"):
    sstable.read_table(path)


# ---------------------------------------------------------------------------------------------
# Damaged checkpoints.


def _copy(tmp_path, name):
  shutil.copytree(os.path.join(FIXTURES, name), tmp_path / name)
  return str(tmp_path / name / CHECKPOINTS[name])


def test_truncated_index(tmp_path):
  prefix = _copy(tmp_path, "t5_1_0")
  data = open(prefix + ".index", "rb").read()
  for cut in (10, len(data) // 2, len(data) - 1):
    open(prefix + ".index", "wb").write(data[:cut])
    with pytest.raises(CheckpointError, match=f"^{prefix}.index: .*(truncated|magic)"):
      tensorbundle.read(prefix)


def test_corrupt_index_block(tmp_path):
  prefix = _copy(tmp_path, "t5_1_0")
  data = bytearray(open(prefix + ".index", "rb").read())
  data[100] ^= 0x40
  open(prefix + ".index", "wb").write(bytes(data))
  with pytest.raises(CheckpointError, match=f"^{prefix}.index: corrupt index .*checksum"):
    tensorbundle.read(prefix)


def test_truncated_data_names_file_and_variable(tmp_path):
  prefix = _copy(tmp_path, "t5_1_1")
  shard = prefix + ".data-00001-of-00002"
  data = open(shard, "rb").read()
  open(shard, "wb").write(data[: len(data) - 100])
  with pytest.raises(CheckpointError, match=f"^{shard}: truncated .*variable '"):
    tensorbundle.read(prefix)


def test_missing_shard(tmp_path):
  prefix = _copy(tmp_path, "t5_1_1")
  os.remove(prefix + ".data-00000-of-00002")
  with pytest.raises(CheckpointError, match="data-00000-of-00002: cannot read"):
    tensorbundle.read(prefix)
  with pytest.raises(CheckpointError, match="nope.index: cannot read"):
    tensorbundle.read(str(tmp_path / "nope"))


def test_corrupt_data_checksum(tmp_path):
  prefix = _copy(tmp_path, "t5_1_0")
  entries = dict(sstable.read_table(prefix + ".index"))
  entry = tensorbundle._entry(entries[b"shared/embedding"])
  shard = prefix + ".data-00000-of-00001"
  data = bytearray(open(shard, "rb").read())
  data[entry["offset"] + 5] ^= 0x01
  open(shard, "wb").write(bytes(data))
  with pytest.raises(CheckpointError, match="checksum of variable 'shared/embedding'"):
    tensorbundle.read(prefix)
  # Without data checksums the (corrupt) bytes are read as stored.
  got = tensorbundle.read(prefix, verify_checksums=False)["shared/embedding"]
  want = _expected("t5_1_0")["shared/embedding"]
  assert (got != want).sum() == 1


def test_index_path_is_accepted():
  got = tensorbundle.read(_prefix("misc") + ".index")
  np.testing.assert_array_equal(got["sliced/rows"], _expected("misc")["sliced/rows"])
