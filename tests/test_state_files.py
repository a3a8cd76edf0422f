"""The project's own state files read back as hostile input: checksum
manifests, the workdir lock, best.json, a checkpoint's data state, a saved config.json or
model_config.json, and the results combine_seeds reads. Each class of bad input has its own
cases: names leading out of their directory, special files (a FIFO, a device) that must never
be opened, sizes beyond the bound, wrong types and values. Each ends in a one-line error naming
the file or, for a checkpoint, in the fall-back to the newest intact one with a warning.

A case that would hang if it regressed (a FIFO or a device opened) runs in a subprocess with a
timeout, so that CI fails instead of blocking. The fuzz tests of the same readers are in
tests/test_fuzz_state.py; every mode's verified load in tests/test_verified_loads.py."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import fake_step, write_file
from tlm import checksums, safe_read
from tlm.errors import CheckpointError, ConfigError, DataError
from tlm.workdir_lock import LOCK_NAME, LockedError, WorkdirLock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ITEMS = ("params", "opt_state", "data_state")
DIGEST = "0" * 64


def _manifest(step_dir) -> dict:
  with open(os.path.join(step_dir, checksums.MANIFEST)) as f:
    return json.load(f)


def _set_manifest(step_dir, manifest) -> None:
  raw = manifest if isinstance(manifest, (str, bytes)) else json.dumps(manifest)
  write_file(os.path.join(step_dir, checksums.MANIFEST), raw)


def _check_in_subprocess(step_dir, items=ITEMS, timeout=60) -> str:
  """`checksums.check` in a fresh process: a FIFO or device opened by a regression times out
  (the test fails) instead of blocking the suite."""
  code = "import sys; from tlm import checksums; print(checksums.check(sys.argv[1], sys.argv[2:]))"
  proc = subprocess.run(
    [sys.executable, "-c", code, step_dir, *items],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=timeout,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  return proc.stdout.strip()


# --- Checksum manifests -----------------------------------------------------------------------


def test_an_intact_fake_step_passes(tmp_path):
  step_dir = fake_step(tmp_path)
  assert checksums.check(step_dir, ITEMS) is None
  assert set(checksums.read_manifest(step_dir)) == {
    "params/_METADATA",
    "params/d/abc",
    "opt_state/_METADATA",
    "opt_state/d/abc",
    "data_state/metadata",
  }


@pytest.mark.parametrize(
  "name",
  [
    "params/../../../outside_fifo",  # resume used to open this FIFO and block
    "params/../../../../../../../../../../dev/zero",  # a device that never ends
    "/dev/zero",
    "params/a\x00b",
    "params/link_out",  # a link inside the checkpoint to the FIFO outside
    "C:/x",
  ],
)
def test_a_manifest_entry_leading_out_of_the_checkpoint_is_never_opened(tmp_path, name):
  step_dir = fake_step(tmp_path / "w")
  os.mkfifo(tmp_path / "outside_fifo")
  os.symlink(tmp_path / "outside_fifo", os.path.join(step_dir, "params", "link_out"))
  manifest = _manifest(step_dir)
  manifest["files"][name] = {"size": 0, "sha256": DIGEST}
  _set_manifest(step_dir, manifest)
  reason = _check_in_subprocess(step_dir)
  assert reason.startswith(f"unreadable ({checksums.MANIFEST}: file name "), reason
  assert "leads outside the checkpoint directory" in reason


def test_a_fifo_or_device_in_place_of_a_checkpoint_file_is_never_opened(tmp_path):
  step_dir = fake_step(tmp_path)
  target = os.path.join(step_dir, "params", "d", "abc")
  os.remove(target)
  os.mkfifo(target)
  assert _check_in_subprocess(step_dir) == "unreadable (params/d/abc: not a regular file (a FIFO))"
  os.remove(os.path.join(step_dir, checksums.MANIFEST))  # unverified: still never opened
  assert _check_in_subprocess(step_dir) == "unreadable (params/d/abc: not a regular file (a FIFO))"
  os.remove(target)
  os.symlink("/dev/zero", target)  # a link out of the checkpoint, to a device
  assert "a character device" in _check_in_subprocess(step_dir)


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory"])
def test_a_manifest_that_is_not_a_regular_file_makes_the_checkpoint_unreadable(tmp_path, kind):
  step_dir = fake_step(tmp_path)
  path = os.path.join(step_dir, checksums.MANIFEST)
  os.remove(path)
  {"fifo": os.mkfifo, "dev_zero": lambda p: os.symlink("/dev/zero", p), "directory": os.mkdir}[
    kind
  ](path)
  # Not "no manifest, used unverified": a manifest is there and cannot be read.
  reason = _check_in_subprocess(step_dir)
  assert reason.startswith(f"unreadable ({checksums.MANIFEST}: cannot read a checksum manifest")
  assert "not a regular file" in reason


def test_a_manifest_beyond_its_size_bound_is_not_read(tmp_path, monkeypatch):
  step_dir = fake_step(tmp_path)
  monkeypatch.setattr(checksums, "MAX_MANIFEST_BYTES", 2000)
  with open(os.path.join(step_dir, checksums.MANIFEST), "ab") as f:
    f.write(b" " * 2000)  # still valid JSON: only the bound refuses it
  assert checksums.check(step_dir, ITEMS) == (
    f"unreadable ({checksums.MANIFEST}: cannot read a checksum manifest (larger than 2000 bytes))"
  )


def _entry(size=10, sha256=DIGEST):
  return {"size": size, "sha256": sha256}


HOSTILE_MANIFESTS = {
  "not_json": b"{",
  "not_utf8": b'{"format": "\xff"}',
  "deep": b"[" * 50_000 + b"]" * 50_000,
  "huge_int": b'{"files": {"params/x": {"size": ' + b"9" * 5000 + b"}}}",
  "a_list": [],
  "other_format": {"format": "x", "files": {}},
  "files_a_list": {"format": "tlm-checkpoint-checksums/1", "files": []},
  "entry_an_int": {"params/_METADATA": 5},
  "entry_a_list": {"params/_METADATA": [10, DIGEST]},
  "size_negative": {"params/_METADATA": _entry(size=-1)},
  "size_beyond_64_bits": {"params/_METADATA": _entry(size=2**63)},
  # An entry of a file outside the items checked (score reads params only) was accepted.
  "size_huge_outside_the_items": {"_CHECKPOINT_METADATA": _entry(size=10**30)},
  "size_a_bool": {"params/_METADATA": _entry(size=True)},
  "size_a_string": {"params/_METADATA": _entry(size="12")},
  "size_a_float": {"params/_METADATA": _entry(size=12.0)},
  "digest_short": {"params/_METADATA": _entry(sha256="abc")},
  "digest_upper": {"params/_METADATA": _entry(sha256="A" * 64)},
  "digest_null": {"params/_METADATA": _entry(sha256=None)},
  "not_normalised": {"params/./_METADATA": _entry()},
  "double_slash": {"params//_METADATA": _entry()},
  "trailing_slash": {"params/": _entry()},
  "empty_name": {"": _entry()},
  "backslash": {"params\\..\\..\\x": _entry()},
  "the_manifest_itself": {checksums.MANIFEST: _entry()},
}


@pytest.mark.parametrize("case", sorted(HOSTILE_MANIFESTS))
def test_a_hostile_manifest_makes_its_checkpoint_unreadable_in_one_line(tmp_path, case):
  step_dir = fake_step(tmp_path)
  bad = HOSTILE_MANIFESTS[case]
  if isinstance(bad, dict) and "format" not in bad:
    manifest = _manifest(step_dir)
    manifest["files"].update(bad)
    bad = manifest
  _set_manifest(step_dir, bad)
  reason = checksums.check(step_dir, ITEMS)
  assert reason is not None and reason.startswith(f"unreadable ({checksums.MANIFEST}: ")
  assert "\n" not in reason and len(reason) < 400, reason


def test_every_file_of_a_checked_item_must_be_listed(tmp_path):
  step_dir = fake_step(tmp_path)
  manifest = _manifest(step_dir)
  del manifest["files"]["params/d/abc"]  # a manifest cut short leaves no file unchecked
  _set_manifest(step_dir, manifest)
  assert checksums.check(step_dir, ITEMS) == (
    f"corrupt (params/d/abc is not in {checksums.MANIFEST})"
  )
  assert checksums.check(step_dir, ("opt_state",)) is None  # another item is unaffected
  step_dir = fake_step(tmp_path, step=2)
  write_file(os.path.join(step_dir, "params", ".DS_Store"), b"x")  # hidden names are not orbax's
  assert checksums.check(step_dir, ITEMS) is None


def test_a_hostile_newest_manifest_falls_back_to_the_previous_step(tmp_path):
  fake_step(tmp_path, 1)
  step_dir = fake_step(tmp_path, 2)
  manifest = _manifest(step_dir)
  manifest["files"]["params/../../1/params/d/abc"] = _entry()
  _set_manifest(step_dir, manifest)
  warnings = []
  root = os.path.join(str(tmp_path), "checkpoints")
  assert checksums.newest_good_step(root, [1, 2], ITEMS, warn=warnings.append) == 1
  assert warnings == [
    f"checkpoint {step_dir} is unreadable ({checksums.MANIFEST}: file name "
    "'params/../../1/params/d/abc' leads outside the checkpoint directory); using "
    f"{os.path.join(root, '1')} instead"
  ]
  _set_manifest(os.path.join(root, "1"), {"format": "x"})
  with pytest.raises(CheckpointError, match="no good checkpoint left") as e:
    checksums.newest_good_step(root, [1, 2], ITEMS, warn=warnings.append)
  assert "\n" not in str(e.value)


def test_an_index_name_that_is_a_fifo_is_refused_by_the_checkpoint_guard(tmp_path):
  from tlm.models.formats import guards

  os.mkfifo(tmp_path / "shard.safetensors")
  with pytest.raises(CheckpointError, match="'shard.safetensors' is a FIFO, not a file"):
    safe_read.confined_path(str(tmp_path), "shard.safetensors", "model.safetensors.index.json")
  os.mkdir(tmp_path / "array")  # a directory (a T5X zarr array's) is its reader's to read
  assert safe_read.confined_path(str(tmp_path), "array", "checkpoint") == str(tmp_path / "array")
  with pytest.raises(CheckpointError, match="cannot read JSON \\(not a regular file"):
    guards.load_json(str(tmp_path / "shard.safetensors"))


# --- The workdir lock -------------------------------------------------------------------------


HOSTILE_LOCKS = {
  "pid_beyond_pid_t": {"pid": 2**70},  # os.kill: OverflowError
  "pid_negative": {"pid": -1},  # os.kill(-1, 0) addresses every process
  "pid_zero": {"pid": 0},
  "pid_a_bool": {"pid": True},
  "pid_a_string": {"pid": "123"},
  "pid_a_float": {"pid": 12.0},
  "host_multiline": {"pid": 1, "host": "a\nb"},
  "host_a_list": {"pid": 1, "host": ["a"]},
  "token_an_object": {"pid": 1, "token": {}},
  "start_not_a_number": {"pid": 1, "process_start": "soon"},
  "a_list": [1],
  "deep": "[" * 50_000,
  "not_json": "pid=1",
  "not_utf8": b"\xff\xfe",
  "huge": " " * (1 << 17) + '{"pid": 1}',
}


@pytest.mark.parametrize("case", sorted(HOSTILE_LOCKS))
def test_a_hostile_lock_file_is_a_one_line_error(tmp_path, case):
  content = HOSTILE_LOCKS[case]
  if isinstance(content, (dict, list)):
    content = json.dumps(content)
  write_file(str(tmp_path / LOCK_NAME), content)
  with pytest.raises(LockedError) as e:
    WorkdirLock(str(tmp_path), "train").acquire()
  message = str(e.value)
  assert message.startswith(f"{tmp_path / LOCK_NAME}: unreadable lock file (")
  assert message.endswith(f"); delete it if no run is using {tmp_path}")
  assert "\n" not in message and len(message) < 400


def test_a_lock_file_that_is_a_fifo_is_never_opened(tmp_path):
  os.mkfifo(tmp_path / LOCK_NAME)
  code = (
    "import sys; from tlm.workdir_lock import WorkdirLock, LockedError\n"
    "try: WorkdirLock(sys.argv[1], 'train').acquire()\n"
    "except LockedError as e: print(e)"
  )
  proc = subprocess.run(
    [sys.executable, "-c", code, str(tmp_path)],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert proc.stdout.strip() == (
    f"{tmp_path / LOCK_NAME}: unreadable lock file (not a regular file (a FIFO)); delete it if "
    f"no run is using {tmp_path}"
  ), proc.stderr


def test_a_lock_that_cannot_be_written_leaves_no_temporary_behind(tmp_path, monkeypatch):
  # On a full disk the write of the lock's temporary file failed and left it beside the output
  # (build_ssm --output_dir on a full tmpfs left .out.tlm.lock.<uuid>.tmp).
  import builtins

  from tlm.errors import UserError

  real_open = builtins.open

  class FullDisk:
    def __init__(self, f):
      self.f = f

    def __enter__(self):
      return self

    def write(self, text):
      raise OSError(28, "No space left on device")

    def __exit__(self, *exc):
      self.f.close()

  def open_(path, *args, **kwargs):
    f = real_open(path, *args, **kwargs)
    return FullDisk(f) if str(path).endswith(".tmp") else f

  monkeypatch.setattr(builtins, "open", open_)
  with pytest.raises(UserError, match=r"cannot create the lock \(No space left on device\)$"):
    WorkdirLock(str(tmp_path / "w"), "train").acquire()
  assert os.listdir(tmp_path / "w") == []


# --- best.json --------------------------------------------------------------------------------


GOOD_BEST = {"metric": "eval_loss", "mode": "min", "value": 2.5, "step": 12}
HOSTILE_BESTS = {
  "truncated": '{"metric": "eval_lo',
  "a_list": "[]",
  "value_a_string": {**GOOD_BEST, "value": "low"},
  "value_nan": '{"metric": "eval_loss", "mode": "min", "value": NaN, "step": 12}',
  "value_beyond_float": {**GOOD_BEST, "value": 10**400},
  "value_a_bool": {**GOOD_BEST, "value": True},
  "step_a_list": {**GOOD_BEST, "step": [12]},
  "step_a_float": {**GOOD_BEST, "step": 12.0},
  "step_negative": {**GOOD_BEST, "step": -1},
  "mode_other": {**GOOD_BEST, "mode": "lowest"},
  "metric_missing": {k: v for k, v in GOOD_BEST.items() if k != "metric"},
  "deep": "[" * 50_000,
  "huge": " " * (1 << 17) + json.dumps(GOOD_BEST),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_BESTS))
def test_a_hostile_best_json_is_a_one_line_error_saying_what_to_do(tmp_path, case):
  from tlm.train.best import read_best

  content = HOSTILE_BESTS[case]
  path = str(tmp_path / "best.json")
  write_file(path, content if isinstance(content, str) else json.dumps(content))
  with pytest.raises(CheckpointError) as e:
    read_best(path)
  message = str(e.value)
  assert message.startswith(f"{path}: ") and "\n" not in message and len(message) < 400
  assert message.endswith(
    "delete it, and the best checkpoint is chosen again from this run's next records"
  )


def test_a_good_best_json_reads_back(tmp_path):
  from tlm.train.best import read_best

  path = str(tmp_path / "best.json")
  write_file(path, json.dumps({**GOOD_BEST, "value": 3}))
  assert read_best(path) == {**GOOD_BEST, "value": 3.0}


def test_a_best_json_that_is_a_fifo_is_never_opened(tmp_path):
  path = str(tmp_path / "best.json")
  os.mkfifo(path)
  code = (
    "import sys\nfrom tlm import safe_read\nfrom tlm.errors import CheckpointError\n"
    "try: safe_read.read_json(sys.argv[1], 1000, error=CheckpointError, what='best.json')\n"
    "except CheckpointError as e: print(e)"
  )
  proc = subprocess.run(
    [sys.executable, "-c", code, path], cwd=ROOT, capture_output=True, text=True, timeout=60
  )
  assert proc.stdout.strip() == f"{path}: cannot read best.json (not a regular file (a FIFO))"


def test_a_hostile_best_json_stops_a_resumed_run_before_training(tmp_path):
  import jax.numpy as jnp

  from tlm.train.best import BestKeeper

  keeper = BestKeeper(str(tmp_path), "eval_loss", main=True)
  record = {"step": 1, "eval_loss": 2.0}
  assert keeper.update(record, {"w": jnp.ones(4)}, {"c": jnp.int32(0)}, {"step": 1})
  keeper.close()
  write_file(str(tmp_path / "best" / "best.json"), '{"metric": "eval_loss", "mode": "min"')
  with pytest.raises(CheckpointError, match="best.json: cannot read best.json"):
    BestKeeper(str(tmp_path), "eval_loss", main=True)


# --- A checkpoint's data state ----------------------------------------------------------------


@pytest.mark.parametrize(
  "saved, why",
  [
    ([], "not a JSON object"),
    ({"step": "8"}, "'step' is not an int"),
    ({"step": 8, "batch_size": 8.0}, "'batch_size' is not an int"),
    ({"step": 8, "batch_size": 8, "data": []}, "'data' is not a dict"),
    ({"step": 8, "batch_size": 8, "data": {}, "world": 3}, "'world' is not a str"),
    ({"step": True}, "'step' is not an int"),
  ],
)
def test_a_mistyped_data_state_is_a_one_line_checkpoint_error(saved, why):
  from tlm import configs
  from tlm.train.data_state import check_data_state

  with pytest.raises(CheckpointError) as e:
    check_data_state(saved, configs.get("tiny_temporal"), "W/checkpoints/8")
  assert str(e.value) == f"W/checkpoints/8/data_state: not a data state written by tlm ({why})"


def test_a_data_state_of_another_step_or_type_falls_back_to_the_previous_checkpoint(tmp_path):
  import jax.numpy as jnp

  from tlm.train.checkpointing import CheckpointManager, data_state_problem

  manager = CheckpointManager(str(tmp_path), keep=3)
  for step in (1, 2, 3):
    manager.save(step, {"w": jnp.ones(4) * step}, {"c": jnp.int32(step)}, {"step": step})
  manager.close()
  root = os.path.join(str(tmp_path), "checkpoints")
  # Rewritten with a matching manifest: the file is intact, what it says is not.
  for step, content in ((3, "[]"), (2, '{"step": 7}')):
    write_file(os.path.join(root, str(step), "data_state", "metadata"), content)
    checksums.write_manifest(os.path.join(root, str(step)))
  warnings = []
  found = checksums.newest_good_step(
    root, [1, 2, 3], ITEMS, warn=warnings.append, inspect=data_state_problem
  )
  assert found == 1
  assert [w.split(" is ", 1)[1].split(";")[0] for w in warnings] == [
    "corrupt (data_state/metadata: not a JSON object)",
    "corrupt (data_state/metadata: step 7, expected 2)",
  ]
  manager = CheckpointManager(str(tmp_path), keep=3)
  assert manager.latest_step() == 1
  manager.close()


# --- Saved configs ----------------------------------------------------------------------------


def _saved_config(tmp_path, edit=None) -> str:
  from tlm import configs

  saved = configs.to_dict(configs.get("tiny_temporal"))
  if edit is not None:
    edit(saved)
  path = str(tmp_path / "config.json")
  write_file(path, json.dumps(saved))
  write_file(str(tmp_path / "model_config.json"), "{}")
  return path


def test_a_saved_config_reads_back(tmp_path):
  from tlm import configs
  from tlm.infer.trained_models import saved_config

  _saved_config(tmp_path)
  assert saved_config(str(tmp_path)) == configs.get("tiny_temporal")


@pytest.mark.parametrize(
  "edit, fragment",
  [
    (lambda c: c["data"].update(ssm_dir="/d\x00x"), "the saved config's data.ssm_dir holds a NUL"),
    (lambda c: c["data"].update(train_years=["2010\x00"]), "data.train_years holds a NUL"),
    (lambda c: c["train"].update(batch_size="8"), "'train.batch_size' expects int"),
    (lambda c: c.update(data=[]), "section 'data'"),
    (lambda c: c.update(extra=1), "unknown keys ['extra']"),
  ],
)
def test_a_hostile_saved_config_is_a_one_line_error_naming_the_file(tmp_path, edit, fragment):
  from tlm.infer.trained_models import saved_config

  path = _saved_config(tmp_path, edit)
  with pytest.raises(ConfigError) as e:
    saved_config(str(tmp_path))
  message = str(e.value)
  assert message.startswith(f"{path}: ") and fragment in message and "\n" not in message


@pytest.mark.parametrize("content", ["[]", "{", "[" * 50_000, " " * (1 << 21) + "{}"])
def test_an_unreadable_saved_config_is_a_one_line_error(tmp_path, content):
  from tlm.infer.trained_models import saved_config

  write_file(str(tmp_path / "config.json"), content)
  write_file(str(tmp_path / "model_config.json"), "{}")
  with pytest.raises(ConfigError) as e:
    saved_config(str(tmp_path))
  assert str(e.value).startswith(f"{tmp_path / 'config.json'}: cannot read the saved config (")


def test_a_saved_config_that_is_a_fifo_is_never_opened(tmp_path):
  os.mkfifo(tmp_path / "config.json")
  write_file(str(tmp_path / "model_config.json"), "{}")
  code = (
    "import sys\nfrom tlm.errors import ConfigError\n"
    "from tlm.infer.trained_models import saved_config\n"
    "try: saved_config(sys.argv[1])\nexcept ConfigError as e: print(e)"
  )
  proc = subprocess.run(
    [sys.executable, "-c", code, str(tmp_path)],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.stdout.strip() == (
    f"{tmp_path / 'config.json'}: cannot read the saved config (not a regular file (a FIFO))"
  ), proc.stderr[-2000:]


@pytest.mark.parametrize("content", ["[]", "[" * 50_000, '{"vocab_size": "big"}', '{"d_model": 1}'])
def test_a_hostile_model_config_of_an_init_checkpoint_is_a_one_line_error(tmp_path, content):
  from tlm.models import t5
  from tlm.train.checkpointing import load_init_params

  (tmp_path / "checkpoints").mkdir()
  write_file(str(tmp_path / "model_config.json"), content)
  with pytest.raises(CheckpointError) as e:
    load_init_params(str(tmp_path), t5.get_preset("tiny", vocab_size=40), None)
  assert str(e.value).startswith(f"{tmp_path / 'model_config.json'}: ")
  assert "\n" not in str(e.value)


@pytest.mark.parametrize("kind", ["missing", "fifo"])
def test_a_workdir_without_a_readable_model_config_names_model_config_json(tmp_path, kind):
  # The workdir's config.json (the experiment config) was read as an HF config instead, and
  # the error named config.json, which is intact.
  from tlm.models.checkpoints import load_checkpoint

  (tmp_path / "checkpoints" / "2" / "params").mkdir(parents=True)
  write_file(str(tmp_path / "config.json"), json.dumps({"name": "tiny_temporal", "model": {}}))
  if kind == "fifo":
    os.mkfifo(tmp_path / "model_config.json")
  with pytest.raises(CheckpointError) as e:
    load_checkpoint(str(tmp_path))
  message = str(e.value)
  assert message.startswith(f"{tmp_path / 'model_config.json'}: ") and "\n" not in message
  assert ("no such file" if kind == "missing" else "a FIFO") in message, message


# --- Results read back by combine_seeds -------------------------------------------------------


@pytest.fixture(scope="module")
def seed_dir(written, tmp_path_factory):
  """A seed's results/ as reproduce writes them, from the evaluation's fixtures (conftest.py)."""
  from tlm.miniature import measurements

  directory = tmp_path_factory.mktemp("seed")
  result = written["eval"]
  files = {
    "per_query.json": measurements.collect(
      0, {"temporal": result}, future={"temporal": written["future"]}
    ),
    "eval.json": {
      "tiny_temporal": {
        k: result[k] for k in ("templama", "news", "answer_baselines") if k in result
      }
    },
    "seed_summary.json": {"configs": {"temporal": {"name": "tiny_temporal"}}},
  }
  for name, content in files.items():
    write_file(str(directory / "results" / name), json.dumps(content))
  return directory


def test_a_seed_as_reproduce_writes_it_loads(seed_dir):
  from tlm.miniature import measurements, over_seeds

  with open(seed_dir / "results" / "per_query.json") as f:
    assert measurements.problem(json.load(f)) is None
  seed = over_seeds.load_saved_seed(str(seed_dir))
  assert seed["seed"] == 0 and seed["names"] == {"temporal": "tiny_temporal"}


def _edited(path, edit):
  with open(path) as f:
    value = json.load(f)
  edit(value)
  write_file(str(path), json.dumps(value))


@pytest.mark.parametrize(
  "name, edit, fragment",
  [
    ("per_query.json", lambda m: m.update(seed="0"), "'seed' is not an integer"),
    (
      "per_query.json",
      lambda m: m["models"]["temporal"]["templama"]["f1"].__setitem__(0, "x"),
      "models.temporal.templama.f1 holds 'x', not an F1 in [0, 1]",
    ),
    # Values of the right type out of their range were accepted: a seed reproduce.seeds
    # refuses, an F1 column of NaN (averaged into the claims), an F1 above 1.
    ("per_query.json", lambda m: m.update(seed=2**70), "'seed' is not an integer in [0, 2**64"),
    ("per_query.json", lambda m: m.update(seed=-1), "'seed' is not an integer in [0, 2**64"),
    (
      "per_query.json",
      lambda m: m["models"]["temporal"]["templama"].update(
        f1=[float("nan")] * len(m["models"]["temporal"]["templama"]["f1"])
      ),
      "models.temporal.templama.f1 holds 'nan', not an F1 in [0, 1]",
    ),
    (
      "per_query.json",
      lambda m: m["models"]["temporal"]["news"]["f1"].__setitem__(0, 1.5),
      "models.temporal.news.f1 holds '1.5', not an F1 in [0, 1]",
    ),
    (
      "per_query.json",
      lambda m: m["models"]["temporal"]["templama"]["year"].append(2010),
      "columns differ in length",
    ),
    (
      "per_query.json",
      lambda m: m["entropy"]["temporal"].update(entropy={"soon": [1.0]}),
      "not a year",
    ),
    ("per_query.json", lambda m: m.update(adaptation=[]), "'adaptation' is not an object"),
    (
      "per_query.json",
      lambda m: m["models"]["temporal"]["templama"].update(answers=[["a"], [1]]),
      "templama.answers holds '[1]', not a list of strings",
    ),
    (
      "per_query.json",
      lambda m: m["models"]["temporal"]["templama"].update(extra=[]),
      "does not have the columns",
    ),
    ("eval.json", lambda r: r["tiny_temporal"]["templama"].pop("metrics"), "tiny_temporal: "),
    ("eval.json", lambda r: r.update(tiny_temporal=[]), "not an object of evaluation results"),
    ("seed_summary.json", lambda s: s["configs"].update(temporal={"name": 3}), "no 'configs'"),
  ],
)
def test_a_hostile_seed_result_is_a_one_line_error_naming_the_file(
  seed_dir, tmp_path, name, edit, fragment
):
  import shutil

  from tlm.miniature import over_seeds

  copy = tmp_path / "seed"
  shutil.copytree(seed_dir, copy)
  _edited(copy / "results" / name, edit)
  with pytest.raises(DataError) as e:
    over_seeds.load_saved_seed(str(copy))
  message = str(e.value)
  assert message.startswith(f"{copy / 'results' / name}: ") and fragment in message, message
  assert "\n" not in message


@pytest.mark.parametrize(
  "edit, fragment",
  [
    (lambda r: r["config"].update(name="a\0b"), "config.name 'a\\x00b' is not a printable name"),
    (lambda r: r["config"].update(name=""), "config.name '' is not a printable name"),
    (lambda r: r["config"].update(name=3), "config.name '3' is not a printable name"),
    (
      lambda r: r["templama"].update(records=[[]] * 1000),
      "templama.records is not a list of objects",
    ),
    (
      lambda r: r["templama"].update(records=r["templama"]["records"] * 2),
      "its metrics count",
    ),
    (lambda r: r["templama"].update(records={}), "templama.records is not a list of objects"),
  ],
)
def test_a_hostile_eval_json_read_by_tables_is_a_one_line_error(written, tmp_path, edit, fragment):
  from tlm.eval import tables

  path = tmp_path / "results" / "eval.json"
  result = json.loads(json.dumps(written["eval.json"]))
  result["config"] = {"name": "tiny_temporal"}
  write_file(str(path), json.dumps(result))
  assert list(tables.read_eval_results([str(tmp_path)])) == ["tiny_temporal"]  # the control
  edit(result)
  write_file(str(path), json.dumps(result))
  with pytest.raises(DataError) as e:
    tables.read_eval_results([str(tmp_path)])
  message = str(e.value)
  assert message.startswith(f"{path}: not an eval.json written by --mode=eval (") and (
    fragment in message
  ), message
  assert "\n" not in message


def test_a_seed_result_beyond_its_bound_is_not_read(seed_dir, monkeypatch):
  from tlm.miniature import over_seeds

  monkeypatch.setattr(over_seeds, "MAX_RESULT_BYTES", 100)
  with pytest.raises(DataError, match="cannot read a seed's results \\(larger than 100 bytes\\)"):
    over_seeds.load_saved_seed(str(seed_dir))


def test_a_seed_kept_compressed_loads_as_the_plain_one(seed_dir, tmp_path):
  """The committed results keep per_query.json and eval.json as XZ (docs/results/README.md):
  the loader reads NAME.xz where NAME is missing, and gives the same seed."""
  import lzma
  import shutil

  from tlm.miniature import over_seeds

  copy = tmp_path / "seed"
  shutil.copytree(seed_dir, copy)
  for name in ("per_query.json", "eval.json"):
    path = copy / "results" / name
    (copy / "results" / (name + ".xz")).write_bytes(lzma.compress(path.read_bytes()))
    path.unlink()
  assert over_seeds.load_saved_seed(str(copy)) == over_seeds.load_saved_seed(str(seed_dir))


def test_a_compressed_json_is_bounded_by_what_it_decompresses_to(tmp_path):
  """A small XZ file that expands beyond the reader's bound is refused at the bound; a file
  that is not XZ, or XZ with bytes after its stream, is one line naming it."""
  import lzma

  path = tmp_path / "x.json"
  (tmp_path / "x.json.xz").write_bytes(lzma.compress(b"[" + b"0," * 500_000 + b"0]"))
  assert len((tmp_path / "x.json.xz").read_bytes()) < 2_000
  with pytest.raises(DataError, match="decompresses to more than 10000 bytes"):
    safe_read.read_json(str(path), 10_000)
  assert len(safe_read.read_json(str(path), 2_000_000)) == 500_001
  (tmp_path / "x.json.xz").write_bytes(b"not xz at all")
  with pytest.raises(DataError, match=r"x\.json\.xz: cannot read JSON \(not XZ data"):
    safe_read.read_json(str(path), 10_000)
  (tmp_path / "x.json.xz").write_bytes(lzma.compress(b"[1]") + b"junk")
  with pytest.raises(DataError, match="not one whole XZ stream"):
    safe_read.read_json(str(path), 10_000)
  path.write_text("[2]")  # the plain file, where present, is the one read
  assert safe_read.read_json(str(path), 10_000) == [2]


# --- JSON lines and the shared reader ---------------------------------------------------------


def test_an_integer_beyond_the_digit_limit_in_a_jsonl_line_is_a_data_error(tmp_path):
  from tlm.line_files import read_jsonl

  path = str(tmp_path / "in.jsonl")
  write_file(path, '{"a": 1}\n{"a": ' + "9" * 5000 + "}\n")
  with pytest.raises(DataError, match=f"^{path}:2: malformed JSON \\(Exceeds the limit"):
    read_jsonl(path)


def test_safe_read_refuses_special_files_and_nul_names(tmp_path):
  os.mkfifo(tmp_path / "fifo")
  for path, kind in (
    (tmp_path / "fifo", "a FIFO"),
    ("/dev/null", "a character device"),
    (tmp_path, "a directory"),
  ):
    with pytest.raises(safe_read.NotARegularFile, match=f"not a regular file \\({kind}\\)"):
      safe_read.read_bounded(str(path), 10)
  with pytest.raises(OSError, match="NUL"):
    safe_read.read_bounded(str(tmp_path / "a\x00b"), 10)
  write_file(str(tmp_path / "f"), b"x" * 11)
  with pytest.raises(safe_read.FileTooLarge, match="larger than 10 bytes"):
    safe_read.read_bounded(str(tmp_path / "f"), 10)
  assert safe_read.read_bounded(str(tmp_path / "f"), 11) == b"x" * 11


@pytest.mark.parametrize(
  "bad_line", ['{"step": "3"}', "[3]", '{"loss": 1.0}', '{"step": 1e999}', '{"step": true}', "x"]
)
@pytest.mark.parametrize("after", ["", '{"step": 4}\n'])
def test_a_bad_metrics_line_keeps_the_records_before_it(tmp_path, capsys, bad_line, after):
  from tlm.train.run_records import resume_metrics

  path = str(tmp_path / "metrics.jsonl")
  write_file(path, '{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.0}\n' + bad_line + "\n" + after)
  assert resume_metrics(path, 9) == [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0}]
  err = capsys.readouterr().err.strip()
  if bad_line == "x" and not after:  # unparseable and last: a torn append, dropped quietly
    assert err == f"notice: {path}: dropped a torn last line (a write cut short by a crash)"
  else:
    assert err.startswith(f"warning: {path}:3: ") and "\n" not in err
    assert err.endswith("; keeping the 2 records before it")


@pytest.mark.parametrize("content", [b"\xff", b"[" * 50_000, b'{"seed": ' + b"9" * 5000 + b"}"])
def test_a_hostile_synthetic_build_info_is_a_one_line_error(tmp_path, content):
  from tlm.input import datasets

  write_file(str(tmp_path / datasets._BUILD_INFO), content)
  with pytest.raises(ConfigError, match="was not built by ensure_synthetic_data"):
    datasets._check_world(str(tmp_path), {"seed": 0})
