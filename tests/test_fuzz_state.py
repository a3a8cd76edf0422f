"""Property-based fuzz tests (Hypothesis) of what parses input (the part of JSON
lines and the project's own state files): the JSON-lines reader, checksum manifests, the
workdir lock, best.json, a checkpoint's data state, a saved config.json and model_config.json,
and a seed's per_query.json. Whatever the bytes, each reader either succeeds or raises its
one-line `UserError` naming the file; nothing is written outside the directory under test.

Each test draws a bounded number of examples in-process. A regression that opened a FIFO or a
device would block: `faulthandler.dump_traceback_later` ends the run (with the stack) instead
of letting CI hang. The hand-written cases of each class are in tests/test_state_files.py."""

import contextlib
import faulthandler
import json
import os
import socket
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import fake_step
from tlm import checksums
from tlm.errors import CheckpointError, ConfigError, DataError, UserError

FUZZ = settings(
  max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)

# JSON values, nested a few levels, with the awkward scalars: huge and negative integers,
# floats at the extremes, control characters and lone surrogates in strings.
SCALARS = st.one_of(
  st.none(),
  st.booleans(),
  st.integers(min_value=-(2**80), max_value=2**80),
  st.floats(allow_nan=True, allow_infinity=True),
  st.text(max_size=20),
)
JSON = st.recursive(
  SCALARS,
  lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
  ),
  max_leaves=12,
)


@contextlib.contextmanager
def _no_hang(seconds: int = 600):
  faulthandler.dump_traceback_later(seconds, exit=True)
  try:
    yield
  finally:
    faulthandler.cancel_dump_traceback_later()


def _tree(root: str) -> dict[str, bytes]:
  out = {}
  for top, _, names in os.walk(root):
    for name in names:
      path = os.path.join(top, name)
      if os.path.isfile(path) and not os.path.islink(path):
        with open(path, "rb") as f:
          out[os.path.relpath(path, root)] = f.read()
  return out


def _one_line(e: UserError, path: str) -> None:
  message = str(e)
  assert "\n" not in message and message.startswith(path), message


def _dump(value) -> bytes:
  return json.dumps(value).encode()


# --- JSON lines -------------------------------------------------------------------------------

LINES = st.lists(
  st.one_of(
    st.binary(max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b),
    JSON.map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")),
    st.dictionaries(st.sampled_from(["input", "target", "x"]), SCALARS, max_size=3).map(_dump),
  ),
  max_size=6,
)


@FUZZ
@given(lines=LINES, truncate=st.integers(min_value=0, max_value=3))
def test_jsonl_lines_read_or_fail_in_one_line_naming_file_and_line(lines, truncate):
  from tlm.line_files import read_jsonl

  raw = b"\n".join(lines)
  raw = raw[: len(raw) - truncate] if truncate else raw
  with tempfile.TemporaryDirectory() as tmp, _no_hang():
    path = os.path.join(tmp, "in.jsonl")
    with open(path, "wb") as f:
      f.write(raw)
    try:
      rows = read_jsonl(path, required=("input",))
    except DataError as e:
      _one_line(e, f"{path}:")
    else:
      assert all(isinstance(r, dict) and "input" in r for r in rows)
    assert os.listdir(tmp) == ["in.jsonl"]


# --- Checksum manifests -----------------------------------------------------------------------

NAMES = st.one_of(
  st.sampled_from(
    [
      "params/_METADATA",
      "params/d/abc",
      "opt_state/d/abc",
      "data_state/metadata",
      "params/../../../../../../../../dev/zero",
      "/dev/zero",
      "params/./d/abc",
      "params/d",
      "params",
      "tlm_checksums.json",
      "..",
      ".",
    ]
  ),
  st.text(alphabet="params/._\\\x00:dabc", max_size=24),
)
ENTRIES = st.one_of(
  st.fixed_dictionaries(
    {
      "size": st.one_of(st.integers(min_value=-2, max_value=2000), SCALARS),
      "sha256": st.one_of(
        st.just("0" * 64), st.text(alphabet="0123456789abcdef", max_size=64), SCALARS
      ),
    }
  ),
  JSON,
)
MANIFESTS = st.one_of(
  st.binary(max_size=64),
  JSON.map(_dump),
  st.fixed_dictionaries(
    {
      "format": st.one_of(st.just("tlm-checkpoint-checksums/1"), SCALARS),
      "files": st.one_of(st.dictionaries(NAMES, ENTRIES, max_size=5), JSON),
    }
  ).map(_dump),
)


@FUZZ
@given(manifest=MANIFESTS, keep_entries=st.booleans())
def test_any_manifest_makes_check_a_reason_or_none_never_an_exception(manifest, keep_entries):
  with tempfile.TemporaryDirectory() as tmp, _no_hang():
    step_dir = fake_step(os.path.join(tmp, "w"))
    path = os.path.join(step_dir, checksums.MANIFEST)
    if keep_entries and manifest.startswith(b"{"):  # the real entries plus the drawn ones
      with contextlib.suppress(ValueError):
        drawn = json.loads(manifest)
        with open(path) as f:
          real = json.load(f)
        if isinstance(drawn.get("files"), dict):
          real["files"].update(drawn["files"])
          manifest = _dump(real)
    with open(path, "wb") as f:
      f.write(manifest)
    before = _tree(tmp)
    reason = checksums.check(step_dir, ("params", "opt_state", "data_state"))
    assert reason is None or ("\n" not in reason and len(reason) < 600), reason
    root = os.path.join(tmp, "w", "checkpoints")
    try:
      found = checksums.newest_good_step(root, [1], ("params",), warn=lambda _: None)
      assert found == 1
    except CheckpointError as e:
      assert "\n" not in str(e)
    assert _tree(tmp) == before  # checking writes nothing, anywhere


# --- The workdir lock -------------------------------------------------------------------------

LOCKS = st.one_of(
  st.binary(max_size=64),
  JSON.map(_dump),
  st.fixed_dictionaries(
    {"pid": st.one_of(st.integers(min_value=-(2**70), max_value=2**70), SCALARS)},
    optional={
      k: st.one_of(st.text(max_size=12), SCALARS, st.just(socket.gethostname()))
      for k in ("host", "process_start", "mode", "since", "token")
    },
  ).map(_dump),
)


@FUZZ
@given(content=LOCKS)
def test_any_lock_file_is_taken_over_or_a_one_line_error(content):
  from tlm.workdir_lock import LOCK_NAME, LockedError, WorkdirLock

  with tempfile.TemporaryDirectory() as tmp, _no_hang():
    work = os.path.join(tmp, "w")
    os.mkdir(work)
    with open(os.path.join(work, LOCK_NAME), "wb") as f:
      f.write(content)
    lock = WorkdirLock(work, "train")
    try:
      lock.acquire()
    except LockedError as e:
      assert "\n" not in str(e) and str(e).startswith(work), str(e)
    else:  # a stale lock of this host, taken over: ours now, and released
      lock.release()
      assert not os.path.exists(os.path.join(work, LOCK_NAME))
    assert os.listdir(tmp) == ["w"]


# --- best.json, data state, configs -----------------------------------------------------------

BESTS = st.one_of(
  st.binary(max_size=48),
  JSON.map(_dump),
  st.fixed_dictionaries(
    {},
    optional={
      "metric": st.one_of(st.just("eval_loss"), SCALARS),
      "mode": st.one_of(st.sampled_from(["min", "max"]), SCALARS),
      "value": SCALARS,
      "step": SCALARS,
    },
  ).map(_dump),
)


@FUZZ
@given(content=BESTS)
def test_any_best_json_is_read_checked_or_a_one_line_error(content):
  import math

  from tlm.train.best import read_best

  with tempfile.TemporaryDirectory() as tmp, _no_hang():
    path = os.path.join(tmp, "best.json")
    with open(path, "wb") as f:
      f.write(content)
    try:
      best = read_best(path)
    except CheckpointError as e:
      _one_line(e, path)
    else:
      assert isinstance(best["metric"], str) and best["mode"] in ("min", "max")
      assert math.isfinite(best["value"]) and isinstance(best["step"], int) and best["step"] >= 0


@FUZZ
@given(
  saved=st.one_of(
    JSON, st.dictionaries(st.sampled_from(["step", "batch_size", "data", "world"]), JSON)
  )
)
def test_any_data_state_resumes_or_is_refused_in_one_line(saved):
  from tlm import configs
  from tlm.train.data_state import check_data_state

  try:
    check_data_state(saved, configs.get("tiny_temporal"), "W/checkpoints/8")
  except (ConfigError, CheckpointError) as e:
    assert "\n" not in str(e)


def _leaves(value, path=()):
  if isinstance(value, dict):
    for k, v in value.items():
      yield from _leaves(v, (*path, k))
  else:
    yield path


@pytest.fixture(scope="module")
def good_config():
  from tlm import configs

  return configs.to_dict(configs.get("tiny_temporal"))


@FUZZ
@given(data=st.data())
def test_any_edit_of_a_saved_config_reads_back_or_is_a_one_line_error(good_config, data):
  import copy

  from tlm.infer.trained_models import read_saved_config

  saved = copy.deepcopy(good_config)
  for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
    where = data.draw(st.sampled_from(sorted(_leaves(saved), key=str)))
    node = saved
    for key in where[:-1]:
      node = node[key]
    node[where[-1]] = data.draw(JSON)
  raw = json.dumps(saved).encode()
  if data.draw(st.booleans()):
    raw = raw[: data.draw(st.integers(min_value=0, max_value=len(raw)))]
  with tempfile.TemporaryDirectory() as tmp, _no_hang():
    path = os.path.join(tmp, "config.json")
    with open(path, "wb") as f:
      f.write(raw)
    try:
      read_saved_config(path)
    except ConfigError as e:
      _one_line(e, path)


@FUZZ
@given(
  content=st.one_of(
    JSON.map(_dump),
    st.dictionaries(
      st.sampled_from(
        [
          "vocab_size",
          "d_model",
          "num_heads",
          "num_layers",
          "head_dim",
          "mlp_dim",
          "dropout_rate",
          "x",
        ]
      ),
      SCALARS,
    ).map(_dump),
  )
)
def test_any_model_config_reads_back_or_is_a_one_line_error(content):
  from tlm.models.checkpoints import read_model_config

  with tempfile.TemporaryDirectory() as tmp, _no_hang():
    path = os.path.join(tmp, "model_config.json")
    with open(path, "wb") as f:
      f.write(content)
    try:
      read_model_config(path)
    except CheckpointError as e:
      _one_line(e, path)


# --- A seed's per-query measurements ----------------------------------------------------------


@FUZZ
@given(data=st.data())
def test_any_edit_of_per_query_measurements_is_accepted_or_named(data):
  from tlm.miniature import measurements

  columns = {c: ["q", "r"] for c in measurements.TEMPLAMA_COLUMNS}
  columns.update(
    year=[2010, 2019], duration=[1, 3], f1=[0.5, 1.0], most_frequent_is_correct=[True, False]
  )
  meas = {
    "seed": 0,
    "loglik_change": {"temporal": {"single": {"2019": [0.1]}}},
    "entropy": {"temporal": {"id": ["q"], "set": ["rare"], "entropy": {"2020": [1.0]}}},
    "models": {
      "temporal": {"templama": columns, "news": {c: [] for c in measurements.NEWS_COLUMNS}}
    },
  }
  assert measurements.problem(meas) is None
  for _ in range(data.draw(st.integers(min_value=1, max_value=2))):
    where = data.draw(st.sampled_from(sorted(_leaves(meas), key=str)))
    node = meas
    for key in where[:-1]:
      node = node[key]
    node[where[-1]] = data.draw(JSON)
  why = measurements.problem(meas)
  assert why is None or "\n" not in why
