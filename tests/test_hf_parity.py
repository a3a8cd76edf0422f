"""Parity with HF transformers' T5ForConditionalGeneration (PyTorch, test-only reference) on
tiny random models of both families saved as HF directories, and with UMT5ForConditionalGeneration
(umT5: a relative-position table in every layer) for `relpos_bias_per_layer`: logits, greedy
outputs, scores, training gradients, relative-position buckets, HF -> tlm -> HF round trip, and
parameter counts of the published sizes (abstract shapes on both sides)."""

import json
import os

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.helpers import BATCH, MAX_DECODE, VOCAB, inputs, random_params  # noqa: E402
from tlm.models import checkpoints, decoding, layers, t5  # noqa: E402
from tlm.models.formats import safetensors  # noqa: E402
from tlm.models.formats.hf_config import from_hf_config, to_hf_config  # noqa: E402
from tlm.train import step as train_step  # noqa: E402


def _hf_model(hf_config: dict, tensors: dict[str, np.ndarray]):
  """A transformers model holding exactly `tensors` (strict), in eval mode: T5, or UMT5 for a
  config.json of model_type "umt5"."""
  if hf_config["model_type"] == "umt5":
    model = transformers.UMT5ForConditionalGeneration(transformers.UMT5Config(**hf_config))
  else:
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(**hf_config))
  if "lm_head.weight" in tensors:
    # transformers >= 5 ties lm_head to the embedding at construction; give it its own.
    model.lm_head.weight = torch.nn.Parameter(torch.empty(model.lm_head.weight.shape))
  state = {k: torch.from_numpy(np.array(v)) for k, v in tensors.items()}
  tied = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
  state.update({k: state["shared.weight"] for k in tied})
  if "lm_head.weight" not in state:
    state["lm_head.weight"] = state["shared.weight"]
  model.load_state_dict(state, strict=True)
  return model.eval()


@pytest.fixture(scope="module", params=["tiny", "tiny-v1_1", "umt5"])
def family(request, tmp_path_factory):
  """(config, tlm params, HF model, HF directory) of a random tiny model; "umt5" is T5 1.1 with
  a relative-position table per layer, HF's UMT5."""
  if request.param == "umt5":
    cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB, relpos_bias_per_layer=True)
  else:
    cfg = t5.get_preset(request.param, vocab_size=VOCAB)
  params = random_params(cfg)
  hf_config = to_hf_config(cfg)
  model = _hf_model(hf_config, checkpoints.params_to_hf(params, cfg))
  directory = str(tmp_path_factory.mktemp(request.param))
  model.save_pretrained(directory)
  return cfg, params, model, directory


def _hf_logits(model, x, decoder_inputs):
  with torch.no_grad():
    out = model(
      input_ids=torch.from_numpy(x),
      attention_mask=torch.from_numpy(x > 0),
      decoder_input_ids=torch.from_numpy(np.asarray(decoder_inputs, np.int64)),
    )
  return out.logits.numpy()


def test_load_hf_directory_and_match_logits(family):
  cfg, params, model, directory = family
  assert os.path.isfile(os.path.join(directory, "model.safetensors"))
  loaded_cfg, loaded = checkpoints.load_checkpoint(directory)
  assert loaded_cfg == cfg
  expected, got = dict(checkpoints.flatten(params)), dict(checkpoints.flatten(loaded))
  assert sorted(got) == sorted(expected)
  for path, value in expected.items():
    np.testing.assert_array_equal(got[path], value, err_msg=path)
  x = inputs(seed=7)
  y = np.random.RandomState(8).randint(2, VOCAB, (BATCH, MAX_DECODE))
  y[:, 0] = 0
  ours = np.asarray(decoding.logits(cfg, loaded, x, y))
  ref = _hf_logits(model, x, y)
  np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)
  assert np.abs(ref).max() > 1.0, "logits should not be trivially small"
  if cfg.relpos_bias_per_layer:  # each layer's own table: they differ
    tables = [loaded["encoder"][f"layers_{i}"]["relpos_bias"]["rel_embedding"] for i in (0, 1)]
    assert np.abs(tables[0] - tables[1]).max() > 0.1


def test_greedy_outputs_equal_hf_generate(family):
  cfg, params, model, _ = family
  x = inputs()  # 16 inputs of 2 to 12 tokens
  ours = np.asarray(decoding.greedy_decode(cfg, params, x, MAX_DECODE))
  with torch.no_grad():
    ref = model.generate(
      input_ids=torch.from_numpy(x),
      attention_mask=torch.from_numpy(x > 0),
      max_new_tokens=MAX_DECODE,
      do_sample=False,
      num_beams=1,
      use_cache=True,
      decoder_start_token_id=0,
      eos_token_id=1,
      pad_token_id=0,
    ).numpy()[:, 1:]  # drop the start token
  ref = np.pad(ref, ((0, 0), (0, MAX_DECODE - ref.shape[1])))
  np.testing.assert_array_equal(ours, ref)
  # Not a degenerate comparison: varied outputs, ending at different lengths.
  assert len({tuple(r) for r in ours}) >= BATCH // 2
  assert len({list(r).index(1) for r in ours if 1 in r}) >= 2


def _random_targets(seed):
  """`[BATCH, MAX_DECODE]` random targets of 1 to MAX_DECODE tokens ending in EOS, 0 after."""
  rs = np.random.RandomState(seed)
  targets = rs.randint(2, VOCAB, (BATCH, MAX_DECODE))
  for b in range(BATCH):
    n = rs.randint(1, MAX_DECODE + 1)
    targets[b, n - 1], targets[b, n:] = 1, 0
  return targets


def test_scores_equal_hf_log_likelihoods(family):
  cfg, params, model, _ = family
  x = inputs(seed=9)
  targets = _random_targets(seed=10)
  total, per_token = map(np.asarray, decoding.score(cfg, params, x, targets))
  # HF's own loss (labels, -100 = ignored) per example.
  labels = torch.from_numpy(np.where(targets > 0, targets, -100))
  with torch.no_grad():
    logits = model(
      input_ids=torch.from_numpy(x), attention_mask=torch.from_numpy(x > 0), labels=labels
    ).logits
  nll = torch.nn.functional.cross_entropy(
    logits.transpose(1, 2), labels, ignore_index=-100, reduction="none"
  ).numpy()
  np.testing.assert_allclose(per_token, -nll, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(total, -nll.sum(-1), rtol=1e-4, atol=1e-4)


def test_training_gradients_equal_torch_autograd(family):
  # The train step's gradients (tlm's cross-entropy, no z-loss, through the custom-VJP
  # matmul of DenseGeneral) against torch autograd through transformers' model.
  cfg, params, model, _ = family
  x = inputs(seed=12)
  targets = _random_targets(seed=13)
  decoder_inputs = np.asarray(decoding.shift_right(targets))

  def loss(p):
    logits = t5.Transformer(cfg).apply({"params": p}, x, decoder_inputs, enable_dropout=False)
    return train_step.loss_sums(logits, targets, targets > 0, z_loss=0.0)["loss"]

  ours = checkpoints.params_to_hf(jax.grad(loss)(params), cfg)
  model.zero_grad(set_to_none=True)
  logits = model(
    input_ids=torch.from_numpy(x),
    attention_mask=torch.from_numpy(x > 0),
    decoder_input_ids=torch.from_numpy(decoder_inputs.astype(np.int64)),
  ).logits
  labels = torch.from_numpy(np.where(targets > 0, targets, -100))
  torch.nn.functional.cross_entropy(
    logits.transpose(1, 2), labels, ignore_index=-100, reduction="sum"
  ).backward()
  theirs = {name: p.grad.numpy().copy() for name, p in model.named_parameters()}
  model.zero_grad(set_to_none=True)
  assert set(ours) == set(theirs)
  for name, grad in theirs.items():
    scale = np.abs(grad).max()
    assert scale > 0, name
    np.testing.assert_allclose(ours[name], grad, rtol=1e-4, atol=1e-5 * scale, err_msg=name)


def test_relative_position_buckets_equal_hf_everywhere():
  attention = transformers.models.t5.modeling_t5.T5Attention
  rel = torch.arange(-1500, 1500)
  for buckets, distance in ((32, 128), (8, 16), (64, 256), (10, 50)):
    for bidirectional in (True, False):
      ref = attention._relative_position_bucket(rel, bidirectional, buckets, distance).numpy()
      ours = layers.relative_position_bucket(rel.numpy(), bidirectional, buckets, distance)
      np.testing.assert_array_equal(ours, ref)


def test_hf_to_tlm_to_hf_round_trip_is_bit_exact(family, tmp_path):
  cfg, params, model, directory = family
  loaded_cfg, loaded = checkpoints.load_checkpoint(directory)
  out = str(tmp_path / "export")
  checkpoints.save_hf(out, loaded_cfg, loaded, spiece_model=b"not-a-real-model")
  original = safetensors.read(os.path.join(directory, "model.safetensors"))
  exported = safetensors.read(os.path.join(out, "model.safetensors"))
  assert sorted(exported) == sorted(original)
  for name, value in original.items():
    assert exported[name].dtype == value.dtype and exported[name].shape == value.shape, name
    assert exported[name].tobytes() == value.tobytes(), name
  with open(os.path.join(out, "spiece.model"), "rb") as f:
    assert f.read() == b"not-a-real-model"
  # transformers loads the export (as the class of the source) and computes the same function.
  reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
  assert type(reloaded) is type(model)
  x, y = inputs(seed=11, batch=2), np.zeros((2, 3), np.int64)
  np.testing.assert_array_equal(_hf_logits(reloaded, x, y), _hf_logits(model, x, y))
  with open(os.path.join(out, "config.json")) as f:
    assert from_hf_config(json.load(f)) == cfg


def test_transformers_5_tied_unscaled_v1_1_imports_with_the_embedding_as_output(tmp_path):
  # transformers >= 5 builds T5 1.1 with lm_head tied to the embedding (unscaled logits)
  # and saves only shared.weight; tlm then uses the transposed embedding as logits_dense.
  cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB)
  params = random_params(cfg)
  params["decoder"]["logits_dense"]["kernel"] = params["token_embedder"]["embedding"].T.copy()
  tensors = checkpoints.params_to_hf(params, cfg)
  del tensors["lm_head.weight"]
  model = _hf_model({**to_hf_config(cfg), "tie_word_embeddings": True}, tensors)
  model.save_pretrained(str(tmp_path))
  assert "lm_head.weight" not in safetensors.read(str(tmp_path / "model.safetensors"))
  loaded_cfg, loaded = checkpoints.load_checkpoint(str(tmp_path))
  assert loaded_cfg == cfg
  np.testing.assert_array_equal(
    loaded["decoder"]["logits_dense"]["kernel"], params["decoder"]["logits_dense"]["kernel"]
  )


# Every published size (HF hub: google-t5/*, google/t5-v1_1-*). Measured totals (both sides):
# t5-small 60,506,624; t5-base 222,903,552; t5-large 737,668,096; t5-3b 2,851,598,336;
# t5-11b 11,307,321,344; t5-v1_1-small 76,961,152; -base 247,577,856; -large 783,150,080;
# -xl 2,849,757,184; -xxl 11,135,332,352.
PUBLISHED = [n for n in t5.PRESETS if not n.startswith("tiny")]


def test_parameter_counts_equal_transformers_on_abstract_shapes():
  for name in PUBLISHED:
    cfg = t5.get_preset(name)
    ours = sum(int(np.prod(s)) for s in checkpoints.param_shapes(cfg).values())
    with torch.device("meta"):
      model = transformers.T5ForConditionalGeneration(transformers.T5Config(**to_hf_config(cfg)))
      if not cfg.logits_via_embedding:  # the published 1.1 checkpoints have their own lm_head
        model.lm_head.weight = torch.nn.Parameter(torch.empty(model.lm_head.weight.shape))
    theirs = sum(p.numel() for p in model.parameters())
    assert ours == theirs, name
  assert len(PUBLISHED) == 10
  # The familiar totals: t5-small ~60.5M, t5-11b ~11.3B, t5-v1_1-xxl ~11.1B.
  count = lambda n: sum(
    int(np.prod(s)) for s in checkpoints.param_shapes(t5.get_preset(n)).values()
  )
  assert count("t5-small") == 60_506_624 and count("t5-11b") == 11_307_321_344
  assert count("t5-v1_1-xxl") == 11_135_332_352
