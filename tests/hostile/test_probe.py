"""The hostile-input probe: `run.py` run as a careless or hostile user would, one case per
subprocess, each of which must end in a one-line error or a correct recovery, with no traceback,
no hang, no file written outside the locations it was given and no checkpoint lost
(tests/hostile/probe.py says how an outcome is classified).

One test per surface, parametrised by that surface's tables (tests/hostile/cases/, one module
per surface). Every case is marked `hostile`; `python -m pytest tests/hostile -m hostile` runs
all of them (about an hour on 2 cores; `-k NAME` picks cases), any other run only `SAMPLE`: a
few cases of different surfaces that need no trained model, so that the suite's default run
checks the harness and those surfaces in seconds (tests/hostile/conftest.py).
"""

import collections

import pytest

from tests.hostile import probe
from tests.hostile.cases import CASES

# The default run's cases: fast (run.py refuses before or just after importing jax) and
# independent of the base's trained model.
SAMPLE = frozenset(
  {
    "train_workdir_gs_missing_package",  # paths: a scheme whose package is missing
    "extreme_train_lr_nan",  # extremes: a setting no training can use
    "build_templama_years_reversed",  # builders: flags checked before anything is written
    "build_templama_intact",  # builders: a success, its output checked, nothing written outside
    "store_check_tokens_vocab_size_lies",  # store: a manifest that lies about its vocabulary
    "tables_results_missing",  # state: results that are not there
    "layout_workdir_in_unwritable_parent",  # layout: a workdir that cannot be made
    "disk_full_build_ssm",  # disk_full: a full disk mid-build (a tmpfs: root only, else skipped)
  }
)


def cases(surface: str) -> list:
  return [
    pytest.param(c, id=c.name, marks=pytest.mark.hostile(surface=surface, sample=c.name in SAMPLE))
    for c in CASES
    if c.surface == surface
  ]


def test_the_cases_have_unique_names_and_the_sample_exists():
  names = collections.Counter(c.name for c in CASES)
  assert [n for n, k in names.items() if k > 1] == []
  assert SAMPLE <= set(names)


def test_the_harness_fails_a_case_whose_outcome_is_not_the_expected_one(tmp_path):
  # A refusal where success is expected must not pass: the harness, not only the cases, is
  # under test here.
  case = probe.Case(
    "gs_workdir_expected_to_train",
    "paths",
    lambda ctx: probe.train_args("gs://"),
    expect="ok",
  )
  record = probe.run_case(case, probe.Base(str(tmp_path / "base"), 60), str(tmp_path), 120)
  assert (record["class"], record["passed"]) == ("refused", False), record
  assert "--workdir" in record["detail"] and record["outside"] == [] and record["lost"] == []


@pytest.mark.parametrize("case", cases("paths"))
def test_paths(case, run_case):
  run_case(case)


@pytest.mark.parametrize("case", cases("state"))
def test_state(case, run_case):
  run_case(case)


@pytest.mark.parametrize("case", cases("layout"))
def test_layout(case, run_case):
  run_case(case)


@pytest.mark.parametrize("case", cases("extremes"))
def test_extremes(case, run_case):
  run_case(case)


@pytest.mark.parametrize("case", cases("builders"))
def test_builders(case, run_case):
  run_case(case)


@pytest.mark.parametrize("case", cases("checkpoints"))
def test_checkpoints(case, run_case):
  run_case(case)


@pytest.mark.parametrize("case", cases("store"))
def test_store(case, run_case):
  run_case(case)


@pytest.mark.parametrize("case", cases("t5x"))
def test_t5x(case, run_case):
  run_case(case)


@pytest.mark.parametrize("case", cases("sampling"))
def test_sampling(case, run_case):
  run_case(case)


@pytest.mark.parametrize("case", cases("midrun"))
def test_midrun(case, run_case):
  run_case(case)


@pytest.mark.parametrize("case", cases("disk_full"))
def test_disk_full(case, run_case):
  run_case(case)
