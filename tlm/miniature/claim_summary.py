"""`summary.json`: every claim of `tlm.miniature.claims` judged on each seed, with its interval.

For each claim and each seed: the components' margins on the seed's per-query numbers, each
with its verdict and within-seed 95% interval; the claim's margin (the minimum of its
components'), its verdict (margin > 0) and the within-seed 95% interval of that margin (a
paired bootstrap over the seed's pools, each resampled by its unit: `tlm.miniature.stats`).
Over the seeds:

- "holds": true iff it holds on every seed; null if an input is missing on some seed (the
  "missing" list says what), or the margin is undefined (e.g. an empty group);
- "hold_rate": the share of seeds on which it holds (null when no seed has a verdict);
- "margin_mean": the mean of the per-seed margins;
- "margin_ci95": the 95% interval of that mean, a two-level bootstrap (seeds, then the
  clusters of each pool within each seed; `tlm.miniature.stats` says why). Null where no per-query
  numbers exist and there is one seed (C13 is computed from aggregate F1 numbers, so its
  within-seed interval is null and its interval over several seeds resamples the seeds only),
  and null where the components have different units (C12: a minimum of nats and nats/year
  has no meaningful interval; "margin_ci95_note" says so): the components' own intervals,
  in "components", are reported instead. Where no per-item numbers exist (C13) the interval
  resamples the seeds only, and with fewer than `stats.SEEDS_FOR_A_SEED_INTERVAL` seeds it is
  not reported as a 95% interval: "margin_ci95" is null, "margin_seed_range" holds the lowest
  and highest seed's margin, and "margin_ci95_note" says why;
- "margin_t95": the t-interval of the mean over the per-seed margins (`stats.t_interval`; k - 1
  degrees of freedom), beside the bootstrap's: with three seeds the bootstrap's coverage falls
  to about 0.8 when seeds differ much (`tlm.miniature.stats`), the t-interval's does not, at
  the price of a wide t quantile. Null with one seed and for mixed units;
- "bootstrap_unit": {pool: what one resampled unit of that pool is}, e.g. the (subject,
  relation) pair for TempLAMA (the outer level, over seeds, always resamples seeds);
- "components": each component over the seeds: its hold-rate, mean margin and interval, from
  the same replicates as the claim's (absent when the seeds have different components).

Output (ids and keys fixed; other tools read them):
  {"claims": [{"id", "statement", "source", "holds", "hold_rate", "margin_mean",
               "margin_ci95": [lo, hi], "margin_ci95_note", "margin_t95": [lo, hi],
               "margin_seed_range", "bootstrap_unit", "units", "compound", "components",
               "missing", "per_seed": [...]}],
   "mechanism": {"M1": {... as a claim ..., "f1": {model: [per seed]}},
                 "M2": {... as a claim ..., "right_year_rate", "chance_rate",
                        "answered_share": {model: [per seed]}, "shares": {model: [per seed]},
                        "reframing": {...}, "as_first_registered": {... as a claim ...}}},
   "bootstrap": {"outer", "resamples", "level", "interval", "t_interval", "coverage"},
   "seeds": [...]}
"""

import copy
from collections.abc import Mapping, Sequence

import numpy as np

from tlm.configs.years import TRAIN_YEARS
from tlm.miniature import claims, measurements, stats, year_tracking
from tlm.miniature.claim_parts import Claim, Component
from tlm.miniature.mechanism import PAPER_LINE

MIXED_UNITS = "not reported: the minimum is over parts of different units; see the components"
SEEDS_ONLY = (
  "not reported as a 95% interval: it resamples the seeds only (no per-item numbers), and the "
  "percentile interval of {k} seeds is at most their range, which covers the median of the "
  "seeds' distribution with probability {p:.2f}; margin_seed_range gives that range"
)
T_INTERVAL = (
  "mean of the per-seed margins +- t(k - 1, 0.975) * their standard deviation / sqrt(k): exact "
  "for normal seed margins, each of which carries its own within-seed noise"
)
COVERAGE = (
  "simulated, k = 3 seeds of 100 clusters x 10 items, between-seed sd tau in within-seed "
  "standard errors (research/intervals/coverage.json): two-level bootstrap {boot}; t-interval {t}"
)


def _finite(x) -> bool:
  return x is not None and bool(np.isfinite(x))


def _interval(reps) -> list[float] | None:
  lo, hi = stats.percentile_interval(reps)
  return None if not (np.isfinite(lo) and np.isfinite(hi)) else [lo, hi]


def pool_sizes(components: Sequence[Component]) -> dict[str, stats.Pool]:
  pools: dict[str, stats.Pool] = {}
  for c in components:
    for name, given in c.pools.items():
      pool = stats.as_pool(given)
      if not pools.setdefault(name, pool).same_as(pool):
        raise ValueError(
          f"pool {name!r} has {len(pools[name])} items ({pools[name].unit}) in one "
          f"component, {len(pool)} ({pool.unit}) in another"
        )
  return pools


def _statistic(components: Sequence[Component]):
  """A draw -> [the claim's margin (the minimum), each component's margin]."""

  def stat(draw):
    margins = np.array([c.margin(draw) for c in components], dtype=float)
    return np.concatenate([[np.min(margins)], margins])

  return stat


def seed_verdict(claim: Claim, meas: Mapping, *, resamples: int | None = None) -> dict:
  """One seed's verdict on one claim (see the module docstring)."""
  resamples = resamples or stats.RESAMPLES  # read at call time: tests may lower it
  components, missing = claim.components(meas)
  pools = pool_sizes(components)
  everything = stats.identity_indices(pools)
  margins = {c.name: c.margin(everything) for c in components}
  undefined = [
    f"{name}: undefined on this seed (an empty group)"
    for name, v in margins.items()
    if not _finite(v)
  ]
  missing = missing + undefined
  margin = min(margins.values()) if components and not undefined else None
  mixed = len({c.unit for c in components}) > 1
  ci, comp_ci = None, [None] * len(components)
  if margin is not None and any(len(p) for p in pools.values()):
    reps = stats.replicates([_statistic(components)], [pools], resamples=resamples)[:, 0]
    ci = None if mixed else _interval(reps[:, 0])
    comp_ci = [_interval(reps[:, 1 + j]) if c.pools else None for j, c in enumerate(components)]
  return {
    "seed": meas["seed"],
    "holds": None if missing or margin is None else bool(margin > 0),
    "margin": margin,
    "ci95": ci,
    "components": [
      {
        "name": c.name,
        "unit": c.unit,
        "margin": margins[c.name],
        "holds": bool(margins[c.name] > 0),
        "ci95": comp_ci[j],
      }
      for j, c in enumerate(components)
      if _finite(margins[c.name])
    ],
    "pools": {
      name: {"unit": p.unit, "items": len(p), "clusters": p.n_clusters} for name, p in pools.items()
    },
    "missing": missing,
    "_stat": (_statistic(components), pools, [c.name for c in components], mixed)
    if margin is not None
    else None,
  }


def summarize_claim(
  claim: Claim, seeds: Sequence[Mapping], *, resamples: int | None = None
) -> dict:
  """A claim over the seeds (`seeds`: each seed's `measurements.collect` output)."""
  resamples = resamples or stats.RESAMPLES
  per_seed = [seed_verdict(claim, m, resamples=resamples) for m in seeds]
  verdicts = [p["holds"] for p in per_seed]
  missing = sorted({reason for p in per_seed for reason in p["missing"]})
  complete = all(v is not None for v in verdicts)
  decided = [v for v in verdicts if v is not None]
  margin_mean = ci = reps = components = None
  mixed = any(p["_stat"][3] for p in per_seed if p["_stat"])
  if complete:
    margin_mean = float(np.mean([p["margin"] for p in per_seed]))
    stats_, pools, names, _ = zip(*(p["_stat"] for p in per_seed))
    same = all(n == names[0] for n in names)
    if len(seeds) > 1 or any(len(p) for p in pools[0].values()):
      # One set of replicates for the claim and its components; the components only where
      # every seed has the same ones (else each replicate keeps the claim's margin alone).
      keep = (lambda v: v) if same else (lambda v: v[:1])
      reps = stats.replicates(
        [lambda d, f=f: keep(f(d)) for f in stats_], list(pools), resamples=resamples
      ).mean(axis=1)
      ci = None if mixed else _interval(reps[:, 0])
    if same:
      components = _components_over_seeds(per_seed, names[0], reps)
  units = sorted({c["unit"] for p in per_seed for c in p["components"]})
  out = {
    "id": claim.id,
    "statement": claim.statement,
    "source": claim.source,
    "holds": all(verdicts) if complete else None,
    "hold_rate": float(np.mean(decided)) if decided else None,
    "margin_mean": margin_mean,
    "margin_ci95": ci,
    "margin_ci95_note": MIXED_UNITS if mixed else None,
    "bootstrap_unit": {name: p["unit"] for s in per_seed for name, p in s["pools"].items()},
    "units": units,
    "compound": "margin = min of the components' margins" if _compound(per_seed) else None,
    "components": components,
    "missing": missing,
    "per_seed": [{k: v for k, v in p.items() if k != "_stat"} for p in per_seed],
  }
  return seed_intervals(out)


def seed_intervals(claim: dict) -> dict:
  """Adds the intervals that read the per-seed margins only, to a claim of summary.json (and to
  its components): "margin_t95" and, for an interval over the seeds alone from too few seeds,
  "margin_seed_range" in place of "margin_ci95" (module docstring). Returns the claim."""
  per_seed = claim["per_seed"]
  k = len(per_seed)
  few = not claim["bootstrap_unit"] and k < stats.SEEDS_FOR_A_SEED_INTERVAL

  def fill(target: dict, margins: list) -> None:
    complete = len(margins) == k and all(_finite(m) for m in margins)
    target["margin_t95"] = stats.t_interval(margins) if complete else None
    target["margin_seed_range"] = None
    if few and complete and k > 1:
      target["margin_ci95"] = None
      target["margin_seed_range"] = [float(min(margins)), float(max(margins))]

  if claim["margin_mean"] is not None:
    fill(claim, [p["margin"] for p in per_seed])
    if claim["margin_ci95_note"] == MIXED_UNITS:
      claim["margin_t95"] = claim["margin_seed_range"] = None
  else:
    claim["margin_t95"] = claim["margin_seed_range"] = None
  if claim["margin_seed_range"] is not None:
    claim["margin_ci95_note"] = SEEDS_ONLY.format(k=k, p=1 - 2.0 ** (1 - k))
  for comp in claim["components"] or []:
    got = [next((c for c in p["components"] if c["name"] == comp["name"]), None) for p in per_seed]
    fill(comp, [c["margin"] for c in got if c is not None])
  return claim


def _components_over_seeds(per_seed, names, reps) -> list[dict]:
  out = []
  for j, name in enumerate(names):
    got = [next((c for c in p["components"] if c["name"] == name), None) for p in per_seed]
    if any(c is None for c in got):
      continue  # undefined on some seed: its reason is in "missing"
    out.append(
      {
        "name": name,
        "unit": got[0]["unit"],
        "holds": all(c["holds"] for c in got),
        "hold_rate": float(np.mean([c["holds"] for c in got])),
        "margin_mean": float(np.mean([c["margin"] for c in got])),
        "margin_ci95": None
        if reps is None or reps.shape[1] <= 1 + j
        else _interval(reps[:, 1 + j]),
      }
    )
  return out


def _compound(per_seed) -> bool:
  return any(len(p["components"]) > 1 or p["missing"] for p in per_seed)


def _f1_not_most_frequent(meas: Mapping, model: str) -> float | None:
  try:
    cols = measurements.templama(meas, model, TRAIN_YEARS)
  except measurements.MissingInput:
    return None
  keep = ~cols["most_frequent_is_correct"].astype(bool)
  return float(100.0 * np.mean(cols["f1"][keep])) if keep.any() else None


def _shares(meas: Mapping, models: Sequence[str]) -> dict[str, float | None]:
  present = [m for m in models if m in meas["models"]]
  if not present:
    return {m: None for m in models}
  changed = year_tracking.changing_pair_shares(meas, present)
  return {
    m: float(np.mean(changed[m])) if m in changed and len(changed[m]) else None for m in models
  }


def _right_year(meas: Mapping, models: Sequence[str]) -> dict[str, dict[str, float | None]]:
  """M2's numbers per model: {"rate", "chance", "answered"} (`tlm.miniature.year_tracking`)."""
  present = [m for m in models if m in meas["models"]]
  none = {"rate": None, "chance": None, "answered": None}
  try:
    counts = year_tracking.right_year_counts(meas, present) if present else {}
  except measurements.MissingInput:
    counts = {}
  queries = sum(len(ix) for ix in year_tracking.changing_pairs(meas, present[0])) if counts else 0
  out = {}
  for m in models:
    c = counts.get(m)
    if c is None or not np.sum(c["hit"]):
      out[m] = none
      continue
    out[m] = {
      "rate": year_tracking.rate(c),
      "chance": year_tracking.rate(c, key="chance"),
      "answered": float(np.sum(c["hit"])) / queries,
    }
  return out


def summarize(seeds: Sequence[Mapping], *, resamples: int | None = None) -> dict:
  """`summary.json` from each seed's per-query numbers (`measurements.collect`)."""
  models = ("temporal", "uniform", "yearly")
  mechanism = {c.id: summarize_claim(c, seeds, resamples=resamples) for c in claims.MECHANISM}
  mechanism["M1"]["f1"] = {m: [_f1_not_most_frequent(s, m) for s in seeds] for m in models}
  right = [_right_year(s, models) for s in seeds]
  for key, field in (
    ("right_year_rate", "rate"),
    ("chance_rate", "chance"),
    ("answered_share", "answered"),
  ):
    mechanism["M2"][key] = {m: [r[m][field] for r in right] for m in models}
  shares = [_shares(s, models) for s in seeds]  # the earliest M2's share, as a description
  mechanism["M2"]["shares"] = {m: [sh[m] for sh in shares] for m in models}
  mechanism["M2"]["reframing"] = REFRAMING
  mechanism["M2"]["as_first_registered"] = summarize_claim(
    claims.M2_FIRST, seeds, resamples=resamples
  )
  return {
    "claims": [summarize_claim(c, seeds, resamples=resamples) for c in claims.CLAIMS],
    "mechanism": mechanism,
    "bootstrap": BOOTSTRAP | {"resamples": resamples or stats.RESAMPLES},
    "seeds": [s["seed"] for s in seeds],
  }


BOOTSTRAP = {
  "outer": "seeds drawn with replacement (one seed: none)",
  "inner": "each pool's units drawn with replacement (see each claim's bootstrap_unit)",
  "resamples": stats.RESAMPLES,
  "level": stats.LEVEL,
  "interval": "percentile",
  "t_interval": T_INTERVAL,
  "coverage": COVERAGE.format(
    boot=", ".join(f"{c:.3f} at tau {tau:g}" for tau, (c, _) in stats.COVERAGE_K3.items()),
    t=", ".join(f"{c:.3f}" for _, c in stats.COVERAGE_K3.values()),
  )
  if stats.COVERAGE_K3
  else None,
}
REFRAMING = {
  "post_hoc": True,
  "when": "after seeds 0-2 of the default had been run and seen",
  "test": "Temporal's right-year rate minus its own chance rate > 0 (the component "
  "'temporal - chance (right-year rate)' of the first definition)",
  "dropped_from_the_test": "Temporal's right-year rate above the Yearly experts' (each expert "
  "reads one year's news and cannot mix years); reported as a description in "
  "as_first_registered's components",
  "paper": f"{PAPER_LINE}, leading to the overall higher F1 in Table 2. "
  "(section 3.1, on Figure 2: the Yearly experts and Uniform are the two extremes of averaging)",
}


def upgrade(summary: dict) -> dict:
  """The fields of this version added to a summary.json written before them, from its per-seed
  numbers alone: each claim's (and component's) "margin_t95" and "margin_seed_range"
  (`seed_intervals`), M2 as the paper states it with the old M2 kept in "as_first_registered",
  and the bootstrap's "t_interval" and "coverage". M2's test is the old M2's first component:
  the same replicates (its one pool, the same draws), so its margins and intervals are that
  component's. A summary that already has the fields is returned unchanged. Returns it."""
  m2 = summary["mechanism"]["M2"]
  if "as_first_registered" in m2:
    return summary
  first = {k: v for k, v in m2.items() if k in _CLAIM_KEYS}
  first["statement"] = claims.M2_FIRST.statement
  name = "temporal - chance (right-year rate)"
  test = copy.deepcopy(first)
  test["statement"] = next(c for c in claims.MECHANISM if c.id == "M2").statement
  test["compound"] = None
  test["components"] = [c for c in first["components"] or [] if c["name"] == name] or None
  if test["components"]:
    comp = test["components"][0]
    test |= {k: comp[k] for k in ("holds", "hold_rate", "margin_mean", "margin_ci95")}
  for p in test["per_seed"]:
    p["components"] = [c for c in p["components"] if c["name"] == name]
    if p["components"]:
      c = p["components"][0]
      p |= {"margin": c["margin"], "holds": c["holds"], "ci95": c["ci95"]}
  extras = {k: v for k, v in m2.items() if k not in _CLAIM_KEYS}
  out = seed_intervals(test) | extras
  out["reframing"] = REFRAMING
  out["as_first_registered"] = seed_intervals(first)
  summary["mechanism"]["M2"] = out
  summary["mechanism"]["M1"] = seed_intervals(summary["mechanism"]["M1"])
  summary["claims"] = [seed_intervals(c) for c in summary["claims"]]
  summary["bootstrap"] |= {k: BOOTSTRAP[k] for k in ("t_interval", "coverage")}
  return summary


_CLAIM_KEYS = (
  "id", "statement", "source", "holds", "hold_rate", "margin_mean", "margin_ci95",
  "margin_ci95_note", "bootstrap_unit", "units", "compound", "components", "missing", "per_seed",
)  # fmt: skip


def _short(unit: str) -> str:
  """A unit's name without its explanation: "news example (no article id ...)" -> "news example"."""
  return unit.split(":")[0].split(" (no ")[0].split(" (one ")[0].strip()


def claims_table(summary: Mapping) -> str:
  """Markdown: one row per claim and mechanism item, with the hold-rate and the interval."""
  from tlm.eval.tables import markdown_table

  def fmt(x):
    return "-" if x is None else f"{x:+.2f}"

  rows = []

  def share(x):
    return "-" if x is None else f"{x:.0%}"

  for c in list(summary["claims"]) + list(summary["mechanism"].values()):
    verdict = {True: "yes", False: "no", None: "n/a"}[c["holds"]]
    rate = share(c["hold_rate"])
    ci, seed_range, t95 = c["margin_ci95"], c.get("margin_seed_range"), c.get("margin_t95")
    interval = "-" if not ci else f"[{fmt(ci[0])}, {fmt(ci[1])}]"
    if c.get("margin_ci95_note") == MIXED_UNITS:
      interval = "- (mixed units)"
    elif seed_range:
      interval = f"seeds' range [{fmt(seed_range[0])}, {fmt(seed_range[1])}], not 95%"
    t_cell = "-" if not t95 else f"[{fmt(t95[0])}, {fmt(t95[1])}]"
    note = "; ".join(c["missing"]) if c["missing"] else ", ".join(c["units"])
    resampled = sorted({_short(u) for u in (c.get("bootstrap_unit") or {}).values()})
    note += f"; resampled by {', '.join(resampled)}" if resampled else ""
    if c.get("reframing"):
      first = c["as_first_registered"]
      note += (
        f'; post-hoc reframing (the paper: "{PAPER_LINE}"); as first registered'
        f" (also > the Yearly experts): holds on {share(first['hold_rate'])} of seeds, margin"
        f" {fmt(first['margin_mean'])}"
      )
    cells = [c["id"], c["statement"], verdict, rate, fmt(c["margin_mean"]), interval, t_cell, note]
    rows.append([x.replace("|", "\\|") for x in cells])  # C9's |gap| is not a column
  headers = [
    "Claim",
    "Statement",
    "Holds",
    "Hold-rate",
    "Margin",
    "95% interval (two-level bootstrap)",
    "95% t-interval over seeds",
    "Units / missing",
  ]
  return markdown_table(headers, rows)
