"""Every path argument and path setting is parsed once where it enters (`tlm.storage.parse`).

`file://` is local; an empty bucket, an unknown scheme, a URI missing a slash, a NUL or a
newline, bytes that are not UTF-8, a name too long for a filesystem, or a scheme whose fsspec
package is missing is a one-line error naming the flag or key (and the package to install)
before any work starts; nothing is written outside the given location. The command-line cases
run `run.py` from an empty directory that must stay empty.
"""

import importlib
import json

import pytest

from tests.helpers import one_error, run_tlm, tree
from tlm import configs, storage
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
      "--workdir=gs://bucket/run: gs:// needs the gcsfs package (pip install gcsfs)",
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
