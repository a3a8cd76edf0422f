"""Remote storage (tlm/storage.py): gs:// paths are parsed and routed to the object-store code
paths without network, and the atomic outputs, the workdir lock and training checkpoints work
on a filesystem that behaves like an object store (tests/objstore.py: no rename of a
directory, no hard links, no locks), in process and end to end (train -> SIGKILL -> resume ->
predict and eval, compared with the same run on local disk)."""

import concurrent.futures
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests import objstore
from tests.helpers import DATA, FIXTURE_DATA_SETS, compilation_cache
from tlm import checksums, files, line_files, storage
from tlm.errors import OutputError, UserError
from tlm.workdir_lock import LOCK_NAME, LockedError, WorkdirLock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ITEMS = ("params", "opt_state", "data_state")

# --- Parsing and routing (no filesystem behind gs://) ------------------------------------------


def test_gs_paths_are_parsed_and_routed_to_epath_fsspec():
  from etils.epath import backend

  assert storage.is_remote("gs://bucket/x") and storage.scheme("gs://bucket/x") == "gs"
  assert not storage.is_remote("runs/x") and not storage.is_remote("/abs/x")
  assert not storage.is_remote("file:///tmp/x") and storage.local("file:///tmp/x") == "/tmp/x"
  with pytest.raises(UserError, match="unsupported storage scheme http://"):
    storage.is_remote("http://host/x")
  assert storage.abspath("gs://bucket/runs/x/") == "gs://bucket/runs/x"
  assert storage.abspath("runs/x") == os.path.abspath("runs/x")
  assert storage.join("gs://bucket/w", "checkpoints", "3") == "gs://bucket/w/checkpoints/3"
  assert storage.dirname("gs://bucket/w/checkpoints") == "gs://bucket/w"
  assert storage.dirname("gs://bucket") == "gs://bucket"
  # epath serves gs:// with its fsspec backend (gcsfs when installed); nothing is contacted.
  path = storage.epath_of("gs://bucket/x")
  assert path._backend is backend.fsspec_backend and os.fspath(path) == "gs://bucket/x"


def test_a_transport_failure_of_the_store_is_an_oserror_naming_the_path(monkeypatch, tmp_path):
  # huggingface_hub's transport errors (httpx's ConnectError, offline) are not OSError:
  # --workdir=hf://org/run ended in a traceback from the lock's exclusive create.
  ConnectError = type("ConnectError", (Exception,), {"__module__": "httpx._exceptions"})

  class Unreachable:
    def __getattr__(self, name):
      def fail(*args, **kwargs):
        raise ConnectError("[Errno -2] Name or service not known")

      return fail

  monkeypatch.setattr(storage, "epath_of", lambda path: Unreachable())
  for call in (storage.exists, storage.isdir, storage.listdir, storage.read_bytes):
    with pytest.raises(OSError) as e:
      call("hf://org/run/x")
    assert e.value.filename == "hf://org/run/x"
    assert e.value.strerror == (
      "the object store failed or cannot be reached (ConnectError: [Errno -2] Name or service "
      "not known)"
    )
  with pytest.raises(UserError, match=r"^hf://org/run/\.tlm\.lock: cannot create the lock \(the "):
    monkeypatch.setattr(storage, "create_exclusive", storage._store_errors(
      lambda path, content: storage.epath_of(path).open("xb")))  # fmt: skip
    WorkdirLock("hf://org/run", "train").acquire()
  # tlm's own errors pass unchanged.
  monkeypatch.setattr(storage, "epath_of", lambda path: 1 / 0)
  with pytest.raises(ZeroDivisionError):
    storage.exists("hf://org/run/x")


def test_remote_lock_uses_exclusive_create_not_links(monkeypatch):
  from tlm import workdir_lock

  created = []
  monkeypatch.setattr(storage, "create_exclusive", lambda p, c: created.append(p) or True)
  monkeypatch.setattr(storage, "makedirs", lambda p: None)
  monkeypatch.setattr(os, "link", lambda *a: pytest.fail("os.link on a gs:// lock"))
  lock = WorkdirLock("gs://bucket/wd", "train")
  assert lock.path == f"gs://bucket/wd/{LOCK_NAME}" and lock.directory == "gs://bucket/wd"
  assert workdir_lock._create_exclusive(lock.path, "{}") is True
  lock.acquire()
  assert created == [lock.path, lock.path]
  beside = WorkdirLock.beside("gs://bucket/out/tables", "tables")
  assert beside.path == f"gs://bucket/out/.tables{LOCK_NAME}"


def test_remote_atomic_outputs_choose_single_object_and_commit_marker(monkeypatch):
  ops = []
  monkeypatch.setattr(storage, "write_object", lambda p, d: ops.append(("write", p, d)))
  monkeypatch.setattr(storage, "exists", lambda p: False)
  monkeypatch.setattr(storage, "rmtree", lambda p: ops.append(("rmtree", p)))
  monkeypatch.setattr(storage, "upload_tree", lambda s, d: ops.append(("upload", s, d)))
  monkeypatch.setattr(os, "replace", lambda *a: pytest.fail("os.replace on a gs:// output"))
  with files.atomic_output_file("gs://bucket/out/x.json") as f:
    f.write("first ")
    f.write("second")
  assert ops == [("write", "gs://bucket/out/x.json", b"first second")]  # one object, once
  ops.clear()
  with pytest.raises(RuntimeError), files.atomic_output_file("gs://bucket/out/y.json") as f:
    f.write("partial")
    raise RuntimeError
  assert ops == []  # nothing uploaded
  with files.atomic_output_dir("gs://bucket/out/d") as tmp:
    assert not storage.is_remote(tmp)  # staged locally: builders may write with open()
  upload, marker = ops
  assert upload == ("upload", tmp, "gs://bucket/out/d")
  assert marker[:2] == ("write", f"gs://bucket/out/d/{storage.COMMIT_MARKER}")
  assert not os.path.exists(tmp)


def test_remote_checkpoints_choose_orbax_commit_file(monkeypatch):
  import orbax.checkpoint as ocp

  from tlm.train import checkpointing

  seen = {}

  class Manager:
    def __init__(self, directory, options, item_names):
      seen["directory"], seen["options"] = directory, options

  monkeypatch.setattr(ocp, "CheckpointManager", Manager)
  checkpointing.CheckpointManager("gs://bucket/wd")
  assert seen["directory"] == "gs://bucket/wd/checkpoints"
  mode = seen["options"].atomicity_options.mode
  assert mode == ocp.options.AtomicityMode.COMMIT_FILE
  checkpointing.CheckpointManager("/tmp/wd")
  assert seen["options"].atomicity_options is None  # local: orbax's atomic rename


# --- On a filesystem that behaves like an object store -----------------------------------------


def _local(uri):
  return objstore.local_path(uri)


def test_the_test_filesystem_refuses_renames_links_and_locks(bucket, tmp_path):
  import fcntl

  from etils import epath

  storage.write_object(f"{bucket}/d/a", b"x")
  with pytest.raises(OSError, match="prefix cannot be renamed"):
    epath.Path(f"{bucket}/d").rename(f"{bucket}/e")
  with pytest.raises(OSError, match="no link"):
    os.link(_local(f"{bucket}/d/a"), _local(f"{bucket}/d/b"))
  with pytest.raises(OSError, match="no rename"):
    os.rename(_local(f"{bucket}/d"), _local(f"{bucket}/e"))
  with open(_local(f"{bucket}/d/a"), "rb") as f, pytest.raises(OSError, match="no locks"):
    fcntl.flock(f, fcntl.LOCK_EX)
  assert not storage.isdir(f"{bucket}/empty")  # a prefix without objects does not exist
  storage.makedirs(f"{bucket}/empty")
  assert not storage.exists(f"{bucket}/empty")


def test_atomic_file_and_dir_on_the_object_store(bucket):
  path = f"{bucket}/out/result.json"
  files.write_json(path, {"a": 1})
  assert json.loads(storage.read_bytes(path)) == {"a": 1}
  with pytest.raises(RuntimeError), files.atomic_output_file(path) as f:
    f.write('{"half": ')
    raise RuntimeError
  assert json.loads(storage.read_bytes(path)) == {"a": 1}  # left as it was
  out = f"{bucket}/out/tables"
  with files.atomic_output_dir(out) as tmp:
    files.write_json(storage.join(tmp, "t.json"), [1])
    with open(os.path.join(tmp, "plain.txt"), "w") as f:  # as the data builders write
      f.write("x")
    assert not storage.exists(out)  # nothing visible before the commit
  listed = [storage.COMMIT_MARKER, "plain.txt", "t.json"]
  assert storage.is_committed(out) and storage.listdir(out) == listed
  with pytest.raises(RuntimeError), files.atomic_output_dir(out) as tmp:
    files.write_json(storage.join(tmp, "u.json"), [2])
    raise RuntimeError
  assert storage.listdir(out) == listed  # the old one, whole
  assert storage.listdir(f"{bucket}/out") == ["result.json", "tables"]  # no temporaries
  with files.atomic_output_dir(out) as tmp:
    files.write_json(storage.join(tmp, "v.json"), [3])
  assert storage.listdir(out) == [storage.COMMIT_MARKER, "v.json"]  # replaced as a whole
  files.check_replaceable(out, {"v.json"})
  with pytest.raises(UserError, match="holds other files"):
    files.check_replaceable(out, set())
  rows = [{"input": "é"}, {"input": "b"}]
  files.write_jsonl(f"{bucket}/in.jsonl", rows)
  assert line_files.read_jsonl(f"{bucket}/in.jsonl") == rows


def test_write_error_on_the_object_store_is_one_line_naming_the_output(bucket, monkeypatch):
  def full(path, data):
    raise OSError(28, "No space left on device")

  monkeypatch.setattr(storage, "write_object", full)
  with pytest.raises(OutputError, match=r"^gs://bucket/x.json: cannot write \(No space left"):
    files.write_json(f"{bucket}/x.json", {})


def test_lock_on_the_object_store(bucket, capsys):
  wd = f"{bucket}/wd"
  with WorkdirLock(wd, "train"):
    assert storage.isfile(f"{wd}/{LOCK_NAME}")
    with pytest.raises(LockedError, match=f"{wd} is in use by pid {os.getpid()}"):
      WorkdirLock(wd, "eval").acquire()
  assert not storage.exists(f"{wd}/{LOCK_NAME}")
  # A lock left by a dead process of this host is taken over.
  dead = subprocess.Popen([sys.executable, "-c", "pass"])
  dead.wait()
  stale = json.dumps({"pid": dead.pid, "host": os.uname()[1]}).encode()
  storage.write_object(f"{wd}/{LOCK_NAME}", stale)
  with WorkdirLock(wd, "train"):
    pass
  assert "took over the lock" in capsys.readouterr().err


def test_exclusive_create_and_lease_fallback(bucket, monkeypatch):
  assert storage.create_exclusive(f"{bucket}/l", "a") is True
  assert storage.create_exclusive(f"{bucket}/l", "b") is False
  assert storage.read_text(f"{bucket}/l") == "a"
  # Concurrent creators: exactly one wins, and the object is the winner's.
  with concurrent.futures.ThreadPoolExecutor(8) as pool:
    won = list(pool.map(lambda i: storage.create_exclusive(f"{bucket}/race", str(i)), range(8)))
  assert won.count(True) == 1
  assert storage.read_text(f"{bucket}/race") == str(won.index(True))
  # A backend without exclusive create: a lease, read back after writing.
  real_open = objstore.ObjectStoreFS._open

  def no_xb(self, path, mode="rb", **kwargs):
    if mode == "xb":
      raise ValueError("unsupported mode")
    return real_open(self, path, mode, **kwargs)

  monkeypatch.setattr(objstore.ObjectStoreFS, "_open", no_xb)
  monkeypatch.setattr(storage, "LEASE_SETTLE_S", 0.01)
  assert storage.create_exclusive(f"{bucket}/m", "mine") is True
  assert storage.create_exclusive(f"{bucket}/m", "theirs") is False
  real_read = storage.read_text
  monkeypatch.setattr(storage, "read_text", lambda p: "a later writer's token")
  assert storage.create_exclusive(f"{bucket}/n", "mine") is False  # lost the lease race
  monkeypatch.setattr(storage, "read_text", real_read)


def _state(seed):
  import jax.numpy as jnp

  params = {"w": jnp.arange(64.0).reshape(8, 8) * seed, "b": jnp.arange(8.0) + seed}
  return params, {"count": jnp.int32(seed), "mu": jnp.full((16,), float(seed))}


def _abstract(tree):
  import jax

  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


def test_checkpoints_on_the_object_store(bucket, capsys):
  from tlm.train.checkpointing import CheckpointManager

  wd = f"{bucket}/wd"
  manager = CheckpointManager(wd, keep=2)
  for step in (1, 2, 3):
    manager.save(step, *_state(step), {"step": step})
  manager.close()
  root = f"{wd}/checkpoints"
  assert storage.listdir(root) == ["2", "3"]  # keep=2: step 1 deleted through epath
  for step in ("2", "3"):
    names = storage.listdir(f"{root}/{step}")
    assert checksums.ORBAX_COMMIT in names and checksums.MANIFEST in names
  # A step whose commit marker is missing (killed mid-save) is incomplete: orbax does not list
  # it, and tlm's own listing (`load_checkpoint` of a workdir) skips it with a warning.
  storage.remove(f"{root}/3/{checksums.ORBAX_COMMIT}")
  manager = CheckpointManager(wd, keep=2)
  assert manager.latest_step() == 2
  assert checksums.newest_good_step(root, [2, 3], ITEMS) == 2
  assert "checkpoint gs://bucket/wd/checkpoints/3 is incomplete (no commit_success.txt)" in (
    capsys.readouterr().err
  )
  params, opt_state = _state(2)
  got, _, data_state = manager.restore(2, _abstract(params), _abstract(opt_state))
  assert data_state == {"step": 2}
  np.testing.assert_array_equal(np.asarray(got["w"]), np.asarray(params["w"]))
  # The resumed run saves step 3 again, over the uncommitted one.
  manager.save(3, *_state(30), {"step": 3})
  manager.close()
  assert storage.listdir(root) == ["2", "3"]
  manager = CheckpointManager(wd, keep=2)
  assert manager.latest_step() == 3
  got, _, _ = manager.restore(3, _abstract(params), _abstract(opt_state))
  manager.close()
  np.testing.assert_array_equal(np.asarray(got["b"]), np.arange(8.0) + 30)
  # A committed but corrupt step is set aside before a save over it: copied, not renamed.
  chunks = glob.glob(os.path.join(_local(f"{root}/3/params"), "**", "d", "*"), recursive=True)
  with open(max(chunks, key=os.path.getsize), "r+b") as f:
    f.write(b"\xff" * 16)
  manager = CheckpointManager(wd, keep=3)
  assert manager.latest_step() == 2
  manager.save(3, *_state(31), {"step": 3})
  manager.close()
  assert storage.listdir(root) == ["2", "3", "3.bad"]
  assert "moved the bad checkpoint(s) [3]" in capsys.readouterr().err
  assert checksums.check(f"{root}/3", ITEMS) is None


# --- End to end: train -> SIGKILL -> resume -> predict, eval, all on gs:// ------------------------

STEPS = 12
EVAL_YEARS = "--set=eval.years=2016,2017,2018"  # the years of the fixture's held-out news


def _env(cache):
  e = dict(os.environ)
  e["JAX_PLATFORMS"] = "cpu"
  e["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1 --xla_backend_optimization_level=0"
  e.update(compilation_cache(str(cache)))
  return e


def _train_args(workdir, data):
  sets = [s.replace(DATA, data) for s in FIXTURE_DATA_SETS] + [
    f"train.steps={STEPS}",
    "train.batch_size=8",
    "train.checkpoint_every=4",
    "train.keep_checkpoints=2",
    "train.log_every=1",
    "train.eval_every=8",
    "model.num_layers=1",
  ]
  return ["--mode=train", "--config=tiny_temporal", f"--workdir={workdir}"] + [
    f"--set={s}" for s in sets
  ]


def _predict_args(checkpoint, input_file, output_file):
  return [
    "--mode=predict",
    f"--checkpoint={checkpoint}",
    f"--input_file={input_file}",
    f"--output_file={output_file}",
    "--max_decode_length=8",
  ]


@pytest.mark.slow
def test_train_kill_resume_predict_eval_on_the_object_store_equals_local(tmp_path):
  env = _env(tmp_path / "jax_cache")
  store, cwd = tmp_path / "store", tmp_path / "cwd"
  cwd.mkdir()
  shutil.copytree(DATA, store / "bucket" / "data")  # "uploaded" inputs
  rows = [{"input": "Who was the head of Entity 3?"}, {"input": "Where is Entity 7?"}]
  files.write_jsonl(str(tmp_path / "queries.jsonl"), rows)
  shutil.copy(tmp_path / "queries.jsonl", store / "bucket" / "queries.jsonl")

  def on_store(*args):
    return [
      sys.executable,
      os.path.join(ROOT, "tests", "objstore.py"),
      str(store),
      os.path.join(ROOT, "run.py"),
      *args,
    ]

  def run(cmd):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc

  # The reference: the same run on local disk, uninterrupted.
  local, on_disk = str(tmp_path / "local"), [sys.executable, os.path.join(ROOT, "run.py")]
  run(on_disk + _train_args(local, DATA))
  queries, local_pred = str(tmp_path / "queries.jsonl"), str(tmp_path / "pred.jsonl")
  run(on_disk + _predict_args(local, queries, local_pred))
  run(on_disk + ["--mode=eval", f"--workdir={local}", EVAL_YEARS])

  # On the object store: killed after a committed checkpoint, then resumed.
  workdir, steps = "gs://bucket/wd", store / "bucket" / "wd" / "checkpoints"

  def committed():
    done = glob.glob(str(steps / "*" / checksums.ORBAX_COMMIT))
    return sorted(int(os.path.basename(os.path.dirname(p))) for p in done)

  cmd = on_store(*_train_args(workdir, "gs://bucket/data"))
  proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  deadline = time.time() + 600
  while not committed() and proc.poll() is None:
    assert time.time() < deadline, "no checkpoint within 600 s"
    time.sleep(0.02)
  proc.send_signal(signal.SIGKILL)
  _, err = proc.communicate()
  killed_at = max(committed(), default=0)
  assert 4 <= killed_at < STEPS, f"not killed mid-way (latest {killed_at}): {err[-2000:]}"
  resumed = run(cmd)
  assert f"resumed from step {killed_at}" in resumed.stdout, resumed.stdout[-2000:]
  run(on_store(*_predict_args(workdir, "gs://bucket/queries.jsonl", "gs://bucket/out/pred.jsonl")))
  run(on_store("--mode=eval", f"--workdir={workdir}", EVAL_YEARS))

  # Same results as the local run: the metrics, the final parameters, the predictions.
  objstore.install(str(store))
  try:
    import orbax.checkpoint as ocp

    got_metrics = line_files.read_jsonl(f"{workdir}/metrics.jsonl")
    want_metrics = line_files.read_jsonl(os.path.join(local, "metrics.jsonl"))
    assert [r["loss"] for r in got_metrics] == [r["loss"] for r in want_metrics]
    want = ocp.StandardCheckpointer().restore(
      os.path.join(local, "checkpoints", str(STEPS), "params")
    )
    got = ocp.StandardCheckpointer().restore(f"{workdir}/checkpoints/{STEPS}/params")
    flat_want, flat_got = ocp.tree.to_flat_dict(want), ocp.tree.to_flat_dict(got)
    assert flat_want.keys() == flat_got.keys()
    for k in flat_want:
      np.testing.assert_array_equal(np.asarray(flat_got[k]), np.asarray(flat_want[k]), str(k))
    predictions = line_files.read_jsonl("gs://bucket/out/pred.jsonl")
    assert predictions == line_files.read_jsonl(local_pred)
    assert [r["input"] for r in predictions] == [r["input"] for r in rows]
    # Nothing half-written or temporary is visible; the lock is gone.
    names = storage.listdir(workdir)
    assert not [n for n in names if n.startswith(".")], names
    kept = sorted(int(n) for n in storage.listdir(f"{workdir}/checkpoints"))
    assert kept == [STEPS - 4, STEPS]
    for step in kept:
      assert checksums.check(f"{workdir}/checkpoints/{step}", ITEMS) is None
    assert storage.listdir("gs://bucket/out") == ["pred.jsonl"]
    assert storage.listdir(f"{workdir}/results") == ["eval.json", "table2_row.md"]
    got_eval = json.loads(storage.read_bytes(f"{workdir}/results/eval.json"))
    with open(os.path.join(local, "results", "eval.json")) as f:
      want_eval = json.load(f)
    assert got_eval["templama"]["records"] and got_eval["news"]
    for key in ("templama", "news", "answer_baselines"):
      assert got_eval[key] == want_eval[key], key
  finally:
    objstore.uninstall()
  assert os.listdir(cwd) == [], "a gs:// path was written as a local path"
