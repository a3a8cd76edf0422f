"""The exposure lever on the fresh seeds (research/c3/fresh.py): the committed numbers it starts
from, and the five-seed criterion on hand-made seeds."""

import pytest

from research.c3 import fresh


def test_the_committed_fresh_seeds():
  """V2's inputs: per_query.json gives summary.json's C3 margin (-0.83, -1.94), on the
  committed pools (906 / 104 and 910 / 103), with the 2010 expert on every query."""
  for seed, margin, pool in ((3, -0.83, (906, 104)), (4, -1.94, (910, 103))):
    c = fresh.committed_fresh(seed)
    assert c["temporal_f1"] - c["yearly_f1"] == pytest.approx(c["c3_margin"], abs=fresh.TOLERANCE)
    assert round(c["c3_margin"], 2) == margin
    assert (c["queries"], c["pairs"]) == pool == (len(c["temporal_records"]), pool[1])
    assert len(c["check_expert"]) > c["queries"]  # every test query, 2019-20 included


def _seed(seed, change, margin, ok=True):
  return {
    "seed": seed,
    "change": change,
    "new_margin": margin,
    "V1": {"ok": ok},
    "V2": {"ok": True},
    "V3": {"ok": True},
  }


FIRST = [_seed(0, 4.66, -0.11), _seed(1, 2.41, 2.94), _seed(2, 6.39, 4.15)]


def test_r_and_e5_over_five_seeds():
  v = fresh.verdict(FIRST, [_seed(3, 4.0, 3.0), _seed(4, 5.0, 3.5)])
  assert v["R"] and v["E5"] and v["outcome"].startswith("fails for a measured reason")
  assert v["seeds"] == [0, 1, 2, 3, 4] and v["change_t95"][0] > 0


def test_a_fresh_seed_below_zero_fails_its_criterion():
  v = fresh.verdict(FIRST, [_seed(3, 4.0, 3.0), _seed(4, 5.0, -0.5)])
  assert v["R"] and not v["E5"] and v["outcome"].startswith("exposure accounts for part")
  v = fresh.verdict(FIRST, [_seed(3, -0.1, 3.0), _seed(4, 5.0, 3.5)])
  assert not v["R"] and v["outcome"].startswith("the replication does not support")


def test_a_failed_check_gives_no_verdict():
  v = fresh.verdict(FIRST, [_seed(3, 4.0, 3.0, ok=False), _seed(4, 5.0, 3.5)])
  assert v["outcome"].startswith("no verdict")


def test_the_registrations():
  """Each registration names its own file, its two seeds and where each seed's committed default
  is; seed 5 (research/c3/PREREGISTRATION_seed5.md) stands in for the unregenerable seed 4."""
  import os

  for name, r in fresh.REGISTRATIONS.items():
    assert os.path.isfile(os.path.join(fresh.REPO, r.file)), name
    assert set(r.committed) == set(r.seeds) and r.name == f"result_{name}"
  assert fresh.REGISTRATIONS["fresh"].seeds == fresh.SEEDS == (3, 4)
  assert fresh.REGISTRATIONS["seed5"].seeds == (3, 5)
  v = fresh.verdict(FIRST, [_seed(3, 4.0, 3.0), _seed(5, 5.0, 3.5)])
  assert v["seeds"] == [0, 1, 2, 3, 5] and v["R"] and v["E5"]
