"""C12, T5-CBQA-ft's entropy level: the future probes in their wording and in the encyclopedia's.

  nice -n 10 python -m research.c12.wording --root=runs/c12 --seeds=3,4 --out=research/c12

Settings, checks, prediction and criterion: research/c12/PREREGISTRATION.md (committed before
this code and any model). Per seed S, by the reproduction's code and configs: tiny_t5, then
tiny_cbqa and tiny_cbqa_ft (ROOT/seed=S/{t5,cbqa,cbqa_ft}); T5-CBQA-ft and T5-CBQA probed as
the reproduction probes them (`future_probe=True`, the world's 60 queries, 2018-2029), once in
the probes' wording and once with each query in the sentence the encyclopedia states that
(relation, subject) in. C12's part "cbqa_ft low" is recomputed by the claim's own code on the
seed's committed per_query.json with only T5-CBQA-ft's entropies replaced.

Writes ROOT/seed=S/wording.json per seed (a rerun reads it back) and OUT/result.json,
OUT/result.md.
"""

import argparse
import copy
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from research.committed import read_json
from tlm.configs.years import PROBE_YEARS, REFERENCE_YEAR
from tlm.errors import DataError
from tlm.files import write_json

Log = Callable[[str], None]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMITTED = os.path.join(REPO, "docs", "results", "fresh")
MODELS = ("cbqa_ft", "cbqa")
WORDINGS = ("probe", "encyclopedia")
LOW = "cbqa_ft low: min(uniform, temporal) - cbqa_ft (mean 2019-29)"
FLAT = "cbqa_ft flat: min(slope uniform, temporal) - |slope cbqa_ft|"
FALL = 1.0  # P1: nats
TOLERANCE = 1e-9
SETS = ("frequent", "rare", "never")


def plan(seed: int, root: str) -> tuple[str, dict]:
  """(ROOT/seed=S, {"t5" | "cbqa" | "cbqa_ft": (config, dir)}): the reproduction's starts."""
  from tlm.miniature import reproduce, starts

  work = os.path.join(os.path.abspath(root), f"seed={seed}")
  cfgs = starts.starting_configs(reproduce.seed_overrides(seed), work)
  dirs = starts.start_dirs(work)
  return work, {name: (cfgs[name], dirs[name]) for name in ("t5", "cbqa", "cbqa_ft")}


def train(seeds: Sequence[int], root: str, workers: int, log: Log) -> None:
  """Each seed's chain tiny_t5 -> tiny_cbqa -> tiny_cbqa_ft, one job per seed."""
  from tlm.miniature import parallel, reproduce

  jobs = []
  for s in seeds:
    _, models = plan(s, root)
    chain = tuple(models[n] for n in ("t5", "cbqa", "cbqa_ft"))
    cache = reproduce.compilation_cache_dir(models["t5"][0])
    jobs.append(parallel.Job(f"seed {s} t5 + cbqa + cbqa_ft", "train", chain, cache))
  parallel.run_jobs(jobs, workers, log)


def encyclopedia_wording(future, queries_path: str, entities_path: str):
  """`future` (a FutureRelations) with each query in the encyclopedia's sentence for its
  (relation, subject), "_X_" for the object; ids, sets and candidates unchanged."""
  from tlm.data.future_relations import FutureQuery, FutureRelations
  from tlm.data.wikidata_facts import read_entities
  from tlm.line_files import read_jsonl
  from tlm.synthetic.pretrain import encyclopedia_sentence

  names = {q: name for q, (name, _) in read_entities(entities_path).items()}
  raw = {r["id"]: r for r in read_jsonl(queries_path, required=("id", "relation", "subject"))}
  out = []
  for q in future.queries:
    r = raw.get(q.id)
    if r is None or r["subject"] not in names:
      raise DataError(f"query {q.id}: no relation and subject, or an unknown subject", queries_path)
    text = encyclopedia_sentence(r["relation"], names[r["subject"]], "_X_")
    out.append(FutureQuery(q.id, q.set, text, q.candidates))
  return FutureRelations(out, future.candidates)


def probe(seed: int, root: str, log: Log) -> dict:
  """{model: {wording: future_entropy's result}} of one seed, with the query texts used."""
  from tlm.data.future_relations import load_future_relations
  from tlm.eval import future as future_probes
  from tlm.eval.experiments import eval_data
  from tlm.infer.trained_models import load_model
  from tlm.input.locations import synthetic_data

  work, models = plan(seed, root)
  config = models["cbqa_ft"][0]
  data = eval_data(config)
  world_dir = synthetic_data(config.data).world_dir
  fr = load_future_relations(data.future_relations_dir)
  worded = {
    "probe": fr,
    "encyclopedia": encyclopedia_wording(
      fr,
      os.path.join(data.future_relations_dir, "queries.jsonl"),
      os.path.join(world_dir, "entities.tsv"),
    ),
  }
  out: dict = {"texts": {w: {q.id: q.query for q in f.queries} for w, f in worded.items()}}
  for m in MODELS:
    cfg, path = models[m]
    model = load_model(cfg, path, future_probe=True)
    for w, f in worded.items():
      log(f"seed {seed}: {cfg.name}, {w} wording")
      out.setdefault(m, {})[w] = future_probes.future_entropy(model, f)
  return out


# ---- the measurement -----------------------------------------------------------------------


def committed(seed: int, root: str = COMMITTED) -> tuple[dict, dict]:
  """The seed's committed per_query.json and C12's components {name: margin}."""
  base = os.path.join(root, f"seed={seed}")
  meas = read_json(os.path.join(base, "per_query.json"))
  with open(os.path.join(base, "summary.json"), encoding="utf-8") as f:
    c12 = next(c for c in json.load(f)["claims"] if c["id"] == "C12")
  return meas, {c["name"]: c["margin_mean"] for c in c12["components"]}


def entropy_columns(result: Mapping, ids: Sequence[str]) -> dict:
  """future_entropy's per-query numbers in per_query.json's layout ({year: [entropy, ...]}) in
  the order of `ids`."""
  pq = result["per_query"]
  years = sorted({int(y) for q in pq.values() for y in q})
  return {str(y): [float(pq[i][y] if y in pq[i] else pq[i][str(y)]) for i in ids] for y in years}


def with_cbqa_ft(meas: Mapping, columns: Mapping | None) -> dict:
  """A copy of `meas` whose T5-CBQA-ft entropies are `columns` (None: as they are)."""
  out = copy.deepcopy(dict(meas))
  if columns is not None:
    out["entropy"]["cbqa_ft"]["entropy"] = {y: list(v) for y, v in columns.items()}
  return out


def margins(meas: Mapping) -> dict:
  """C12's components by the claim's code: {name: (margin, 95% interval or None)}."""
  from tlm.miniature import stats
  from tlm.miniature.figure_claims import c12_entropy_ordered_and_rising

  comps, _ = c12_entropy_ordered_and_rising(meas)
  out = {}
  for c in comps:
    if c.name not in (LOW, FLAT):
      continue
    value = float(c.margin(stats.identity_indices(c.pools)))
    out[c.name] = (value, list(stats.hierarchical_bootstrap([c.margin], [c.pools])))
  return out


def levels(result: Mapping, ids: Sequence[str], sets: Sequence[str]) -> dict:
  """Mean entropy per set (and "all") in 2018 and over 2019-29."""
  pq = result["per_query"]

  def at(i, y):
    q = pq[i]
    return float(q[y] if y in q else q[str(y)])

  out = {}
  for which in (*SETS, "all"):
    keep = [i for i, s in zip(ids, sets) if which == "all" or s == which]
    out[which] = {
      "2018": float(np.mean([at(i, REFERENCE_YEAR) for i in keep])),
      "2019-29": float(np.mean([np.mean([at(i, y) for y in PROBE_YEARS]) for i in keep])),
    }
  return out


def arm(meas: Mapping, result: Mapping) -> dict:
  """One arm: a T5-CBQA-ft's `future_entropy` result put in place of the committed one in
  `meas`; its levels (`levels`) and C12's parts "low" and "flat" by the claim's code."""
  e = meas["entropy"]["cbqa_ft"]
  ids, sets = list(e["id"]), list(e["set"])
  got = margins(with_cbqa_ft(meas, entropy_columns(result, ids)))
  return {
    "levels": levels(result, ids, sets),
    "low": {"margin": got[LOW][0], "ci95": got[LOW][1]},
    "flat": {"margin": got[FLAT][0], "ci95": got[FLAT][1]},
  }


def same_entropies(a: Mapping, b: Mapping, ids: Sequence[str]) -> bool:
  """Two `future_entropy` results' per-query numbers equal within TOLERANCE, query by query."""
  x, y = entropy_columns(a, ids), entropy_columns(b, ids)
  return set(x) == set(y) and all(
    len(x[k]) == len(y[k]) and all(abs(u - v) <= TOLERANCE for u, v in zip(x[k], y[k])) for k in x
  )


def arm_cells(a: Mapping) -> list[str]:
  """An arm's markdown cells: the 2019-29 level of each set and of all, the part "low" with its
  interval, the part "flat"."""
  lv, (lo, hi) = a["levels"], a["low"]["ci95"]
  return [f"{lv[k]['2019-29']:.2f}" for k in (*SETS, "all")] + [
    f"{a['low']['margin']:+.3f} [{lo:+.2f}, {hi:+.2f}]",
    f"{a['flat']['margin']:+.4f}",
  ]


def measure_seed(seed: int, probed: Mapping, meas: Mapping, parts: Mapping) -> dict:
  e = meas["entropy"]["cbqa_ft"]
  ids = list(e["id"])
  mine = entropy_columns(probed["cbqa_ft"]["probe"], ids)
  v1 = set(mine) == set(e["entropy"]) and all(
    len(mine[y]) == len(e["entropy"][y])
    and all(abs(a - b) <= TOLERANCE for a, b in zip(mine[y], e["entropy"][y]))
    for y in mine
  )
  base = margins(with_cbqa_ft(meas, None))
  v2 = abs(base[LOW][0] - parts[LOW]) <= TOLERANCE
  arms = {f"{m}/{w}": arm(meas, probed[m][w]) for m in MODELS for w in WORDINGS}
  fall = (
    arms["cbqa_ft/probe"]["levels"]["all"]["2019-29"]
    - arms["cbqa_ft/encyclopedia"]["levels"]["all"]["2019-29"]
  )
  return {
    "seed": seed,
    "V1": v1,
    "V2": v2,
    "committed_low": parts[LOW],
    "P1_fall": fall,
    "P1": fall >= FALL,
    "P2_margin": arms["cbqa_ft/encyclopedia"]["low"]["margin"],
    "P2": arms["cbqa_ft/encyclopedia"]["low"]["margin"] > 0,
    "arms": arms,
    "example_texts": {w: dict(list(probed["texts"][w].items())[:3]) for w in WORDINGS},
  }


def judge_p1_p2(seeds: Sequence[Mapping], checks: bool, both: str, p1_only: str) -> dict:
  """A C12 registration's outcome from its seeds' P1 and P2 (each needed on every seed)."""
  p1, p2 = all(s["P1"] for s in seeds), all(s["P2"] for s in seeds)
  if not checks:
    outcome = "void: a check failed"
  elif p1 and p2:
    outcome = both
  elif p1:
    outcome = p1_only
  else:
    outcome = "not explained"
  return {"checks_ok": checks, "P1": p1, "P2": p2, "outcome": outcome}


def judge(seeds: Sequence[Mapping]) -> dict:
  return judge_p1_p2(
    seeds,
    all(s["V1"] and s["V2"] for s in seeds),
    both="fails for a measured reason: the probes' wording, which the miniature's T5-CBQA-ft "
    "never trained on; asked in its own wording it is the lowest of the three",
    p1_only="the wording accounts for part of the level; the part stays not explained",
  )


def markdown(result: Mapping) -> str:
  j = result["judgement"]
  lines = [
    "# C12, T5-CBQA-ft's entropy level in two wordings: measured",
    "",
    f"Pre-registration: `{result['preregistration']}`. Code at `{result['commit']}`.",
    "",
    "| seed | V1 | V2 | committed margin | P1: fall (nats) | P2: margin, encyclopedia wording |",
    "|---|---|---|---|---|---|",
  ]
  for s in result["seeds"]:
    lines.append(
      f"| {s['seed']} | {s['V1']} | {s['V2']} | {s['committed_low']:+.3f}"
      f" | {s['P1_fall']:+.3f} ({s['P1']}) | {s['P2_margin']:+.3f} ({s['P2']}) |"
    )
  lines += ["", f"P1: {j['P1']}. P2: {j['P2']}. **Outcome: {j['outcome']}.**", ""]
  lines += ["Levels (mean entropy, nats: 2018 / 2019-29) and the parts per arm:", ""]
  lines += ["| seed | arm | frequent | rare | never | all | low margin [95%] | flat margin |"]
  lines += ["|---|---|---|---|---|---|---|---|"]
  for s in result["seeds"]:
    for arm, a in s["arms"].items():
      lv = a["levels"]
      cells = [f"{lv[k]['2018']:.2f} / {lv[k]['2019-29']:.2f}" for k in (*SETS, "all")]
      lo, hi = a["low"]["ci95"]
      lines.append(
        f"| {s['seed']} | {arm} | " + " | ".join(cells) + f" | {a['low']['margin']:+.3f}"
        f" [{lo:+.2f}, {hi:+.2f}] | {a['flat']['margin']:+.4f} |"
      )
  return "\n".join(lines) + "\n"


def run(seeds: Sequence[int], root: str, out: str, *, workers: int = 2, log: Log = print) -> dict:
  from research.lever_verdict import head_commit, write_result

  commit = head_commit()  # at the start: the code this run imports
  start = time.time()
  train(seeds, root, workers, log)
  measured = []
  for s in seeds:
    work, _ = plan(s, root)
    path = os.path.join(work, "wording.json")
    if not os.path.isfile(path):
      write_json(path, probe(s, root, log))
    with open(path, encoding="utf-8") as f:
      probed = json.load(f)
    meas, parts = committed(s)
    measured.append(measure_seed(s, probed, meas, parts))
  result = {
    "preregistration": "research/c12/PREREGISTRATION.md",
    "commit": commit,
    "seeds": measured,
    "judgement": judge(measured),
    "wall_minutes": (time.time() - start) / 60,
    "load_average": list(os.getloadavg()),
  }
  write_result(out, result, markdown(result), log)
  return result


def main() -> None:
  from tlm import host_memory

  host_memory.restart_with_hugepages()  # before jax starts: see tlm/host_memory.py
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--root", default=os.path.join("runs", "c12"))
  ap.add_argument("--seeds", default="3,4")
  ap.add_argument("--out", default=os.path.join(REPO, "research", "c12"))
  ap.add_argument("--workers", type=int, default=2)
  args = ap.parse_args()
  run([int(s) for s in args.seeds.split(",")], args.root, args.out, workers=args.workers)


if __name__ == "__main__":
  main()
