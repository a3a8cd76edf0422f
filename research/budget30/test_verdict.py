"""research/budget30/verdict.py: the registered predictions and the decision rule read on
hand-made summaries (no model): P1 fails when one seed's C1 does, T1 on the timed seed's wall
clock, adoption only with the required seeds."""

import json
import os

from research.budget30 import verdict
from research.lever_verdict import REPO

TIME = """	User time (seconds): 3000.00
	System time (seconds): 60.00
	Percent of CPU this job got: 195%
	Elapsed (wall clock) time (h:mm:ss or m:ss): {wall}
	Maximum resident set size (kbytes): 1500000
"""


def _claim(cid, margins, ci_low=1.0):
  per = [
    {"seed": s, "margin": m, "holds": m > 0, "ci95": [m - 3 if m > 3 else -1.0, m + 3]}
    for s, m in margins.items()
  ]
  mean = sum(margins.values()) / len(margins)
  return {
    "id": cid,
    "statement": cid,
    "holds": all(p["holds"] for p in per),
    "margin_mean": mean,
    "margin_ci95": [ci_low, mean + 4],
    "margin_t95": [ci_low - 0.5, mean + 6],
    "per_seed": per,
  }


def _summary(c1, m1):
  seeds = sorted(c1)
  return {
    "seeds": seeds,
    "claims": [_claim("C1", c1), _claim("C5", {s: -2.0 for s in seeds})],
    "mechanism": {"M1": _claim("M1", m1)},
  }


def test_adopted_when_every_seed_holds_in_time(tmp_path):
  seeds = (0, 1, 2, 6)
  s = _summary({k: 8.0 + k for k in seeds}, {k: 12.0 for k in seeds})
  t = {"user_seconds": 3000.0, "system_seconds": 60.0, "cpu_percent": 195.0, "peak_rss_gb": 1.5}
  times = {0: {"wall_minutes": 27.5, **t}}
  r = verdict.verdict(s, times)
  assert r["P1"] and r["P2"] and r["T1"] and r["required_seeds_run"] and r["adopt"]
  c1 = next(x for x in r["claims"] if x["id"] == "C1")
  # Seed 0's committed 2800-step record is beside it; seed 6 has none.
  assert c1["seeds"][0]["margin_2800"] is not None and c1["seeds"][6]["margin_2800"] is None
  assert "| C1 |" in verdict.markdown(r)


def test_one_failing_seed_or_a_slow_run_or_missing_seeds_is_not_adopted():
  seeds = (0, 1, 2, 6)
  bad = _summary({0: 8.0, 1: -0.5, 2: 9.0, 6: 7.0}, {k: 12.0 for k in seeds})
  r = verdict.verdict(bad, {0: {"wall_minutes": 27.5}})
  assert not r["P1"] and not r["adopt"]
  good = _summary({k: 8.0 for k in seeds}, {k: 12.0 for k in seeds})
  assert not verdict.verdict(good, {0: {"wall_minutes": 30.2}})["adopt"]  # T1
  assert not verdict.verdict(good, {})["T1"]
  few = _summary({0: 8.0, 1: 8.0}, {0: 12.0, 1: 12.0})
  assert not verdict.verdict(few, {0: {"wall_minutes": 27.5}})["adopt"]


def test_timing_reads_the_log_and_the_time_report(tmp_path):
  run = tmp_path / "b30_s0"
  (tmp_path / "b30_s0.log").write_text("=== [3/7] training 14 models  (elapsed 0.5 min)\n")
  (tmp_path / "b30_s0.time").write_text(TIME.format(wall="27:36.00"))
  t = verdict.timing(str(run))
  assert t["wall_minutes"] == 27.6 and t["system_seconds"] == 60.0
  assert t["stage_starts_minutes"] == {"3 training 14 models": 0.5}
  json.dumps(t)


def test_the_committed_verdict_is_the_committed_result_and_names_m2_reframed():
  """verdict.md is what `markdown` writes from the committed verdict.json, M2 labelled as a
  claim reframed after the results wherever it shows it holding."""
  with open(os.path.join(REPO, "research/budget30/verdict.json"), encoding="utf-8") as f:
    text = verdict.markdown(json.load(f))
  with open(os.path.join(REPO, "research/budget30/verdict.md"), encoding="utf-8") as f:
    assert f.read() == text
  assert "| M2 (reframed after the results) |" in text and "| M2 |" not in text
