"""gs:// through the clients a pod runs, over HTTP against a GCS emulator on 127.0.0.1
(tests/gcs_emulator.py): gcsfs (etils.epath and fsspec: tlm's files, orbax's file operations,
the ranged reads of an example store) and TensorStore's `gcs` driver (orbax's arrays).

- `build_ssm` straight to gs:// writes the local build's files byte for byte;
- `--mode=train` reading its data from gs:// and writing its workdir and checkpoints there,
  stopped and resumed, logs the losses of the same run on local disk, and `--mode=eval` from
  that gs:// workdir writes the local evaluation's results;
- a save that fails on the store (a revoked token, the store gone) is one line naming the
  checkpoint, the last complete checkpoint intact, and nothing else on stderr;
- every request has a deadline: a black-holed ranged read is one line naming the object and
  the byte range within it (in process and from a training run); 403 and 404 are not retried;
  a persistent 503 is retried by one layer (tlm's, not also gcsfs's).

Test-only, and not tlm's: the emulator's media downloads carry no generation, which
TensorStore's conditional writes need; tests/gcs_emulator.py adds it. The emulator does not
enforce a conditional create, so the workdir lock's exclusive create is tested on the
in-process double (tests/test_storage.py). Skipped without requirements-gcs.txt's packages
unless TLM_REQUIRE_GCS=1 (.ci/run's step, in a venv of its own).
"""

import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.helpers import DATA, FIXTURE_DATA_SETS, NEWS_SAMPLE, ROOT, SPIECE_MODEL, gcs_or_skip

gcs_or_skip()

from tests.gcs_emulator import Emulator  # noqa: E402
from tests.helpers import ENTITIES_SAMPLE  # noqa: E402
from tlm import remote_clients  # noqa: E402

# tlm's settings in this process too, before anything imports gcsfs (its bucket-type probe off).
remote_clients.configure()

# The tiny run: one layer, 8 rows, a checkpoint every 2 steps, a record at every step.
TRAIN_SETS = [
  *(s for s in FIXTURE_DATA_SETS if not s.startswith("data.ssm_dir=")),
  "train.batch_size=8",
  "train.checkpoint_every=2",
  "train.eval_every=0",
  "train.log_every=1",
  "model.num_layers=1",
]
ITEMS = ("params", "opt_state", "data_state")
# Lines the clients print that are not errors: TensorStore notes the test token it was given
# (GOOGLE_AUTH_TOKEN_FOR_TESTING), orbax when a save took longer than the steps between.
NOTES = ("Using GOOGLE_AUTH_TOKEN_FOR_TESTING", "Waiting for previous save to complete")
# No record before the end: between checkpoints, the run writes nothing else to its workdir.
_QUIET = "train.log_every=1000"


@pytest.fixture(scope="module")
def emulator():
  with Emulator() as emu:
    _fs(emu).put(os.path.join(DATA, "ssm"), "bucket/data/ssm", recursive=True)
    yield emu


def _fs(emu: Emulator):
  """A gcsfs filesystem of the emulator for the test's own reads and writes."""
  import gcsfs

  return gcsfs.GCSFileSystem(endpoint_url=emu.url, token="anon", skip_instance_cache=True)


def _run(emu: Emulator, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
  """`python run.py ARGS` with the emulator's environment only: what else a pod needs (the
  bucket-type probe off, timeouts) tlm sets."""
  env = {k: v for k, v in os.environ.items() if not k.startswith(("GCSFS_", "TENSORSTORE_"))}
  env.update(emu.env(), JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  command = [sys.executable, os.path.join(ROOT, "run.py"), *args]
  return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _start(emu: Emulator, *args: str) -> subprocess.Popen:
  env = {k: v for k, v in os.environ.items() if not k.startswith(("GCSFS_", "TENSORSTORE_"))}
  env.update(emu.env(), JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  command = [sys.executable, os.path.join(ROOT, "run.py"), *args]
  return subprocess.Popen(
    command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
  )


def _problems(stderr: str) -> list[str]:
  """The lines of stderr that are not the clients' notes (NOTES)."""
  lines = [line for line in stderr.splitlines() if line.strip()]
  return [line for line in lines if not any(note in line for note in NOTES)]


def _clean(proc) -> None:
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert _problems(proc.stderr) == [], proc.stderr[-3000:]


def _train(workdir: str, steps: int, ssm_dir: str, *flags: str, sets=()) -> list[str]:
  sets = [*TRAIN_SETS, f"data.ssm_dir={ssm_dir}", f"train.steps={steps}", *sets]
  head = ["--mode=train", "--config=tiny_temporal", f"--workdir={workdir}", *flags]
  return head + [f"--set={s}" for s in sets]


def _losses(text: str) -> np.ndarray:
  return np.array([json.loads(line)["loss"] for line in text.splitlines() if line.strip()])


@pytest.fixture
def clients(emulator, monkeypatch):
  """tlm's clients in this process, pointed at the emulator, with a 4 s deadline."""
  import gcsfs

  from tlm import remote_retries

  for name, value in emulator.env().items():
    monkeypatch.setenv(name, value)
  monkeypatch.setenv(remote_clients.DEADLINE_ENV, "4")
  monkeypatch.setattr(remote_retries, "_UNREACHABLE", [False])
  gcsfs.GCSFileSystem.clear_instance_cache()
  yield remote_retries.COUNTS
  emulator.clear()
  gcsfs.GCSFileSystem.clear_instance_cache()


def test_build_ssm_straight_to_gs_equals_the_local_build(emulator, tmp_path):
  flags = [f"--news={NEWS_SAMPLE}", f"--entities={ENTITIES_SAMPLE}", f"--vocab={SPIECE_MODEL}"]
  flags += ["--num_workers=2"]
  local = tmp_path / "ssm"
  _clean(_run(emulator, "--mode=build_ssm", f"--output_dir={local}", *flags))
  _clean(_run(emulator, "--mode=build_ssm", "--output_dir=gs://bucket/built/ssm", *flags))
  fs = _fs(emulator)
  remote = {p.removeprefix("bucket/built/ssm/"): p for p in fs.find("bucket/built/ssm")}
  files = {str(p.relative_to(local)): p for p in local.rglob("*") if p.is_file()}
  assert sorted(remote) == sorted([*files, ".tlm_committed"]) and len(files) > 100
  for rel, path in files.items():
    assert fs.cat_file(remote[rel]) == path.read_bytes(), rel


def test_train_resume_and_eval_on_gs_equal_the_local_run(emulator, clients, tmp_path):
  local = str(tmp_path / "local")
  _clean(_run(emulator, *_train(local, 6, os.path.join(DATA, "ssm"))))
  remote = "gs://bucket/runs/tiny"
  _clean(_run(emulator, *_train(remote, 4, "gs://bucket/data/ssm")))
  resumed = _run(emulator, *_train(remote, 6, "gs://bucket/data/ssm"))
  _clean(resumed)
  assert "resumed from step 4" in resumed.stdout, resumed.stdout
  fs = _fs(emulator)
  want = _losses(open(os.path.join(local, "metrics.jsonl")).read())
  got = _losses(fs.cat_file("bucket/runs/tiny/metrics.jsonl").decode())
  assert len(want) == 6
  np.testing.assert_array_equal(got, want)
  for step in (4, 6):  # the two kept: orbax's commit file and tlm's checksums, intact
    from tlm import checksums

    step_dir = f"{remote}/checkpoints/{step}"
    assert fs.exists(f"{step_dir}/commit_success.txt"), step_dir
    assert fs.exists(f"{step_dir}/tlm_checksums.json"), step_dir
    assert checksums.check(step_dir, ITEMS) is None
  # The years of the fixture's held-out news.
  sets = [*TRAIN_SETS, "data.ssm_dir=gs://bucket/data/ssm", "eval.years=2016,2017,2018"]
  evaluate = ["--mode=eval", "--config=tiny_temporal", *[f"--set={s}" for s in sets]]
  _clean(_run(emulator, *evaluate, f"--workdir={remote}"))
  _clean(_run(emulator, *evaluate, f"--workdir={local}"))
  got = json.loads(fs.cat_file("bucket/runs/tiny/results/eval.json"))
  assert got == json.load(open(os.path.join(local, "results", "eval.json")))


def _when_saved(emu: Emulator, workdir: str, step: int, timeout: float = 120) -> None:
  """Waits until checkpoint `step` is complete: orbax's commit file and tlm's checksums."""
  fs, deadline = _fs(emu), time.monotonic() + timeout
  key = workdir.removeprefix("gs://") + f"/checkpoints/{step}/tlm_checksums.json"
  while not fs.exists(key):
    assert time.monotonic() < deadline, f"no checkpoint {step} in {timeout} s"
    time.sleep(0.2)


@pytest.mark.parametrize("failure", ["revoked token", "store gone"])
def test_a_failed_save_is_one_line_and_the_last_checkpoint_stays(tmp_path, monkeypatch, failure):
  """A run writing only checkpoints to gs:// (no records before its end), from local data,
  loses its store once checkpoint 2 is complete: every upload refused (401), or the store
  gone. The run ends in one line naming the checkpoint it could not save and the one it can
  resume from, which is intact; nothing else is printed."""
  with Emulator(data_dir=str(tmp_path / "objects")) as emu:
    for name, value in emu.env().items():  # for tlm's check of the checkpoint, here
      monkeypatch.setenv(name, value)
    workdir, steps_key = "gs://bucket/runs/fail", "bucket/runs/fail/checkpoints"
    flags = ["--storage_deadline_s=4"]
    proc = _start(emu, *_train(workdir, 40, os.path.join(DATA, "ssm"), *flags, sets=[_QUIET]))
    _when_saved(emu, workdir, 2)
    if failure == "revoked token":
      emu.fail("*", "/upload/", 401)
    else:
      emu.stop()
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=300)
    took = time.monotonic() - t0
    if failure == "store gone":
      emu.start()
    emu.clear()
    problems = _problems(err)
    assert proc.returncode == 1 and len(problems) == 1, err[-3000:]
    line = problems[0]
    # The checkpoint the store failed (orbax's save of it, or tlm's checksums of it after), and
    # why; the one to resume from.
    steps = f"{re.escape(workdir)}/checkpoints"
    assert re.fullmatch(
      rf"error: ({steps}: cannot save checkpoint \d+ \(.+\); nothing of it was committed|"
      rf"{steps}/\d+: cannot write its checksum manifest \(.+\)); "
      rf"the last complete checkpoint is {steps}/\d+",
      line,
    ), line
    for noise in ("Traceback", "never retrieved", "Exception ignored", "never awaited"):
      assert noise not in err, err[-3000:]
    assert took < 60, took  # the deadline is 4 s: its retries, not orbax's 300 s timeouts
    from tlm import checksums

    complete = int(line.rsplit("/", 1)[1])
    fs = _fs(emu)
    names = [p.rsplit("/", 1)[1] for p in fs.ls(steps_key)]
    committed = [
      int(n) for n in names if n.isdigit() and fs.exists(f"{steps_key}/{n}/commit_success.txt")
    ]
    # Later steps may have left objects (the store went before they could be removed); none
    # is committed, so a resumed run skips them.
    assert complete >= 2 and max(committed) == complete, (names, line)
    assert checksums.check(f"{workdir}/checkpoints/{complete}", ITEMS) is None


def test_a_black_holed_read_is_one_line_within_the_deadline(emulator, clients):
  from tlm.errors import DataError
  from tlm.store.ranged import RangeReader

  obj = "gs://bucket/data/ssm/train/2014.tokens.bin"
  emulator.fail("GET", r"2014\.tokens\.bin\?alt=media", 0)  # accepted, never answered
  before, t0 = clients.snapshot(), time.monotonic()
  with pytest.raises(DataError) as err:
    RangeReader(obj).read([0, 64], [32, 96])
  took = time.monotonic() - t0
  message = str(err.value)
  assert message.startswith(f"{obj}: read of bytes [") and "; the last: no answer in " in message
  assert "\n" not in message
  assert 3.5 < took < 5.0, took  # the 4 s deadline
  sent = clients.snapshot()["requests"] - before["requests"]
  assert emulator.hits()[-1] == sent  # every request the emulator saw was one of tlm's


@pytest.mark.parametrize("status", [403, 404])
def test_403_and_404_are_not_retried(emulator, clients, status):
  from tlm.errors import DataError
  from tlm.store.ranged import RangeReader

  emulator.fail("GET", r"2015\.tokens\.bin\?alt=media", status)
  with pytest.raises(DataError, match=r"read of bytes \[0, 32\) failed \(.*\); not retried$"):
    RangeReader("gs://bucket/data/ssm/train/2015.tokens.bin").read([0], [32])
  assert emulator.hits()[-1] == 1


def test_a_persistent_503_is_retried_by_one_layer(emulator, clients):
  """gcsfs retried each request 6 times itself; under tlm's 8 attempts that made 48."""
  from tlm import remote_retries, storage

  emulator.fail("GET", r"/o/data%2Fssm%2Fmanifest\.json", 503)
  fs, key = storage.filesystem("gs://bucket/data/ssm/manifest.json")
  with pytest.raises(Exception, match="503"):
    fs.cat_file(key)  # one request
  assert emulator.hits()[-1] == remote_retries.RETRIES + 1


def test_a_training_run_whose_data_reads_hang_stops_in_one_line(emulator, tmp_path):
  """The pod's case: a training run's data reads get no answer (black-holed after start-up);
  it stops with one line naming the object and the byte range, well within the subprocess
  timeout (without deadlines it waited forever)."""
  emulator.fail("GET", r"\.tokens\.bin\?alt=media", 0)
  try:
    args = _train(str(tmp_path / "w"), 6, "gs://bucket/data/ssm", "--storage_deadline_s=2")
    proc = _run(emulator, *args, timeout=240)
  finally:
    emulator.clear()
  problems = _problems(proc.stderr)
  assert proc.returncode == 1 and len(problems) == 1, proc.stderr[-3000:]
  line = problems[0]
  assert line.startswith("error: gs://bucket/data/ssm/train/"), line
  assert ".tokens.bin: read of bytes [" in line
  assert "; the last: no answer in " in line, line
