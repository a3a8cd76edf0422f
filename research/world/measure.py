"""Properties of the synthetic world that the failing claims depend on (no model involved).

  python -m research.world.measure [--seeds=0,1,2] [--out=research/world]

The measurements, their predictions and criteria: research/world/PREREGISTRATION.md (committed
before the first run). Writes OUT/measure.json and OUT/measure.md.
"""

import argparse
import json
import os
import re
import tempfile
from collections import Counter, defaultdict

import numpy as np

from tlm.data import fact_durations, templama
from tlm.synthetic import pretrain
from tlm.synthetic import world as world_lib
from tlm.synthetic.world_records import year_of

PROBE_YEARS = range(2019, 2030)
TRAIN = range(2010, 2019)


def _test_split(world, tmp: str) -> tuple[list, str]:
  facts, entities = os.path.join(tmp, "facts.tsv"), os.path.join(tmp, "entities.tsv")
  with open(facts, "w") as f:
    f.writelines(world_lib.format_fact(x) + "\n" for x in world.facts)
  with open(entities, "w") as f:
    f.writelines(f"{e.qid}\t{e.name}\t{e.popularity}\n" for e in world.entities.values())
  out = os.path.join(tmp, "templama")
  templama.build_templama(facts, entities, out, seed=world.seed)
  return templama.load_templama_splits(out)["test"], facts


def _gold(examples) -> dict:
  """{(subject, relation): {year: frozenset of answer ids}}."""
  out: dict = defaultdict(dict)
  for ex in examples:
    out[(ex.subject, ex.relation)][int(ex.date[:4])] = frozenset(ex.answer_ids)
  return out


def year_words(world, docs) -> dict[int, int]:
  """W1: occurrences of each probe year as a word in the training text."""
  texts = [d.text for d in docs if year_of(d.date) in TRAIN]
  texts += pretrain.generic_texts(world, world.seed)
  counts: Counter = Counter()
  pattern = re.compile(r"\b(20[12][0-9])\b")
  for t in texts:
    counts.update(int(y) for y in pattern.findall(t))
  return {y: counts.get(y, 0) for y in PROBE_YEARS}


def symmetry(gold: dict) -> dict:
  """W2: the share of pairs whose answer set at e + g equals that at e, by g; and slopes."""
  same: dict = defaultdict(list)
  for years in gold.values():
    for e in TRAIN:
      for t in range(2010, 2021):
        if e in years and t in years and t != e:
          same[t - e].append(years[t] == years[e])
  share = {g: float(np.mean(v)) for g, v in sorted(same.items())}
  gaps = range(1, 9)
  past = np.polyfit(list(gaps), [share[-g] for g in gaps], 1)[0]
  future = np.polyfit(list(gaps), [share[g] for g in gaps], 1)[0]
  return {"same_share": share, "past_slope": float(past), "future_slope": float(future)}


def exposure(examples, docs, facts_path: str) -> dict:
  """W3: mentions of long-lived facts in their year's news and in all 2010-18 news."""
  spans = fact_durations.read_fact_spans(facts_path)
  seen = [ex for ex in examples if int(ex.date[:4]) in TRAIN]
  durations = fact_durations.durations_from_facts(spans, seen)
  mentions: Counter = Counter()
  sentences: Counter = Counter()
  for d in docs:
    y = year_of(d.date)
    if y not in TRAIN:
      continue
    sentences[y] += len(d.sentences)
    for s in d.sentences:
      if s.kind == "fact" and s.fact is not None:
        mentions[(s.fact.relation, s.fact.subject, s.fact.obj, y)] += 1
  total = sum(sentences.values())
  gold = _gold(seen)
  ratios, changing, unstated = [], [], 0
  for ex in seen:
    if durations.get(ex.id, 0) < 5 or not ex.answer_ids:
      continue
    y, key = int(ex.date[:4]), (ex.relation, ex.subject, ex.answer_ids[0])
    in_year = mentions[key + (y,)]
    overall = sum(mentions[key + (z,)] for z in TRAIN)
    changing.append(len(set(gold[(ex.subject, ex.relation)].values())) > 1)
    if not in_year:
      unstated += 1
      continue
    ratios.append((overall / total) / (in_year / sentences[y]))
  return {
    "long_lived_queries": len(changing),
    "median_ratio": float(np.median(ratios)) if ratios else None,
    "quartiles": [float(q) for q in np.quantile(ratios, [0.25, 0.75])] if ratios else None,
    "unstated_in_their_year": unstated,
    "share_in_changing_pairs": float(np.mean(changing)) if changing else None,
  }


def single_answer_pairs(gold: dict) -> dict:
  """W4: pairs with a 2018 query whose answer set is one over 2010-20, and all such pairs."""
  with_2018 = [years for years in gold.values() if 2018 in years]
  single = [years for years in with_2018 if len(set(years.values())) == 1]
  return {"pairs_with_2018": len(with_2018), "single": len(single)}


def persistence(gold: dict) -> dict:
  """W5: the share of 2019 and 2020 queries whose gold includes the pair's 2018 answer."""
  out = {}
  for y in (2019, 2020):
    keep = [bool(years[y] & years[2018]) for years in gold.values() if y in years and 2018 in years]
    out[str(y)] = float(np.mean(keep)) if keep else None
  return out


def measure(seed: int) -> dict:
  world, docs = world_lib.generate(seed, version=3)  # world v3, as registered
  with tempfile.TemporaryDirectory() as tmp:
    examples, facts_path = _test_split(world, tmp)
    gold = _gold(examples)
    return {
      "W1_year_words": year_words(world, docs),
      "W2_symmetry": symmetry(gold),
      "W3_exposure": exposure(examples, docs, facts_path),
      "W4_single_answer": single_answer_pairs(gold),
      "W5_persistence": persistence(gold),
    }


def verdicts(by_seed: dict) -> dict:
  """The pre-registered criteria (PREREGISTRATION.md), applied as written."""
  seeds = list(by_seed.values())
  return {
    "W1": all(s["W1_year_words"][y] == 0 for s in seeds for y in range(2020, 2030)),
    "W2": all(
      abs(s["W2_symmetry"]["future_slope"] - s["W2_symmetry"]["past_slope"]) < 0.01 for s in seeds
    ),
    "W3": all(
      s["W3_exposure"]["median_ratio"] is not None
      and s["W3_exposure"]["median_ratio"] <= 1.25
      and s["W3_exposure"]["share_in_changing_pairs"] >= 0.5
      for s in seeds
    ),
    "W4": any(s["W4_single_answer"]["single"] < 10 for s in seeds),
  }


def markdown(out: dict) -> str:
  lines = ["# World measurements (research/world/PREREGISTRATION.md)", ""]
  for seed, m in out["seeds"].items():
    lines.append(f"## seed {seed}")
    lines.append("")
    lines.append(f"- W1 year words in training text: {m['W1_year_words']}")
    sym = m["W2_symmetry"]
    lines.append(
      f"- W2 same-answer share past slope {sym['past_slope']:+.4f}/year, future slope "
      f"{sym['future_slope']:+.4f}/year; by gap: "
      + ", ".join(f"{g}: {v:.3f}" for g, v in sym["same_share"].items())
    )
    lines.append(f"- W3 long-lived exposure: {m['W3_exposure']}")
    lines.append(f"- W4 single-answer pairs: {m['W4_single_answer']}")
    lines.append(f"- W5 2018 answer persists: {m['W5_persistence']}")
    lines.append("")
  lines.append(f"Verdicts (criteria as pre-registered): {out['verdicts']}")
  return "\n".join(lines) + "\n"


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--seeds", default="0,1,2")
  ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
  args = ap.parse_args()
  by_seed = {}
  for s in (int(x) for x in args.seeds.split(",")):
    by_seed[str(s)] = measure(s)
    print(f"seed {s}: {json.dumps(by_seed[str(s)])}", flush=True)
  out = {"seeds": by_seed, "verdicts": verdicts(by_seed)}
  with open(os.path.join(args.out, "measure.json"), "w") as f:
    json.dump(out, f, indent=1)
  with open(os.path.join(args.out, "measure.md"), "w") as f:
    f.write(markdown(out))
  print(out["verdicts"])


if __name__ == "__main__":
  main()
