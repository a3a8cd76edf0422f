"""T5X checkpoints in and out: random HF transformers T5 models (the reference),
written as T5X writes them (tests/t5x_reference.py, transcribed from t5x/checkpoints.py), read
by tlm: the HF model's logits and greedy outputs, for T5 1.0 and 1.1, the legacy layout
(msgpack + gzip zarr, several chunks per array, float32 and bfloat16) and the Orbax one, a
model directory (newest step) and one `checkpoint_STEP`, scanned (stacked) scalable-T5 layers
with a relative-position table per layer (random HF UMT5 models: umT5's own tables), config
inferred from the shapes, local and gs://; `--format=t5x` read back by T5X's own reading code
equal to the source bit for bit."""

import dataclasses
import json
import os
import types

import jax
import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests import t5x_reference as ref  # noqa: E402
from tests.helpers import BATCH, MAX_DECODE, VOCAB, inputs  # noqa: E402
from tlm import storage  # noqa: E402
from tlm.models import checkpoints, decoding, t5  # noqa: E402
from tlm.models.formats import t5x, t5x_msgpack  # noqa: E402

# The same dimensions as test_hf_parity's tiny presets (compiled programs are shared).
HF_DIMS = dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4)
NAMES = {"query": "q", "key": "k", "value": "v", "out": "o"}
LOGITS_TOLERANCE = 1e-4  # float32 (the logits reach about 20)
# Small chunks (T5X: 64 MiB): every array of the tiny model spans several chunk files.
SMALL_CHUNKS = 256


def _hf_model(family: str, seed: int = 0):
  """A random transformers T5 (eval mode), weights scaled up for peaked, varied predictions;
  family "umt5" is transformers' UMT5 (T5 1.1 with a relative-position table in every layer)."""
  v1_1 = family in ("1.1", "umt5")
  config_cls, model_cls = (
    (transformers.UMT5Config, transformers.UMT5ForConditionalGeneration)
    if family == "umt5"
    else (transformers.T5Config, transformers.T5ForConditionalGeneration)
  )
  config = config_cls(
    vocab_size=VOCAB,
    **HF_DIMS,
    feed_forward_proj="gated-gelu" if v1_1 else "relu",
    tie_word_embeddings=not v1_1,
    dropout_rate=0.0,
    decoder_start_token_id=0,
    pad_token_id=0,
    eos_token_id=1,
  )
  torch.manual_seed(seed)
  model = model_cls(config).eval()
  with torch.no_grad():
    if v1_1:  # transformers >= 5 ties lm_head at construction: T5 1.1 has its own
      model.lm_head.weight = torch.nn.Parameter(torch.randn(VOCAB, HF_DIMS["d_model"]) * 0.3)
    for p in model.parameters():
      p.mul_(2.0 if p.ndim > 1 else 1.0)
  return model


def t5x_target(model) -> dict:
  """The T5X `target` tree (t5x/examples/t5/network.py names) of an HF T5, by hand."""
  sd = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
  gated = model.config.is_gated_act
  mlp = ("wi_0", "wi_1", "wo") if gated else ("wi", "wo")
  t = {"token_embedder": {"embedding": sd["shared.weight"]}}
  for stack, layers in (
    ("encoder", model.config.num_layers),
    ("decoder", model.config.num_decoder_layers),
  ):
    rel = f"{stack}.block.{{}}.layer.0.SelfAttention.relative_attention_bias.weight"
    # T5: block 0's table, the stack's; UMT5: every block's own, in scalable T5's layers.
    per_layer = rel.format(1) in sd
    out = {} if per_layer else {"relpos_bias": {"rel_embedding": sd[rel.format(0)].T.copy()}}
    out[f"{stack}_norm"] = {"scale": sd[f"{stack}.final_layer_norm.weight"]}
    for i in range(layers):
      b = f"{stack}.block.{i}.layer"
      if stack == "encoder":
        parts = {
          "pre_attention_layer_norm": 0,
          "attention": (0, "SelfAttention"),
          "pre_mlp_layer_norm": 1,
        }
        mlp_layer = 1
      else:
        parts = {
          "pre_self_attention_layer_norm": 0,
          "self_attention": (0, "SelfAttention"),
          "pre_cross_attention_layer_norm": 1,
          "encoder_decoder_attention": (1, "EncDecAttention"),
          "pre_mlp_layer_norm": 2,
        }
        mlp_layer = 2
      layer = {}
      for name, where in parts.items():
        if isinstance(where, int):
          layer[name] = {"scale": sd[f"{b}.{where}.layer_norm.weight"]}
        else:
          n, module = where
          layer[name] = {
            a: {"kernel": sd[f"{b}.{n}.{module}.{h}.weight"].T.copy()} for a, h in NAMES.items()
          }
      layer["mlp"] = {
        k: {"kernel": sd[f"{b}.{mlp_layer}.DenseReluDense.{k}.weight"].T.copy()} for k in mlp
      }
      if per_layer:
        layer["relpos_bias"] = {"rel_embedding": sd[rel.format(i)].T.copy()}
      out[f"layers_{i}"] = layer
    t[stack] = out
  if gated:
    t["decoder"]["logits_dense"] = {"kernel": sd["lm_head.weight"].T.copy()}
  return t


def _state_dict(target: dict, step: int) -> dict:
  state = {"step": np.asarray(step, np.int32), "param_states": ref.adafactor_init(target)}
  return {"target": target, "state": state}


@pytest.fixture(scope="module", params=["1.0", "1.1"])
def family(request):
  """(T5 family, HF model, T5X target tree, the config tlm should infer)."""
  model = _hf_model(request.param)
  preset = "tiny" if request.param == "1.0" else "tiny-v1_1"
  return request.param, model, t5x_target(model), t5.get_preset(preset, vocab_size=VOCAB)


def _flat(tree) -> dict:
  return dict(checkpoints.flatten(tree))


def _assert_params_equal(params, target, cast=None):
  got, expected = _flat(params), _flat(target)
  assert sorted(got) == sorted(expected)
  for name, value in expected.items():
    value = value if cast is None else value.astype(cast)
    assert got[name].dtype == np.float32, name
    np.testing.assert_array_equal(got[name], value.astype(np.float32), err_msg=name)


def _hf_logits(model, x, y):
  with torch.no_grad():
    return model(
      input_ids=torch.from_numpy(x),
      attention_mask=torch.from_numpy(x > 0),
      decoder_input_ids=torch.from_numpy(np.asarray(y, np.int64)),
    ).logits.numpy()


def _decoder_inputs(seed=8):
  y = np.random.RandomState(seed).randint(2, VOCAB, (BATCH, MAX_DECODE))
  y[:, 0] = 0
  return y


def _logits_difference(model, cfg, params) -> float:
  x, y = inputs(seed=7), _decoder_inputs()
  ours = np.asarray(decoding.logits(cfg, params, x, y))
  theirs = _hf_logits(model, x, y)
  assert np.abs(theirs).max() > 1.0, "logits should not be trivially small"
  return float(np.abs(ours - theirs).max())


def _hf_greedy(model, x):
  with torch.no_grad():
    out = model.generate(
      input_ids=torch.from_numpy(x),
      attention_mask=torch.from_numpy(x > 0),
      max_new_tokens=MAX_DECODE,
      do_sample=False,
      num_beams=1,
      decoder_start_token_id=0,
      eos_token_id=1,
      pad_token_id=0,
    ).numpy()[:, 1:]
  return np.pad(out, ((0, 0), (0, MAX_DECODE - out.shape[1])))


def test_legacy_checkpoint_gives_the_hf_logits_and_greedy_outputs(family, tmp_path):
  name, model, target, expected_cfg = family
  model_dir = str(tmp_path / "model")
  step_dir = ref.save_legacy(
    model_dir, _state_dict(target, 1000), 1000, target_elements=SMALL_CHUNKS
  )
  # Several chunk files per array, gzip-compressed, as T5X's TensorStore writes them.
  zarr_dir = os.path.join(step_dir, "target.encoder.layers_0.mlp.wo.kernel")
  with open(os.path.join(zarr_dir, ".zarray")) as f:
    assert json.load(f)["compressor"]["id"] == "gzip"
  assert len([n for n in os.listdir(zarr_dir) if not n.startswith(".")]) > 4
  cfg, params = checkpoints.load_checkpoint(model_dir)
  assert cfg == expected_cfg
  _assert_params_equal(params, target)
  assert _logits_difference(model, cfg, params) < LOGITS_TOLERANCE
  x = inputs()
  ours = np.asarray(decoding.greedy_decode(cfg, params, x, MAX_DECODE))
  np.testing.assert_array_equal(ours, _hf_greedy(model, x))
  assert len({tuple(r) for r in ours}) >= BATCH // 2  # varied outputs: not a degenerate match


def test_bfloat16_legacy_checkpoint_reads_bfloat16(family, tmp_path):
  # T5X `Checkpointer(save_dtype=jnp.bfloat16)`: TensorStore casts the target to bfloat16.
  name, model, target, expected_cfg = family
  step_dir = ref.save_legacy(
    str(tmp_path),
    _state_dict(target, 5),
    5,
    save_dtype=ml_dtypes.bfloat16,
    target_elements=SMALL_CHUNKS,
  )
  with open(os.path.join(step_dir, "target.token_embedder.embedding", ".zarray")) as f:
    assert json.load(f)["dtype"] == "bfloat16"
  raw = t5x.read_legacy(step_dir, "target")
  assert {v.dtype for v in raw.values()} == {np.dtype(ml_dtypes.bfloat16)}
  cfg, params = checkpoints.load_checkpoint(step_dir)
  _assert_params_equal(params, target, cast=ml_dtypes.bfloat16)
  # The HF model with the same bfloat16-rounded weights computes the same logits.
  rounded = _hf_model(name)
  with torch.no_grad():
    for p in rounded.parameters():
      p.copy_(p.to(torch.bfloat16).to(torch.float32))
  assert t5x_target(rounded).keys() == target.keys()
  _assert_params_equal(params, t5x_target(rounded))
  assert _logits_difference(rounded, cfg, params) < LOGITS_TOLERANCE


@pytest.mark.parametrize("save_dtype", [None, "bfloat16"])
def test_orbax_checkpoint_gives_the_hf_logits_and_greedy_outputs(family, tmp_path, save_dtype):
  name, model, target, expected_cfg = family
  dtype = np.dtype(ml_dtypes.bfloat16) if save_dtype else None  # T5X: 'bfloat16'; orbax 0.12
  # needs a numpy dtype instance
  step_dir = ref.save_orbax(str(tmp_path), _state_dict(target, 7), 7, save_dtype=dtype)
  assert os.path.isdir(os.path.join(step_dir, "state")) and not os.path.exists(
    os.path.join(step_dir, "checkpoint")
  )
  if dtype is not None:
    assert {v.dtype for v in t5x.read_orbax(step_dir).values()} == {np.dtype(dtype)}
  for path in (str(tmp_path), step_dir):
    cfg, params = checkpoints.load_checkpoint(path)
    assert cfg == expected_cfg
    _assert_params_equal(params, target, cast=dtype)
  if dtype is None:
    assert _logits_difference(model, cfg, params) < LOGITS_TOLERANCE
    x = inputs()
    ours = np.asarray(decoding.greedy_decode(cfg, params, x, MAX_DECODE))
    np.testing.assert_array_equal(ours, _hf_greedy(model, x))


def _scaled(target, factor):
  return jax.tree.map(lambda x: (x * factor).astype(np.float32), target)


def test_model_directory_newest_step_and_one_step(family, tmp_path):
  _, _, target, _ = family
  model_dir = str(tmp_path / "run")
  older, newer = _scaled(target, 0.5), target
  ref.save_legacy(model_dir, _state_dict(older, 100), 100)
  ref.save_legacy(model_dir, _state_dict(newer, 200), 200)
  os.makedirs(os.path.join(model_dir, "checkpoint_300.tmp-1700000000"))  # a save in progress
  assert t5x.find(model_dir) == (os.path.join(model_dir, "checkpoint_200"), "legacy")
  _assert_params_equal(checkpoints.load_checkpoint(model_dir)[1], newer)
  _assert_params_equal(checkpoints.load_checkpoint(f"{model_dir}/checkpoint_100")[1], older)
  _assert_params_equal(
    checkpoints.load_checkpoint(f"{model_dir}/checkpoint_100/checkpoint")[1], older
  )
  # A newer step in the Orbax layout (T5X's default now) is the newest.
  ref.save_orbax(model_dir, _state_dict(older, 400), 400)
  assert t5x.find(model_dir) == (os.path.join(model_dir, "checkpoint_400"), "orbax")
  _assert_params_equal(checkpoints.load_checkpoint(model_dir)[1], older)
  # The step's state is there too: T5X's Adafactor slots and the step.
  state = t5x.read_legacy(f"{model_dir}/checkpoint_200", "state")
  assert int(state["step"]) == 200
  assert state["param_states/encoder/layers_0/attention/query/kernel/v"].shape == (64, 64)


def _per_layer(target):
  """The target with the stack's relative table copied into every layer (scalable T5's
  `layers_N/relpos_bias`), as a T5 model converted to scalable T5 starts."""
  out = jax.tree.map(lambda x: x, target)
  for stack in ("encoder", "decoder"):
    if "relpos_bias" in out[stack]:
      shared = out[stack].pop("relpos_bias")
      for k in [k for k in out[stack] if k.startswith("layers_")]:
        out[stack][k]["relpos_bias"] = jax.tree.map(np.copy, shared)
  return out


def _scanned(target, axis=1):
  """The target as scalable T5 with scan_layers lays it out (`ref.scan_layers`), each layer
  with its own relative table (the stack's copied into every layer where it has one)."""
  return ref.scan_layers(_per_layer(target), axis)


def test_scanned_scalable_t5_layers_are_unstacked(family, tmp_path):
  _, model, target, expected_cfg = family
  scanned = _scanned(target)
  assert scanned["encoder"]["encoder"]["attention"]["query"]["kernel"].shape == (64, 2, 4, 16)
  assert scanned["decoder"]["decoder"]["pre_mlp_layer_norm"]["scale"].shape == (64, 2)
  assert scanned["encoder"]["encoder"]["relpos_bias"]["rel_embedding"].shape == (4, 2, 32)
  # (T5X factors scanned Adafactor slots by logical axes: the state is left out here.)
  state = {"target": scanned, "state": {"step": np.asarray(3, np.int32)}}
  ref.save_legacy(str(tmp_path / "legacy"), state, 3)
  ref.save_orbax(str(tmp_path / "orbax"), state, 3)
  # Scalable T5 has a table per layer (here all equal, the T5 model's): read as such.
  expected_cfg = dataclasses.replace(expected_cfg, relpos_bias_per_layer=True)
  for layout in ("legacy", "orbax"):
    cfg, params = checkpoints.load_checkpoint(str(tmp_path / layout))
    assert cfg == expected_cfg
    _assert_params_equal(params, _per_layer(target))
  assert _logits_difference(model, cfg, params) < LOGITS_TOLERANCE
  # Layers stacked along axis 0 (scan_axis=0) are found there.
  state = {"target": _scanned(target, axis=0), "state": {"step": np.asarray(3, np.int32)}}
  ref.save_legacy(str(tmp_path / "axis0"), state, 3)
  cfg, params = checkpoints.load_checkpoint(str(tmp_path / "axis0"))
  assert cfg == expected_cfg
  _assert_params_equal(params, _per_layer(target))


@pytest.fixture(scope="module")
def umt5():
  """A random HF UMT5 (every layer its own relative table) and its T5X target tree."""
  model = _hf_model("umt5", seed=4)
  return model, t5x_target(model)


def test_scanned_umt5_gives_the_hf_umt5_logits_and_greedy_outputs(umt5, tmp_path):
  # umT5 as T5X trains it (scalable T5, scanned): each layer's own relative-position table,
  # stacked [heads, layers, buckets]; tables that differ were refused before
  # relpos_bias_per_layer.
  model, target = umt5
  scanned = _scanned(target)
  rel = scanned["encoder"]["encoder"]["relpos_bias"]["rel_embedding"]
  assert rel.shape == (4, 2, 32) and np.abs(rel[:, 0] - rel[:, 1]).max() > 0.1
  state = {"target": scanned, "state": {"step": np.asarray(6, np.int32)}}
  ref.save_legacy(str(tmp_path / "legacy"), state, 6, target_elements=SMALL_CHUNKS)
  ref.save_orbax(str(tmp_path / "orbax"), state, 6)
  expected_cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB, relpos_bias_per_layer=True)
  for layout in ("legacy", "orbax"):
    cfg, params = checkpoints.load_checkpoint(str(tmp_path / layout))
    assert cfg == expected_cfg
    _assert_params_equal(params, target)
    assert _logits_difference(model, cfg, params) < LOGITS_TOLERANCE
  x = inputs()
  ours = np.asarray(decoding.greedy_decode(cfg, params, x, MAX_DECODE))
  np.testing.assert_array_equal(ours, _hf_greedy(model, x))
  assert len({tuple(r) for r in ours}) >= BATCH // 2
  # Not a comparison the tables could pass unused: with layer 0's table everywhere (what a
  # shared-table model would compute) the logits move away from HF's.
  shared_cfg = dataclasses.replace(cfg, relpos_bias_per_layer=False)
  shared = jax.tree.map(lambda v: v, params)
  for stack in ("encoder", "decoder"):
    shared[stack]["relpos_bias"] = shared[stack]["layers_0"]["relpos_bias"]
    for i in range(2):
      del shared[stack][f"layers_{i}"]["relpos_bias"]
  assert _logits_difference(model, shared_cfg, shared) > 100 * LOGITS_TOLERANCE


def test_umt5_written_back_to_t5x_and_to_hf(umt5, tmp_path):
  # --format=t5x writes each layer's table where scalable T5 keeps it unscanned
  # (target/<stack>/layers_N/relpos_bias/rel_embedding), read back by T5X's reading code bit
  # for bit; --format=hf writes a UMT5 directory that transformers loads.
  model, target = umt5
  state = {"target": _scanned(target), "state": {"step": np.asarray(6, np.int32)}}
  ref.save_legacy(str(tmp_path / "scanned"), state, 6)
  _convert(str(tmp_path / "scanned"), str(tmp_path / "t5x"))
  written = _flat(ref.load_legacy(str(tmp_path / "t5x" / "checkpoint_0"))["target"])
  expected = _flat(target)
  assert sorted(written) == sorted(expected)
  assert "encoder/layers_1/relpos_bias/rel_embedding" in written
  for key, value in expected.items():
    assert written[key].tobytes() == value.astype(np.float32).tobytes(), key
  cfg, params = checkpoints.load_checkpoint(str(tmp_path / "t5x"))
  assert cfg.relpos_bias_per_layer
  _assert_params_equal(params, target)
  _convert(str(tmp_path / "t5x"), str(tmp_path / "hf"), fmt="hf")
  with open(tmp_path / "hf" / "config.json") as f:
    assert json.load(f)["model_type"] == "umt5"
  reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path / "hf")).eval()
  assert isinstance(reloaded, transformers.UMT5ForConditionalGeneration)
  x, y = inputs(seed=7), _decoder_inputs()
  np.testing.assert_array_equal(_hf_logits(reloaded, x, y), _hf_logits(model, x, y))


@pytest.mark.parametrize(
  "overrides",
  [
    dict(num_encoder_layers=3, num_decoder_layers=1, num_heads=2, head_dim=8),
    dict(mlp_activations=("relu",), logits_via_embedding=False, relative_attention_num_buckets=8),
    dict(mlp_activations=("gelu", "linear"), logits_via_embedding=True, emb_dim=32, mlp_dim=48),
  ],
)
def test_config_inferred_from_the_shapes(tmp_path, overrides):
  cfg = t5.get_preset("tiny", vocab_size=50, **overrides)
  rs = np.random.RandomState(0)
  target = checkpoints.unflatten(
    {k: rs.randn(*s).astype(np.float32) for k, s in checkpoints.param_shapes(cfg).items()}
  )
  ref.save_legacy(str(tmp_path), {"target": target, "state": {"step": np.int32(1)}}, 1)
  loaded_cfg, params = checkpoints.load_checkpoint(str(tmp_path))
  assert loaded_cfg == cfg
  _assert_params_equal(params, target)


def _convert(checkpoint, output_dir, fmt="t5x"):
  from tlm.cli import convert

  flags = types.SimpleNamespace(
    checkpoint=checkpoint, output_dir=output_dir, format=fmt, vocab=None
  )
  convert.main(flags)


def test_format_t5x_is_read_back_by_t5x_bit_for_bit(family, tmp_path):
  name, model, target, expected_cfg = family
  hf_dir = str(tmp_path / "hf")
  model.save_pretrained(hf_dir)
  with open(os.path.join(hf_dir, "spiece.model"), "wb") as f:
    f.write(b"vocabulary")
  out = str(tmp_path / "t5x")
  _convert(hf_dir, out)
  source_cfg, source = checkpoints.load_checkpoint(hf_dir)
  assert sorted(os.listdir(out)) == ["checkpoint_0", "spiece.model"]
  state = ref.load_legacy(os.path.join(out, "checkpoint_0"))  # T5X's reading code
  assert sorted(state) == ["state", "target"]
  written, expected = _flat(state["target"]), _flat(source)
  assert sorted(written) == sorted(expected)
  for key, value in expected.items():
    assert written[key].dtype == value.dtype == np.float32, key
    assert written[key].tobytes() == value.tobytes(), key  # bit for bit
  # T5X's initial Adafactor state, at step 0: a T5X training run restores it as its own.
  assert int(state["state"]["step"]) == 0 and state["state"]["step"].dtype == np.int32
  init = _flat(ref.adafactor_init(source))
  got = _flat(state["state"]["param_states"])
  assert sorted(got) == sorted(init)
  for key, value in init.items():
    assert got[key].shape == value.shape and not got[key].any(), key
  # The msgpack file is T5X's: version 3, relative file specs for the arrays T5X partitions.
  with open(os.path.join(out, "checkpoint_0", "checkpoint"), "rb") as f:
    contents = t5x_msgpack.decode(f.read(), "checkpoint")
  assert contents["version"] == 3
  spec = contents["optimizer"]["target"]["encoder"]["layers_0"]["attention"]["query"]["kernel"]
  assert spec["kvstore"] == {
    "driver": "file",
    "path": "target.encoder.layers_0.attention.query.kernel/",
  }
  v_row = contents["optimizer"]["state"]["param_states"]["token_embedder"]["embedding"]["v_row"]
  assert isinstance(v_row, np.ndarray)  # unpartitioned in T5X: inline in the msgpack
  # tlm reads it back as the same model, and the vocabulary beside it.
  cfg, params = checkpoints.load_checkpoint(out)
  # T5X stores no config: dropout takes T5's 0.1 (the HF model's config.json said 0.0).
  assert cfg == expected_cfg == dataclasses.replace(source_cfg, dropout_rate=0.1)
  _assert_params_equal(params, source)
  assert _logits_difference(model, cfg, params) < LOGITS_TOLERANCE
  from tlm.data.vocab import find_spiece_model

  assert find_spiece_model(f"{out}/checkpoint_0") == f"{out}/spiece.model"


def test_t5x_checkpoints_on_gs(bucket, tmp_path):
  model = _hf_model("1.1", seed=3)
  target = t5x_target(model)
  local = str(tmp_path / "legacy")
  # Written by T5X to GCS: the specs hold the gcs kvstore and the dummy bucket.
  step_dir = ref.save_legacy(
    local, _state_dict(target, 9), 9, gcs=True, target_elements=SMALL_CHUNKS
  )
  with open(os.path.join(step_dir, "checkpoint"), "rb") as f:
    spec = t5x_msgpack.decode(f.read(), "x")["optimizer"]["target"]["token_embedder"]["embedding"]
  assert spec["kvstore"]["driver"] == "gcs" and spec["kvstore"]["bucket"] == ref.DUMMY_BUCKET
  storage.upload_tree(local, f"{bucket}/models/legacy")
  ref.save_orbax(str(tmp_path / "orbax"), _state_dict(target, 9), 9)
  storage.upload_tree(str(tmp_path / "orbax"), f"{bucket}/models/orbax")
  expected_cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB)
  for path in (
    f"{bucket}/models/legacy",
    f"{bucket}/models/legacy/checkpoint_9",
    f"{bucket}/models/orbax",
    f"{bucket}/models/orbax/checkpoint_9",
    local,  # gcs specs read from a local copy
  ):
    cfg, params = checkpoints.load_checkpoint(path)
    assert cfg == expected_cfg, path
    _assert_params_equal(params, target)
  # --format=t5x into the bucket: relative `file` specs (T5X turns them into `gcs` ones when it
  # reads from GCS), read back by T5X's code.
  out = f"{bucket}/exported"
  _convert(f"{bucket}/models/legacy", out)
  with storage.open_file(f"{out}/checkpoint_0/checkpoint", "rb") as f:
    spec = t5x_msgpack.decode(f.read(), "x")["optimizer"]["target"]["token_embedder"]["embedding"]
  assert spec["kvstore"] == {"driver": "file", "path": "target.token_embedder.embedding/"}
  store_root = str(tmp_path / "store" / "bucket")  # gs://bucket, as tests/objstore.py keeps it
  state = ref.load_legacy(os.path.join(store_root, "exported", "checkpoint_0"))
  _assert_params_equal(state["target"], target)
  _assert_params_equal(checkpoints.load_checkpoint(out)[1], target)


@pytest.mark.parametrize("scanned", [False, True], ids=["t5", "scanned-umt5"])
def test_model_init_checkpoint_takes_a_t5x_model_directory(tmp_path, scanned):
  from flax import linen as nn

  from tlm.models.t5 import Transformer
  from tlm.sharding import partitioning
  from tlm.train.checkpointing import load_init_params
  from tlm.train.optim import make_optimizer
  from tlm.train.state import state_layout

  target = t5x_target(_hf_model("umt5" if scanned else "1.1", seed=5))
  if scanned:  # (model.relpos_bias_per_layer=true in a config)
    state = {"target": _scanned(target), "state": {"step": np.asarray(10, np.int32)}}
    ref.save_legacy(str(tmp_path), state, 10)
  else:
    ref.save_legacy(str(tmp_path), _state_dict(target, 10), 10)
  cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB, relpos_bias_per_layer=scanned)
  cfg = dataclasses.replace(cfg, dropout_rate=0.0)
  mesh = partitioning.make_mesh(1, 1, jax.devices()[:1])
  with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.AXIS_RULES):
    layout = state_layout(Transformer(cfg), make_optimizer("constant", 1e-3), mesh)
  params = load_init_params(str(tmp_path), cfg, layout.abstract.params)
  _assert_params_equal(jax.tree.map(np.asarray, params), target)


def test_unpartitioned_parameters_inline_in_the_msgpack(family, tmp_path):
  # A T5X parameter without partitioning axes is written into the msgpack file itself.
  _, _, target, expected_cfg = family
  axes = jax.tree_util.tree_map_with_path(
    lambda path, _: None if str(path[-1].key) == "scale" else True, target
  )
  ref.save_legacy(
    str(tmp_path), _state_dict(target, 2), 2, axes={"target": axes, "state": {"step": None}}
  )
  assert not os.path.exists(tmp_path / "checkpoint_2" / "target.encoder.encoder_norm.scale")
  cfg, params = checkpoints.load_checkpoint(str(tmp_path))
  assert cfg == expected_cfg
  _assert_params_equal(params, target)
