"""The 30-minute default against its pre-registration (research/budget30/PREREGISTRATION.md).

  python -m research.budget30.verdict --combined=docs/results/budget30 \\
      --runs=runs/b30_s{seed} --out=docs/results/budget30

Reads the combined `summary.json` of the seeds run at 2000 steps (`--mode=combine_seeds`), each
seed's run log and `/usr/bin/time -v` report (`RUN.log`, `RUN.time`, RUN = `--runs` with the
seed), and the committed 2800-step summaries of the same seeds; writes `verdict.json` and
`verdict.md`: P1, P2 and T1 as registered, the decision rule, each seed's time, and every claim
at 2000 steps beside the 2800-step protocol's on the seeds both ran.
"""

import argparse
import json
import os

from research.lever_verdict import write_result
from research.pinned.compare import claims, label, wall_minutes

CENTRAL = ("C1", "M1")
REQUIRED_SEEDS = (0, 1, 2, 6)  # the decision needs at least these
TIMED_SEED, BUDGET_MINUTES = 0, 30.0
# The 2800-step protocol's committed results: {seed: the summary.json holding that seed}.
COMMITTED = {
  0: "docs/results/summary.json",
  1: "docs/results/summary.json",
  2: "docs/results/summary.json",
  3: "docs/results/fresh/seed=3/summary.json",
  5: "docs/results/fresh5/seed=5/summary.json",
}


def _load(path: str) -> dict:
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _per_seed(record: dict) -> dict[int, dict]:
  return {p["seed"]: p for p in record["per_seed"]}


def committed(seed: int) -> dict[str, dict]:
  """{claim id: the 2800-step protocol's per-seed record} of `seed` (empty if not run)."""
  if seed not in COMMITTED:
    return {}
  return {cid: _per_seed(c).get(seed) for cid, c in claims(_load(COMMITTED[seed])).items()}


def timing(run: str) -> dict:
  """Wall clock, CPU and stage starts of one seed's run (RUN.log and RUN.time)."""
  return wall_minutes(run + ".log", run + ".time")


def verdict(summary: dict, times: dict[int, dict]) -> dict:
  new = claims(summary)
  seeds = list(summary["seeds"])
  central = {}
  for cid in CENTRAL:
    c, per = new[cid], _per_seed(new[cid])
    central[cid] = {
      "per_seed": {
        s: {"margin": per[s]["margin"], "holds": per[s]["holds"], "ci95": per[s]["ci95"]}
        for s in seeds
      },
      "margin_mean": c["margin_mean"],
      "margin_ci95": c["margin_ci95"],
      "margin_t95": c.get("margin_t95"),
    }
  p1 = all(
    all(v["holds"] for v in central[k]["per_seed"].values()) and central[k]["margin_ci95"][0] > 0
    for k in CENTRAL
  )
  p2 = all(
    all(v["ci95"][0] > 0 for v in central[k]["per_seed"].values())
    and central[k]["margin_t95"] is not None
    and central[k]["margin_t95"][0] > 0
    for k in CENTRAL
  )
  t1 = TIMED_SEED in times and times[TIMED_SEED]["wall_minutes"] <= BUDGET_MINUTES
  enough = set(REQUIRED_SEEDS) <= set(seeds)
  old_by_seed = {s: committed(s) for s in seeds}
  rows = []
  for cid, c in new.items():
    per = _per_seed(c)
    row = {"id": cid, "statement": c["statement"], "holds_2000": c["holds"], "seeds": {}}
    for s in seeds:
      old = old_by_seed[s].get(cid)
      row["seeds"][s] = {
        "margin_2000": per[s]["margin"],
        "holds_2000": per[s]["holds"],
        "margin_2800": None if old is None else old["margin"],
        "holds_2800": None if old is None else old["holds"],
      }
    row["flipped_seeds"] = [
      s
      for s, v in row["seeds"].items()
      if v["holds_2800"] is not None and v["holds_2800"] != v["holds_2000"]
    ]
    rows.append(row)
  return {
    "registration": "research/budget30/PREREGISTRATION.md",
    "seeds": seeds,
    "P1": p1,
    "P2": p2,
    "T1": t1,
    "required_seeds_run": enough,
    "adopt": bool(p1 and t1 and enough),
    "central": central,
    "timing": {s: times[s] for s in sorted(times)},
    "claims": rows,
  }


def interval_text(ci) -> str:
  """[lo, hi] as "[+a, +b]" (2 decimals); "-" where there is none."""
  return "-" if not ci else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"


def markdown(result: dict) -> str:
  def num(x):
    return "-" if x is None else f"{x:+.2f}"

  seeds = result["seeds"]
  lines = [
    "# The 30-minute default: the verdict (research/budget30/PREREGISTRATION.md)",
    "",
    f"Seeds run: {', '.join(map(str, seeds))}.",
    "",
    f"- **P1** (C1 and M1 hold on every seed, pooled interval above zero): {result['P1']}",
    f"- **P2** (every per-seed interval and the t-interval above zero): {result['P2']}",
    f"- **T1** (seed {TIMED_SEED} at most {BUDGET_MINUTES:g} min idle): {result['T1']}",
    f"- seeds {', '.join(map(str, REQUIRED_SEEDS))} run: {result['required_seeds_run']}",
    f"- **adopted as the default** (P1, T1 and those seeds): {result['adopt']}",
    "",
    "| Claim | "
    + " | ".join(f"seed {s}" for s in seeds)
    + " | mean | two-level 95% | t over seeds |",
    "|---|" + "---|" * (len(seeds) + 3),
  ]
  for cid, c in result["central"].items():
    cells = [f"{num(v['margin'])} {interval_text(v['ci95'])}" for v in c["per_seed"].values()]
    lines.append(
      f"| {cid} | "
      + " | ".join(cells)
      + f" | {num(c['margin_mean'])} | {interval_text(c['margin_ci95'])}"
      + f" | {interval_text(c['margin_t95'])} |"
    )
  lines += [
    "",
    "Time per seed (`/usr/bin/time -v`):",
    "",
    "| seed | wall (min) | user CPU (s) | kernel CPU (s) | CPU % | peak RSS (GB) |",
    "|---|---|---|---|---|---|",
  ]
  for s, t in result["timing"].items():
    lines.append(
      f"| {s} | {t['wall_minutes']:.2f} | {t['user_seconds']:.0f} | {t['system_seconds']:.0f} | "
      f"{t['cpu_percent']:.0f} | {t['peak_rss_gb']} |"
    )
  lines += [
    "",
    "Every claim, each seed's margin at 2000 steps and (where committed) at 2800; "
    "✓ holds, ✗ does not:",
    "",
    "| Claim | " + " | ".join(f"seed {s}: 2000 / 2800" for s in seeds) + " | flipped on |",
    "|---|" + "---|" * (len(seeds) + 1),
  ]

  def mark(h):
    return "-" if h is None else ("✓" if h else "✗")

  for r in result["claims"]:
    cells = [
      f"{num(v['margin_2000'])} {mark(v['holds_2000'])} / "
      f"{num(v['margin_2800'])} {mark(v['holds_2800'])}"
      for v in r["seeds"].values()
    ]
    flipped = ", ".join(map(str, r["flipped_seeds"])) or "none"
    lines.append(f"| {label(r['id'])} | " + " | ".join(cells) + f" | {flipped} |")
  return "\n".join(lines) + "\n"


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--combined", required=True, help="the combined results (summary.json)")
  p.add_argument("--runs", required=True, help="each seed's run, {seed} in it: RUN.log, RUN.time")
  p.add_argument("--out", default="research/budget30")
  args = p.parse_args()
  summary = _load(os.path.join(args.combined, "summary.json"))
  times = {}
  for s in summary["seeds"]:
    run = args.runs.format(seed=s)
    if os.path.isfile(run + ".time"):
      times[s] = timing(run)
  result = verdict(summary, times)
  write_result(args.out, result, markdown(result), print, name="verdict")


if __name__ == "__main__":
  main()
