"""Property-based tests (Hypothesis) of what parses user input: `--set` values and path strings.

Whatever the text, parsing ends in success or in one `ConfigError` / `UserError` line naming the
key or flag, never another exception; a config that parses is one the code can honour (its
values inside the schema's limits, its paths canonical, its memory floor computable); and
nothing is written outside the given location. The in-process properties test the parse and
validate layer directly (no jax per example); two small subprocess properties run `run.py` end
to end from an empty directory.
"""

import json
import os
import shutil
import tempfile
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import one_error, run_tlm, tree
from tlm import configs, files, storage
from tlm.configs import schema
from tlm.errors import ConfigError, UserError
from tlm.train import preflight

KEYS = configs.valid_keys()
BASE = configs.get("tiny_temporal")
# The numeric keys (ints, floats and tuples of them), drawn more often than the rest.
NUMERIC = [
  k
  for k in KEYS
  if isinstance(configs.lookup(BASE, k), int | float | tuple)
  and not isinstance(configs.lookup(BASE, k), bool)
  and k != "required"
]

# Numbers at and around every limit, and far beyond.
_EDGES = [
  0,
  1,
  -1,
  2,
  7,
  64,
  999,
  1000,
  2014,
  9999,
  10000,
  schema.MAX_LENGTH,
  schema.MAX_LENGTH + 1,
  schema.MAX_BEAM + 1,
  2**31 - 1,
  2**31,
  2**32,
  2**63 - 1,
  2**63,
  2**64 - 1,
  2**64,
  10**12,
  10**30,
  -(2**63) - 1,
]
_NUMBERS = st.one_of(
  st.sampled_from(_EDGES),
  st.integers(-(2**70), 2**70),
  st.floats(allow_nan=True, allow_infinity=True),
)
# Text that looks like numbers, lists, booleans and paths, with hostile characters.
_ALPHABET = st.sampled_from(list("0123456789,.-+eE_xnaitrufls /:\\~=\n\r\t\x00\x1b") + ["\udcff"])
_PATHS = st.builds(
  lambda prefix, body: prefix + body,
  st.sampled_from(
    [
      "",
      "file://",
      "file:",
      "gs://",
      "gs:/",
      "gs:",
      "GS://",
      "s3://",
      "hf://",
      "http://",
      "x://",
      "./",
      "/tmp/",
      "~/",
    ]
  ),
  st.text(alphabet=st.sampled_from(list("ab./:-_ %\n\x00") + ["é", "\udcff"]), max_size=20),
)
_VALUES = st.one_of(
  _NUMBERS.map(str),
  st.sampled_from(_EDGES).map(str),
  _NUMBERS.map(repr),
  st.lists(_NUMBERS.map(str), max_size=4).map(",".join),
  st.text(alphabet=_ALPHABET, max_size=24),
  st.sampled_from(["true", "false", "yes", "", " ", "nan", "inf", "-inf", "1e400", "0x10"]),
  _PATHS,
)


def _check_valid(config: configs.Config) -> None:
  """A config that parsed is one the code can honour."""
  assert configs.validate(config) == config  # validating again changes nothing
  for key in KEYS:
    value = configs.lookup(config, key)
    for v in value if isinstance(value, tuple) else (value,):
      configs.check_value(key, v)  # inside its range
  tokens = config.train.batch_size * (config.data.input_length + config.data.target_length)
  assert tokens <= schema.MAX_BATCH_TOKENS
  for key in schema.PATH_KEYS:
    value = configs.lookup(config, key)
    assert not value or storage.parse(value, key) == value  # canonical
  try:  # the preflight's arithmetic holds for any config that validates
    floor = preflight.memory_floor(config, data_devices=1, devices=1)
  except ConfigError:  # e.g. an unknown model.preset: one line too
    return
  assert all(isinstance(v, int) and v >= 0 for v in floor.values())


def _one_line(error: Exception, *names: str) -> None:
  message = str(error)
  assert message and "\n" not in message and "\r" not in message, repr(message)
  assert any(name in message for name in names), (names, message)


@pytest.fixture(scope="module")
def empty_cwd():
  """A current directory that the in-process properties must leave empty."""
  with tempfile.TemporaryDirectory() as cwd:
    old = os.getcwd()
    os.chdir(cwd)
    try:
      yield cwd
    finally:
      os.chdir(old)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
  assignments=st.lists(
    st.tuples(st.one_of(st.sampled_from(NUMERIC), st.sampled_from(KEYS)), _VALUES),
    min_size=1,
    max_size=3,
  )
)
def test_set_values_parse_or_fail_in_one_line(assignments):
  text = [f"{key}={value}" for key, value in assignments]
  try:
    config = configs.override(BASE, text)
  except ConfigError as e:
    _one_line(e, *[key for key, _ in assignments], "--set", "train.", "data.", "adapt.")
    return
  _check_valid(config)


# The keys whose limits tie them together (`tlm.configs.overrides._check_together`).
_SIZES = [
  "train.batch_size",
  "data.input_length",
  "data.target_length",
  "train.microbatches",
  "adapt.steps",
  "adapt.eval_points",
  "train.eval_batches",
  "model.num_heads",
]


@settings(max_examples=300, deadline=None)
@given(
  assignments=st.lists(
    st.tuples(st.sampled_from(_SIZES), st.one_of(st.sampled_from(_EDGES), _NUMBERS)),
    min_size=1,
    max_size=4,
  )
)
def test_sizes_together_parse_or_fail_in_one_line(assignments):
  text = [f"{key}={value}" for key, value in assignments]
  try:
    config = configs.override(BASE, text)
  except ConfigError as e:
    _one_line(e, *[key for key, _ in assignments])
    return
  _check_valid(config)


@settings(max_examples=200, deadline=None)
@given(key=st.sampled_from(KEYS), value=_NUMBERS)
def test_saved_config_values_parse_or_fail_in_one_line(key, value):
  """The same values in a workdir's config.json (JSON numbers, not --set text)."""
  saved = configs.to_dict(BASE)
  section, _, field = key.partition(".")
  hint = typing.get_type_hints(type(getattr(BASE, section)))[field] if field else None
  if hint is None or not (hint in (int, float) or typing.get_origin(hint) is tuple):
    return
  if isinstance(value, float) and hint is int:
    return  # a float for an int key is a type error, tested in test_configs
  saved[section][field] = [value] if typing.get_origin(hint) is tuple else value
  try:
    config = configs.from_dict(json.loads(json.dumps(saved)))
  except ConfigError as e:
    _one_line(e, key)
    return
  _check_valid(config)


@settings(
  max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=_PATHS)
def test_path_strings_parse_or_fail_and_write_only_there(empty_cwd, text):
  try:
    path = storage.parse(text, "--output_file")
  except UserError as e:
    _one_line(e, "--output_file")
    assert os.listdir(empty_cwd) == []
    return
  assert storage.parse(path, "--output_file") == path  # canonical: parsed once is enough
  assert not _has_control(path)
  if storage.is_remote(path):
    found, _, rest = path.partition("://")
    assert found in storage.SCHEMES and rest.split("/")[0] and not rest.endswith("/")
    return
  assert not path.startswith("file:")
  if os.path.isabs(path) or ".." in path.split("/"):
    return  # outside the empty directory: not written here
  # A local output lands exactly where the parsed path says, and nowhere else.
  try:
    files.check_output_file(path)
    files.write_json(path, {"ok": True})
  except UserError as e:
    _one_line(e, path)
  else:
    target = os.path.normpath(os.path.join(empty_cwd, path))
    written = [p for p in tree(empty_cwd) if os.path.isfile(os.path.join(empty_cwd, p))]
    assert [os.path.join(empty_cwd, p) for p in written] == [target]
  for name in os.listdir(empty_cwd):  # the next example starts from an empty directory again
    entry = os.path.join(empty_cwd, name)
    shutil.rmtree(entry) if os.path.isdir(entry) else os.remove(entry)


def _has_control(text: str) -> bool:
  return any(ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) <= 0xDFFF for c in text)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(
  # (A command line cannot hold a NUL: the operating system ends the argument there.)
  assignment=st.tuples(st.sampled_from(KEYS), _VALUES)
  .map(lambda kv: f"{kv[0]}={kv[1]}")
  .filter(lambda a: "\x00" not in a),
  workdir=st.sampled_from(["w", "file://w", "gs://", "gs:/w", "w\nx", "ftp://h/w"]),
)
def test_cli_set_and_workdir_end_to_end(tmp_path_factory, assignment, workdir):
  """`--mode=eval` with no model there: whatever --set and --workdir say, one error line (the
  value's, or "no trained model"), and the current directory stays empty."""
  cwd = tmp_path_factory.mktemp("cwd")
  proc = run_tlm("--mode=eval", f"--workdir={workdir}", f"--set={assignment}", cwd=str(cwd))
  one_error(proc)
  assert tree(str(cwd)) == []


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(
  output_dir=st.sampled_from(["out", "file://out", "a/b/out", "gs:out", "o\x1bt", "s3://"]),
  seed=st.sampled_from([0, 3, -1, 2**64]),
  scale=st.sampled_from(["0.001", "1e-300", "0", "nan", "1e9"]),
)
def test_cli_build_world_end_to_end(tmp_path_factory, output_dir, seed, scale):
  """Built where --output_dir says, or one error line; nothing else in the current directory."""
  cwd = tmp_path_factory.mktemp("cwd")
  proc = run_tlm(
    "--mode=build_world",
    f"--output_dir={output_dir}",
    f"--seed={seed}",
    f"--scale={scale}",
    cwd=str(cwd),
  )
  if proc.returncode != 0:
    one_error(proc)
    assert tree(str(cwd)) == []
    return
  out = storage.parse(output_dir, "--output_dir")
  assert os.path.isfile(cwd / out / "facts.tsv")
  for entry in tree(str(cwd)):
    assert entry == out or entry.startswith(out + "/") or out.startswith(entry + "/"), entry
