"""Two processes on 127.0.0.1 (jax.distributed, gloo collectives) train exactly as one process
with the same devices, and save/restore checkpoints across processes and across process counts,
with the block sampler (`data.sampler=block`) on a tiny shuffled store: its batches are a pure
function of (seed, step), whatever the hosts, its runs shared by the 16 steps of a block, its
windows visited again in another order each pass. Each run is the CLI."""

import json
import os
import subprocess

import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests.helpers import (
  ENTITIES_SAMPLE,
  FIXTURE_DATA_SETS,
  NEWS_SAMPLE,
  SPIECE_MODEL,
  environment,
  free_port,
  one_error,
  run_child,
  tiny_train_argv,
)
from tlm.models.formats import orbax_params
from tlm.store.build_ssm import build_ssm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Jobs on a coordinator port: with the other such tests on one worker (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("coordinator")]


def command(workdir, steps, ssm_dir, *flags):
  sets = [
    *(s for s in FIXTURE_DATA_SETS if not s.startswith("data.ssm_dir=")),
    f"data.ssm_dir={ssm_dir}",
    "data.sampler=block",
    "train.batch_size=8",
    "train.checkpoint_every=2",
    "train.log_every=1",
    "train.eval_every=0",
    "model.dropout_rate=0.0",  # dropout keys are covered by test_resume and the mesh parity
    "model.num_layers=1",  # the mechanics, not the model, are under test: compile less
    f"train.steps={steps}",
  ]
  return tiny_train_argv(workdir, sets, *flags)


def two_processes(workdir, steps, ssm_dir, env):
  port = free_port()
  procs = [
    subprocess.Popen(
      command(
        workdir,
        steps,
        ssm_dir,
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


def test_two_processes_train_like_one_and_resume_on_one(tmp_path):
  """20 steps (blocks 0 and 1 of the block sampler; the smaller tables start a second pass at
  step 16): 2 processes to step 6, resumed on 2 processes to step 18 (mid-block, restored
  across processes), then on 1 process with 2 devices to 20 (another host count): the losses
  and parameters of one uninterrupted process. Resumed once more on the store rebuilt in place
  in another order: refused in one line naming the store."""
  cache = str(tmp_path / "jax_cache")
  ssm = str(tmp_path / "ssm")  # 80-240 train examples a year, in a seeded order
  build_ssm(NEWS_SAMPLE, ssm, gazetteer=ENTITIES_SAMPLE, vocab=SPIECE_MODEL, shuffle_seed=0)
  multi, single = str(tmp_path / "multi"), str(tmp_path / "single")
  out0, out1 = two_processes(multi, 6, ssm, environment(1, cache))
  assert "2 process(es)" in out0 and "step 6/6" in out0
  assert "step " not in out1 and "parameters" not in out1  # only process 0 logs
  out0, _ = two_processes(multi, 18, ssm, environment(1, cache))
  assert "resumed from step 6" in out0
  proc = run_child(command(multi, 20, ssm), environment(2, cache))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "1 process(es), resumed from step 18" in proc.stdout
  proc = run_child(command(single, 20, ssm), environment(2, cache))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "mesh {'data': 2, 'model': 1}, 1 process(es)" in proc.stdout
  np.testing.assert_allclose(losses(multi), losses(single), rtol=1e-6)
  assert len(losses(single)) == 20
  want, got = params(single, 20), params(multi, 20)
  assert want.keys() == got.keys()
  for k in want:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-7, err_msg=str(k))
  # The store rebuilt in place, the same examples in another order: refused in one line.
  build_ssm(NEWS_SAMPLE, ssm, gazetteer=ENTITIES_SAMPLE, vocab=SPIECE_MODEL, shuffle_seed=1)
  proc = run_child(command(single, 21, ssm), environment(2, cache))
  line = one_error(proc, f"{single}/checkpoints/20 was trained with other example store (")
  assert "data." not in line, line  # the config is the same: only the store differs
