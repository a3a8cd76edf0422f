"""`run.py --mode=predict|score|convert` end to end, as subprocesses, on tiny models.

The checkpoints are tiny random T5s (1.0 and 1.1) made with transformers in PyTorch and saved
with `save_pretrained` (config.json + model.safetensors), with a SentencePiece model trained
here on a few sentences. Predictions must equal `tlm.models.decoding.greedy_decode` called
directly; scores must equal the log-likelihood transformers computes (its mean token loss times
the number of target tokens); conversions must round-trip bit-exactly. Every bad input must fail
with one `error:` line on stderr naming the file and line (or key), a non-zero exit status, and
no output file.
"""

import json
import os
import shutil
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from tlm.data.vocab import EOS_ID, Vocabulary, train_sentencepiece
from tlm.models.formats import safetensors

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTENCES = [
  f"The {role} of {place} was {person} in {year}."
  for role in ("mayor", "coach", "owner", "president")
  for place in ("Paris", "Berlin", "Chelsea", "Google")
  for person in ("Alice Smith", "Bob Jones")
  for year in (2010, 2014, 2018)
]
INPUTS = [
  "Who was the coach of Chelsea in 2014?",
  "year: 2018 The mayor of <extra_id_0> was Alice Smith.",
  "",
  "Berlin",
  "The president of Google was Bob Jones in 2010.",
  "coach",
  "The owner of Berlin in 2018 was <extra_id_0>.",
]
TARGETS = ["Bob Jones", "Paris", "2014", "Alice Smith was the mayor of Berlin.", "", "x", "Google"]


def _run(*args, expect_ok=True):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run(
    [sys.executable, "run.py", *args], cwd=REPO, env=env, capture_output=True, text=True
  )
  if expect_ok:
    assert proc.returncode == 0, proc.stderr
  return proc


def _hf_model(directory, v1_1: bool, vocab_size: int, seed: int):
  import torch
  import transformers

  config = transformers.T5Config(
    vocab_size=vocab_size,
    d_model=16,
    d_kv=4,
    d_ff=24,
    num_layers=2,
    num_decoder_layers=2,
    num_heads=2,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=20,
    feed_forward_proj="gated-gelu" if v1_1 else "relu",
    tie_word_embeddings=not v1_1,
    decoder_start_token_id=0,
    pad_token_id=0,
    eos_token_id=1,
  )
  torch.manual_seed(seed)
  model = transformers.T5ForConditionalGeneration(config).eval()
  with torch.no_grad():  # larger weights than the default init: peaked, varied predictions
    for p in model.parameters():
      p.mul_(4.0 if p.ndim > 1 else 1.0)
  model.save_pretrained(directory)
  return model


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  root = tmp_path_factory.mktemp("cli")
  spiece = train_sentencepiece(SENTENCES, 40)
  vocab = Vocabulary(spiece)
  models = {}
  for name, v1_1 in (("t5", False), ("t5_v1_1", True)):
    directory = str(root / name)
    # The embedding is larger than the vocabulary, as t5's 32128 > 32100.
    models[name] = _hf_model(directory, v1_1, vocab.vocab_size + 4, seed=len(name))
    with open(os.path.join(directory, "spiece.model"), "wb") as f:
      f.write(spiece)
  inputs = root / "inputs.jsonl"
  inputs.write_text("".join(json.dumps({"input": x, "id": i}) + "\n" for i, x in enumerate(INPUTS)))
  pairs = root / "pairs.jsonl"
  pairs.write_text(
    "".join(json.dumps({"input": x, "target": y}) + "\n" for x, y in zip(INPUTS, TARGETS))
  )
  return {"root": root, "vocab": vocab, "models": models, "inputs": inputs, "pairs": pairs}


def _padded(ids: list[list[int]]) -> np.ndarray:
  """Token ids as one batch, zero-padded to the longest row (as a direct decode takes them)."""
  tokens = np.zeros((len(ids), max(map(len, ids))), np.int32)
  for i, x in enumerate(ids):
    tokens[i, : len(x)] = x
  return tokens


def _read_jsonl(path):
  with open(path) as f:
    return [json.loads(line) for line in f]


def test_predict_equals_direct_greedy_decoding(setup, tmp_path):
  from tlm.models import decoding
  from tlm.models.checkpoints import load_checkpoint

  checkpoint = str(setup["root"] / "t5")
  out = str(tmp_path / "predictions.jsonl")
  _run(
    "--mode=predict",
    f"--checkpoint={checkpoint}",
    f"--input_file={setup['inputs']}",
    f"--output_file={out}",
    "--batch_size=3",  # three batches, the last one partial, two length buckets
    "--max_decode_length=12",
    f"--vocab={setup['root'] / 't5' / 'spiece.model'}",
  )
  rows = _read_jsonl(out)
  assert [r["input"] for r in rows] == INPUTS
  assert [r["id"] for r in rows] == list(range(len(INPUTS)))

  # The same inputs in one batch, padded to the longest, decoded directly.
  vocab = setup["vocab"]
  ids = [vocab.encode(x) + [EOS_ID] for x in INPUTS]
  tokens = _padded(ids)
  config, params = load_checkpoint(checkpoint)
  direct = np.asarray(decoding.greedy_decode(config, params, tokens, 12))
  assert [r["prediction"] for r in rows] == [vocab.decode(row) for row in direct]
  assert len({r["prediction"] for r in rows}) > 1  # the model does not say one thing


def test_predict_beam_search(setup, tmp_path):
  out = str(tmp_path / "beam.jsonl")
  _run(
    "--mode=predict",
    f"--checkpoint={setup['root'] / 't5'}",
    f"--input_file={setup['inputs']}",
    f"--output_file={out}",
    "--beam_size=3",
    "--max_decode_length=6",
    "--batch_size=8",  # one batch: one compilation
  )
  rows = _read_jsonl(out)
  assert [r["input"] for r in rows] == INPUTS
  assert all(isinstance(r["prediction"], str) for r in rows)


def test_predict_samples_the_same_texts_in_any_batch(setup, tmp_path):
  from tlm.models import decoding
  from tlm.models.checkpoints import load_checkpoint

  checkpoint = str(setup["root"] / "t5_v1_1")
  out = str(tmp_path / "sampled.jsonl")
  # Three batches of 3 rows, sorted by length, in two length buckets.
  _run(
    "--mode=predict",
    f"--checkpoint={checkpoint}",
    f"--input_file={setup['inputs']}",
    f"--output_file={out}",
    "--batch_size=3",
    "--max_decode_length=8",
    "--temperature=1.0",
    "--top_k=20",
    "--top_p=0.9",
    "--seed=5",
  )
  predictions = [r["prediction"] for r in _read_jsonl(out)]

  # Directly: all inputs in one batch, each row keyed by its line's index.
  vocab = setup["vocab"]
  ids = [vocab.encode(x) + [EOS_ID] for x in INPUTS]
  tokens = _padded(ids)
  config, params = load_checkpoint(checkpoint)
  direct = decoding.temperature_sample(
    config, params, tokens, 8, seed=5, temperature=1.0, top_k=20, top_p=0.9
  )
  assert predictions == [vocab.decode(row) for row in np.asarray(direct)]
  greedy = np.asarray(decoding.greedy_decode(config, params, tokens, 8))
  assert predictions != [vocab.decode(row) for row in greedy]


# Runs run.py with jax unimportable: a check that comes after jax's import fails loudly.
_WITHOUT_JAX = (
  "import runpy, sys; sys.modules['jax'] = None; sys.argv = ['run.py', *sys.argv[1:]]; "
  "runpy.run_path('run.py', run_name='__main__')"
)


def _predict_without_jax(setup, out: str, *flags):
  """`--mode=predict` of the tiny T5 in a child where importing jax fails."""
  return subprocess.run(
    [
      sys.executable,
      "-c",
      _WITHOUT_JAX,
      "--mode=predict",
      f"--checkpoint={setup['root'] / 't5'}",
      f"--input_file={setup['inputs']}",
      f"--output_file={out}",
      *flags,
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
  )


@pytest.mark.parametrize(
  "flags,fragment",
  [
    (["--temperature=-1"], "--temperature must be a finite number >= 0"),
    (["--temperature=nan"], "--temperature must be a finite number >= 0"),
    (["--temperature=inf"], "--temperature must be a finite number >= 0"),
    # Finite as a Python float, inf once the decoder casts it to float32.
    (["--temperature=1e39"], "--temperature must be a finite number >= 0 and <= 3.402823e+38"),
    (["--temperature=1", "--top_k=-3"], "--top_k must be in [0, 2**31)"),
    # Beyond int32 (the decoder's k) and beyond int64: one line, not an OverflowError.
    (["--temperature=1", "--top_k=2147483648"], "--top_k must be in [0, 2**31)"),
    (["--temperature=1", "--top_k=" + "9" * 30], "--top_k must be in [0, 2**31)"),
    (["--temperature=1", "--top_p=0"], "--top_p must be in (0, 1]"),
    (["--temperature=1", "--top_p=1.5"], "--top_p must be in (0, 1]"),
    (["--temperature=1", "--seed=-1"], "--seed must be in [0, 2**32)"),
    (["--temperature=1", "--seed=4294967296"], "--seed must be in [0, 2**32)"),
    (["--beam_size=4", "--top_k=40", "--temperature=0.7"], "beam search (--beam_size=4)"),
    (["--beam_size=2", "--temperature=0.7"], "sampling (--temperature=0.7)"),
    (["--top_k=40"], "--top_k=40 only restrict sampling"),
    (["--top_p=0.9"], "--temperature=0 is greedy decoding"),
  ],
)
def test_bad_sampling_flags_fail_before_jax(setup, tmp_path, flags, fragment):
  out = str(tmp_path / "out.jsonl")
  proc = _predict_without_jax(setup, out, *flags)
  _assert_fails(proc, out, fragment)


def test_good_sampling_flags_reach_jax(setup, tmp_path):
  # The control of the test above: valid flags get as far as importing jax, which fails here.
  flags = ("--temperature=0.7", "--top_k=2147483647", "--top_p=0.9", "--seed=4294967295")
  proc = _predict_without_jax(setup, str(tmp_path / "out.jsonl"), *flags)
  assert proc.returncode != 0 and "ModuleNotFoundError: import of jax halted" in proc.stderr


def test_score_equals_transformers_log_likelihood(setup, tmp_path):
  import torch

  name = "t5_v1_1"
  out = str(tmp_path / "scores.jsonl")
  _run(
    "--mode=score",
    f"--checkpoint={setup['root'] / name}",
    f"--input_file={setup['pairs']}",
    f"--output_file={out}",
    "--batch_size=4",
  )
  rows = _read_jsonl(out)
  assert [(r["input"], r["target"]) for r in rows] == list(zip(INPUTS, TARGETS))
  vocab, model = setup["vocab"], setup["models"][name]
  for row in rows:
    input_ids = torch.tensor([vocab.encode(row["input"]) + [EOS_ID]])
    labels = torch.tensor([vocab.encode(row["target"]) + [EOS_ID]])
    with torch.no_grad():
      loss = model(input_ids=input_ids, labels=labels).loss.item()  # mean over target tokens
    assert row["num_tokens"] == labels.shape[1]
    np.testing.assert_allclose(row["log_likelihood"], -loss * labels.shape[1], rtol=1e-5, atol=1e-4)


def test_convert_round_trips(setup, tmp_path):
  import torch
  import transformers

  source = str(setup["root"] / "t5_v1_1")
  hf, tlm_dir, back = str(tmp_path / "hf"), str(tmp_path / "tlm"), str(tmp_path / "back")
  _run("--mode=convert", f"--checkpoint={source}", f"--output_dir={hf}", "--format=hf")
  _run("--mode=convert", f"--checkpoint={hf}", f"--output_dir={tlm_dir}", "--format=tlm")
  _run("--mode=convert", f"--checkpoint={tlm_dir}", f"--output_dir={back}", "--format=hf")
  original = safetensors.read(os.path.join(source, "model.safetensors"))
  for directory in (hf, back):
    converted = safetensors.read(os.path.join(directory, "model.safetensors"))
    # HF may store tied copies under extra names; every original tensor must be there, equal.
    for key, value in original.items():
      np.testing.assert_array_equal(converted[key], value, key)
    with open(os.path.join(directory, "spiece.model"), "rb") as f:
      assert f.read() == setup["vocab"].serialized_model
  for name in ("model_config.json", "spiece.model", "params"):
    assert os.path.exists(os.path.join(tlm_dir, name))
  # transformers loads the converted directory and computes the same logits.
  reloaded = transformers.T5ForConditionalGeneration.from_pretrained(back).eval()
  ids = torch.tensor([[5, 6, 7, EOS_ID]])
  with torch.no_grad():
    want = setup["models"]["t5_v1_1"](input_ids=ids, decoder_input_ids=ids).logits
    got = reloaded(input_ids=ids, decoder_input_ids=ids).logits
  np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_convert_never_replaces_what_it_did_not_write(setup, tmp_path):
  source = str(setup["root"] / "t5_v1_1")
  # A file as --output_dir was moved aside and replaced; a directory holding a user's file
  # was replaced with it. Both are refused before anything is written, and stay as they were.
  mine = tmp_path / "out_file"
  mine.write_text("mine")
  notes = tmp_path / "out_dir" / "notes.txt"
  notes.parent.mkdir()
  notes.write_text("precious")
  for out, fragment in ((mine, "exists and is not a directory"), (notes.parent, "notes.txt")):
    proc = _run(
      "--mode=convert",
      f"--checkpoint={source}",
      f"--output_dir={out}",
      "--format=hf",
      expect_ok=False,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {out}: ") and fragment in lines[0], lines[0]
  assert mine.read_text() == "mine" and notes.read_text() == "precious"
  assert sorted(os.listdir(tmp_path)) == ["out_dir", "out_file"]  # no temporary, no lock left
  # A previous convert's output (here of another format) is replaced as before.
  previous = tmp_path / "previous"
  previous.mkdir()
  for name in ("model_config.json", "spiece.model", "tlm_checksums.json"):
    (previous / name).write_text("old")
  (previous / "params").mkdir()
  _run("--mode=convert", f"--checkpoint={source}", f"--output_dir={previous}", "--format=hf")
  assert sorted(os.listdir(previous)) == ["config.json", "model.safetensors", "spiece.model"]


# ---------------------------------------------------------------------------------------------
# Bad input: one line on stderr naming the file and line (or key), exit != 0, no output.


def _assert_fails(proc, output, *fragments):
  assert proc.returncode != 0
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
  for fragment in fragments:
    assert fragment in lines[0], (fragment, lines[0])
  assert not os.path.exists(output)
  leftovers = [n for n in os.listdir(os.path.dirname(output)) if n.startswith(".")]
  assert not leftovers, leftovers


@pytest.mark.parametrize(
  "mode,content,fragment",
  [
    ("predict", '{"input": "a"}\n{"input": "b"\n', "bad.jsonl:2: malformed JSON"),
    ("predict", '{"input": "a"}\n\n{"question": "b"}\n', "bad.jsonl:3: missing field(s) 'input'"),
    ("predict", '{"input": 5}\n', "bad.jsonl:1: field 'input' must be a string"),
    ("score", '{"input": "a", "target": "b"}\n{"input": "a"}\n', "bad.jsonl:2: missing field"),
    ("score", '{"input": "a", "target": null}\n', "bad.jsonl:1: field 'target' must be a string"),
  ],
)
def test_bad_input_lines(setup, tmp_path, mode, content, fragment):
  bad = tmp_path / "bad.jsonl"
  bad.write_text(content)
  out = str(tmp_path / "out.jsonl")
  proc = _run(
    f"--mode={mode}",
    f"--checkpoint={setup['root'] / 't5'}",
    f"--input_file={bad}",
    f"--output_file={out}",
    expect_ok=False,
  )
  _assert_fails(proc, out, str(tmp_path) + "/" + fragment)


def test_missing_input_file_and_flags(setup, tmp_path):
  out = str(tmp_path / "out.jsonl")
  missing = str(tmp_path / "missing.jsonl")
  checkpoint = f"--checkpoint={setup['root'] / 't5'}"
  proc = _run(
    "--mode=predict", checkpoint, f"--input_file={missing}", f"--output_file={out}", expect_ok=False
  )
  _assert_fails(proc, out, f"{missing}: no such file")
  proc = _run(
    "--mode=score", f"--input_file={setup['pairs']}", f"--output_file={out}", expect_ok=False
  )
  _assert_fails(proc, out, "--checkpoint is required")


def test_no_vocabulary(setup, tmp_path):
  checkpoint = tmp_path / "novocab"
  shutil.copytree(setup["root"] / "t5", checkpoint)
  os.remove(checkpoint / "spiece.model")
  out = str(tmp_path / "out.jsonl")
  args = [f"--checkpoint={checkpoint}", f"--input_file={setup['inputs']}", f"--output_file={out}"]
  proc = _run("--mode=predict", *args, expect_ok=False)
  _assert_fails(proc, out, "no vocabulary", "--vocab")


def test_truncated_checkpoint(setup, tmp_path):
  checkpoint = tmp_path / "truncated"
  shutil.copytree(setup["root"] / "t5", checkpoint)
  weights = checkpoint / "model.safetensors"
  weights.write_bytes(weights.read_bytes()[:-100])
  out = str(tmp_path / "out.jsonl")
  proc = _run(
    "--mode=predict",
    f"--checkpoint={checkpoint}",
    f"--input_file={setup['inputs']}",
    f"--output_file={out}",
    expect_ok=False,
  )
  _assert_fails(proc, out, str(weights), "trunc")
  dst = str(tmp_path / "converted")
  proc = _run(
    "--mode=convert", f"--checkpoint={checkpoint}", f"--output_dir={dst}", expect_ok=False
  )
  _assert_fails(proc, dst, str(weights))


def test_mismatched_checkpoint(setup, tmp_path):
  # config.json says 3 encoder layers; the weights have 2: the missing keys are named.
  checkpoint = tmp_path / "mismatched"
  shutil.copytree(setup["root"] / "t5", checkpoint)
  config = json.loads((checkpoint / "config.json").read_text())
  config["num_layers"] = 3
  (checkpoint / "config.json").write_text(json.dumps(config))
  out = str(tmp_path / "out.jsonl")
  proc = _run(
    "--mode=score",
    f"--checkpoint={checkpoint}",
    f"--input_file={setup['pairs']}",
    f"--output_file={out}",
    expect_ok=False,
  )
  _assert_fails(proc, out, "encoder.block.2")


def test_vocabulary_larger_than_embedding(setup, tmp_path):
  big = train_sentencepiece(SENTENCES, 45)  # 145 ids > the model's 144
  (tmp_path / "big.model").write_bytes(big)
  out = str(tmp_path / "out.jsonl")
  proc = _run(
    "--mode=predict",
    f"--checkpoint={setup['root'] / 't5'}",
    f"--input_file={setup['inputs']}",
    f"--output_file={out}",
    f"--vocab={tmp_path / 'big.model'}",
    expect_ok=False,
  )
  _assert_fails(proc, out, "145 ids", "144")


def test_convert_mesh_tf_checkpoint_to_hf(tmp_path):
  """The TF-written Mesh-TF fixture (tests/fixtures/meshtf) converts to an HF directory that
  transformers loads with no missing key, each kernel transposed to PyTorch's [out, in]."""
  import transformers

  source = os.path.join(REPO, "tests", "fixtures", "meshtf", "t5_1_1")  # dir + TF state file
  out = str(tmp_path / "hf")
  _run("--mode=convert", f"--checkpoint={source}", f"--output_dir={out}", "--format=hf")
  expected = np.load(os.path.join(source, "expected.npz"))
  tf = {k: expected[k] for k in expected.files}
  tf["shared/embedding"] = tf["shared/embedding"].view(ml_dtypes.bfloat16).astype(np.float32)
  hf = safetensors.read(os.path.join(out, "model.safetensors"))
  pairs = {
    "shared.weight": tf["shared/embedding"],
    "encoder.block.1.layer.0.SelfAttention.q.weight": tf[
      "encoder/block_001/layer_000/SelfAttention/q"
    ].T,
    "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": tf[
      "encoder/block_000/layer_000/SelfAttention/relative_attention_bias"
    ].T,
    "decoder.block.1.layer.1.EncDecAttention.o.weight": tf[
      "decoder/block_001/layer_001/EncDecAttention/o"
    ].T,
    "decoder.block.0.layer.2.DenseReluDense.wi_1.weight": tf[
      "decoder/block_000/layer_002/DenseReluDense/wi_1/kernel"
    ].T,
    "decoder.block.1.layer.2.layer_norm.weight": tf["decoder/block_001/layer_002/layer_norm/scale"],
    "decoder.final_layer_norm.weight": tf["decoder/final_layer_norm/scale"],
    "lm_head.weight": tf["decoder/logits/kernel"].T,
  }
  for name, value in pairs.items():
    np.testing.assert_array_equal(hf[name], value, name)
  model, info = transformers.T5ForConditionalGeneration.from_pretrained(
    out, output_loading_info=True
  )
  assert not info["missing_keys"] and not info["unexpected_keys"], info
  # transformers 5 reads `tie_word_embeddings: false` as "do not scale the decoder output"
  # and keeps an lm_head that differs from the embedding untied.
  assert model.config.feed_forward_proj == "gated-gelu" and not model.config.scale_decoder_outputs
  np.testing.assert_array_equal(model.lm_head.weight.detach().numpy(), pairs["lm_head.weight"])


# ---------------------------------------------------------------------------------------------
# Inputs longer than the training input length: one warning per file; --truncate_inputs.


def test_long_inputs_warned_and_truncated(setup, tmp_path):
  from tlm.models import decoding
  from tlm.models.checkpoints import load_checkpoint

  # The same model, recorded as trained on 8-token inputs (HF config.json's n_positions).
  checkpoint = tmp_path / "short"
  shutil.copytree(setup["root"] / "t5", checkpoint)
  config = json.loads((checkpoint / "config.json").read_text())
  config["n_positions"] = 8
  (checkpoint / "config.json").write_text(json.dumps(config))
  vocab = setup["vocab"]
  long = [x for x in INPUTS if len(vocab.encode(x)) + 1 > 8]
  assert 0 < len(long) < len(INPUTS)
  args = [
    "--mode=predict",
    f"--checkpoint={checkpoint}",
    f"--input_file={setup['inputs']}",
    "--max_decode_length=6",
    "--batch_size=8",
  ]
  warning = (
    f"warning: {setup['inputs']}: {len(long)} of {len(INPUTS)} inputs are longer than the "
    f"model's training input length of 8 tokens ({checkpoint}/config.json n_positions)"
  )
  whole = _run(*args, f"--output_file={tmp_path / 'whole.jsonl'}")
  warnings = [x for x in whole.stderr.splitlines() if x.startswith("warning:")]
  assert len(warnings) == 1 and warnings[0].startswith(warning), whole.stderr
  assert "they run whole" in warnings[0]
  cut = _run(*args, "--truncate_inputs", f"--output_file={tmp_path / 'cut.jsonl'}")
  warnings = [x for x in cut.stderr.splitlines() if x.startswith("warning:")]
  assert len(warnings) == 1 and "--truncate_inputs cuts them to 8 tokens" in warnings[0]

  # Direct greedy decoding of the whole and of the cut ids (first 7 ids + EOS).
  config, params = load_checkpoint(str(checkpoint))
  for name, limit in (("whole", None), ("cut", 8)):
    ids = [vocab.encode(x) + [EOS_ID] for x in INPUTS]
    if limit:
      ids = [x if len(x) <= limit else x[: limit - 1] + [EOS_ID] for x in ids]
    tokens = _padded(ids)
    direct = np.asarray(decoding.greedy_decode(config, params, tokens, 6))
    rows = _read_jsonl(tmp_path / f"{name}.jsonl")
    assert [r["prediction"] for r in rows] == [vocab.decode(row) for row in direct], name
  # The long inputs' predictions differ between the two: truncation happened.
  whole_rows, cut_rows = (_read_jsonl(tmp_path / f"{n}.jsonl") for n in ("whole", "cut"))
  assert any(w != c for w, c in zip(whole_rows, cut_rows))


def test_training_input_length_sources(tmp_path):
  from tlm import configs
  from tlm.cli.inference import training_input_length

  # A training workdir: its experiment config's data.input_length, for it and for its steps.
  workdir = tmp_path / "w"
  (workdir / "checkpoints" / "400").mkdir(parents=True)
  (workdir / "model_config.json").write_text("{}")
  config = configs.override(configs.get("tiny_temporal"), ["data.input_length=48"])
  (workdir / "config.json").write_text(json.dumps(configs.to_dict(config)))
  where = f"{workdir}/config.json data.input_length"
  assert training_input_length(str(workdir)) == (48, where)
  assert training_input_length(str(workdir / "checkpoints" / "400")) == (48, where)
  # An HF directory: n_positions; anything else: the configs' default.
  hf = tmp_path / "hf"
  hf.mkdir()
  (hf / "config.json").write_text(json.dumps({"n_positions": 512}))
  assert training_input_length(str(hf)) == (512, f"{hf}/config.json n_positions")
  default = (configs.DataConfig.input_length, "tlm's default data.input_length")
  (hf / "config.json").write_text("[" * 100_000)  # unreadable: load_checkpoint reports it
  assert training_input_length(str(hf)) == default
  assert training_input_length(str(tmp_path / "model.ckpt-1000")) == default
