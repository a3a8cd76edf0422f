"""Training and outputs under faults: checkpoint integrity (tlm/checksums.py and the training
CheckpointManager), the workdir lock (tlm/workdir_lock.py), and full disks / unwritable outputs
(tlm/files.py, checkpoint saves, convert). The end-to-end resume after corruption is in
tests/test_resume.py."""

import errno
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tlm import checksums, files
from tlm.errors import CheckpointError, OutputError, UserError
from tlm.models import checkpoints, t5
from tlm.train.checkpointing import CheckpointManager
from tlm.workdir_lock import LOCK_NAME, LockedError, WorkdirLock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ITEMS = ("params", "opt_state", "data_state")


# --- Checkpoint integrity ---------------------------------------------------------------------


def _state(seed):
  params = {"w": jax.random.normal(jax.random.key(seed), (64, 64)), "b": jnp.arange(8.0) + seed}
  opt_state = {"count": jnp.int32(seed), "mu": jnp.full((16,), float(seed))}
  return params, opt_state


def _abstract(tree):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


@pytest.fixture
def workdir(tmp_path):
  """A workdir with checkpoints at steps 1, 2, 3 (state seeded by the step), manifests included."""
  manager = CheckpointManager(str(tmp_path), keep=3)
  for step in (1, 2, 3):
    manager.save(step, *_state(step), {"step": step})
  manager.close()
  return str(tmp_path)


def _largest_params_file(workdir, step):
  found = glob.glob(os.path.join(workdir, "checkpoints", str(step), "params", "**", "d", "*"))
  found += glob.glob(os.path.join(workdir, "checkpoints", str(step), "params", "d", "*"))
  return max(found, key=os.path.getsize)


def _random_bytes(path):
  with open(path, "r+b") as f:
    f.seek(min(64, os.path.getsize(path) // 2))
    f.write(np.random.RandomState(0).bytes(4096))


def _truncate(path):
  with open(path, "r+b") as f:
    f.truncate(os.path.getsize(path) // 2)


def _restore_latest(workdir):
  manager = CheckpointManager(workdir, keep=3)
  try:
    step = manager.latest_step()
    params, opt_state = _state(0)
    restored = manager.restore(step, _abstract(params), _abstract(opt_state))
    return step, restored
  finally:
    manager.close()


def test_every_save_gets_a_manifest_that_a_clean_restore_passes(workdir):
  for step in (1, 2, 3):
    step_dir = os.path.join(workdir, "checkpoints", str(step))
    assert checksums.has_manifest(step_dir)
    manifest = json.load(open(os.path.join(step_dir, checksums.MANIFEST)))
    listed = set(manifest["files"])
    assert "data_state/metadata" in listed and any(f.startswith("params/") for f in listed)
    assert checksums.check(step_dir, ITEMS) is None
  step, (params, _, data_state) = _restore_latest(workdir)
  assert step == 3 and data_state == {"step": 3}
  np.testing.assert_array_equal(np.asarray(params["b"]), np.arange(8.0) + 3)
  # Restoring writes nothing into the checkpoint: it still matches its manifest.
  assert checksums.check(os.path.join(workdir, "checkpoints", "3"), ITEMS) is None


@pytest.mark.parametrize("damage", [_random_bytes, _truncate], ids=["random_bytes", "truncated"])
def test_corrupt_newest_checkpoint_falls_back_with_a_warning(workdir, damage, capsys):
  damage(_largest_params_file(workdir, 3))
  step, (params, opt_state, data_state) = _restore_latest(workdir)
  assert step == 2 and data_state == {"step": 2}
  np.testing.assert_array_equal(np.asarray(params["w"]), np.asarray(_state(2)[0]["w"]))
  assert np.isfinite(np.asarray(params["w"])).all()
  warnings = [line for line in capsys.readouterr().err.splitlines() if "checkpoint" in line]
  bad, good = (os.path.join(workdir, "checkpoints", s) for s in ("3", "2"))
  assert len(warnings) == 1, warnings
  assert warnings[0].startswith(f"warning: checkpoint {bad} is corrupt (params/")
  assert warnings[0].endswith(f"; using {good} instead")


def test_deleted_data_state_is_an_incomplete_checkpoint(workdir, capsys):
  shutil.rmtree(os.path.join(workdir, "checkpoints", "3", "data_state"))
  step, (_, _, data_state) = _restore_latest(workdir)
  assert step == 2 and data_state == {"step": 2}
  err = capsys.readouterr().err
  assert "checkpoint" in err and "is incomplete (data_state missing); using" in err
  assert "does not match" not in err


def test_bad_checkpoint_deleted_before_it_is_set_aside(workdir, capsys):
  # Found bad at the restore, then deleted (by a user, while the run restored) before the
  # first save sets it aside: there is nothing left to move, and the save goes on.
  _random_bytes(_largest_params_file(workdir, 3))
  manager = CheckpointManager(workdir, keep=3)
  assert manager.latest_step() == 2
  shutil.rmtree(os.path.join(workdir, "checkpoints", "3"))
  manager.save(3, *_state(30), {"step": 3})
  manager.close()
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["1", "2", "3"]
  assert "moved the bad checkpoint" not in capsys.readouterr().err
  assert _restore_latest(workdir)[0] == 3


@pytest.mark.parametrize("what", ["params", "opt_state", "step"])
def test_checkpoint_deleted_while_it_is_restored(workdir, what, capfd):
  # Verified by its checksums, then deleted (by a user, another job's cleanup) once orbax has
  # begun to restore it: the deletion is made inside orbax's restore call, so it lands mid-restore
  # every time (a watcher thread cannot time that). One line naming the checkpoint, no traceback
  # from TensorStore's reads still in flight, and the older checkpoints untouched.
  manager = CheckpointManager(workdir, keep=3)
  step = manager.latest_step()
  real_restore = manager._manager.restore
  step_dir = os.path.join(workdir, "checkpoints", str(step))

  def restore_while_deleted(*args, **kwargs):
    shutil.rmtree(step_dir if what == "step" else os.path.join(step_dir, what))
    return real_restore(*args, **kwargs)

  manager._manager.restore = restore_while_deleted
  params, opt_state = _state(0)
  try:
    with pytest.raises(CheckpointError) as e:
      manager.restore(step, _abstract(params), _abstract(opt_state))
  finally:
    manager.close()
  assert "\n" not in str(e.value) and str(step) in str(e.value), str(e.value)
  assert "Traceback" not in capfd.readouterr().err
  for older in (1, 2):
    assert checksums.check(os.path.join(workdir, "checkpoints", str(older)), ITEMS) is None
  # The next start falls back to the newest checkpoint still whole.
  assert _restore_latest(workdir)[0] == 2


def test_no_good_checkpoint_left_is_one_line_error(workdir):
  for step in (1, 2, 3):
    _truncate(_largest_params_file(workdir, step))
  manager = CheckpointManager(workdir)
  with pytest.raises(CheckpointError, match="no good checkpoint left") as e:
    manager.latest_step()
  manager.close()
  assert "\n" not in str(e.value) and "3: corrupt" in str(e.value) and "1: corrupt" in str(e.value)


def test_checkpoint_without_manifest_is_used_unverified(workdir, capsys):
  os.remove(os.path.join(workdir, "checkpoints", "3", checksums.MANIFEST))
  step, _ = _restore_latest(workdir)
  assert step == 3
  assert "has no tlm_checksums.json" in capsys.readouterr().err


def test_unverifiable_unreadable_checkpoint_is_one_line_error(workdir):
  os.remove(os.path.join(workdir, "checkpoints", "3", checksums.MANIFEST))
  _truncate(_largest_params_file(workdir, 3))
  with pytest.raises(CheckpointError) as e:
    _restore_latest(workdir)
  message = str(e.value)
  assert message.startswith(f"{workdir}/checkpoints/3: unreadable (") and "\n" not in message
  assert message.endswith("move it aside to resume from the previous one")


def test_bad_newer_checkpoints_are_set_aside_before_saving_over_them(workdir, capsys):
  _random_bytes(_largest_params_file(workdir, 3))
  manager = CheckpointManager(workdir, keep=3)
  assert manager.latest_step() == 2
  manager.save(3, *_state(30), {"step": 3})  # the resumed run reaches step 3 again
  manager.close()
  names = sorted(os.listdir(os.path.join(workdir, "checkpoints")))
  assert names == ["1", "2", "3", "3.bad"]
  assert "moved the bad checkpoint(s) [3]" in capsys.readouterr().err
  step, (params, _, _) = _restore_latest(workdir)
  assert step == 3
  np.testing.assert_array_equal(np.asarray(params["b"]), np.arange(8.0) + 30)


def test_load_checkpoint_of_a_workdir_verifies_params(tmp_path, capsys):
  from tlm.models.formats import orbax_params

  cfg = t5.get_preset("tiny", vocab_size=40)
  work = tmp_path / "work"
  (work / "checkpoints").mkdir(parents=True)
  (work / "model_config.json").write_text(json.dumps(cfg.to_dict()))
  shapes = checkpoints.param_shapes(cfg)
  trees = {}
  for step in (100, 200):
    rs = np.random.RandomState(step)
    flat = {k: rs.randn(*s).astype(np.float32) for k, s in shapes.items()}
    trees[step] = checkpoints.unflatten(flat)
    step_dir = str(work / "checkpoints" / str(step))
    orbax_params.save(os.path.join(step_dir, "params"), trees[step])
    checksums.write_manifest(step_dir)
  _random_bytes(_largest_params_file(str(work), 200))
  _, params = checkpoints.load_checkpoint(str(work))
  want = checkpoints.flatten(trees[100])
  for (k, got), (_, ref) in zip(checkpoints.flatten(params), want):
    np.testing.assert_array_equal(got, ref, k)
  assert f"checkpoint {work}/checkpoints/200 is corrupt" in capsys.readouterr().err
  with pytest.raises(CheckpointError, match="200: checkpoint is corrupt"):
    checkpoints.load_checkpoint(str(work / "checkpoints" / "200"))


# --- The workdir lock -------------------------------------------------------------------------


def _lock_file(directory, pid, host=None, start=None):
  holder = {
    "pid": pid,
    "host": host or socket.gethostname(),
    "process_start": start,
    "mode": "train",
    "since": "earlier",
    "token": "t",
  }
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, LOCK_NAME), "w") as f:
    json.dump(holder, f)


def _dead_pid():
  proc = subprocess.Popen([sys.executable, "-c", "pass"])
  proc.wait()
  return proc.pid


def test_second_writer_gets_one_line_error_naming_the_holder(tmp_path):
  holder = subprocess.Popen(
    [
      sys.executable,
      "-c",
      textwrap.dedent(f"""
      import sys, time
      sys.path.insert(0, {ROOT!r})
      from tlm.workdir_lock import WorkdirLock
      with WorkdirLock({str(tmp_path)!r}, "train"):
        print("locked", flush=True)
        time.sleep(60)
    """),
    ],
    stdout=subprocess.PIPE,
    text=True,
  )
  try:
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(LockedError) as e:
      WorkdirLock(str(tmp_path), "eval").acquire()
    message = str(e.value)
    assert "\n" not in message
    assert f"pid {holder.pid} on host {socket.gethostname()} (--mode=train" in message
    assert str(tmp_path) in message
  finally:
    holder.kill()
    holder.wait()


def test_lock_is_released_and_reentrant_after_release(tmp_path):
  lock = WorkdirLock(str(tmp_path), "train")
  with lock:
    assert os.path.isfile(tmp_path / LOCK_NAME)
    held = json.load(open(tmp_path / LOCK_NAME))
    assert held["pid"] == os.getpid() and held["host"] == socket.gethostname()
  assert not os.path.exists(tmp_path / LOCK_NAME)
  with WorkdirLock(str(tmp_path), "train"):
    pass
  # A directory the lock created for a run that wrote nothing is removed again.
  with WorkdirLock(str(tmp_path / "new"), "eval"):
    assert os.path.isdir(tmp_path / "new")
  assert not os.path.exists(tmp_path / "new")


def test_stale_lock_of_a_dead_process_is_taken_over_with_a_warning(tmp_path, capsys):
  pid = _dead_pid()
  _lock_file(str(tmp_path), pid)
  with WorkdirLock(str(tmp_path), "train"):
    assert json.load(open(tmp_path / LOCK_NAME))["pid"] == os.getpid()
  err = capsys.readouterr().err.strip()
  assert err.startswith("warning: ") and f"took over the lock of pid {pid}" in err
  assert "no longer running" in err and len(err.splitlines()) == 1


def test_reused_pid_is_stale_but_a_live_holder_and_another_host_are_not(tmp_path):
  # Our own pid with another start time: the pid was reused by a new process.
  _lock_file(str(tmp_path), os.getpid(), start="1")
  with WorkdirLock(str(tmp_path), "train"):
    pass
  _lock_file(str(tmp_path), os.getppid())  # alive, no start time recorded
  with pytest.raises(LockedError, match=f"pid {os.getppid()} on host"):
    WorkdirLock(str(tmp_path), "train").acquire()
  _lock_file(str(tmp_path), _dead_pid(), host="another-host.example")  # cannot be checked
  with pytest.raises(LockedError, match="on host another-host.example .*delete .*if that"):
    WorkdirLock(str(tmp_path), "train").acquire()
  (tmp_path / LOCK_NAME).write_text("garbage")
  with pytest.raises(LockedError, match="unreadable lock file"):
    WorkdirLock(str(tmp_path), "train").acquire()


def test_concurrent_writers_exactly_one_wins(tmp_path):
  """Eight processes race for one lock (then for a stale one): exactly one gets it."""
  done = tmp_path / "done"
  script = textwrap.dedent(f"""
    import os, sys, time
    sys.path.insert(0, {ROOT!r})
    from tlm.workdir_lock import WorkdirLock, LockedError
    time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
    try:
      with WorkdirLock({str(tmp_path / "work")!r}, "train"):
        print("won", flush=True)
        while not os.path.exists({str(done)!r}):  # hold it until every other one has tried
          time.sleep(0.05)
    except LockedError as e:
      print("lost", e, flush=True)
  """)
  for stale in (False, True):
    if stale:
      _lock_file(str(tmp_path / "work"), _dead_pid())
      done.unlink()
    start = str(time.time() + 3.0)
    procs = [
      subprocess.Popen([sys.executable, "-c", script, start], stdout=subprocess.PIPE, text=True)
      for _ in range(8)
    ]
    deadline = time.time() + 120
    while sum(p.poll() is not None for p in procs) < 7 and time.time() < deadline:
      time.sleep(0.05)
    done.touch()
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert sum(o.startswith("won") for o in outs) == 1, outs
    assert sum(o.startswith("lost") for o in outs) == 7, outs
    assert not os.path.exists(tmp_path / "work" / LOCK_NAME)


def test_output_dir_lock_lives_beside_the_directory(tmp_path):
  lock = WorkdirLock.beside(str(tmp_path / "out"), "convert")
  assert lock.path == str(tmp_path / f".out{LOCK_NAME}")
  with lock, pytest.raises(LockedError, match="out is in use by pid"):
    WorkdirLock.beside(str(tmp_path / "out"), "convert").acquire()


def test_writing_modes_take_the_lock_before_any_work(tmp_path):
  """eval* / adapt / cronquestions / reproduce lock the workdir, convert and tables the output
  directory: with the lock held elsewhere they stop at once, naming the holder."""
  from types import SimpleNamespace

  from tlm.cli import convert
  from tlm.cli import experiment_modes as experiments

  work = str(tmp_path / "work")
  flags = SimpleNamespace(
    config="tiny_temporal",
    workdir=work,
    set=[],
    data=str(tmp_path),
    dry_run=False,
    check="",
    coordinator_address=None,
    num_processes=None,
    process_id=None,
  )
  with WorkdirLock(work, "train"):
    for mode in ("evaluate", "eval_future", "adapt", "cronquestions", "reproduce"):
      with pytest.raises(LockedError, match=f"{work} is in use by pid {os.getpid()} on host"):
        getattr(experiments, mode)(flags)
  out = str(tmp_path / "out")
  flags = SimpleNamespace(
    checkpoint=str(tmp_path / "missing"), output_dir=out, format="hf", vocab=None
  )
  with WorkdirLock.beside(out, "convert"):
    with pytest.raises(LockedError, match=f"{out} is in use by pid {os.getpid()}"):
      convert.main(flags)
  from tlm.cli import build_world as world
  from tlm.cli import data

  flags = SimpleNamespace(
    mode="build",
    output_dir=out,
    facts="f.tsv",
    entities="e.tsv",
    news="n.jsonl",
    seed=0,
    scale=1.0,
    world_version=4,
  )
  for build in (data.build_templama, data.build_ssm, world.build_world):
    with WorkdirLock.beside(out, "build"):
      with pytest.raises(LockedError, match=f"{out} is in use by pid {os.getpid()}"):
        build(flags)
  assert sorted(os.listdir(tmp_path)) == []


# --- Disk full and unwritable outputs ---------------------------------------------------------


def _enospc(*args, **kwargs):
  raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_atomic_file_write_error_names_the_path_and_leaves_nothing(tmp_path, monkeypatch):
  path = tmp_path / "out.jsonl"
  path.write_text("old\n")

  class FullDisk:
    def __init__(self, f):
      self.f = f

    def write(self, text):
      _enospc()

    def __enter__(self):
      return self

    def __exit__(self, *exc):
      self.f.close()

  real_fdopen = os.fdopen
  monkeypatch.setattr(files.os, "fdopen", lambda *a, **k: FullDisk(real_fdopen(*a, **k)))
  with pytest.raises(OutputError) as e:
    files.write_jsonl(str(path), [{"a": 1}])
  assert str(e.value) == f"{path}: cannot write (No space left on device); left as it was"
  assert os.listdir(tmp_path) == ["out.jsonl"] and path.read_text() == "old\n"


def test_unwritable_output_directory_is_one_line_error(tmp_path, monkeypatch):
  monkeypatch.setattr(files.tempfile, "mkdtemp", _enospc)
  with pytest.raises(OutputError, match=r"out: cannot write \(No space left on device\); not"):
    with files.atomic_output_dir(str(tmp_path / "out")):
      pass
  # An OSError about another file (an input) is the caller's, not the output's.
  with pytest.raises(FileNotFoundError):
    with files.atomic_output_file(str(tmp_path / "x.json")):
      open(tmp_path / "missing")
  assert os.listdir(tmp_path) == []


def test_checkpoint_save_error_is_one_line_and_keeps_nothing(tmp_path, monkeypatch):
  manager = CheckpointManager(str(tmp_path), keep=3, async_save=False)
  manager.save(1, *_state(1), {"step": 1})
  manager.wait()

  def fail(*args, **kwargs):
    raise ValueError(
      'RESOURCE_EXHAUSTED: Error writing local file "x": Failed to write 113 bytes to file 7: '
      "No space left on device [os_error_code='28']"
    )

  monkeypatch.setattr(manager._manager, "save", fail)
  with pytest.raises(CheckpointError) as e:
    manager.save(2, *_state(2), {"step": 2})
  directory = os.path.join(str(tmp_path), "checkpoints")
  assert str(e.value) == (
    f"{directory}: cannot save checkpoint 2 (No space left on device); nothing of it was kept"
  )
  manager.close()  # a failed save is reported once, not again on close


def test_a_tlm_error_is_the_outputs_by_the_path_it_carries_not_its_words(tmp_path):
  """A failed write of orbax inside `atomic_output_dir` (orbax_params.save's CheckpointError,
  with the directory it was writing and the reason) is the output's OutputError; an error
  about anything else passes unchanged, whatever its message quotes."""
  out = str(tmp_path / "out")

  def raised_in_block(path_of, message_of=lambda tmp: "x"):
    with pytest.raises(UserError) as e:
      with files.atomic_output_dir(out) as tmp:
        error = CheckpointError(message_of(tmp))
        error.path, error.reason = path_of(tmp), "No space left on device"
        raise error
    assert os.listdir(tmp_path) == []
    return e.value

  inside = raised_in_block(lambda tmp: os.path.join(tmp, "params"))
  assert type(inside) is OutputError
  assert str(inside) == f"{out}: cannot write (No space left on device); not written"
  assert (inside.path, inside.reason) == (out, "No space left on device")
  assert type(raised_in_block(lambda tmp: tmp)) is OutputError  # the directory itself
  # Another directory, even one whose name starts with the temporary one's, or a message
  # that quotes the temporary directory: not the output's.
  for path_of, message_of in [
    (lambda tmp: tmp + "-input/params", lambda tmp: "x"),
    (lambda tmp: str(tmp_path / "input"), lambda tmp: f"{tmp}/params: cannot save"),
    (lambda tmp: None, lambda tmp: f"{tmp}/params: cannot save"),
  ]:
    assert type(raised_in_block(path_of, message_of)) is CheckpointError


@pytest.fixture
def tiny_disk(tmpfs):
  """A 1 MiB tmpfs."""
  return tmpfs("1m")


def test_full_disk_file_output(tiny_disk):
  path = os.path.join(tiny_disk, "predictions.jsonl")
  rows = [{"input": "x" * 1000, "i": i} for i in range(2000)]  # 2 MB
  with pytest.raises(OutputError, match=f"{path}: cannot write \\(No space left on device\\)"):
    files.write_jsonl(path, rows)
  assert os.listdir(tiny_disk) == []


def test_full_disk_checkpoint_save(tiny_disk):
  params = {"w": jax.random.normal(jax.random.key(0), (512, 512))}  # 1 MiB, incompressible
  opt_state = {"count": jnp.int32(0)}
  manager = CheckpointManager(tiny_disk, keep=3)
  with pytest.raises(CheckpointError, match="cannot save checkpoint 1 .*No space left on device"):
    manager.save(1, params, opt_state, {"step": 1})
    manager.wait()
  manager.close()
  assert os.listdir(os.path.join(tiny_disk, "checkpoints")) == []


@pytest.mark.parametrize("save", [checkpoints.save_hf, checkpoints.save_tlm], ids=["hf", "tlm"])
def test_full_disk_convert(tiny_disk, save):
  cfg = t5.get_preset("tiny", vocab_size=2000)  # about 2 MB of float32 parameters
  rs = np.random.RandomState(0)
  params = checkpoints.unflatten(
    {k: rs.randn(*s).astype(np.float32) for k, s in checkpoints.param_shapes(cfg).items()}
  )
  out = os.path.join(tiny_disk, "out")
  with pytest.raises(OutputError) as e:
    save(out, cfg, params)
  # (orbax's message, quoted by save_tlm, may be cut before the errno)
  reason = "(No space left on device|disk full or quota exceeded \\(RESOURCE_EXHAUSTED\\))"
  assert re.fullmatch(f"{out}: cannot write \\({reason}\\); not written", str(e.value))
  assert os.listdir(tiny_disk) == []


# What tensorstore and asyncio raise, pinned: tlm tells their failures apart by what they
# expose, and where that is only a message or a frame, a change there must fail here.


def _tensorstore_write(path: str, array: np.ndarray) -> BaseException:
  import tensorstore as ts

  spec = {
    "driver": "zarr",
    "kvstore": {"driver": "file", "path": f"{path}/"},
    "metadata": {"shape": list(array.shape), "chunks": list(array.shape), "dtype": "<f4"},
  }
  try:
    ts.open(spec, create=True, open=True).result().write(array).result()
  except BaseException as e:
    return e
  raise AssertionError(f"tensorstore wrote {path}")


def _only_in_the_message(e: BaseException):
  # tensorstore 0.1.86: a plain ValueError with nothing but its message (no errno, no status
  # attribute, no subclass). A tensorstore that grows one should be read by that instead.
  assert type(e) is ValueError, type(e)
  assert not hasattr(e, "errno") and not vars(e) and e.__cause__ is None, vars(e)


def test_tensorstore_reports_a_failed_file_operation_in_its_message_only(tmp_path):
  (tmp_path / "file").write_text("")
  e = _tensorstore_write(str(tmp_path / "file" / "array"), np.zeros(4, np.float32))  # ENOTDIR
  _only_in_the_message(e)
  assert files.tensorstore_status(e) == ("FAILED_PRECONDITION", errno.ENOTDIR), str(e)
  assert files.io_error_reason(e) == os.strerror(errno.ENOTDIR)
  assert files.tensorstore_status(ValueError("an unrelated bug")) is None
  assert files.tensorstore_status(OSError(errno.ENOSPC, "x")) is None


def test_tensorstores_message_is_shown_without_the_spec_it_appends():
  # tensorstore 0.1.86 appends its whole JSON spec to a message (hundreds of characters):
  # `tensorstore_one_line`, which orbax_params and t5x quote, keeps what failed, before it.
  # (The status's payloads, the spec and the errno, come in no fixed order.)
  # A short directory: the message quotes the path twice, and pytest's own temporary paths
  # (longer under xdist) would push the line past the 300 characters `tensorstore_one_line` keeps.
  short = tempfile.mkdtemp(prefix="ts")
  try:
    with open(os.path.join(short, "file"), "w"):
      pass
    e = _tensorstore_write(os.path.join(short, "file", "array"), np.zeros(4, np.float32))
  finally:
    shutil.rmtree(short)
  assert " [tensorstore_spec='{" in str(e), str(e)  # ENOTDIR, with the spec after it
  line = files.tensorstore_one_line(e)
  assert line.startswith("ValueError: FAILED_PRECONDITION: ") and "tensorstore_spec" not in line
  end = f'"{short}/file/array": Not a directory'
  assert line.endswith((end, f"{end} [os_error_code='20']")), line
  assert files.tensorstore_one_line(ValueError("x" * 400)) == "ValueError: " + "x" * 297 + "..."
  assert files.tensorstore_one_line(OSError("first\nsecond")) == "OSError: first"
  assert files.tensorstore_one_line(ValueError()) == "ValueError"


def test_tensorstore_reports_a_full_disk_in_its_message_only(tiny_disk):
  from tlm.models.formats import t5x_zarr

  array = np.random.RandomState(0).rand(1 << 19).astype(np.float32)  # 2 MiB on 1 MiB
  e = _tensorstore_write(os.path.join(tiny_disk, "array"), array)
  _only_in_the_message(e)
  assert files.tensorstore_status(e) == ("RESOURCE_EXHAUSTED", errno.ENOSPC), str(e)
  assert files.io_error_reason(e) == "No space left on device"
  # The T5X writer turns it into the OSError it is, naming the array's directory.
  spec = t5x_zarr.spec_for("target/w", array)
  with pytest.raises(OSError) as raised:
    t5x_zarr.write(spec, os.path.join(tiny_disk, "t5x"), array)
  assert raised.value.errno == errno.ENOSPC
  assert raised.value.filename == os.path.join(tiny_disk, "t5x", "target.w")


def test_a_closed_event_loop_is_told_by_where_asyncio_raises():
  # asyncio has no exception type for a closed loop: tensorstore's callbacks arriving at the
  # loop orbax closed are a RuntimeError raised by `_check_closed` under
  # `call_soon_threadsafe`, which `orbax_failures` recognises by those frames.
  import asyncio
  import types

  from tlm.models.formats import orbax_failures

  loop = asyncio.new_event_loop()
  loop.close()
  with pytest.raises(RuntimeError) as closed:
    loop.call_soon_threadsafe(print)

  def unraisable(e):
    return types.SimpleNamespace(exc_type=type(e), exc_value=e, exc_traceback=e.__traceback__)

  assert orbax_failures._closed_loop_callback(unraisable(closed.value))
  try:
    raise RuntimeError("Event loop is closed")  # the same words, raised elsewhere
  except RuntimeError as e:
    assert not orbax_failures._closed_loop_callback(unraisable(e))


@pytest.mark.slow
def test_full_disk_during_training_is_one_line_error(tmpfs):
  from tests.helpers import full_disk_training

  workdir, proc = full_disk_training(tmpfs)
  assert proc.returncode == 1
  # orbax's own writer threads may still print their traceback after tlm's one line (measured:
  # about one run in four), so the line is looked for in all of stderr, and must be alone. Their
  # output can also land just before it on the same line (a traceback's chunk written without
  # its newline yet: seen once in CI), so the message is found wherever it starts.
  expected = (
    f"error: {workdir}/checkpoints: cannot save checkpoint 4 (No space left on device); "
    "nothing of it was kept; no checkpoint was completed"
  )
  assert proc.stderr.count(expected) == 1, proc.stderr[-2000:]
  others = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
  assert set(others) <= {expected}, others
  assert os.listdir(os.path.join(workdir, "checkpoints")) == []  # no orbax temporary left
  assert not os.path.exists(os.path.join(workdir, LOCK_NAME))
