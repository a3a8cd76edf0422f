"""Two processes on 127.0.0.1 (jax.distributed, gloo collectives) train exactly as one process
with the same devices, and save/restore checkpoints across processes. Each run is the CLI."""

import json
import os
import subprocess

import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests.helpers import FIXTURE_DATA_SETS, environment, free_port, run_child, tiny_train_argv
from tlm.models.formats import orbax_params

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Jobs on a coordinator port: with the other such tests on one worker (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("coordinator")]


def command(workdir, steps, *flags):
  sets = [
    *FIXTURE_DATA_SETS,
    "train.batch_size=8",
    "train.checkpoint_every=2",
    "train.log_every=1",
    "train.eval_every=0",
    "model.dropout_rate=0.0",  # dropout keys are covered by test_resume and the mesh parity
    "model.num_layers=1",  # the mechanics, not the model, are under test: compile less
    f"train.steps={steps}",
  ]
  return tiny_train_argv(workdir, sets, *flags)


def two_processes(workdir, steps, env):
  port = free_port()
  procs = [
    subprocess.Popen(
      command(
        workdir,
        steps,
        f"--coordinator_address=127.0.0.1:{port}",
        "--num_processes=2",
        f"--process_id={i}",
      ),
      cwd=ROOT,
      env=env,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for i in range(2)
  ]
  outs = [p.communicate(timeout=600) for p in procs]
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  return [out for out, _ in outs]


def losses(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line)["loss"] for line in f]


def params(workdir, step):
  tree = orbax_params.restore(os.path.join(workdir, "checkpoints", str(step), "params"))
  return {k: np.asarray(v) for k, v in ocp.tree.to_flat_dict(tree).items()}


def test_two_processes_train_like_one(tmp_path):
  cache = str(tmp_path / "jax_cache")
  multi, single = str(tmp_path / "multi"), str(tmp_path / "single")
  # Phase 1: 2 steps on 2 processes x 1 device; phase 2 restores step 2 across processes.
  out0, out1 = two_processes(multi, 2, environment(1, cache))
  assert "2 process(es)" in out0 and "step 2/2" in out0
  assert "step " not in out1 and "parameters" not in out1  # only process 0 logs
  out0, _ = two_processes(multi, 5, environment(1, cache))
  assert "resumed from step 2" in out0
  proc = run_child(command(single, 5), environment(2, cache))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "mesh {'data': 2, 'model': 1}, 1 process(es)" in proc.stdout
  np.testing.assert_allclose(losses(multi), losses(single), rtol=1e-6)
  want, got = params(single, 5), params(multi, 5)
  assert want.keys() == got.keys()
  for k in want:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-7, err_msg=str(k))
