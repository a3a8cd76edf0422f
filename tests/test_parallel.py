"""Independent trainings in worker processes (tlm/miniature/parallel.py): the same numbers as one
after the other in this process, in job order, and a failed job named with its log."""

import os

import jax
import numpy as np
import pytest

from tlm import configs
from tlm.errors import UserError
from tlm.miniature import parallel
from tlm.models.checkpoints import load_checkpoint

SMALL = [
  "data.world_scale=0.2",
  "data.train_years=2017,2018",
  "train.steps=3",
  "train.log_every=1",
  "train.eval_every=0",
  "train.checkpoint_every=3",
]


def _jobs(root, cache):
  out = []
  for variant, seed in (("temporal", 0), ("uniform", 1), ("temporal", 2)):
    sets = SMALL + [f"data.cache_dir={cache}", f"train.seed={seed}", f"data.seed={seed}"]
    config = configs.override(configs.get(f"tiny_{variant}"), sets)
    out.append(parallel.Job(f"{variant} {seed}", "train", ((config, str(root / f"{seed}")),)))
  return out


def _params(path):
  return jax.tree.leaves(load_checkpoint(str(path))[1])


@pytest.mark.slow  # worker processes
def test_workers_give_the_numbers_of_one_after_the_other(tmp_path):
  cache = tmp_path / "cache"
  lines = []
  parallel.run_jobs(_jobs(tmp_path / "serial", cache), 1, lines.append)
  assert any("step 3/3" in line for line in lines)  # one at a time: the lines come here
  parallel.run_jobs(_jobs(tmp_path / "pool", cache), 2, lines.append)
  for seed in range(3):
    log = (tmp_path / "pool" / f"{seed}" / "log.txt").read_text()
    assert "step 3/3" in log  # in a worker: the lines go to the job's log
    serial, pool = _params(tmp_path / "serial" / f"{seed}"), _params(tmp_path / "pool" / f"{seed}")
    assert len(serial) == len(pool)
    for a, b in zip(serial, pool):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  first, second = _params(tmp_path / "pool" / "0"), _params(tmp_path / "pool" / "2")
  assert any(not np.array_equal(a, b) for a, b in zip(first, second))  # the seeds matter


@pytest.mark.slow  # worker processes
def test_a_failed_job_names_itself_and_its_log(tmp_path):
  jobs = _jobs(tmp_path / "pool", tmp_path / "cache")[:2]
  bad = configs.replace(jobs[1].steps[0][0], "model.init_checkpoint", str(tmp_path / "none"))
  jobs[1] = parallel.Job("broken", "train", ((bad, str(tmp_path / "pool" / "b")),))
  with pytest.raises(UserError, match=r"broken failed .*log\.txt"):
    parallel.run_jobs(jobs, 2, lambda _: None)


_ORPHAN = """
import multiprocessing, os, sys, time
from tlm.miniature.parallel import exit_with_parent

def child(path):
  exit_with_parent(poll_seconds=0.1)
  with open(path, "w") as f:
    f.write(str(os.getpid()))
  time.sleep(60)

if __name__ == "__main__":
  context = multiprocessing.get_context("spawn")
  context.Process(target=child, args=(sys.argv[1],)).start()
  time.sleep(60)
"""


def _running(pid: int) -> bool:
  """Alive and not a zombie (an exited orphan waits for init, which may not reap it soon)."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      state = f.read().rsplit(")", 1)[1].split()[0]
  except (FileNotFoundError, ProcessLookupError, IndexError):
    return False
  return state != "Z"


@pytest.mark.slow  # worker processes
def test_a_worker_ends_when_its_parent_is_killed(tmp_path):
  # SIGKILL leaves the parent no time to stop its pool: the worker must not train on alone.
  import os
  import signal
  import subprocess
  import sys
  import time

  script, pid_file = tmp_path / "orphan.py", tmp_path / "child.pid"
  script.write_text(_ORPHAN)
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, PYTHONPATH=root)
  parent = subprocess.Popen([sys.executable, str(script), str(pid_file)], env=env)
  try:
    deadline = time.time() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.time() < deadline:
      time.sleep(0.1)
    child = int(pid_file.read_text())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 10
    while time.time() < deadline and _running(child):
      time.sleep(0.1)
    gone = not _running(child)
    if not gone:
      os.kill(child, signal.SIGKILL)
    assert gone, "the worker outlived its parent by 10 s"
  finally:
    if parent.poll() is None:
      parent.kill()


@pytest.mark.slow  # worker processes
def test_pinned_workers_are_single_threaded_and_independent_of_the_schedule(tmp_path):
  cache = tmp_path / "cache"
  two = _jobs(tmp_path / "two", cache)[:2]
  parallel.run_jobs(two, 2, lambda _: None, pin=True)
  one = _jobs(tmp_path / "one", cache)[:2][::-1]  # the other order, one worker
  parallel.run_jobs(one, 1, lambda _: None, pin=True)
  cores = sorted(os.sched_getaffinity(0))
  for seed in range(2):
    for run in ("two", "one"):
      line = (tmp_path / run / f"{seed}" / "log.txt").read_text().splitlines()[0]
      core = line.split("pinned worker: cores [")[1].split("]")[0]
      assert int(core) in cores and parallel.SINGLE_THREADED_XLA in line
    for a, b in zip(_params(tmp_path / "two" / f"{seed}"), _params(tmp_path / "one" / f"{seed}")):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
