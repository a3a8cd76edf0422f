"""T5X checkpoints against hostile and corrupt files: each case is one
`CheckpointError` whose message is one line naming the file at fault, raised before anything
is opened outside the checkpoint or allocated beyond the bytes present.

A valid tiny legacy checkpoint is written as T5X writes it (tests/t5x_reference.py), then
its msgpack file, `.zarray` metadata or chunk files are replaced. The bombs declare huge
sizes; they do not hold them.
"""

import gzip
import json
import os
import shutil

import msgpack
import numpy as np
import pytest
from flax import serialization

from tests import t5x_reference as ref
from tlm.errors import CheckpointError
from tlm.models import checkpoints, t5
from tlm.models.formats import t5x_zarr

ARRAY = "target.encoder.layers_0.mlp.wo.kernel"  # [128, 64] float32: 4 chunks of [32, 64]


@pytest.fixture
def step_dir(tmp_path):
  cfg = t5.get_preset("tiny", vocab_size=32)
  rs = np.random.RandomState(0)
  target = checkpoints.unflatten(
    {k: rs.randn(*s).astype(np.float32) for k, s in checkpoints.param_shapes(cfg).items()}
  )
  state = {"target": target, "state": {"step": np.asarray(1, np.int32)}}
  directory = ref.save_legacy(str(tmp_path / "model"), state, 1, target_elements=2048)
  checkpoints.load_checkpoint(directory)  # valid as written
  return directory


def _error(path, expected_file, match) -> str:
  with pytest.raises(CheckpointError, match=match) as e:
    checkpoints.load_checkpoint(str(path))
  message = str(e.value)
  assert message.startswith(str(expected_file)), message
  assert "\n" not in message and len(message) < 600, message
  return message


def _contents(step_dir) -> dict:
  with open(os.path.join(step_dir, "checkpoint"), "rb") as f:
    return serialization.msgpack_restore(f.read())


def _write_contents(step_dir, contents):
  with open(os.path.join(step_dir, "checkpoint"), "wb") as f:
    f.write(serialization.msgpack_serialize(contents))


def _spec(contents, name=ARRAY) -> dict:
  node = contents["optimizer"]
  for part in name.split("."):
    node = node[part]
  return node


# ---------------------------------------------------------------------------------------------
# Tensorstore spec paths stay inside the checkpoint directory.


@pytest.mark.parametrize(
  "path",
  ["../outside/", "/etc/", "target.x/../../outside/", "..", "C:/x"],
)
def test_spec_path_cannot_leave_the_checkpoint(step_dir, tmp_path, path):
  # A real zarr array waits outside: following the path would read it without complaint.
  shutil.copytree(os.path.join(step_dir, ARRAY), tmp_path / "outside")
  contents = _contents(step_dir)
  _spec(contents)["kvstore"]["path"] = path
  _write_contents(step_dir, contents)
  message = _error(step_dir, f"{step_dir}/checkpoint", "leads outside the checkpoint directory")
  assert "(target/encoder/layers_0/mlp/wo/kernel)" in message


def test_old_style_spec_path_beside_kvstore_is_confined_too(step_dir):
  # TensorStore < 0.1.14 wrote `path` beside `kvstore`.
  contents = _contents(step_dir)
  spec = _spec(contents)
  spec["path"] = "../../" + spec["kvstore"].pop("path")
  _write_contents(step_dir, contents)
  _error(step_dir, f"{step_dir}/checkpoint", "leads outside the checkpoint directory")


def test_spec_path_symlink_out_of_the_checkpoint(step_dir, tmp_path):
  outside = tmp_path / "elsewhere"
  shutil.move(os.path.join(step_dir, ARRAY), outside)
  os.symlink(outside, os.path.join(step_dir, ARRAY))
  _error(step_dir, f"{step_dir}/checkpoint", "is a link that leads outside")


@pytest.mark.parametrize(
  "change, match",
  [
    (lambda s: s.update(driver="n5"), "TensorStore driver 'n5' is not zarr"),
    (lambda s: s["kvstore"].update(driver="http"), "kvstore driver 'http' is not file"),
    (lambda s: s["kvstore"].update(path=7), "spec without a kvstore path"),
  ],
)
def test_spec_of_the_wrong_kind(step_dir, change, match):
  contents = _contents(step_dir)
  change(_spec(contents))
  _write_contents(step_dir, contents)
  _error(step_dir, f"{step_dir}/checkpoint", match)


# ---------------------------------------------------------------------------------------------
# zarr chunks: declared sizes checked before allocating, inflation bounded.


def _chunk(step_dir, key="1.0") -> str:
  return os.path.join(step_dir, ARRAY, key)


def test_chunk_that_decompresses_to_more_than_its_shape(step_dir):
  chunk_bytes = 32 * 64 * 4
  with open(_chunk(step_dir), "wb") as f:
    f.write(gzip.compress(b"\0" * (chunk_bytes * 50)))  # 50 chunks' worth, compressed to ~400 B
  _error(step_dir, _chunk(step_dir), f"decompresses to more than its declared {chunk_bytes} bytes")


def test_chunk_that_decompresses_to_less_than_its_shape(step_dir):
  with open(_chunk(step_dir), "wb") as f:
    f.write(gzip.compress(b"\1" * 100))
  _error(step_dir, _chunk(step_dir), "decompresses to 100 bytes, not its declared 8192")


def test_corrupt_and_missing_chunks(step_dir):
  with open(_chunk(step_dir), "r+b") as f:
    f.seek(12)
    f.write(b"\xff" * 8)
  _error(step_dir, _chunk(step_dir), "corrupt compressed chunk")
  os.remove(_chunk(step_dir))
  _error(step_dir, _chunk(step_dir), "chunk missing")


def _zarray(step_dir, **changes):
  path = os.path.join(step_dir, ARRAY, ".zarray")
  with open(path) as f:
    meta = json.load(f)
  meta.update(changes)
  with open(path, "w") as f:
    json.dump(meta, f)
  return path


def test_declared_shape_beyond_the_bytes_present_is_refused_before_allocating(
  step_dir, monkeypatch
):
  # One 20-byte chunk declaring 4 TiB: refused from the sizes alone, nothing allocated.
  huge = [1 << 20, 1 << 20]
  contents = _contents(step_dir)
  _spec(contents)["metadata"]["shape"] = huge
  _write_contents(step_dir, contents)
  _zarray(step_dir, shape=huge, chunks=huge)
  for name in os.listdir(os.path.join(step_dir, ARRAY)):
    if not name.startswith("."):
      os.remove(os.path.join(step_dir, ARRAY, name))
  with open(_chunk(step_dir, "0.0"), "wb") as f:
    f.write(gzip.compress(b"\0" * 64))

  empty = np.empty

  def no_large_allocation(shape, *args, **kwargs):
    assert int(np.prod(shape, dtype=object)) < 1 << 20, "allocated before checking the sizes"
    return empty(shape, *args, **kwargs)

  monkeypatch.setattr(t5x_zarr.np, "empty", no_large_allocation)
  _error(step_dir, _chunk(step_dir, "0.0"), r"chunk declares 4398046511104 bytes but holds \d+")


def test_chunk_count_bomb(step_dir):
  contents = _contents(step_dir)
  _spec(contents)["metadata"]["shape"] = [1 << 30, 1 << 30]
  _write_contents(step_dir, contents)
  _zarray(step_dir, shape=[1 << 30, 1 << 30], chunks=[1, 1])
  _error(step_dir, os.path.join(step_dir, ARRAY), r"1152921504606846976 chunks \(at most")


@pytest.mark.parametrize(
  "changes, match",
  [
    (dict(shape=[64, 128]), r"shape \[64, 128\] is not the"),
    (dict(dtype="<f8"), "dtype <f8 is not the 'float32' of the spec"),
    (dict(dtype="|O"), "dtype '|O' is not supported"),
    (dict(dtype="<u2"), "uint16 array"),
    (dict(compressor={"id": "blosc"}), "compressor 'blosc' is not supported"),
    (dict(chunks=[32]), r"chunks \[32\] do not match shape"),
    (dict(chunks=[0, 64]), "chunks .* has an invalid dimension"),
    (dict(filters=[{"id": "delta"}]), "filters are not supported"),
    (dict(zarr_format=3), "not zarr v2 metadata"),
  ],
)
def test_zarray_metadata_that_does_not_fit(step_dir, changes, match):
  if changes.get("dtype") == "<u2":  # T5X < v3 wrote bfloat16 as uint16 (T5X refuses it)
    contents = _contents(step_dir)
    del _spec(contents)["dtype"]
    _write_contents(step_dir, contents)
  path = _zarray(step_dir, **changes)
  _error(step_dir, path, match)


def test_deeply_nested_zarray(step_dir):
  path = os.path.join(step_dir, ARRAY, ".zarray")
  with open(path, "w") as f:
    f.write("[" * 100_000 + "]" * 100_000)
  _error(step_dir, path, "nested")


# ---------------------------------------------------------------------------------------------
# msgpack bombs and malformed msgpack files.


def _header(*keys_and_values: bytes) -> bytes:
  """A msgpack map {"version": 3, "optimizer": <raw bytes>} (a T5X file's start)."""
  return b"\x82\xa7version\x03\xa9optimizer" + b"".join(keys_and_values)


def _ndarray_ext(shape, dtype: bytes, data: bytes) -> bytes:
  payload = msgpack.packb((shape, dtype, data), use_bin_type=True)
  return msgpack.packb(msgpack.ExtType(1, payload))


@pytest.mark.parametrize(
  "raw, match",
  [
    (_header(b"\xdd\xff\xff\xff\xff"), "exceeds max_array_len"),  # 4G-entry list
    (_header(b"\xdf\xff\xff\xff\xff"), "exceeds max_map_len"),  # 4G-entry map
    (_header(b"\xc6\xff\xff\xff\xff" + b"x" * 10), "incomplete input"),  # 4 GiB bytes
    (_header(b"\xc9\xff\xff\xff\xff\x01" + b"x" * 10), "max_ext_len"),  # 4 GiB ext
    (_header(b"\xdb\xff\xff\xff\xff" + b"x" * 10), "incomplete input"),  # 4 GiB string
    (_header(b"\xdb\x00\x01\x11\x70" + b"x" * 70_000), "exceeds max_str_len"),  # a 70 kB name
    (_header(b"\x81\xa1a" * 100_000 + b"\xc0"), "nested more than 64 levels"),
    (_header(b"\x81\xa1a" * 100 + b"\xc0"), "nested more than 64 levels"),
    (_header(b"\x81\xa6target"), "incomplete input"),  # truncated
    (
      _header(b"\x81\xa6target\x81\xa1w" + _ndarray_ext([1 << 32, 1 << 32], b"float32", b"1234")),
      r"array record of shape \[4294967296, 4294967296\] float32 needs 73786976294838206464 "
      "bytes, holds 4",
    ),
    (
      _header(b"\x81\xa6target\x81\xa1w" + _ndarray_ext([1], b"object", b"12345678")),
      "dtype b'object', not a numeric dtype",
    ),
    (_header(msgpack.packb(msgpack.ExtType(2, b"xx"))), "ext type 2 is not an array"),
    (
      _header(
        msgpack.packb(
          {
            "target": {
              "w": {
                "__msgpack_chunked_array__": True,
                "shape": {"0": 1 << 40},
                "chunks": {"0": msgpack.ExtType(1, msgpack.packb(([2], b"float32", b"\0" * 8)))},
              }
            }
          }
        )
      ),
      "chunked array of shape .1099511627776. holds 2 elements",
    ),
  ],
)
def test_msgpack_bombs(step_dir, raw, match):
  with open(os.path.join(step_dir, "checkpoint"), "wb") as f:
    f.write(raw)
  _error(step_dir, f"{step_dir}/checkpoint", match)


@pytest.mark.parametrize(
  "contents, match",
  [
    ({"version": 1, "optimizer": {}}, "version 1 is not supported"),
    ({"version": 4, "optimizer": {}}, "version 4 is not supported"),
    ({"target": {}}, "version 0 is not supported"),
    ({"version": 3, "optimizer": []}, "'optimizer' is not a map"),
    ({"version": 3, "optimizer": {"state": {}}}, "no 'target' map"),
    (
      {"version": 3, "optimizer": {"target": {"a/b": {"c": 1}}}},
      "key 'a/b' under '' is not a name",
    ),
    ({"version": 3, "optimizer": {"target": {"w": "text"}}}, r"\(target/w\): a str, not an array"),
  ],
)
def test_msgpack_that_is_not_a_t5x_state(step_dir, contents, match):
  with open(os.path.join(step_dir, "checkpoint"), "wb") as f:
    f.write(msgpack.packb(contents))
  _error(step_dir, f"{step_dir}/checkpoint", match)


def test_missing_parameter_and_extra_parameter(step_dir):
  contents = _contents(step_dir)
  del contents["optimizer"]["target"]["decoder"]["layers_1"]["mlp"]
  contents["optimizer"]["target"]["decoder"]["extra"] = np.zeros(3, np.float32)
  _write_contents(step_dir, contents)
  message = _error(step_dir, f"{step_dir}/checkpoint", "does not match the model")
  assert "missing (2): decoder/layers_1/mlp/wi/kernel, decoder/layers_1/mlp/wo/kernel" in message
  assert "unexpected (1): decoder/extra" in message


def test_shared_and_per_layer_relative_tables_mixed(step_dir):
  # One layer's own relative table (scalable T5's name) beside the stacks' shared ones.
  contents = _contents(step_dir)
  layer = contents["optimizer"]["target"]["decoder"]["layers_1"]
  layer["relpos_bias"] = {"rel_embedding": np.zeros((4, 32), np.float32)}
  _write_contents(step_dir, contents)
  _error(
    step_dir,
    f"{step_dir}/checkpoint",
    r"both per stack \(encoder/relpos_bias/rel_embedding\) and per layer "
    r"\(decoder/layers_1/relpos_bias/rel_embedding\)",
  )
  # Only some layers with a table: the others are missing.
  del contents["optimizer"]["target"]["encoder"]["relpos_bias"]
  del contents["optimizer"]["target"]["decoder"]["relpos_bias"]
  _write_contents(step_dir, contents)
  message = _error(step_dir, f"{step_dir}/checkpoint", "does not match the model")
  assert "missing (3): " in message and "decoder/layers_0/relpos_bias/rel_embedding" in message
  # A per-layer table that is not [heads, buckets].
  del layer["relpos_bias"]
  contents["optimizer"]["target"]["encoder"]["layers_0"]["relpos_bias"] = {
    "rel_embedding": np.zeros((4, 2, 32), np.float32)
  }
  _write_contents(step_dir, contents)
  _error(step_dir, f"{step_dir}/checkpoint", "encoder/layers_0/relpos_bias/rel_embedding has shape")


def test_tf_state_file_named_checkpoint_is_still_mesh_tf(tmp_path):
  # A directory whose `checkpoint` file is TF's text state file is not T5X's.
  (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-1"\n')
  _error(tmp_path, tmp_path / "model.ckpt-1.index", "cannot read checkpoint index")


def test_model_directory_without_complete_steps(tmp_path):
  os.makedirs(tmp_path / "checkpoint_5")
  _error(tmp_path, tmp_path, "hold neither a 'checkpoint' file nor a 'state' directory")


# ---------------------------------------------------------------------------------------------
# Orbax layout: the tree metadata is bounded JSON before Orbax reads it.


def test_orbax_metadata_bomb(tmp_path):
  cfg = t5.get_preset("tiny", vocab_size=32)
  target = checkpoints.unflatten(
    {k: np.zeros(s, np.float32) for k, s in checkpoints.param_shapes(cfg).items()}
  )
  step_dir = ref.save_orbax(str(tmp_path), {"target": target, "state": {"step": np.int32(1)}}, 1)
  meta = os.path.join(step_dir, "state", "_METADATA")
  with open(meta, "w") as f:
    f.write("[" * 100_000 + "]" * 100_000)
  _error(tmp_path, meta, "nested")


def test_chunk_file_linked_out_of_the_array(step_dir, tmp_path):
  # A chunk that is a link to a file elsewhere (whose bytes would become parameters).
  secret = tmp_path / "secret"
  shutil.copy(_chunk(step_dir), secret)
  os.remove(_chunk(step_dir))
  os.symlink(secret, _chunk(step_dir))
  _error(step_dir, os.path.join(step_dir, ARRAY, ".zarray"), "'1.0' is a link that leads outside")


# ---------------------------------------------------------------------------------------------
# Reads bounded by the format, not by the file's size: a sparse file of 12 GiB holds nothing
# but would be allocated whole by a read bounded by its own size.

SPARSE = 12 << 30


def _sparse(path, size=SPARSE):
  if os.path.lexists(path):
    os.remove(path)
  with open(path, "wb") as f:
    f.truncate(size)


def test_sparse_msgpack_is_refused_by_its_size_before_reading(step_dir):
  path = os.path.join(step_dir, "checkpoint")
  os.truncate(path, SPARSE)  # its msgpack, then 12 GiB of nothing
  _error(step_dir, path, f"cannot read a T5X checkpoint \\(larger than {1 << 30} bytes\\)")


def test_sparse_zarr_chunk_is_refused_by_the_chunk_shape_before_reading(step_dir):
  _sparse(_chunk(step_dir))
  _error(step_dir, _chunk(step_dir), f"chunk file of {SPARSE} bytes, more than a chunk of 8192")


def test_chunk_file_bound_is_what_deflate_can_need():
  # Incompressible data grows by deflate's stored-block overhead only.
  data = np.random.RandomState(0).bytes(1 << 20)
  for level in (0, 1, 9):
    packed = gzip.compress(data, compresslevel=level)
    assert len(packed) <= t5x_zarr.max_chunk_file_bytes(len(data), compressed=True)
  assert t5x_zarr.max_chunk_file_bytes(8192, compressed=False) == 8192


# ---------------------------------------------------------------------------------------------
# Orbax layout: an array's data missing is tlm's one line, last (no tracebacks of TensorStore
# reads still in flight, which arrive at the event loop Orbax closed, timing-dependent).

_MISSING_ARRAY_RUNS = 20


def _orbax_step(tmp_path) -> str:
  cfg = t5.get_preset("tiny", vocab_size=32)
  rs = np.random.RandomState(0)
  target = checkpoints.unflatten(
    {k: rs.randn(*s).astype(np.float32) for k, s in checkpoints.param_shapes(cfg).items()}
  )
  return ref.save_orbax(str(tmp_path), {"target": target, "state": {"step": np.int32(1)}}, 1)


def test_orbax_array_data_missing_is_one_line_every_time(tmp_path):
  import subprocess
  import sys

  step_dir = _orbax_step(tmp_path / "model")
  data = os.path.join(step_dir, "state", "ocdbt.process_0", "d")
  os.remove(os.path.join(data, max(os.listdir(data), key=lambda n: os.path.getsize(f"{data}/{n}"))))
  # One process loads it 20 times (each failure leaves the other arrays' reads in flight),
  # then exits with tlm's line, as run.py does.
  code = (
    "import sys\n"
    "from tlm.errors import CheckpointError\n"
    "from tlm.models import checkpoints\n"
    f"for _ in range({_MISSING_ARRAY_RUNS}):\n"
    "  try:\n"
    f"    checkpoints.load_checkpoint({str(tmp_path / 'model')!r})\n"
    "  except CheckpointError as e:\n"
    "    last = e\n"
    "print(f'error: {last}', file=sys.stderr)\n"
    "sys.exit(1)\n"
  )
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run(
    [sys.executable, "-c", code],
    cwd=root,
    capture_output=True,
    text=True,
    timeout=600,
    env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=root),
  )
  lines = [line for line in proc.stderr.splitlines() if line.strip()]
  assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-3000:]
  assert lines[0].startswith(f"error: {step_dir}/state: cannot restore 'target'"), lines[0]


def test_orbax_checkpoint_named_by_a_relative_path(tmp_path, monkeypatch):
  _orbax_step(tmp_path / "model")
  monkeypatch.chdir(tmp_path)
  _, relative = checkpoints.load_checkpoint("model")
  _, absolute = checkpoints.load_checkpoint(str(tmp_path / "model"))
  want = dict(checkpoints.flatten(absolute))
  got = dict(checkpoints.flatten(relative))
  assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)


def test_orbax_sparse_file_does_not_vouch_for_declared_bytes(tmp_path):
  # The arrays' declared bytes are weighed against the bytes the checkpoint holds: a sparse
  # file of 12 GiB holds none of them.
  from tlm.models.formats import t5x

  directory = os.path.join(_orbax_step(tmp_path / "model"), "state")
  held = t5x._tree_bytes(directory)
  _sparse(os.path.join(directory, "padding"))
  assert t5x._tree_bytes(directory) < held + (1 << 20)


# ---------------------------------------------------------------------------------------------
# What the libraries do with the same files: why tlm decodes T5X's ext records, chunked arrays
# and zarr chunks itself (tlm/models/formats/README.md, "Hand-written readers and why"). Each test
# asserts the library's behaviour today: one that gains the guarantee fails here, and the
# hand-written reader can then give way to it.


def _flax_ext(shape, dtype: str, data: bytes):
  return msgpack.ExtType(1, msgpack.packb((shape, dtype, data), use_bin_type=True))


def test_flax_msgpack_restore_allocates_past_the_bytes_present(step_dir):
  # flax joins a chunked array's chunks with np.concatenate, promoting mixed dtypes: an int8
  # chunk beside a one-element float64 chunk becomes 8 bytes per byte present (a 1 GiB file,
  # 8 GiB). It takes no limits to pass msgpack either.
  import inspect

  n = 1 << 16
  record = {
    "__msgpack_chunked_array__": True,
    "shape": {"0": n + 1},
    "chunks": {
      "0": _flax_ext([n], "int8", b"\1" * n),
      "1": _flax_ext([1], "float64", bytes(8)),
    },
  }
  raw = msgpack.packb({"version": 3, "optimizer": {"target": {"w": record}}})
  joined = serialization.msgpack_restore(raw)["optimizer"]["target"]["w"]
  assert joined.dtype == np.float64 and joined.nbytes >= 7 * len(raw)
  assert list(inspect.signature(serialization.msgpack_restore).parameters) == ["encoded_pytree"]
  # tlm refuses it before joining anything.
  with open(os.path.join(step_dir, "checkpoint"), "wb") as f:
    f.write(raw)
  _error(step_dir, f"{step_dir}/checkpoint", "chunked array whose chunks differ in dtype")


@pytest.mark.parametrize("dtype", ["<U1", "|S4", "|V4"])
def test_flax_msgpack_restore_makes_arrays_of_any_numpy_dtype(step_dir, dtype):
  # flax's ext record is `np.dtype(name)` of whatever name the file holds: text, bytes and
  # void arrays come back as parameters.
  raw = msgpack.packb(
    {"version": 3, "optimizer": {"target": {"w": _flax_ext([1], dtype, bytes(4))}}}
  )
  assert serialization.msgpack_restore(raw)["optimizer"]["target"]["w"].dtype == np.dtype(dtype)
  with open(os.path.join(step_dir, "checkpoint"), "wb") as f:
    f.write(raw)
  _error(step_dir, f"{step_dir}/checkpoint", "not a numeric dtype")


def _tensorstore_read(step_dir) -> np.ndarray:
  import tensorstore as ts

  spec = {
    "driver": "zarr",
    "kvstore": {"driver": "file", "path": os.path.join(step_dir, ARRAY) + "/"},
  }
  return ts.open(spec).result().read().result()


def test_tensorstore_follows_a_chunk_link_out_of_the_array(step_dir, tmp_path):
  # TensorStore's file kvstore opens a chunk that is a link to a file anywhere, and its bytes
  # become the array's.
  outside = tmp_path / "secret"
  outside.write_bytes(gzip.compress(np.full((32, 64), 7, np.float32).tobytes()))
  os.remove(_chunk(step_dir))
  os.symlink(outside, _chunk(step_dir))
  assert np.all(_tensorstore_read(step_dir)[32:64] == 7)
  _error(step_dir, os.path.join(step_dir, ARRAY, ".zarray"), "'1.0' is a link that leads outside")


def test_tensorstore_reads_a_missing_chunk_as_its_fill_value(step_dir):
  # zarr's rule: an absent chunk is the fill value. A checkpoint that lost a chunk file reads
  # as parameters of zeros, without a word.
  whole = _tensorstore_read(step_dir)
  os.remove(_chunk(step_dir))
  read = _tensorstore_read(step_dir)
  assert np.all(read[32:64] == 0) and np.array_equal(read[:32], whole[:32])
  assert not np.all(whole[32:64] == 0)
  _error(step_dir, _chunk(step_dir), "chunk missing")
