"""Exact resume through the CLI: SIGKILL mid-run + restart == an uninterrupted run, bit for bit;
SIGTERM saves a checkpoint at the current step; a corrupt or incomplete newest checkpoint is
named in a warning and the run resumes from the previous one, again bit for bit; a second
`train` on a busy workdir is refused. Each run is `python run.py --mode=train`."""

import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests.helpers import compilation_cache, train_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 20

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  e = dict(os.environ)
  e["JAX_PLATFORMS"] = "cpu"
  e["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1 --xla_backend_optimization_level=0"
  # The runs compile the same programs: share them through JAX's persistent cache.
  e.update(compilation_cache(str(tmp_path_factory.mktemp("jax_cache"))))
  return e


def run(cmd, env, **kw):
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, **kw)


def steps_of(workdir):
  path = os.path.join(workdir, "checkpoints")
  return sorted(int(d) for d in os.listdir(path) if d.isdigit()) if os.path.isdir(path) else []


def restore(workdir, step, item):
  return ocp.StandardCheckpointer().restore(os.path.join(workdir, "checkpoints", str(step), item))


def metrics(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, env):
  workdir = str(tmp_path_factory.mktemp("uninterrupted"))
  proc = run(train_command(workdir, f"train.steps={STEPS}"), env)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return workdir, proc.stdout


def test_progress_and_metrics(uninterrupted):
  workdir, stdout = uninterrupted
  lines = [line for line in stdout.splitlines() if line.startswith("step ")]
  assert len(lines) == STEPS
  assert lines[-1].startswith(f"step {STEPS}/{STEPS} loss ") and "tokens/s ETA" in lines[-1]
  records = metrics(workdir)
  assert [r["step"] for r in records] == list(range(1, STEPS + 1))
  for r in records:
    assert {"step", "loss", "learning_rate", "tokens_per_second", "z_loss"} <= set(r)
    assert r["learning_rate"] == pytest.approx(3e-2) and r["tokens_per_second"] > 0
  assert "eval_loss" in records[9] and "eval_loss" not in records[8]
  assert records[-1]["loss"] < records[0]["loss"]
  assert steps_of(workdir) == [12, 16, 20]  # keep_checkpoints=3
  config = json.load(open(os.path.join(workdir, "config.json")))
  assert config["train"]["steps"] == STEPS and config["data"]["input_length"] == 32
  model = json.load(open(os.path.join(workdir, "model_config.json")))
  assert model["vocab_size"] == 256 and model["emb_dim"] == 64


def test_sigkill_and_restart_is_bit_identical(uninterrupted, tmp_path, env):
  reference, _ = uninterrupted
  workdir = str(tmp_path / "killed")
  cmd = train_command(workdir, f"train.steps={STEPS}")
  proc = subprocess.Popen(
    cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
  )
  deadline = time.time() + 300
  while not [s for s in steps_of(workdir) if s >= 4] and proc.poll() is None:
    assert time.time() < deadline, "no checkpoint within 300 s"
    time.sleep(0.02)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  killed_at = max(steps_of(workdir))
  assert 4 <= killed_at < STEPS, f"the run was not killed mid-way (latest step {killed_at})"
  restarted = run(cmd, env)
  assert restarted.returncode == 0, restarted.stderr[-3000:]
  assert f"resumed from step {killed_at}" in restarted.stdout
  for item in ("params", "opt_state"):
    want, got = restore(reference, STEPS, item), restore(workdir, STEPS, item)
    flat_want, flat_got = ocp.tree.to_flat_dict(want), ocp.tree.to_flat_dict(got)
    assert flat_want.keys() == flat_got.keys()
    for k in flat_want:
      np.testing.assert_array_equal(np.asarray(flat_got[k]), np.asarray(flat_want[k]), str(k))
  # The resumed log continues the uninterrupted one exactly.
  assert [r["loss"] for r in metrics(workdir)] == [r["loss"] for r in metrics(reference)]


def test_sigterm_saves_the_current_step(tmp_path, env):
  workdir = str(tmp_path / "term")
  cmd = train_command(workdir, "train.steps=100000", "train.checkpoint_every=100000")
  proc = subprocess.Popen(
    cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
  )
  path = os.path.join(workdir, "metrics.jsonl")
  deadline = time.time() + 300
  while proc.poll() is None and not (os.path.isfile(path) and len(open(path).readlines()) >= 3):
    assert time.time() < deadline, "no progress within 300 s"
    time.sleep(0.02)
  proc.send_signal(signal.SIGTERM)
  _, stderr = proc.communicate(timeout=300)
  assert proc.returncode == 1
  last = stderr.strip().splitlines()[-1]
  assert last.startswith("error: SIGTERM: saved a checkpoint at step "), last
  step = int(last.split("at step ")[1].split()[0])
  assert step >= 3 and steps_of(workdir) == [step]
  assert int(restore(workdir, step, "opt_state")[0]["count"]) == step  # optax FactoredState
  assert (
    json.load(open(os.path.join(workdir, "checkpoints", str(step), "data_state", "metadata")))[
      "step"
    ]
    == step
  )


def _params_file(workdir, step):
  """The largest parameter chunk file of a checkpoint."""
  root = os.path.join(workdir, "checkpoints", str(step), "params")
  found = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if os.sep + "d" in d]
  return max(found, key=os.path.getsize)


def _corrupt(path, how):
  with open(path, "r+b") as f:
    if how == "truncated":
      f.truncate(os.path.getsize(path) // 2)
    else:  # 4 KiB of random bytes inside the file
      f.seek(min(64, os.path.getsize(path) // 2))
      f.write(np.random.RandomState(0).bytes(4096))


@pytest.mark.parametrize("damage", ["truncated", "random_bytes", "no_data_state"])
def test_damaged_newest_checkpoint_resumes_from_the_previous_one(
  uninterrupted, tmp_path, env, damage
):
  """The newest checkpoint of a finished run is damaged; rerunning the command warns, resumes
  from the previous checkpoint and ends bit-identical to the uninterrupted run."""
  reference, _ = uninterrupted
  workdir = str(tmp_path / "damaged")
  shutil.copytree(reference, workdir)
  bad = os.path.join(workdir, "checkpoints", str(STEPS))
  if damage == "no_data_state":
    shutil.rmtree(os.path.join(bad, "data_state"))
  else:
    _corrupt(_params_file(workdir, STEPS), damage)
  proc = run(train_command(workdir, f"train.steps={STEPS}"), env)
  assert proc.returncode == 0, proc.stderr[-3000:]
  previous = os.path.join(workdir, "checkpoints", str(STEPS - 4))
  reason = "incomplete (data_state missing)" if damage == "no_data_state" else "corrupt (params/"
  warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: checkpoint")]
  assert len(warnings) == 1 and warnings[0].startswith(f"warning: checkpoint {bad} is {reason}")
  assert warnings[0].endswith(f"; using {previous} instead")
  assert "does not match" not in proc.stderr
  assert f"resumed from step {STEPS - 4}" in proc.stdout
  assert steps_of(workdir) == [STEPS - 8, STEPS - 4, STEPS]
  assert os.path.isdir(bad + ".bad")
  for item in ("params", "opt_state"):
    want = ocp.tree.to_flat_dict(restore(reference, STEPS, item))
    got = ocp.tree.to_flat_dict(restore(workdir, STEPS, item))
    for k in want:
      np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(want[k]), str(k))
  assert [r["loss"] for r in metrics(workdir)] == [r["loss"] for r in metrics(reference)]


def test_no_intact_checkpoint_is_one_line_error(uninterrupted, tmp_path, env):
  reference, _ = uninterrupted
  workdir = str(tmp_path / "all_bad")
  shutil.copytree(reference, workdir)
  for step in steps_of(workdir):
    _corrupt(_params_file(workdir, step), "truncated")
  proc = run(train_command(workdir, f"train.steps={STEPS}"), env)
  assert proc.returncode == 1
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith(f"error: {workdir}/checkpoints: no good checkpoint left (20: corrupt")


def test_second_train_on_a_workdir_is_refused(tmp_path, env):
  workdir = str(tmp_path / "busy")
  cmd = train_command(workdir, "train.steps=100000", "train.checkpoint_every=100000")
  first = subprocess.Popen(
    cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
  )
  try:
    deadline = time.time() + 300
    while not os.path.isfile(os.path.join(workdir, ".tlm.lock")):
      assert first.poll() is None and time.time() < deadline, "the first run took no lock"
      time.sleep(0.05)
    second = run(cmd, env)
    assert second.returncode == 1
    lines = second.stderr.strip().splitlines()
    assert lines[-1].startswith(f"error: {workdir} is in use by pid {first.pid} on host "), lines
    assert "(--mode=train, since " in lines[-1]
  finally:
    first.kill()
    first.wait()
  # The killed run's lock is stale: the next run takes it over and resumes.
  third = run(train_command(workdir, "train.steps=2"), env)
  assert third.returncode == 0, third.stderr[-3000:]
  assert f"took over the lock of pid {first.pid}" in third.stderr
  assert not os.path.exists(os.path.join(workdir, ".tlm.lock"))
