"""The hostile-input probe's session (tests/hostile/test_probe.py): which of its cases run, the
base they copy from, and the goal's figures.

Every case is marked `hostile`. A run whose `-m` expression names that marker runs them all
(`python -m pytest tests/hostile -m hostile`: about an hour on 2 cores, one case at a time);
any other run (the suite's default, `-m "not slow"`) runs only the fast sample (the cases
marked `sample`), so that the default suite checks the harness and a few surfaces without a
trained model. `-m "not hostile"` runs none.
Settings, by environment variable (a conftest below the rootdir cannot add command-line
options, and the shared tests/conftest.py stays the suite's own):
- TLM_HOSTILE_EVERY=K: every K-th case of each surface, from its first (an even sample);
- TLM_HOSTILE_TIMEOUT=S: seconds per case whose table names none (default 240);
- TLM_HOSTILE_MEMORY_GIB=G: each case's address space (default 4);
- TLM_HOSTILE_JSON=FILE: every case's record and the counts per surface and class, written at
  the end of the session (the table of those counts is printed after any run of the probe).
A passing case's directory is removed; a failing one's stays under pytest's base temporary
directory for inspection.
"""

import collections
import json
import os
import shutil
import types

import pytest

from tests.hostile import probe as harness


def _whole_probe(config) -> bool:
  return "hostile" in (config.getoption("markexpr") or "")


def pytest_collection_modifyitems(config, items):
  whole = _whole_probe(config)
  every = int(os.environ.get("TLM_HOSTILE_EVERY", "1"))
  seen = collections.Counter()
  keep, drop = [], []
  for item in items:
    mark = item.get_closest_marker("hostile")
    if mark is None:
      keep.append(item)
      continue
    surface = mark.kwargs["surface"]
    wanted = seen[surface] % every == 0 if whole else mark.kwargs.get("sample", False)
    seen[surface] += 1
    (keep if wanted else drop).append(item)
  if drop:
    config.hook.pytest_deselected(items=drop)
    items[:] = keep


@pytest.fixture(scope="session")
def hostile(tmp_path_factory, pytestconfig):
  """The session's base (built on first use), its cases' root and the records of the cases."""
  root = str(tmp_path_factory.mktemp("hostile"))
  timeout = float(os.environ.get("TLM_HOSTILE_TIMEOUT", "240"))
  harness.MEMORY_LIMIT[0] = int(float(os.environ.get("TLM_HOSTILE_MEMORY_GIB", "4")) * (1 << 30))
  session = types.SimpleNamespace(
    base=harness.Base(os.path.join(root, "base"), timeout),
    cases=os.path.join(root, "cases"),
    timeout=timeout,
    records=[],
  )
  pytestconfig.stash[_RECORDS] = session.records
  return session


_RECORDS = pytest.StashKey[list]()


@pytest.fixture
def run_case(hostile):
  """run_case(case): runs the case and fails the test unless it passed (its class is
  `one_line_error` or `ok`, nothing written outside, no checkpoint lost); `skipped` skips."""

  def run(case):
    record = harness.run_case(case, hostile.base, hostile.cases, hostile.timeout)
    hostile.records.append(record)
    if record["class"] == "skipped":
      pytest.skip(record["detail"])
    assert record["passed"], _explain(record)
    shutil.rmtree(record["dir"], ignore_errors=True)

  return run


def _explain(record: dict) -> str:
  lines = [
    f"{record['name']} ({record['surface']}, expects {record['expect']}): {record['class']}",
    f"  detail: {record['detail']}",
  ]
  if record["outside"]:
    lines.append(f"  written outside: {record['outside'][:10]}")
  if record["lost"]:
    lines.append(f"  lost: {record['lost'][:10]}")
  if "args" in record:
    lines.append(f"  run.py {' '.join(map(repr, record['args']))}")
  if record.get("stderr_tail"):
    lines.append("  stderr (tail):\n" + record["stderr_tail"][-1500:])
  lines.append(f"  case directory (kept): {record['dir']}")
  return "\n".join(lines)


def pytest_terminal_summary(terminalreporter, config):
  records = config.stash.get(_RECORDS, [])
  if records and _whole_probe(config):
    terminalreporter.write_sep("-", "hostile-input probe: cases per surface and class")
    terminalreporter.write_line(harness.surface_table(harness.summary(records)))


def pytest_sessionfinish(session):
  records = session.config.stash.get(_RECORDS, [])
  path = os.environ.get("TLM_HOSTILE_JSON")
  if records and path:
    with open(path, "w") as f:
      json.dump({"summary": harness.summary(records), "cases": records}, f, indent=1)
