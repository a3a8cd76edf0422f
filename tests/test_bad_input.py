"""Bad input text: invalid UTF-8, lone surrogates, out-of-range sentinels, unusable output paths.

Each case is a small file written here. Every one must end in one `error:` line naming the file
and line, a non-zero exit status and no output; for `predict` / `score`, before the model is
loaded: the checkpoint here is a directory holding only a vocabulary, so reaching the model
loader would give a different error ("not a checkpoint").
"""

import json
import os

import pytest

from tests.helpers import run_tlm
from tlm import line_files
from tlm.data.vocab import Vocabulary, train_sentencepiece
from tlm.errors import DataError, UserError
from tlm.files import check_output_file
from tlm.line_files import iter_jsonl, iter_tsv, read_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TEXTS = ["Alice Adams plays for Red FC in 2014.", "Bob Brown coached Blue United."] * 20


def _run(*args):
  return run_tlm(*args, cwd=ROOT, timeout=120)


def _one_error(proc, *fragments):
  assert proc.returncode != 0
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
  for fragment in fragments:
    assert fragment in lines[0], (fragment, lines[0])


# --- the readers ------------------------------------------------------------------------------


def test_invalid_utf8_names_file_and_line(tmp_path):
  jsonl = tmp_path / "a.jsonl"
  jsonl.write_bytes(b'{"x": "fine"}\n\n{"x": "caf\xe9"}\n')
  with pytest.raises(DataError, match=rf"^{jsonl}:3: invalid UTF-8 \(byte 0xe9 at character 11\)"):
    read_jsonl(str(jsonl))
  tsv = tmp_path / "a.tsv"
  tsv.write_bytes(b"Q1\tRed FC\nQ2\t\xff\xfeBlue\n")
  with pytest.raises(DataError, match=rf"^{tsv}:2: invalid UTF-8 \(byte 0xff"):
    list(iter_tsv(str(tsv)))
  # Valid UTF-8 beyond ASCII, CRLF line ends and blank lines read as before.
  jsonl.write_bytes('{"x": "café ✓"}\r\n\r\n{"x": "naïve"}\n'.encode())
  assert list(iter_jsonl(str(jsonl))) == [(1, {"x": "café ✓"}), (3, {"x": "naïve"})]
  tsv.write_bytes("Q1\tMünchen\r\n".encode())
  assert list(iter_tsv(str(tsv))) == [(1, ["Q1", "München"])]


def test_lone_surrogates_and_deep_nesting(tmp_path):
  path = tmp_path / "a.jsonl"
  for line in (
    r'{"input": "a \ud800 b"}',
    r'{"input": "ok", "more": ["x", {"y": "\uDFFF"}]}',
    r'{"\udc00": 1}',
  ):
    path.write_text('{"input": "fine"}\n' + line + "\n")
    with pytest.raises(DataError, match=rf"^{path}:2: lone surrogate \\u[0-9a-f]{{4}}"):
      read_jsonl(str(path))
  # An escaped surrogate pair is one character, and "\\ud800" is a backslash and text.
  path.write_text(r'{"a": "\ud83d\ude00", "b": "\\ud800"}' + "\n")
  assert read_jsonl(str(path)) == [{"a": "\U0001f600", "b": "\\ud800"}]
  path.write_text('{"a": 1}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
  with pytest.raises(DataError, match=rf"^{path}:2: malformed JSON \(nested too deeply\)"):
    read_jsonl(str(path))


def test_a_line_beyond_the_bound_and_special_files(tmp_path, monkeypatch):
  # A file of gigabytes without a newline was read as one line (MemoryError); the bound is
  # lowered here so that the test writes kilobytes.
  monkeypatch.setattr(line_files, "MAX_LINE_CHARS", 100)
  path = tmp_path / "a.jsonl"
  path.write_text('{"input": "' + "x" * 85 + '"}\n' + "\0" * 1000)
  with pytest.raises(DataError, match=rf"^{path}:2: line longer than 100 characters$"):
    read_jsonl(str(path))
  path.write_text('{"input": "' + "x" * 86 + '"}\n')  # 100 characters and its newline: fine
  assert read_jsonl(str(path)) == [{"input": "x" * 86}]
  fifo = tmp_path / "fifo.jsonl"
  os.mkfifo(fifo)  # refused unopened (opening it would block until a writer appears)
  with pytest.raises(DataError, match=rf"^{fifo}: cannot read \(not a regular file \(a FIFO\)\)"):
    read_jsonl(str(fifo))


def test_out_of_range_sentinel():
  vocab = Vocabulary(train_sentencepiece(_TEXTS, vocab_size=36))
  assert vocab.sentinel_id(99) in vocab.encode("a <extra_id_99> b")
  with pytest.raises(DataError, match=r"<extra_id_100> is out of range.*<extra_id_99>$"):
    vocab.encode("a <extra_id_100> b")


def test_check_output_file(tmp_path):
  check_output_file(str(tmp_path / "out.jsonl"))
  check_output_file(str(tmp_path / "new" / "dirs" / "out.jsonl"))  # created when written
  (tmp_path / "old.jsonl").write_text("x\n")
  check_output_file(str(tmp_path / "old.jsonl"))  # replaced when written
  with pytest.raises(UserError, match=f"^{tmp_path}: is a directory"):
    check_output_file(str(tmp_path))
  with pytest.raises(UserError, match=f"{tmp_path / 'old.jsonl'} is not a directory"):
    check_output_file(str(tmp_path / "old.jsonl" / "out.jsonl"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_check_output_file_unwritable(tmp_path):
  locked = tmp_path / "locked"
  locked.mkdir()
  locked.chmod(0o500)
  try:
    with pytest.raises(UserError, match="is not writable"):
      check_output_file(str(locked / "sub" / "out.jsonl"))
  finally:
    locked.chmod(0o700)


# --- predict / score: the whole input checked before the model loads --------------------------


@pytest.fixture(scope="module")
def no_model(tmp_path_factory):
  """A "checkpoint" holding only a vocabulary: loading a model from it fails."""
  root = tmp_path_factory.mktemp("bad_input")
  (root / "spiece.model").write_bytes(train_sentencepiece(_TEXTS, vocab_size=36))
  return root


@pytest.mark.parametrize(
  "mode,content,fragment",
  [
    ("predict", b'{"input": "a"}\n{"input": "\xc3("}\n', "in.jsonl:2: invalid UTF-8 (byte 0xc3"),
    ("predict", b'{"input": "a"}\n{"input": "x \\ud800"}\n', "in.jsonl:2: lone surrogate \\ud800"),
    ("score", b'{"input": "a", "target": "\\udfff"}\n', "in.jsonl:1: lone surrogate \\udfff"),
    (
      "predict",
      b'{"input": "a <extra_id_3>"}\n{"input": "b <extra_id_100>"}\n',
      "in.jsonl:2: field 'input': <extra_id_100> is out of range",
    ),
    (
      "score",
      b'{"input": "a", "target": "<extra_id_0> <extra_id_123>"}\n',
      "in.jsonl:1: field 'target': <extra_id_123> is out of range",
    ),
  ],
)
def test_bad_text_fails_before_the_model(no_model, tmp_path, mode, content, fragment):
  (tmp_path / "in.jsonl").write_bytes(content)
  out = tmp_path / "out.jsonl"
  proc = _run(
    f"--mode={mode}",
    f"--checkpoint={no_model}",
    f"--input_file={tmp_path / 'in.jsonl'}",
    f"--output_file={out}",
  )
  _one_error(proc, f"{tmp_path}/{fragment}")
  assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]
  # The same command with good text reaches the model loader (which fails here).
  (tmp_path / "in.jsonl").write_text(json.dumps({"input": "a", "target": "b"}) + "\n")
  proc = _run(
    f"--mode={mode}",
    f"--checkpoint={no_model}",
    f"--input_file={tmp_path / 'in.jsonl'}",
    f"--output_file={out}",
  )
  _one_error(proc, f"{no_model}: not a checkpoint")


@pytest.mark.parametrize("mode", ["predict", "score"])
def test_output_file_checked_first(no_model, tmp_path, mode):
  good = tmp_path / "in.jsonl"
  good.write_text(json.dumps({"input": "a", "target": "b"}) + "\n")
  args = [f"--mode={mode}", f"--checkpoint={no_model}", f"--input_file={good}"]
  (tmp_path / "dir").mkdir()
  _one_error(
    _run(*args, f"--output_file={tmp_path / 'dir'}"), f"{tmp_path / 'dir'}: is a directory"
  )
  bad = tmp_path / "in.jsonl" / "out.jsonl"  # the parent is a file
  _one_error(_run(*args, f"--output_file={bad}"), f"{good} is not a directory")
  # Checked before the input is read: a missing input file is not reached.
  args[2] = f"--input_file={tmp_path / 'missing.jsonl'}"
  _one_error(_run(*args, f"--output_file={tmp_path / 'dir'}"), "is a directory")
  assert sorted(os.listdir(tmp_path)) == ["dir", "in.jsonl"]
  assert os.listdir(tmp_path / "dir") == []


# --- build_ssm --------------------------------------------------------------------------------


@pytest.mark.parametrize(
  "content,fragment",
  [
    (
      b'{"date": "2014", "text": "A."}\n{"date": "2014", "text": "B \xe2\x82"}\n',
      "2: invalid UTF-8",
    ),
    (b'{"date": "2014", "text": "Alice \\ud83d went to Paris."}\n', "1: lone surrogate"),
  ],
)
def test_build_ssm_bad_text(tmp_path, content, fragment):
  news = tmp_path / "news.jsonl"
  news.write_bytes(content)
  proc = _run("--mode=build_ssm", f"--news={news}", f"--output_dir={tmp_path / 'out'}")
  _one_error(proc, f"{news}:{fragment}")
  assert sorted(os.listdir(tmp_path)) == ["news.jsonl"]


def test_build_ssm_bad_gazetteer(tmp_path):
  news = tmp_path / "news.jsonl"
  news.write_text(json.dumps({"date": "2014", "text": "Alice went to Paris."}) + "\n")
  entities = tmp_path / "entities.tsv"
  entities.write_bytes(b"Q1\tAlice\nQ2\tZ\xfcrich\n")
  proc = _run(
    "--mode=build_ssm", f"--news={news}", f"--entities={entities}", f"--output_dir={tmp_path / 'o'}"
  )
  _one_error(proc, f"{entities}:2: invalid UTF-8 (byte 0xfc")
  assert sorted(os.listdir(tmp_path)) == ["entities.tsv", "news.jsonl"]
