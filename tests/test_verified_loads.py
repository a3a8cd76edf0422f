"""Every load of a tlm checkpoint is checked against its checksum manifest, whatever the mode:
`load_checkpoint` (score, predict, eval*, convert), `model.init_checkpoint`
(`load_init_params`) and the evaluations' predictors. A workdir falls back to its newest intact
step with a warning; a step or model directory named on its own that fails is a one-line error.
A tlm model directory (`save_tlm`) carries a manifest too. And a save that fails on a full disk
prints tlm's one line only: no traceback of orbax's background writers."""

import glob
import json
import os
import re
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import DATA, FIXTURE_DATA_SETS, one_error, run_tlm
from tlm import checksums
from tlm.data.vocab import Vocabulary
from tlm.errors import CheckpointError
from tlm.models import checkpoints, t5
from tlm.train.checkpointing import CheckpointManager, load_init_params

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = os.path.join(DATA, "spiece.model")
STEPS = (100, 200)


def _params(cfg, seed):
  rs = np.random.RandomState(seed)
  shapes = checkpoints.param_shapes(cfg)
  return checkpoints.unflatten({k: rs.randn(*s).astype(np.float32) for k, s in shapes.items()})


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  """A training workdir with steps 100 and 200 (manifests written as training writes them) and
  a tlm model directory of step 100's parameters."""
  root = tmp_path_factory.mktemp("saved")
  cfg = t5.get_preset("tiny", vocab_size=Vocabulary(VOCAB).vocab_size)
  work = root / "work"
  manager = CheckpointManager(str(work), keep=3)
  trees = {}
  for step in STEPS:
    trees[step] = _params(cfg, step)
    manager.save(
      step, jax.tree.map(jnp.asarray, trees[step]), {"c": jnp.int32(step)}, {"step": step}
    )
  manager.close()
  (work / "model_config.json").write_text(json.dumps(cfg.to_dict()))
  shutil.copy(VOCAB, work / "spiece.model")
  model = root / "model"
  with open(VOCAB, "rb") as f:
    checkpoints.save_tlm(str(model), cfg, trees[100], spiece_model=f.read())
  return {"cfg": cfg, "work": work, "model": model, "trees": trees}


def _copy(saved, name, tmp_path):
  dst = tmp_path / name
  shutil.copytree(saved[name], dst)
  return dst


def _corrupt(directory):
  """4 KiB of random bytes into the largest parameter data file (as the hostile probe does)."""
  found = glob.glob(os.path.join(directory, "params", "**", "d", "*"), recursive=True)
  path = max(found, key=os.path.getsize)
  with open(path, "r+b") as f:
    f.seek(64)
    f.write(np.random.RandomState(0).bytes(4096))


def _same(got, want):
  for (k, a), (_, b) in zip(checkpoints.flatten(got), checkpoints.flatten(want)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b), k)


def test_a_model_directory_has_a_manifest_and_every_load_checks_it(saved, tmp_path, capsys):
  model = _copy(saved, "model", tmp_path)
  assert checksums.check(str(model), ("params",)) is None
  _same(checkpoints.load_checkpoint(str(model))[1], saved["trees"][100])
  _corrupt(str(model))
  with pytest.raises(CheckpointError) as e:
    checkpoints.load_checkpoint(str(model))
  assert str(e.value).startswith(f"{model}: checkpoint is corrupt (params/")
  assert str(e.value).endswith(": checksum differs)")
  # One written by an older tlm (no manifest) loads, with a warning that it is unverified.
  intact = _copy(saved, "model", tmp_path / "old")
  os.remove(intact / checksums.MANIFEST)
  capsys.readouterr()
  _same(checkpoints.load_checkpoint(str(intact))[1], saved["trees"][100])
  assert f"checkpoint {intact} has no {checksums.MANIFEST}" in capsys.readouterr().err


def test_a_checkpoint_named_through_dotdot_loads(saved, tmp_path, monkeypatch):
  # tensorstore refuses a path with a ".." component ("Invalid file path"): --checkpoint=../W
  # from a sibling directory failed to restore.
  work, model = _copy(saved, "work", tmp_path), _copy(saved, "model", tmp_path)
  (tmp_path / "cwd").mkdir()
  monkeypatch.chdir(tmp_path / "cwd")
  _same(checkpoints.load_checkpoint("../work")[1], saved["trees"][200])
  _same(checkpoints.load_checkpoint("../work/checkpoints/100")[1], saved["trees"][100])
  _same(checkpoints.load_checkpoint("../model")[1], saved["trees"][100])
  assert work.is_dir() and model.is_dir()


def _abstract(cfg):
  from jax.sharding import NamedSharding, PartitionSpec

  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
  sharding = NamedSharding(mesh, PartitionSpec())
  shapes = checkpoints.param_shapes(cfg)
  return checkpoints.unflatten(
    {k: jax.ShapeDtypeStruct(s, jnp.float32, sharding=sharding) for k, s in shapes.items()}
  )


def test_init_checkpoint_is_verified_whatever_it_names(saved, tmp_path, capsys):
  cfg = saved["cfg"]
  work = _copy(saved, "work", tmp_path)
  _corrupt(str(work / "checkpoints" / "200"))
  capsys.readouterr()
  # A workdir: its newest intact step, with the warning.
  _same(load_init_params(str(work), cfg, _abstract(cfg)), saved["trees"][100])
  assert f"checkpoint {work}/checkpoints/200 is corrupt" in capsys.readouterr().err
  # One step, or a model directory: a one-line error.
  with pytest.raises(CheckpointError, match="200: checkpoint is corrupt \\(params/"):
    load_init_params(str(work / "checkpoints" / "200"), cfg, _abstract(cfg))
  model = _copy(saved, "model", tmp_path)
  _corrupt(str(model))
  with pytest.raises(CheckpointError, match=f"^{model}: checkpoint is corrupt"):
    load_init_params(str(model), cfg, _abstract(cfg))


def test_a_damaged_init_checkpoint_leaves_no_workdir_behind(saved, tmp_path):
  """The training fails in one line and removes the (empty) directories it had created: the
  workdir, its parent and checkpoints/; an existing workdir is kept."""
  work = _copy(saved, "work", tmp_path)
  _corrupt(str(work / "checkpoints" / "200"))
  args = [
    "--mode=train",
    "--config=tiny_temporal",
    *(f"--set={s}" for s in FIXTURE_DATA_SETS),
    "--set=train.steps=2",
    "--set=train.batch_size=4",
    f"--set=model.init_checkpoint={work / 'checkpoints' / '200'}",
  ]
  w = tmp_path / "new" / "w"
  proc = run_tlm(*args, f"--workdir={w}", cwd=str(tmp_path))
  one_error(proc, "200: checkpoint is corrupt (params/")
  assert not (tmp_path / "new").exists()
  (tmp_path / "kept").mkdir()
  proc = run_tlm(*args, f"--workdir={tmp_path / 'kept'}", cwd=str(tmp_path))
  one_error(proc, "200: checkpoint is corrupt (params/")
  assert os.listdir(tmp_path / "kept") == []


def test_the_evaluations_predictor_loads_are_verified(saved, tmp_path):
  from tlm import configs
  from tlm.infer.trained_models import checkpoint_predictor

  work = _copy(saved, "work", tmp_path)
  _corrupt(str(work / "checkpoints" / "200"))
  settings = configs.get("tiny_temporal")
  with pytest.raises(CheckpointError, match="200: checkpoint is corrupt"):
    checkpoint_predictor(str(work / "checkpoints" / "200"), settings, vocab=VOCAB)
  predictor = checkpoint_predictor(str(work), settings, vocab=VOCAB)
  _same(jax.device_get(predictor.params), saved["trees"][100])


# --- Through the CLI ---------------------------------------------------------------------------


def _run(*args):
  return run_tlm(*args, cwd=ROOT, timeout=600)


def _errors(proc):
  return [line for line in proc.stderr.splitlines() if line.strip()]


@pytest.mark.slow
def test_score_predict_and_convert_verify_what_they_load(saved, tmp_path):
  work = _copy(saved, "work", tmp_path)
  model = _copy(saved, "model", tmp_path)
  _corrupt(str(work / "checkpoints" / "200"))
  _corrupt(str(model))
  inputs = tmp_path / "in.jsonl"
  inputs.write_text(json.dumps({"input": "The coach of Chelsea", "target": "Bob"}) + "\n")
  score = ["--mode=score", f"--input_file={inputs}", "--truncate_inputs"]

  # The workdir: scored with step 100, named in a warning; the same numbers as step 100 itself.
  proc = _run(*score, f"--checkpoint={work}", f"--output_file={tmp_path / 'w.jsonl'}")
  assert proc.returncode == 0, proc.stderr
  assert f"warning: checkpoint {work}/checkpoints/200 is corrupt (params/" in proc.stderr
  proc = _run(
    *score, f"--checkpoint={work}/checkpoints/100", f"--output_file={tmp_path / 's.jsonl'}"
  )
  assert proc.returncode == 0, proc.stderr
  assert (tmp_path / "w.jsonl").read_text() == (tmp_path / "s.jsonl").read_text()

  # A corrupt step or model directory named on its own: one line, nothing written.
  for mode, checkpoint, out in (
    (score, work / "checkpoints" / "200", "--output_file=" + str(tmp_path / "bad.jsonl")),
    (["--mode=predict", f"--input_file={inputs}"], model, f"--output_file={tmp_path / 'p.jsonl'}"),
    (["--mode=convert", "--format=hf"], model, f"--output_dir={tmp_path / 'hf'}"),
  ):
    proc = _run(*mode, f"--checkpoint={checkpoint}", out)
    assert proc.returncode == 1
    assert _errors(proc) == [
      f"error: {checkpoint}: checkpoint is corrupt ({_corrupt_name(checkpoint)}: checksum differs)"
    ], proc.stderr
  assert sorted(os.listdir(tmp_path)) == ["in.jsonl", "model", "s.jsonl", "w.jsonl", "work"]


def _corrupt_name(directory):
  found = glob.glob(os.path.join(directory, "params", "**", "d", "*"), recursive=True)
  return os.path.relpath(max(found, key=os.path.getsize), directory)


# --- A full disk: tlm's one line, nothing else ------------------------------------------------


@pytest.mark.slow
def test_a_full_disk_while_training_prints_tlms_line_alone(tmpfs):
  from tests.helpers import full_disk_training

  workdir, proc = full_disk_training(tmpfs)
  assert proc.returncode == 1
  # No traceback of orbax's writer threads, before or after the line (there were hundreds of
  # lines of them, one run in four after tlm's).
  assert _errors(proc) == [
    f"error: {workdir}/checkpoints: cannot save checkpoint 4 (No space left on device); "
    "nothing of it was kept; no checkpoint was completed"
  ], proc.stderr[-3000:]
  assert os.listdir(os.path.join(workdir, "checkpoints")) == []


def test_asyncios_report_of_tensorstores_failed_write_on_a_future_is_dropped():
  # Under load asyncio logged "Future exception was never retrieved" for tensorstore's
  # RESOURCE_EXHAUSTED set on a future orbax wrapped (no traceback) after tlm's line.
  import logging

  from tlm.models.formats import orbax_failures

  def record(exc, name="asyncio"):
    message = "Future exception was never retrieved"
    return logging.LogRecord(name, logging.ERROR, "/x/asyncio/base_events.py", 1771, message, (),
                             (type(exc), exc, None))  # fmt: skip

  full = ValueError("RESOURCE_EXHAUSTED: Error writing local file \"/d/x\": No space left on "
                    "device [os_error_code='28']")  # fmt: skip
  orbax_failures.install()
  keep = logging.getLogger("absl").filter  # the filter `install` adds (absl has no other)
  assert not keep(record(full))
  assert keep(record(ValueError("an unrelated bug")))
  assert keep(record(full, name="absl"))  # not asyncio's, not from orbax's code
  try:
    raise ValueError("RESOURCE_EXHAUSTED: [os_error_code='28']")  # raised here, not orbax's
  except ValueError as e:
    assert keep(record(e))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["tlm", "t5x"])
def test_a_full_disk_while_converting_prints_tlms_line_alone(saved, tmpfs, fmt):
  # T5X's zarr arrays: tensorstore's ValueError quoting the errno was a traceback.
  disk = tmpfs("200k")
  out = os.path.join(disk, "out")
  proc = _run(
    "--mode=convert", f"--checkpoint={saved['model']}", f"--output_dir={out}", f"--format={fmt}"
  )
  assert proc.returncode == 1
  lines = _errors(proc)
  reason = "(No space left on device|disk full or quota exceeded \\(RESOURCE_EXHAUSTED\\))"
  assert len(lines) == 1 and re.fullmatch(
    f"error: {out}: cannot write \\({reason}\\); not written", lines[0]
  ), proc.stderr[-3000:]
  assert os.listdir(disk) == []
