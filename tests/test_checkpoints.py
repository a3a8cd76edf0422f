"""Checkpoint name maps and loaders (tlm/models/param_map.py, param_convert.py, checkpoints.py):
strictness, HF PyTorch / Flax / Mesh-TF names written out by hand here, every on-disk layout
`load_checkpoint` accepts, and atomic export."""

import json
import os

import numpy as np
import pytest

from tests.helpers import (
  ATTENTION_NAMES,
  assert_same_params,
  flax_names_by_hand,
  hf_names_by_hand,
  mlp_names,
  normal_params,
  write_hf_dir,
)
from tlm import checksums
from tlm.data.vocab import find_spiece_model
from tlm.errors import CheckpointError
from tlm.models import checkpoints, t5
from tlm.models.formats.hf_config import to_hf_config

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "meshtf")


@pytest.fixture(scope="module", params=["tiny", "tiny-v1_1", "per-layer"])
def model(request):
  # per-layer: T5 1.1 with a relative-position table in every layer (umT5, scalable T5).
  if request.param == "per-layer":
    cfg = t5.get_preset("tiny-v1_1", vocab_size=40, relpos_bias_per_layer=True)
  else:
    cfg = t5.get_preset(request.param, vocab_size=40)
  return cfg, normal_params(cfg)


def test_hf_maps_both_ways(model):
  cfg, params = model
  tensors = hf_names_by_hand(params, cfg)
  exported = checkpoints.params_to_hf(params, cfg)
  assert sorted(exported) == sorted(tensors)
  for k in tensors:
    np.testing.assert_array_equal(exported[k], tensors[k], err_msg=k)
  assert_same_params(checkpoints.params_from_hf(tensors, cfg), params)
  # Old transformers checkpoints carry copies of the embedding and an unused cross-attention
  # relative table: the copies must equal the embedding, the table is skipped.
  extra = {
    "encoder.embed_tokens.weight": tensors["shared.weight"],
    "decoder.embed_tokens.weight": tensors["shared.weight"].copy(),
    "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight": np.zeros((32, 4)),
  }
  if cfg.logits_via_embedding:
    extra["lm_head.weight"] = tensors["shared.weight"]
  assert_same_params(checkpoints.params_from_hf({**tensors, **extra}, cfg), params)


def test_hf_strictness_names_every_bad_key(model):
  cfg, params = model
  tensors = hf_names_by_hand(params, cfg)
  missing = dict(tensors)
  del missing["decoder.block.1.layer.2.DenseReluDense.wo.weight"]
  with pytest.raises(CheckpointError, match=r"missing \(1\): decoder.block.1.layer.2.Dense"):
    checkpoints.params_from_hf(missing, cfg, source="model.safetensors")
  with pytest.raises(CheckpointError, match=r"unexpected \(1\): encoder.block.2.layer.0"):
    checkpoints.params_from_hf({**tensors, "encoder.block.2.layer.0.layer_norm.weight": 1}, cfg)
  wrong = {**tensors, "encoder.block.0.layer.0.SelfAttention.q.weight": np.zeros((64, 63))}
  with pytest.raises(CheckpointError, match=r"SelfAttention.q.weight \(shape \[64, 63\], expe"):
    checkpoints.params_from_hf(wrong, cfg)
  copy = {**tensors, "decoder.embed_tokens.weight": tensors["shared.weight"] + 1}
  with pytest.raises(
    CheckpointError, match="decoder.embed_tokens.weight .must equal shared.weight, as a tied"
  ):
    checkpoints.params_from_hf(copy, cfg)
  # All problems in one message, naming the file.
  everything = {**copy, "x": 1}
  del everything["decoder.block.1.layer.2.DenseReluDense.wo.weight"]
  with pytest.raises(CheckpointError, match=r"^f.bin: .*missing.*; unexpected.*; mismatched"):
    checkpoints.params_from_hf(everything, cfg, source="f.bin")
  if not cfg.logits_via_embedding:
    no_head = {k: v for k, v in tensors.items() if k != "lm_head.weight"}
    with pytest.raises(CheckpointError, match=r"missing \(1\): lm_head.weight"):
      checkpoints.params_from_hf(no_head, cfg, tie_word_embeddings=False)
  else:
    untied = {**tensors, "lm_head.weight": tensors["shared.weight"] * 2}
    with pytest.raises(CheckpointError, match="lm_head.weight .must equal shared.weight"):
      checkpoints.params_from_hf(untied, cfg)


def test_hf_flax_names(model):
  cfg, params = model
  flax = flax_names_by_hand(hf_names_by_hand(params, cfg))
  assert_same_params(checkpoints.params_from_hf(flax, cfg, flax=True), params)


def mesh_tf_names_by_hand(params, cfg, norm="layer_norm"):
  """Mesh-TF variables of tlm params (T5X's importer: same orientation, no transposes)."""
  out = {"shared/embedding": params["token_embedder"]["embedding"], "global_step": np.int64(7)}
  for stack in ("encoder", "decoder"):
    p = params[stack]
    rel = f"{stack}/block_{{:03d}}/layer_000/SelfAttention/relative_attention_bias"
    if "relpos_bias" in p:  # relative_attention_type="bias_shared": block 0's
      out[rel.format(0)] = p["relpos_bias"]["rel_embedding"]
    else:  # relative_attention_type="bias": a variable in every block
      for i in range(2):
        out[rel.format(i)] = p[f"layers_{i}"]["relpos_bias"]["rel_embedding"]
    final = "final_layer_norm" if norm == "layer_norm" else norm
    out[f"{stack}/{final}/scale"] = p[f"{stack}_norm"]["scale"]
    norms = (
      ["pre_attention_layer_norm", "pre_mlp_layer_norm"]
      if stack == "encoder"
      else ["pre_self_attention_layer_norm", "pre_cross_attention_layer_norm", "pre_mlp_layer_norm"]
    )
    attention = [("attention", "SelfAttention")]
    if stack == "decoder":
      attention = [
        ("self_attention", "SelfAttention"),
        ("encoder_decoder_attention", "EncDecAttention"),
      ]
    for i in range(2):
      block = f"{stack}/block_{i:03d}"
      layer = p[f"layers_{i}"]
      for j, n in enumerate(norms):
        out[f"{block}/layer_{j:03d}/{norm}/scale"] = layer[n]["scale"]
      for j, (ours, theirs) in enumerate(attention):
        for a, b in ATTENTION_NAMES.items():
          out[f"{block}/layer_{j:03d}/{theirs}/{b}"] = layer[ours][a]["kernel"]
          out[f"{block}/layer_{j:03d}/{theirs}/{b}_slot_vc"] = np.zeros(3)
      for m in mlp_names(cfg):
        out[f"{block}/layer_{len(attention):03d}/DenseReluDense/{m}/kernel"] = layer["mlp"][m][
          "kernel"
        ]
  if not cfg.logits_via_embedding:
    out["decoder/logits/kernel"] = params["decoder"]["logits_dense"]["kernel"]
  return out


@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
def test_mesh_tf_names_and_config_inference(model, norm):
  cfg, params = model
  tensors = mesh_tf_names_by_hand(params, cfg, norm)
  shapes = {k: np.shape(v) for k, v in tensors.items()}
  inferred = checkpoints.infer_mesh_tf_config(shapes)
  assert inferred == t5.T5Config(**{**cfg.to_dict(), "dropout_rate": 0.1})
  assert_same_params(checkpoints.params_from_mesh_tf(tensors, cfg), params)
  with pytest.raises(CheckpointError, match=r"unexpected \(1\): encoder/block_000/layer_000/S"):
    bad = {**tensors, "encoder/block_000/layer_000/SelfAttention/q_extra": np.zeros(2)}
    checkpoints.params_from_mesh_tf(bad, cfg)
  with pytest.raises(CheckpointError, match="not a Mesh-TF T5 checkpoint"):
    checkpoints.infer_mesh_tf_config({"foo/bar": (2,)})


@pytest.mark.parametrize("name", ["t5_1_0", "t5_1_1"])
def test_load_tensorflow_written_mesh_tf_fixture(name):
  # Written by TensorFlow's own Saver (tests/fixtures/meshtf/README.md): public variable names,
  # Adafactor slots, global_step; t5_1_1 in two shards with a bfloat16 embedding.
  directory = os.path.join(FIXTURES, name)
  expected = np.load(os.path.join(directory, "expected.npz"))
  with open(os.path.join(directory, "expected_dtypes.json")) as f:
    dtypes = json.load(f)

  def value(key):
    v = expected[key]
    if dtypes[key] == "bfloat16":  # stored as bit patterns
      v = (v.astype(np.uint32) << 16).view(np.float32)
    return v

  for path in (directory, os.path.join(directory, "model.ckpt-1000700")):
    cfg, params = checkpoints.load_checkpoint(path)
    assert (cfg.vocab_size, cfg.emb_dim, cfg.num_heads, cfg.head_dim, cfg.mlp_dim) == (
      24,
      8,
      2,
      3,
      10,
    )
    assert cfg.num_encoder_layers == cfg.num_decoder_layers == 2
    assert cfg.logits_via_embedding == (name == "t5_1_0")
    np.testing.assert_array_equal(params["token_embedder"]["embedding"], value("shared/embedding"))
    np.testing.assert_array_equal(
      params["decoder"]["layers_1"]["encoder_decoder_attention"]["out"]["kernel"],
      value("decoder/block_001/layer_001/EncDecAttention/o"),
    )
    np.testing.assert_array_equal(
      params["encoder"]["relpos_bias"]["rel_embedding"],
      value("encoder/block_000/layer_000/SelfAttention/relative_attention_bias"),
    )
    mlp = "wi" if name == "t5_1_0" else "wi_1"
    np.testing.assert_array_equal(
      params["decoder"]["layers_0"]["mlp"][mlp]["kernel"],
      value(f"decoder/block_000/layer_002/DenseReluDense/{mlp}/kernel"),
    )
    np.testing.assert_array_equal(
      params["decoder"]["decoder_norm"]["scale"], value("decoder/final_layer_norm/scale")
    )


def test_load_hf_pytorch_bin_flax_msgpack_and_sharded_safetensors(model, tmp_path):
  from tlm.models.formats import safetensors

  cfg, params = model
  tensors = hf_names_by_hand(params, cfg)
  bin_dir = str(tmp_path / "bin")
  # Old-style pytorch_model.bin with the embedding copies (t5-large-ssm-nq ships only this).
  copies = {"encoder.embed_tokens.weight": tensors["shared.weight"]}
  write_hf_dir(bin_dir, cfg, {**tensors, **copies}, "pytorch_model.bin")
  loaded_cfg, loaded = checkpoints.load_checkpoint(bin_dir)
  assert loaded_cfg == cfg
  assert_same_params(loaded, params)

  flax_dir = str(tmp_path / "flax")
  write_hf_dir(flax_dir, cfg, flax_names_by_hand(tensors), "flax_model.msgpack")
  assert_same_params(checkpoints.load_checkpoint(flax_dir)[1], params)

  sharded = str(tmp_path / "sharded")
  write_hf_dir(sharded, cfg, {}, "none")
  names = sorted(tensors)
  shards = {
    "model-00001-of-00002.safetensors": names[:10],
    "model-00002-of-00002.safetensors": names[10:],
  }
  for shard, keys in shards.items():
    safetensors.write(os.path.join(sharded, shard), {k: tensors[k] for k in keys})
  weight_map = {k: shard for shard, keys in shards.items() for k in keys}
  with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {}, "weight_map": weight_map}, f)
  assert_same_params(checkpoints.load_checkpoint(sharded)[1], params)


def test_tlm_model_dir_and_training_workdir(model, tmp_path):
  from tlm.models.formats import orbax_params

  cfg, params = model
  out = str(tmp_path / "model")
  checkpoints.save_tlm(out, cfg, params, spiece_model=b"vocab")
  assert sorted(os.listdir(out)) == [
    "model_config.json",
    "params",
    "spiece.model",
    checksums.MANIFEST,
  ]
  loaded_cfg, loaded = checkpoints.load_checkpoint(out)
  assert loaded_cfg == cfg
  assert_same_params(loaded, params)
  assert find_spiece_model(out) == os.path.join(out, "spiece.model")
  # A training workdir: the newest checkpoints/<step>/params is loaded.
  work = tmp_path / "work"
  (work / "checkpoints").mkdir(parents=True)
  with open(work / "model_config.json", "w") as f:
    json.dump(cfg.to_dict(), f)
  older = normal_params(cfg, seed=5)
  orbax_params.save(str(work / "checkpoints" / "100" / "params"), older)
  orbax_params.save(str(work / "checkpoints" / "2000" / "params"), params)
  assert_same_params(checkpoints.load_checkpoint(str(work))[1], params)
  # ... or a given step of it.
  assert_same_params(checkpoints.load_checkpoint(str(work / "checkpoints" / "100"))[1], older)
  assert_same_params(checkpoints.load_checkpoint(str(work / "checkpoints" / "100") + "/")[1], older)


def test_user_errors_and_atomic_export(model, tmp_path):
  cfg, params = model
  with pytest.raises(CheckpointError, match="no such checkpoint"):
    checkpoints.load_checkpoint(str(tmp_path / "nothing"))
  with pytest.raises(CheckpointError, match="not a checkpoint"):
    checkpoints.load_checkpoint(str(tmp_path))
  hf = tmp_path / "hf"
  hf.mkdir()
  (hf / "config.json").write_text("{not json")
  with pytest.raises(CheckpointError, match="config.json: cannot read JSON"):
    checkpoints.load_checkpoint(str(hf))
  (hf / "config.json").write_text(json.dumps(to_hf_config(cfg)))
  with pytest.raises(CheckpointError, match="no model.safetensors"):
    checkpoints.load_checkpoint(str(hf))
  # A params tree not matching its config is refused before anything is written.
  bad = checkpoints.unflatten(dict(checkpoints.flatten(params)))
  del bad["decoder"]["decoder_norm"]
  for save in (checkpoints.save_hf, checkpoints.save_tlm):
    with pytest.raises(CheckpointError, match=r"missing \(1\): decoder/decoder_norm/scale"):
      save(str(tmp_path / "out"), cfg, bad)
    assert not os.path.exists(tmp_path / "out")
  checkpoints.save_hf(str(tmp_path / "out"), cfg, params)
  assert sorted(os.listdir(tmp_path / "out")) == ["config.json", "model.safetensors"]
