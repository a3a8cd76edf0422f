"""The pinned seed-0 reproduction against the committed unpinned one.

The pre-registration: research/pinned/PREREGISTRATION.md.

  python -m research.pinned.compare --pinned=runs/pinned_s0/results \\
      --time_log=runs/pinned_s0.log --out=research/pinned

Reads both seeds' `summary.json` and `table2.md`, and `/usr/bin/time -v`'s report at the end of
the run's log; writes `result.json` and `result.md`: check V1, predictions P1-P3 as registered,
and every claim's margin, unpinned and pinned, with the change and whether its verdict flipped.
"""

import argparse
import json
import os
import re

from research.lever_verdict import write_result

COMMITTED = "docs/results/preregistered/reproduce_seed0"
SEED_SD = {"C1": 3.93, "M1": 2.14}  # over the committed seeds 0-2, as registered
ORACLES = ("most frequent answer (oracle)", "most recent answer (oracle)")
# A claim whose test was changed after the results were seen is named so wherever a table shows
# it: M2's second half was dropped after the three seeds (tlm/miniature/mechanism.py).
REFRAMED = {"M2": "M2 (reframed after the results)"}


def label(cid: str) -> str:
  """The claim's id as a table shows it."""
  return REFRAMED.get(cid, cid)


def claims(summary: dict) -> dict[str, dict]:
  """{claim id: its seed's record}, the paper's claims then the mechanism (M1, M2)."""
  out = {c["id"]: c for c in summary["claims"]}
  out.update({c["id"]: c for c in summary["mechanism"].values()})
  return out


def oracle_rows(table2: str) -> list[str]:
  return [line for line in table2.splitlines() if line.startswith(tuple(f"| {o}" for o in ORACLES))]


def wall_minutes(*logs: str) -> dict:
  """Wall clock, CPU seconds and peak memory from `/usr/bin/time -v`'s report, and the stage
  starts from the run's log (one file holding both, or the log and the report)."""
  text = ""
  for path in logs:
    with open(path, encoding="utf-8") as f:
      text += f.read()
  wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text).group(1)
  parts = [float(p) for p in wall.split(":")]
  seconds = sum(p * 60**i for i, p in enumerate(reversed(parts)))

  def field(name: str) -> float:
    return float(re.search(re.escape(name) + r": ([\d.]+)", text).group(1))

  stages = re.findall(r"=== \[(\d)/7\] (.*?)  \(elapsed ([\d.]+) min\)", text)
  return {
    "wall_minutes": round(seconds / 60, 2),
    "user_seconds": field("User time (seconds)"),
    "system_seconds": field("System time (seconds)"),
    "cpu_percent": field("Percent of CPU this job got"),
    "peak_rss_gb": round(field("Maximum resident set size (kbytes)") / 1e6, 2),
    "stage_starts_minutes": {f"{n} {title}": float(t) for n, title, t in stages},
  }


def compare(pinned_dir: str, time_log: str) -> dict:
  def load(d):
    with open(os.path.join(d, "summary.json"), encoding="utf-8") as f:
      summary = json.load(f)
    with open(os.path.join(d, "table2.md"), encoding="utf-8") as f:
      return claims(summary), f.read()

  (old, old_t2), (new, new_t2) = load(COMMITTED), load(pinned_dir)
  rows = []
  for cid in old:
    a, b = old[cid], new[cid]
    ma, mb = a.get("margin_mean"), b.get("margin_mean")
    rows.append(
      {
        "id": cid,
        "unpinned": ma,
        "pinned": mb,
        "change": None if ma is None or mb is None else mb - ma,
        "unpinned_holds": a["holds"],
        "pinned_holds": b["holds"],
        "pinned_ci95": b.get("margin_ci95"),
        "flipped": a["holds"] != b["holds"],
      }
    )
  by_id = {r["id"]: r for r in rows}
  timing = wall_minutes(time_log)
  ci = {k: new[k]["margin_ci95"] for k in ("C1", "M1")}
  return {
    "V1_oracle_rows_equal": oracle_rows(old_t2) == oracle_rows(new_t2)
    and len(oracle_rows(old_t2)) == 2,
    "P1_above_30_minutes": timing["wall_minutes"] > 30,
    "P2_C1_M1_hold_C5_not": all(new[k]["holds"] and ci[k][0] > 0 for k in ("C1", "M1"))
    and not new["C5"]["holds"],
    "P3_changes_below_seed_sd": all(abs(by_id[k]["change"]) < SEED_SD[k] for k in SEED_SD),
    "timing": timing,
    "flipped": [r["id"] for r in rows if r["flipped"]],
    "claims": rows,
  }


def markdown(result: dict) -> str:
  def num(x):
    return "-" if x is None else f"{x:+.2f}"

  lines = [
    "# Pinned workers, seed 0: results (research/pinned/PREREGISTRATION.md)",
    "",
    f"- V1 (oracle rows equal): {result['V1_oracle_rows_equal']}",
    f"- P1 (above 30 minutes): {result['P1_above_30_minutes']} "
    f"({result['timing']['wall_minutes']} min wall clock)",
    "- P2 (C1 and M1 hold with intervals above zero, C5 does not): "
    f"{result['P2_C1_M1_hold_C5_not']}",
    f"- P3 (C1 and M1 change less than a seed SD): {result['P3_changes_below_seed_sd']}",
    f"- verdicts flipped: {', '.join(result['flipped']) or 'none'}",
    "",
    "| Claim | unpinned (committed) | pinned | change | holds unpinned | holds pinned |",
    "|---|---|---|---|---|---|",
  ]
  for r in result["claims"]:
    lines.append(
      f"| {label(r['id'])} | {num(r['unpinned'])} | {num(r['pinned'])} | {num(r['change'])} | "
      f"{r['unpinned_holds']} | {r['pinned_holds']} |"
    )
  return "\n".join(lines) + "\n"


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--pinned", required=True)
  p.add_argument("--time_log", required=True)
  p.add_argument("--out", default="research/pinned")
  args = p.parse_args()
  result = compare(args.pinned, args.time_log)
  write_result(args.out, result, markdown(result), print)


if __name__ == "__main__":
  main()
