"""research/pinned/compare.py: the time report parsed, the claims paired and the predictions read
as registered (on hand-made summaries; no model)."""

import json
import os
import shutil

from research.lever_verdict import REPO
from research.pinned import compare

TIME_LOG = """=== [1/7] building the synthetic world (once; cached)  (elapsed 0.0 min)
=== [3/7] training 16 models  (elapsed 0.6 min)
	User time (seconds): 3700.50
	System time (seconds): 300.25
	Percent of CPU this job got: 195%
	Elapsed (wall clock) time (h:mm:ss or m:ss): 34:30.60
	Maximum resident set size (kbytes): 1740000
"""


def _summary(c1, m1, c5_holds):
  def claim(cid, margin, holds):
    return {
      "id": cid,
      "holds": holds,
      "margin_mean": margin,
      "margin_ci95": [margin - 5, margin + 5],
    }

  return {
    "claims": [claim("C1", c1, c1 > 0), claim("C5", -2.0, c5_holds)],
    "mechanism": {"M1": claim("M1", m1, m1 > 0)},
  }


def _seed(path, summary):
  path.mkdir(parents=True)
  (path / "summary.json").write_text(json.dumps(summary))
  oracle = "| most frequent answer (oracle) | - | - | 67.6 | 52.3 |\n"
  oracle += "| most recent answer (oracle) | - | - | 36.7 | 92.4 |\n"
  (path / "table2.md").write_text("| Model | a |\n|---|---|\n" + oracle)


def test_time_report_and_predictions(tmp_path, monkeypatch):
  log = tmp_path / "run.log"
  log.write_text(TIME_LOG)
  timing = compare.wall_minutes(str(log))
  assert timing["wall_minutes"] == 34.51 and timing["cpu_percent"] == 195
  assert timing["peak_rss_gb"] == 1.74 and len(timing["stage_starts_minutes"]) == 2

  _seed(tmp_path / "old", _summary(7.8, 17.1, False))
  _seed(tmp_path / "new", _summary(9.0, 14.0, True))
  monkeypatch.setattr(compare, "COMMITTED", str(tmp_path / "old"))
  result = compare.compare(str(tmp_path / "new"), str(log))
  assert result["V1_oracle_rows_equal"] and result["P1_above_30_minutes"]
  assert not result["P2_C1_M1_hold_C5_not"]  # C5 holds in the pinned run
  assert not result["P3_changes_below_seed_sd"]  # M1 moved by 3.1 > 2.14
  assert result["flipped"] == ["C5"]
  assert abs({r["id"]: r for r in result["claims"]}["C1"]["change"] - 1.2) < 1e-9

  shutil.rmtree(tmp_path / "new")
  _seed(tmp_path / "new", _summary(6.0, 16.0, False))
  result = compare.compare(str(tmp_path / "new"), str(log))
  assert result["P2_C1_M1_hold_C5_not"] and result["P3_changes_below_seed_sd"]
  assert result["flipped"] == [] and "| C1 | +7.80 | +6.00 | -1.80 |" in compare.markdown(result)


def test_the_committed_table_is_the_committed_result_and_names_m2_reframed():
  """result.md is what `markdown` writes from the committed result.json, M2 labelled as a claim
  reframed after the results wherever it shows it holding."""
  with open(os.path.join(REPO, "research/pinned/result.json"), encoding="utf-8") as f:
    text = compare.markdown(json.load(f))
  with open(os.path.join(REPO, "research/pinned/result.md"), encoding="utf-8") as f:
    assert f.read() == text
  assert "| M2 (reframed after the results) |" in text and "| M2 |" not in text
