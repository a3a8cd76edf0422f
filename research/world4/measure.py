"""World v4's data properties, measured on the world alone (no model): V1-V4.

  python -m research.world4.measure --seeds=7,8,9,10,11,12 [--out=research/world4]

The properties, their targets and the lines of the paper they come from:
research/world4/PREREGISTRATION.md (committed before this script was run on any of the seeds it
names). Each property is measured on world v4 and, for comparison, on world v3 of the same seed
(the same facts; `tlm.synthetic.settings.VERSIONS`). Writes OUT/measure.json and OUT/measure.md.
"""

import argparse
import json
import os
import re
import tempfile
from collections import Counter, defaultdict

import numpy as np

from research.world import measure as w3
from research.world import measure_w6 as w6
from tlm.data import fact_durations
from tlm.synthetic import world as world_lib
from tlm.synthetic.news import news_interval
from tlm.synthetic.settings import YEAR_PIECES
from tlm.synthetic.world_records import day, year_of

YEARS = range(YEAR_PIECES[0], YEAR_PIECES[-1] + 1)  # 2000-2035
TRAIN = range(2010, 2019)
LONG_LIVED = 5  # years: the paper's split (Figure 2, right; C10)
_YEAR = re.compile(r"\b(20[0-3][0-9])\b")


# -- V1: the years the start reads, before the news


def start_years(texts: list[str]) -> dict:
  """Occurrences of each year of 2000-2035 as a word in `texts`, and the sentences naming the
  year together with the year before or after it (an ordered context)."""
  count: Counter = Counter()
  ordered: Counter = Counter()
  for text in texts:
    for sentence in re.split(r"(?<=\.)\s+", text):
      named = {int(y) for y in _YEAR.findall(sentence)}
      count.update(int(y) for y in _YEAR.findall(sentence))
      for y in named:
        if y - 1 in named or y + 1 in named:
          ordered[y] += 1
  return {
    "count": {y: count.get(y, 0) for y in YEARS},
    "ordered": {y: ordered.get(y, 0) for y in YEARS},
    "min_count": min(count.get(y, 0) for y in YEARS),
    "min_ordered": min(ordered.get(y, 0) for y in YEARS),
  }


def probe_years(docs, generic: list[str]) -> dict[int, int]:
  """W1 of research/world (the probe years 2019-2029 as words in the news of 2010-18 and the
  start's text), on this version's start text."""
  texts = [d.text for d in docs if year_of(d.date) in TRAIN] + generic
  counts: Counter = Counter()
  for t in texts:
    counts.update(int(y) for y in _YEAR.findall(t))
  return {y: counts.get(y, 0) for y in w3.PROBE_YEARS}


# -- V2: how often a fact is stated


def _mentions(docs) -> Counter:
  """(relation, subject, object, year) -> the present-tense fact sentences stating it."""
  out: Counter = Counter()
  for d in docs:
    y = year_of(d.date)
    for s in d.sentences:
      if s.kind == "fact" and s.fact is not None:
        out[(s.fact.relation, s.fact.subject, s.fact.obj, y)] += 1
  return out


def coverage(world, docs, examples, facts_path: str) -> dict:
  """No floor (facts valid in a year of 2010-18 and unstated in it), prominence (the rank
  correlation of a subject's popularity with the mentions of its facts per year held), and the
  pooling the paper's C3 and C10 rest on: long-lived TempLAMA 2010-18 test queries whose answer
  is unstated in the query's year but stated in another year of 2010-18."""
  mentions = _mentions(docs)
  valid_years, unstated = 0, 0
  per_subject: dict[str, list[int]] = defaultdict(list)
  for f in world.facts:
    for y in TRAIN:
      if news_interval(f, day(y), day(y, 12, 31)) is None:
        continue
      n = mentions[(f.relation, f.subject, f.obj, y)]
      valid_years += 1
      unstated += n == 0
      per_subject[f.subject].append(n)
  subjects = sorted(per_subject)
  popularity = [world.entities[q].popularity for q in subjects]
  rate = [float(np.mean(per_subject[q])) for q in subjects]
  rho = float(np.corrcoef(_ranks(popularity), _ranks(rate))[0, 1])
  spans = fact_durations.read_fact_spans(facts_path)
  seen = [ex for ex in examples if int(ex.date[:4]) in TRAIN]
  durations = fact_durations.durations_from_facts(spans, seen)
  long_lived, pooled, unstated_long = 0, 0, 0
  for ex in seen:
    if durations.get(ex.id, 0) < LONG_LIVED or not ex.answer_ids:
      continue
    long_lived += 1
    y, key = int(ex.date[:4]), (ex.relation, ex.subject, ex.answer_ids[0])
    if mentions[key + (y,)] == 0:
      unstated_long += 1
      pooled += any(mentions[key + (z,)] for z in TRAIN if z != y)
  return {
    "fact_years": valid_years,
    "unstated_share": unstated / valid_years,
    "prominence_rank_correlation": rho,
    "long_lived_queries": long_lived,
    "unstated_in_their_year": unstated_long,
    "pooling_share": pooled / long_lived if long_lived else None,
  }


def _ranks(values) -> np.ndarray:
  order = np.argsort(values, kind="stable")
  ranks = np.empty(len(values))
  ranks[order] = np.arange(len(values))
  return ranks


# -- V4: does the news look back more than ahead?


def looking(docs, gold: dict) -> dict:
  """Mentions, in the news of a year e of 2010-18, of a TempLAMA test pair's subject with an
  object of another time: `back` (a gold answer of an earlier year of the pair, not of e) and
  `ahead` (of a later year, not of e nor of an earlier one); any sentence that names the pair's
  subject and object (a fact sentence, a past / future one, an explicit year)."""
  counts = Counter()
  for d in docs:
    e = year_of(d.date)
    if e not in TRAIN:
      continue
    for s in d.sentences:
      for f in (s.fact, s.about):
        if f is None or (f.subject, f.relation) not in gold:
          continue
        years = gold[(f.subject, f.relation)]
        now = years.get(e, frozenset())
        if f.obj in now:
          counts["current"] += 1
        elif any(f.obj in a for t, a in years.items() if t < e):
          counts["back"] += 1
        elif any(f.obj in a for t, a in years.items() if t > e):
          counts["ahead"] += 1
  ratio = counts["back"] / counts["ahead"] if counts["ahead"] else None
  return {**{k: counts[k] for k in ("current", "back", "ahead")}, "back_to_ahead": ratio}


# -- one seed ---------------------------------------------------------------------------


def measure_version(seed: int, version: int) -> dict:
  world, docs = world_lib.generate(seed, version=version)
  texts = world_lib.pretraining_texts(world, version)
  with tempfile.TemporaryDirectory() as tmp:
    examples, facts_path = w3._test_split(world, tmp)
    gold = w3._gold(examples)
    out = {
      "V1_start_years": start_years(texts["generic"]),
      "V1_cbqa_years": start_years(texts["generic"] + texts["encyclopedia"]),
      "V1_probe_years_in_training_text": probe_years(docs, texts["generic"]),
      "V2_coverage": coverage(world, docs, examples, facts_path),
      "V4_looking": looking(docs, gold),
      "W2_symmetry": w3.symmetry(gold),
      "W4_single_answer": w3.single_answer_pairs(gold),
      "W5_persistence": w3.persistence(gold),
    }
  w6_out = w6.measure_world(world, docs)
  out["V3_short_lived"] = {
    "news_share_short": w6_out["news"]["share_short"],
    "templama_share_short": w6_out["templama"]["share_short"],
    "difference": w6_out["difference"],
  }
  return out


def measure(seed: int) -> dict:
  return {"v4": measure_version(seed, 4), "v3": measure_version(seed, 3)}


# The targets, as registered in PREREGISTRATION.md (test_measure.py finds each in its text).
TARGETS = {
  "V1": "at least 10 occurrences and at least 5 such sentences, for every year, on every seed",
  "V2": "(a) at least 0.05, (b) at least 0.3, (c) at least 0.05, on every seed",
  "V3": "difference > 0 on every seed",
  "V4": "back / ahead >= 2 on every seed",
}


def verdicts(by_seed: dict) -> dict:
  """Each target applied to world v4 of every seed (`TARGETS`)."""
  v4 = [m["v4"] for m in by_seed.values()]
  return {
    "V1": all(
      m["V1_start_years"]["min_count"] >= 10 and m["V1_start_years"]["min_ordered"] >= 5 for m in v4
    ),
    "V2": all(
      m["V2_coverage"]["unstated_share"] >= 0.05
      and m["V2_coverage"]["prominence_rank_correlation"] >= 0.3
      and (m["V2_coverage"]["pooling_share"] or 0) >= 0.05
      for m in v4
    ),
    "V3": all(m["V3_short_lived"]["difference"] > 0 for m in v4),
    "V4": all((m["V4_looking"]["back_to_ahead"] or 0) >= 2 for m in v4),
  }


def markdown(out: dict) -> str:
  lines = ["# World v4's properties (research/world4/PREREGISTRATION.md)", ""]
  lines += [
    "| seed | world | V1 min count / min ordered (start) | V2 unstated (fact, year) | "
    "V2 prominence rho | V2 pooling | V3 news - TempLAMA short-lived | V4 back / ahead |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for seed, both in out["seeds"].items():
    for version in ("v4", "v3"):
      m = both[version]
      v1, v2, v3, v4 = (
        m["V1_start_years"],
        m["V2_coverage"],
        m["V3_short_lived"],
        m["V4_looking"],
      )
      pooling = "-" if v2["pooling_share"] is None else f"{v2['pooling_share']:.3f}"
      ratio = "-" if v4["back_to_ahead"] is None else f"{v4['back_to_ahead']:.2f}"
      lines.append(
        f"| {seed} | {version} | {v1['min_count']} / {v1['min_ordered']} | "
        f"{v2['unstated_share']:.3f} | {v2['prominence_rank_correlation']:.2f} | {pooling} "
        f"({v2['unstated_in_their_year']} of {v2['long_lived_queries']} unstated) | "
        f"{100 * v3['difference']:+.1f} points ({100 * v3['news_share_short']:.1f}% vs "
        f"{100 * v3['templama_share_short']:.1f}%) | {ratio} ({v4['back']} / {v4['ahead']}) |"
      )
  lines += ["", "Targets (world v4, every seed):", ""]
  lines += [
    f"- {k}: {v} -> **{'met' if out['verdicts'][k] else 'not met'}**" for k, v in TARGETS.items()
  ]
  lines += ["", "Probe years 2019-2029 in training text (news 2010-18 and the start's text):", ""]
  for seed, both in out["seeds"].items():
    for version in ("v4", "v3"):
      lines.append(f"- seed {seed}, {version}: {both[version]['V1_probe_years_in_training_text']}")
  return "\n".join(lines) + "\n"


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--seeds", required=True)
  ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
  args = ap.parse_args()
  by_seed = {}
  for s in (int(x) for x in args.seeds.split(",")):
    by_seed[str(s)] = measure(s)
    print(f"seed {s}: measured", flush=True)
  out = {"seeds": by_seed, "targets": TARGETS, "verdicts": verdicts(by_seed)}
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, "measure.json"), "w") as f:
    json.dump(out, f, indent=1)
  with open(os.path.join(args.out, "measure.md"), "w") as f:
    f.write(markdown(out))
  print(out["verdicts"])


if __name__ == "__main__":
  main()
