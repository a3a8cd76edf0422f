"""The one verdict table: each claim's seeds held and its class at both protocols, from the
committed summaries and the registered explanations (`research.verdicts.registry`).

  python -m research.verdicts.table            # writes docs/results/verdicts.md and .json
  python -m research.verdicts.table --check    # exits 1 if they differ from what it computes

A claim part that fails on a seed is "not explained" unless a registered explanation measured
that seed and its criterion, as first written, is met by the recorded result (`check`); a
claim's class is the weakest of its failing parts'. Nothing is classified by hand in this file.
"""

import argparse
import json
import os
import sys
from collections.abc import Iterable, Mapping

from research.committed import read_json
from research.verdicts.claims import CLAIMS
from research.verdicts.registry import (
  DEFAULT,
  EXPLANATIONS,
  HOLDS,
  NOT_EXPLAINED,
  ORDER,
  P2800,
  Explanation,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Each protocol's committed summaries, in its seeds' order.
SUMMARIES = {
  DEFAULT: ("docs/results/budget30/summary.json",),
  P2800: (
    "docs/results/summary.json",
    "docs/results/fresh/summary.json",
    "docs/results/fresh5/seed=5/summary.json",
  ),
}
OUT = "docs/results"
PROTOCOL_NAMES = {DEFAULT: "the 2000-step default", P2800: "the 2800-step protocol"}


def _claims_of(summary: Mapping) -> list[dict]:
  return list(summary["claims"]) + [summary["mechanism"]["M1"], summary["mechanism"]["M2"]]


def per_seed(protocol: str, root: str = REPO) -> dict[str, list[dict]]:
  """{claim id: [its per-seed record, in the protocol's seed order]} from the summaries."""
  out: dict[str, list[dict]] = {}
  for path in SUMMARIES[protocol]:
    for claim in _claims_of(read_json(os.path.join(root, path))):
      out.setdefault(claim["id"], []).extend(claim["per_seed"])
  return out


def value_at(doc, path: str):
  """The value at a dotted path ("verdict.E5", "a.ci95.0"); "P - Q" subtracts two paths. A
  key may hold spaces ("clamped - asked.margin"): each part is matched as a key first."""
  if " - " in path and not _has(doc, path):
    left, right = path.split(" - ", 1)
    if _has(doc, left) and _has(doc, right):
      return value_at(doc, left) - value_at(doc, right)
  cur = doc
  for part in path.split("."):
    cur = cur[int(part)] if isinstance(cur, list) else cur[part]
  return cur


def _has(doc, path: str) -> bool:
  try:
    cur = doc
    for part in path.split("."):
      cur = cur[int(part)] if isinstance(cur, list) else cur[part]
  except (KeyError, IndexError, ValueError, TypeError):
    return False
  return True


_OPS = {
  "==": lambda a, b: a == b,
  "<": lambda a, b: a < b,
  "<=": lambda a, b: a <= b,
  ">": lambda a, b: a > b,
  ">=": lambda a, b: a >= b,
  "abs<": lambda a, b: abs(a) < b,
}


def result_files(expl: Explanation) -> list[str]:
  """The result files `expl.checks` read: one per seed where `result` names "{seed}"."""
  if "{seed}" not in expl.result:
    return [expl.result]
  return [expl.result.format(seed=s) for s in expl.seeds]


def check(expl: Explanation, root: str = REPO) -> list[str]:
  """Why the recorded result does not meet the explanation's criterion: [] when it does."""
  problems = []
  for name in (expl.registration, *result_files(expl)):
    if not os.path.isfile(os.path.join(root, name)):
      problems.append(f"{name} is missing")
  if problems:
    return problems
  for result in result_files(expl):
    doc = read_json(os.path.join(root, result))
    for path, op, want in expl.checks:
      if not _has(doc, path) and " - " not in path:
        problems.append(f"{result}: no {path}")
        continue
      got = value_at(doc, path)
      if not _OPS[op](got, want):
        problems.append(f"{result}: {path} is {got!r}, the criterion needs {op} {want!r}")
  return problems


def _covering(
  claim: str, part: str, protocol: str, seed: int, explanations=EXPLANATIONS
) -> list[Explanation]:
  """The explanations whose measurement covered `seed`: no other explains the part there."""
  return [
    e
    for e in explanations
    if e.claim == claim and part in e.parts and protocol in e.protocols and seed in e.seeds
  ]


def classify(
  protocol: str, root: str = REPO, met=check, explanations=EXPLANATIONS
) -> dict[str, dict]:
  """{claim: {"held", "seeds", "class", "parts": [...]}}, each part's class per seed."""
  out = {}
  for cid, records in per_seed(protocol, root).items():
    seeds = [r["seed"] for r in records]
    parts: dict[str, dict] = {}
    for rec in records:
      for comp in rec["components"]:
        if comp.get("holds") is True:
          continue
        part = parts.setdefault(comp["name"], {"part": comp["name"], "failing": [], "by_seed": {}})
        part["failing"].append(rec["seed"])
        covering = _covering(cid, comp["name"], protocol, rec["seed"], explanations)
        found = [e for e in covering if not met(e, root)]
        # A measurement of this seed that missed its criterion leaves the part not explained
        # there, whatever another measurement of it found.
        best = None if len(found) < len(covering) else (found or [None])[0]
        part["by_seed"][rec["seed"]] = {
          "class": best.kind if best else NOT_EXPLAINED,
          "measured": best is not None,
          "measured_seeds": list(best.seeds) if best else [],
          "reason": best.reason if best else "",
          "registration": best.registration if best else "",
          "result": best.result.format(seed=rec["seed"]) if best else "",
        }
    for part in parts.values():
      part["class"] = min((s["class"] for s in part["by_seed"].values()), key=ORDER.index)
    held = [r["seed"] for r in records if r["holds"] is True]
    klass = min((p["class"] for p in parts.values()), key=ORDER.index) if parts else HOLDS
    out[cid] = {"held": held, "seeds": seeds, "class": klass, "parts": list(parts.values())}
  return out


def _class_text(cid: str, verdict: Mapping, claim) -> str:
  text = verdict["class"]
  if text == HOLDS and "reframed" in claim.met.get(DEFAULT, ""):
    return "holds (reframed after the results)"
  if text == NOT_EXPLAINED and claim.candidate:
    return f"not explained ({'lever suggestive' if cid == 'C3' else 'candidate named'})"
  return text


def _held_text(verdict: Mapping) -> str:
  return f"{len(verdict['held'])}/{len(verdict['seeds'])}"


def build(root: str = REPO) -> dict:
  """The table's content: every claim at both protocols, the "not explained" counts."""
  by_protocol = {p: classify(p, root) for p in (DEFAULT, P2800)}
  rows = []
  for claim in CLAIMS:
    row = {"claim": claim.id, "statement": claim.statement, "link": claim.link}
    for p in (DEFAULT, P2800):
      v = by_protocol[p][claim.id]
      row[p] = {
        "held": v["held"],
        "seeds": v["seeds"],
        "class": _class_text(claim.id, v, claim),
        "met_as_first_written": claim.met[p],
        "caveat": claim.caveat.get(p, ""),
        "parts": v["parts"],
      }
    row["candidate"] = claim.candidate
    rows.append(row)
  not_explained = {
    p: [r["claim"] for r in rows if r[p]["class"].startswith(NOT_EXPLAINED)]
    for p in (DEFAULT, P2800)
  }
  return {"rows": rows, "not_explained": not_explained, "summaries": SUMMARIES}


HEADER = (
  "| claim | the paper's statement | held at the default (n/6) | held at 2800 (n/k) "
  "| class at the default | class at 2800 | registered test met as first written "
  "(default; 2800) | caveat | link |"
)


def table_rows(table: Mapping, link_prefix: str = "") -> list[str]:
  """The table's Markdown lines, links relative to the page (`link_prefix` to the repo root)."""
  lines = [HEADER, "|" + "---|" * 9]
  for r in table["rows"]:
    d, o = r[DEFAULT], r[P2800]
    caveat = "; ".join(x for x in (d["caveat"], o["caveat"] and f"2800: {o['caveat']}") if x)
    met = f"{d['met_as_first_written']}; {o['met_as_first_written']}"
    link = f"[{os.path.basename(r['link'])}]({link_prefix}{r['link']})"
    lines.append(
      f"| {r['claim']} | {r['statement']} | {_held_text(d)} | {_held_text(o)} | {d['class']} "
      f"| {o['class']} | {met} | {caveat or '-'} | {link} |"
    )
  return lines


README_HEADER = (
  "| claim | the paper says | holds on (default; 2800 steps) | class at the default | "
  "class at 2800 steps |"
)


def headline(root: str = REPO) -> str:
  """The central finding at the default, each interval named by its kind."""
  summary = read_json(os.path.join(root, SUMMARIES[DEFAULT][0]))
  found = {c["id"]: c for c in _claims_of(summary)}

  def one(cid: str) -> str:
    c = found[cid]
    lo, hi = c["margin_ci95"]
    tlo, thi = c["margin_t95"]
    return (
      f"{cid} {c['margin_mean']:+.1f} F1 (two-level bootstrap 95% [{lo:+.1f}, {hi:+.1f}], "
      f"t over seeds [{tlo:+.1f}, {thi:+.1f}])"
    )

  seeds = ", ".join(map(str, summary["seeds"]))
  return f"On seeds {seeds} at the default: {one('C1')}; {one('M1')}."


def readme_rows(table: Mapping) -> list[str]:
  """The README's short form of the table (its links go to the full one)."""
  lines = [README_HEADER, "|---|---|---|---|---|"]
  for r in table["rows"]:
    d, o = r[DEFAULT], r[P2800]
    lines.append(
      f"| {r['claim']} | {r['statement']} | {_held_text(d)}; {_held_text(o)} | {d['class']} "
      f"| {o['class']} |"
    )
  return lines


def markdown(table: Mapping) -> str:
  """docs/results/verdicts.md."""
  ne = table["not_explained"]
  lines = [
    "# Verdicts: every claim of the paper in the miniature, as measured",
    "",
    "Generated by `python -m research.verdicts.table` from the committed summaries "
    "(the default: `docs/results/budget30/summary.json`, seeds 0, 1, 2, 6, 3, 5; the 2800-step "
    "protocol: `docs/results/summary.json`, `fresh/summary.json`, `fresh5/seed=5/summary.json`, "
    "seeds 0-5) and the registered explanations (`research/verdicts/registry.py`). "
    "A part failing on a seed is **not explained** unless a registration committed before its "
    "result names the part, its measurement covered that seed, and its criterion, as first "
    "written, is met by the recorded result; "
    "**undecided at this size** where a registered interval or size check shows the miniature "
    "cannot resolve it; **cannot be tested here** where a registered measurement shows the "
    "miniature lacks what it needs. A claim's class is the weakest of its parts'. "
    "Held: the seeds on which every part of the claim holds (per-seed verdicts; the intervals "
    "are in each summary's `claims.md`: per seed a paired bootstrap, over seeds the two-level "
    "bootstrap and the t-interval).",
    "",
    *table_rows(table, "../../"),
    "",
    f"**Not explained**: at the default {len(ne[DEFAULT])} ({', '.join(ne[DEFAULT]) or 'none'}); "
    f"at 2800 steps {len(ne[P2800])} ({', '.join(ne[P2800]) or 'none'}). "
    "M2 holds only as reframed after the results; as first registered it fails on every seed.",
    "",
    "## The failing parts",
    "",
  ]
  for r in table["rows"]:
    for p in (DEFAULT, P2800):
      for part in r[p]["parts"]:
        seeds = ", ".join(
          f"{s}: {v['class']}" for s, v in sorted(part["by_seed"].items(), key=lambda kv: kv[0])
        )
        reasons = sorted({v["reason"] for v in part["by_seed"].values() if v["reason"]})
        why = f" ({'; '.join(reasons)})" if reasons else ""
        if part["class"] == NOT_EXPLAINED and r["candidate"]:
          why += f"; candidate: {r['candidate']}"
        lines.append(f"- {r['claim']}, {PROTOCOL_NAMES[p]}, '{part['part']}' — {seeds}{why}")
  return "\n".join(lines) + "\n"


def write(table: Mapping, out: str) -> dict[str, str]:
  """{path: text} of verdicts.md and verdicts.json under `out`."""
  return {
    os.path.join(out, "verdicts.md"): markdown(table),
    os.path.join(out, "verdicts.json"): json.dumps(table, indent=1, sort_keys=True) + "\n",
  }


def main(argv: Iterable[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--check", action="store_true", help="compare with the committed files")
  ap.add_argument("--out", default=os.path.join(REPO, OUT))
  args = ap.parse_args(list(argv) if argv is not None else None)
  files = write(build(), args.out)
  if args.check:
    stale = [p for p, text in files.items() if not os.path.isfile(p) or open(p).read() != text]
    for p in stale:
      print(f"{p}: differs from what python -m research.verdicts.table writes", file=sys.stderr)
    return 1 if stale else 0
  for path, text in files.items():
    with open(path, "w", encoding="utf-8") as f:
      f.write(text)
    print(f"wrote {path}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
