"""Every path argument and path setting is parsed once where it enters (`tlm.storage.parse`).

`file://` is local; an empty bucket, an unknown scheme, a URI missing a slash, a NUL or a
newline, bytes that are not UTF-8, a name too long for a filesystem, or a scheme whose fsspec
package is missing is a one-line error naming the flag or key (and the package to install)
before any work starts; nothing is written outside the given location. The command-line cases
run `run.py` from an empty directory that must stay empty.
"""

import copy as copy_module
import importlib
import json
import os
import pickle
import types

import pytest

from tests.helpers import one_error, run_tlm, tree
from tlm import checksums, configs, files, line_files, storage
from tlm.errors import ConfigError, UserError

# --- storage.parse ----------------------------------------------------------------------------


@pytest.mark.parametrize(
  "text,canonical",
  [
    ("runs/x", "runs/x"),
    ("/abs/runs/x/", "/abs/runs/x/"),
    ("seed=0/a:b", "seed=0/a:b"),  # a colon inside a local name is no scheme
    ("./gs:/b", "./gs:/b"),  # the way to name a local directory "gs:"
    ("file:///abs/out", "/abs/out"),
    ("file://rel/out.jsonl", "rel/out.jsonl"),
    ("hf://datasets/org/set", "hf://datasets/org/set"),
    ("HF://datasets/org/set/", "hf://datasets/org/set"),
    ("hf://bucket", "hf://bucket"),
  ],
)
def test_parse_gives_the_canonical_form(text, canonical):
  assert storage.parse(text, "--workdir") == canonical
  assert storage.parse(canonical, "--workdir") == canonical  # once parsed, stable


@pytest.mark.parametrize(
  "text,fragment",
  [
    ("", "--x: empty path"),
    ("gs://", "--x=gs://: no bucket"),
    ("gs:///runs", "no bucket"),
    ("s3://", "no bucket"),
    ("gs://b//x", "empty, . or .. component"),
    ("gs://b/x/../y", "empty, . or .. component"),
    ("gs://b/./y", "empty, . or .. component"),
    (
      "gs:/b/x",
      "a gs:// URI needs two slashes (for a local directory of that name write ./gs:/b/x)",
    ),
    ("gs:b", "a gs:// URI needs two slashes"),
    ("FILE:/abs", "a file:// URI needs two slashes"),
    ("file://", "file:// names no path"),
    ("http://host/x", "unsupported storage scheme http://"),
    ("c://x", "unsupported storage scheme c://"),
    ("runs/a\nb", "--x='runs/a\\nb': a path cannot hold the control character '\\n'"),
    ("runs/a\x00b", "the control character '\\x00'"),
    ("runs/\x1b[31m", "the control character '\\x1b'"),
    ("gs://b/\r", "the control character '\\r'"),
    ("runs/\udcff", "bytes that are not UTF-8"),
    ("runs/" + "x" * 256, "longer than a filesystem takes"),
    ("/".join(["abcdefgh"] * 500), "longer than a filesystem takes"),
    ("runs/a\\b", "--x=runs/a\\b: a path cannot hold a backslash"),
    ("file:///abs/a\\b", "a path cannot hold a backslash"),
  ],
)
def test_parse_rejects_in_one_line_naming_the_flag(text, fragment):
  with pytest.raises(UserError) as e:
    storage.parse(text, "--x")
  message = str(e.value)
  assert fragment in message and message.startswith("--x") and "\n" not in message


def test_a_backslash_in_the_working_directory_counts(tmp_path, monkeypatch):
  # tensorstore wrote part of a checkpoint saved under "a\\b" into "a/b"; a relative path
  # inherits the working directory's name.
  cwd = tmp_path / "a\\b"
  cwd.mkdir()
  monkeypatch.chdir(cwd)
  with pytest.raises(UserError) as e:
    storage.parse("w", "--workdir")
  assert str(e.value).startswith(f"--workdir=w (its absolute form {cwd}/w): a path cannot hold")
  assert storage.parse(str(tmp_path / "w"), "--workdir") == str(tmp_path / "w")


def _fsspec_registry():
  return importlib.import_module("fsspec.registry")  # the module (fsspec.registry: its dict)


def test_a_missing_filesystem_package_is_named(monkeypatch):
  real = storage.importlib.util.find_spec
  monkeypatch.setattr(
    storage.importlib.util, "find_spec", lambda n: None if n in ("gcsfs", "s3fs") else real(n)
  )
  monkeypatch.delitem(_fsspec_registry()._registry, "gs", raising=False)
  with pytest.raises(UserError, match=r"^--workdir=gs://b/w: gs:// needs the gcsfs package "):
    storage.parse("gs://b/w", "--workdir")
  with pytest.raises(UserError, match=r"pip install s3fs\)$"):
    storage.parse("s3://b/w", "--workdir")
  # A filesystem registered by the program (tests/objstore.py serves gs:// so) is enough.
  monkeypatch.setitem(_fsspec_registry()._registry, "gs", object)
  assert storage.parse("gs://b/w/", "--workdir") == "gs://b/w"


# --- config path keys -------------------------------------------------------------------------


def test_path_keys_are_parsed_when_the_config_is_validated():
  base = configs.get("tiny_temporal")
  config = configs.override(base, ["data.ssm_dir=file:///data/ssm", "data.vocab=file://sp.model"])
  assert config.data.ssm_dir == "/data/ssm" and config.data.vocab == "sp.model"
  # The saved config.json of a workdir goes through the same parse.
  saved = configs.to_dict(base)
  saved["model"]["init_checkpoint"] = "file:///ckpt/t5"
  assert configs.from_dict(json.loads(json.dumps(saved))).model.init_checkpoint == "/ckpt/t5"
  for key in configs.schema.PATH_KEYS:
    for text, fragment in (("gs://", "no bucket"), ("ftp://h/x", "unsupported"), ("a\0b", "\\x00")):
      with pytest.raises(ConfigError, match=f"^{key}=") as e:
        configs.override(base, [f"{key}={text}"])
      assert fragment in str(e.value) and "\n" not in str(e.value)
      saved = configs.to_dict(base)
      section, field = key.split(".")
      saved[section][field] = text
      with pytest.raises(ConfigError, match=f"^{key}="):
        configs.from_dict(saved)
  # The synthetic world's cache is built with local file operations: no object store there.
  with pytest.raises(ConfigError, match=r"^data.cache_dir=hf://org/c: must be a local directory"):
    configs.override(base, ["data.cache_dir=hf://org/c"])


# --- the command line: one line, nothing written, from an empty directory ----------------------


@pytest.mark.parametrize(
  "args,hide,fragment",
  [
    (
      ["--mode=train", "--config=tiny_temporal", "--workdir=gs://"],
      (),
      "--workdir=gs://: no bucket",
    ),
    (
      ["--mode=train", "--config=tiny_temporal", "--workdir=gs://bucket/run"],
      ("gcsfs",),
      "--workdir=gs://bucket/run: gs:// needs the gcsfs package (pip install -r "
      "requirements-gcs.txt)",
    ),
    (
      ["--mode=train", "--config=tiny_temporal", "--workdir=w", "--set=data.cache_dir=s3://b/c"],
      ("s3fs",),
      "data.cache_dir=s3://b/c: s3:// needs the s3fs package (pip install s3fs)",
    ),
    (["--mode=build_world", "--output_dir=gs:/b/world"], (), "gs:// URI needs two slashes"),
    (["--mode=build_world", "--output_dir=w\norld"], (), "--output_dir='w\\norld'"),
    (["--mode=build_ssm", "--news=file://", "--output_dir=o"], (), "--news=file://: file://"),
    (
      ["--mode=predict", "--checkpoint=ftp://h/m", "--input_file=i", "--output_file=o"],
      (),
      "ftp://",
    ),
    (["--mode=score", "--checkpoint=m", "--input_file=i", "--output_file=gs://"], (), "no bucket"),
    (["--mode=tables", "--workdirs=a,,b", "--output_dir=o"], (), "--workdirs: empty path"),
    (["--mode=eval", "--workdir=gs://b/../w"], (), ". or .. component"),
  ],
)
def test_cli_path_errors_are_one_line_before_any_work(tmp_path, args, hide, fragment):
  proc = run_tlm(*args, cwd=str(tmp_path), hide=hide)
  one_error(proc, fragment)
  assert tree(str(tmp_path)) == []


def test_file_uri_output_dir_is_the_local_path(tmp_path):
  cwd, out = tmp_path / "cwd", tmp_path / "abs" / "world"
  cwd.mkdir()
  proc = run_tlm("--mode=build_world", f"--output_dir=file://{out}", "--scale=0.001", cwd=str(cwd))
  assert proc.returncode == 0, proc.stderr
  assert tree(str(cwd)) == []  # before: ./file:/<tmp>/abs/world
  assert (out / "facts.tsv").is_file() and (out / "stats.json").is_file()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
  """A tiny random tlm model directory with its vocabulary."""
  from tests.helpers import random_params
  from tlm.data.vocab import train_sentencepiece
  from tlm.models import checkpoints, t5

  texts = [f"The coach of team {i} in {2010 + i % 9} was person {i}." for i in range(60)]
  vocab = train_sentencepiece(texts, vocab_size=60)
  cfg = t5.get_preset("tiny-v1_1", vocab_size=160, num_encoder_layers=1, num_decoder_layers=1)
  path = str(tmp_path_factory.mktemp("model") / "tiny")
  checkpoints.save_tlm(path, cfg, random_params(cfg, seed=1), vocab)
  return path


def test_file_uris_of_predict_and_score_are_local_paths(tmp_path, tiny_model):
  cwd, data = tmp_path / "cwd", tmp_path / "data"
  cwd.mkdir()
  data.mkdir()
  (data / "in.jsonl").write_text(json.dumps({"input": "coach of team 3", "target": "person"}))
  for mode in ("predict", "score"):
    out = data / f"{mode}.jsonl"
    proc = run_tlm(
      f"--mode={mode}",
      f"--checkpoint=file://{tiny_model}",
      f"--input_file=file://{data / 'in.jsonl'}",
      f"--output_file=file://{out}",
      "--max_decode_length=4",
      cwd=str(cwd),
    )
    assert proc.returncode == 0, proc.stderr
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert ("prediction" if mode == "predict" else "log_likelihood") in row
  assert tree(str(cwd)) == []  # before: ./file:/<tmp>/data/predict.jsonl


# --- a path parsed once: storage.Location -----------------------------------------------------


def _decisions(monkeypatch) -> list[str]:
  """The texts `storage.decide` examines from now on (the one place a scheme is read)."""
  calls, real = [], storage.decide

  def counted(text):
    calls.append(text)
    return real(text)

  monkeypatch.setattr(storage, "decide", counted)
  return calls


def test_parse_gives_a_location_carrying_its_scheme(monkeypatch):
  hf = storage.parse("HF://datasets/org/set/", "--data")
  assert isinstance(hf, storage.Location) and (hf.scheme, hf.is_remote) == ("hf", True)
  assert hf.path == "datasets/org/set"
  for text, shown in (("runs/x", "runs/x"), ("file:///abs/x", "/abs/x")):
    loc = storage.parse(text, "--workdir")
    assert isinstance(loc, storage.Location) and loc == shown
    assert (loc.scheme, loc.is_remote, loc.path) == (None, False, shown)
  # Parsed again (a config validated after each override): checked, never examined again.
  calls = _decisions(monkeypatch)
  again = storage.parse(hf, "--data")
  assert again == hf and again.scheme == "hf" and calls == []


@pytest.mark.parametrize(
  "text,scheme", [("gs://b/run", "gs"), ("s3://b/run", "s3"), ("runs/run", None)]
)
def test_joining_keeps_the_scheme_without_reading_the_text(monkeypatch, text, scheme):
  loc = storage.location(text)
  calls = _decisions(monkeypatch)
  derived = [
    loc / "checkpoints",
    loc.joinpath("checkpoints", "7"),
    storage.join(loc, "a", "b"),
    storage.dirname(loc / "x"),
    loc.parent,
    storage.abspath(loc),
    loc.suffixed(".takeover"),
    # os.path.join appends to its first argument: the Location's scheme stays.
    os.path.join(loc, "metrics.jsonl"),
    os.path.join(loc, "a", "b"),
    loc + ".tmp",
  ]
  assert calls == []
  for d in derived:
    assert isinstance(d, storage.Location) and d.scheme == scheme and d.is_remote == bool(scheme)
  assert derived[1] == f"{text}/checkpoints/7" and derived[6] == f"{text}.takeover"
  assert derived[7] == f"{text}/metrics.jsonl" and derived[9] == f"{text}.tmp"
  # Text before a Location, or a slice of it, is a plain str again (decided where it is used).
  assert type("x" + loc) is str and type(loc[:2]) is str
  if scheme:  # never above the bucket
    assert storage.location(f"{scheme}://b").parent == f"{scheme}://b"
  else:
    assert derived[5] == os.path.abspath(text)


def test_remote_and_local_are_decided_from_the_scheme():
  assert storage.location("gs://b/x").is_remote and storage.location("s3://b/x").is_remote
  assert not storage.location("/abs/gs:/x").is_remote  # a local directory named "gs:"
  assert storage.location("file:///abs/x") == "/abs/x"
  with pytest.raises(UserError, match="unsupported storage scheme http://"):
    storage.location("http://host/x")
  loc = storage.location("gs://b/x")
  assert storage.location(loc) is loc  # a Location is taken as it is
  with pytest.raises(AttributeError):
    loc.scheme = None  # immutable: its scheme is what it was parsed with


def test_a_local_location_is_a_path_string(tmp_path, monkeypatch):
  loc = storage.parse(f"file://{tmp_path}", "--output_dir") / "out.txt"
  with open(loc, "w") as f:
    f.write("x")
  assert os.path.isfile(loc) and os.fspath(loc) == str(tmp_path / "out.txt")
  assert storage.read_text(loc) == "x" and storage.getsize(loc) == 1
  assert f"{loc}" == str(tmp_path / "out.txt") and json.dumps([loc]) == json.dumps([str(loc)])
  assert loc == str(loc) and hash(loc) == hash(str(loc))
  calls = _decisions(monkeypatch)
  for copy in (pickle.loads(pickle.dumps(loc)), copy_module.deepcopy(loc)):
    assert isinstance(copy, storage.Location) and copy == loc and copy.scheme is None
  assert calls == []  # unpickled with its scheme (a worker process), not parsed again


def test_config_path_keys_are_locations_that_dump_as_before():
  config = configs.override(configs.get("tiny_temporal"), ["data.vocab=file:///v/sp.model"])
  for key in configs.schema.PATH_KEYS:
    value = configs.lookup(config, key)
    assert not value or isinstance(value, storage.Location), key
  # config.json and anything hashed from it: the same text as plain strings give.
  plain = json.loads(json.dumps(configs.to_dict(config)))
  assert json.dumps(configs.to_dict(config)) == json.dumps(plain)
  assert plain["data"]["vocab"] == "/v/sp.model"
  assert configs.from_dict(plain) == config and hash(configs.from_dict(plain)) == hash(config)


def test_path_flags_become_locations_at_the_edge(monkeypatch):
  run = importlib.import_module("run")
  values = types.SimpleNamespace(**{name: None for name in run.PATH_FLAGS})
  values.workdir, values.workdirs, values.output_dir = "file:///w", ["a", "b/c"], "hf://org/o"
  run.parse_path_flags(values)
  assert isinstance(values.workdir, storage.Location) and values.workdir == "/w"
  assert all(isinstance(w, storage.Location) for w in values.workdirs)
  assert values.output_dir.scheme == "hf"


def _a_run_s_file_operations(workdir: storage.Location) -> None:
  """What a training run does with its workdir, jax aside: layout check, lock, config and
  metrics files, a checkpoint's files, its checksum manifest and their check."""
  from tlm.train.run_records import MetricsLog
  from tlm.workdir_lock import WorkdirLock

  files.check_layout(workdir, ("config.json", "metrics.jsonl"), ("checkpoints",))
  with WorkdirLock(workdir, "train"):
    files.write_json(workdir / "config.json", {"name": "tiny"})
    log = MetricsLog(workdir / "metrics.jsonl", 0)
    log.append({"step": 1, "loss": 1.0})
    log.flush()
    step_dir = storage.abspath(workdir) / "checkpoints" / "1"
    for name, data in (("_METADATA", b'{"tree": {}}'), ("p.bin", b"params")):
      with files.atomic_output_file(step_dir / "params" / name, "wb") as f:
        f.write(data)
    if step_dir.is_remote:
      storage.write_object(step_dir / checksums.ORBAX_COMMIT, b"")
    checksums.write_manifest(step_dir)
    assert checksums.check(step_dir, ("params",)) is None
    assert line_files.read_jsonl(workdir / "metrics.jsonl") == [{"step": 1, "loss": 1.0}]


@pytest.mark.parametrize("where", ["local", "bucket"])
def test_a_workdir_is_decided_once_along_a_run(tmp_path, monkeypatch, request, where):
  text = f"{request.getfixturevalue('bucket')}/w" if where == "bucket" else str(tmp_path / "w")
  calls = _decisions(monkeypatch)
  workdir = storage.parse(text, "--workdir")  # the edge: run.py's flags
  _a_run_s_file_operations(workdir)
  # Every file below the workdir was joined to the parsed value: one decision in all (before
  # the Location, each helper decided its string again: 146 times in a real 2-step tiny train).
  assert [c for c in calls if c.startswith(text)] == [text]
  assert storage.isfile(storage.abspath(workdir) / "checkpoints" / "1" / checksums.MANIFEST)


@pytest.mark.parametrize("where", ["local", "bucket"])
def test_a_store_is_decided_once_when_opened_and_read(tmp_path, monkeypatch, request, where):
  import shutil

  from tests.helpers import DATA
  from tlm.store import store

  if where == "bucket":
    from tests import objstore

    text = f"{request.getfixturevalue('bucket')}/data/ssm"
    shutil.copytree(os.path.join(DATA, "ssm"), objstore.local_path(text))
  else:
    text = str(tmp_path / "ssm")
    shutil.copytree(os.path.join(DATA, "ssm"), text)
  calls = _decisions(monkeypatch)
  ssm_dir = configs.override(configs.get("tiny_temporal"), [f"data.ssm_dir={text}"]).data.ssm_dir
  opened = store.Store(ssm_dir)
  table = opened.table("train", opened.years("train")[0])
  assert len(table.tokens([0, 1])[0]) == 2
  table.close()
  assert store.verify(ssm_dir)["tables"] == 27
  assert [c for c in calls if c.startswith(text)] == [text]


def test_within_compares_whole_components_and_keeps_schemes_apart(tmp_path):
  d = str(tmp_path / "out")
  assert storage.within(d, d) and storage.within(d + "/a/b", d) and storage.within(d + "/", d)
  assert not storage.within(d + "-tmp/a", d)  # a sibling sharing the prefix
  assert not storage.within(str(tmp_path), d)
  assert storage.within("gs://b/out/a", "gs://b/out/") and not storage.within(
    "gs://b/outx", "gs://b/out"
  )
  assert not storage.within("/b/out/a", "gs://b/out") and not storage.within(
    "gs://b/out/a", "/b/out"
  )
