"""Inference on the mesh: the Predictor on 8 simulated devices (4 x 2, and 8 with FSDP) gives
the single-device outputs, sampled ones included (same seed); `--mode=predict` / `score` on
two processes (gloo) write the files one process writes; predict / score reject the `--set`
keys they do not use."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import (
  FIXTURES,
  ROOT,
  environment,
  free_port,
  random_params,
  run_child,
  run_fixture,
  subprocess_env,
)
from tlm.models import checkpoints, t5

VOCAB = os.path.join(FIXTURES, "tiny_data", "spiece.model")
# Jobs on a coordinator port: with the other such tests on one worker (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("coordinator")


@pytest.fixture(scope="module")
def meshes(tmp_path_factory):
  out = tmp_path_factory.mktemp("mesh_inference") / "out.json"
  run_fixture("mesh_inference.py", 8, str(out))
  return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["4x2", "8_fsdp"])
def test_meshes_give_the_single_device_outputs(meshes, name):
  one, run = meshes["1"], meshes[name]
  assert run["predictions"] == one["predictions"]
  assert len(set(one["predictions"])) > 5  # the inputs decode to different texts
  # Sums of ~30 float32 log-probs of ~-10 each: within 1e-5 of their value.
  np.testing.assert_allclose(run["log_likelihood"], one["log_likelihood"], rtol=1e-5)
  np.testing.assert_allclose(run["rank"], one["rank"], rtol=1e-5)


@pytest.mark.slow
def test_a_seed_samples_the_same_texts_on_any_mesh_and_batch(meshes):
  one = meshes["1"]
  for name in ("4x2", "8_fsdp"):
    assert meshes[name]["sampled"] == one["sampled"], name
  assert one["sampled_batch_3"] == one["sampled"]
  # Sampling happened: the texts are not the greedy ones.
  differ = sum(s != g for s, g in zip(one["sampled"], one["predictions"]))
  assert differ > len(one["sampled"]) // 2, (one["sampled"], one["predictions"])


@pytest.mark.slow
def test_parameters_are_placed_by_the_rules(meshes):
  # wi_0 is [embed=64, mlp=128]: split over "model" on 4 x 2; with FSDP also over "data".
  assert meshes["1"]["wi_0_shard"] == [64, 128]
  assert meshes["4x2"]["wi_0_spec"] == "(None, 'model')"
  assert meshes["4x2"]["wi_0_shard"] == [64, 64]
  assert meshes["8_fsdp"]["wi_0_spec"] == "('data', 'model')"
  assert meshes["8_fsdp"]["wi_0_shard"] == [8, 128]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  cfg = t5.get_preset("tiny-v1_1", vocab_size=180, num_encoder_layers=1, num_decoder_layers=1)
  path = str(tmp_path_factory.mktemp("model") / "tiny")
  with open(VOCAB, "rb") as f:
    checkpoints.save_tlm(path, cfg, random_params(cfg, seed=5, eos_scale=2.0), f.read())
  return path


def _cli(mode, model_dir, input_file, output_file, *flags):
  return [
    sys.executable,
    "run.py",
    f"--mode={mode}",
    f"--checkpoint={model_dir}",
    f"--input_file={input_file}",
    f"--output_file={output_file}",
    "--batch_size=4",
    *flags,
  ]


def _inputs(path, n=7):
  words = "the coach of a team in year 2014 plays for city".split()
  rng = np.random.default_rng(0)
  with open(path, "w") as f:
    for _ in range(n):
      text = " ".join(rng.choice(words, size=int(rng.integers(1, 12))))
      f.write(json.dumps({"input": text, "target": " ".join(rng.choice(words, size=3))}) + "\n")


@pytest.mark.slow
@pytest.mark.parametrize(
  "mode,extra", [("predict", ()), ("predict", ("--temperature=1.0", "--seed=3")), ("score", ())]
)
def test_two_processes_write_what_one_writes(tmp_path, model_dir, mode, extra):
  inputs = str(tmp_path / "in.jsonl")
  _inputs(inputs)
  cache = str(tmp_path / "jax_cache")
  single = str(tmp_path / "single.jsonl")
  proc = run_child(
    _cli(mode, model_dir, inputs, single, "--set=mesh.data=2", *extra), environment(2, cache)
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  port = free_port()
  multi = str(tmp_path / "multi.jsonl")
  procs = [
    subprocess.Popen(
      _cli(
        mode,
        model_dir,
        inputs,
        multi,
        "--set=mesh.data=2",
        *extra,
        f"--coordinator_address=127.0.0.1:{port}",
        "--num_processes=2",
        f"--process_id={i}",
      ),
      cwd=ROOT,
      env=environment(1, cache),
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for i in range(2)
  ]
  for p in procs:
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-3000:]
  with open(single) as f, open(multi) as g:
    want, got = f.read(), g.read()
  assert want == got
  rows = [json.loads(line) for line in want.splitlines()]
  assert len(rows) == 7
  if mode == "predict":
    assert len({r["prediction"] for r in rows}) > 3


def test_predict_and_score_reject_unused_set_keys(tmp_path, model_dir):
  inputs = str(tmp_path / "in.jsonl")
  _inputs(inputs, 2)
  env = subprocess_env(1)
  for mode, key in (("predict", "mesh.no_such_key=1"), ("score", "train.steps=3")):
    out = str(tmp_path / f"{mode}.jsonl")
    proc = subprocess.run(
      _cli(mode, model_dir, inputs, out, f"--set={key}"),
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert key.split("=")[0] in lines[0] and "mesh.fsdp" in lines[0]
    assert not os.path.exists(out)
  # A key they use is applied: a mesh that the one device cannot hold is an error.
  proc = subprocess.run(
    _cli("predict", model_dir, inputs, str(tmp_path / "p.jsonl"), "--set=mesh.data=2"),
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert proc.returncode == 1 and "mesh.data=2" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
def test_predict_dry_run_reads_no_weights(tmp_path, model_dir):
  inputs = str(tmp_path / "in.jsonl")
  _inputs(inputs, 3)
  out = str(tmp_path / "out.jsonl")
  # The weights are gone: only model_config.json is read.
  weightless = str(tmp_path / "weightless")
  os.makedirs(weightless)
  os.symlink(
    os.path.join(model_dir, "model_config.json"), os.path.join(weightless, "model_config.json")
  )
  proc = subprocess.run(
    _cli(
      "predict",
      weightless,
      inputs,
      out,
      "--dry_run",
      f"--vocab={VOCAB}",
      "--set=mesh.data=2",
      "--set=mesh.fsdp=true",
      "--set=eval.param_dtype=bfloat16",
    ),
    cwd=ROOT,
    env=subprocess_env(2),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "mesh {'data': 2, 'model': 1}, FSDP" in proc.stdout and "(bfloat16)" in proc.stdout
  assert "per device: parameters" in proc.stdout and "decode: " in proc.stdout
  assert not os.path.exists(out)
