"""`summary.json`: every claim of `tlm.eval.claims` judged on each seed, with its interval.

For each claim and each seed: the components' margins on the seed's per-query numbers, the
claim's margin (the minimum of its components'), the verdict (margin > 0) and the within-seed
95% interval of the margin (paired bootstrap over the seed's queries, `tlm.eval.stats`).
Over the seeds:

- "holds": true iff it holds on every seed; null if an input is missing on some seed (the
  "missing" list says what), or the margin is undefined (e.g. an empty group);
- "hold_rate": the share of seeds on which it holds (null when no seed has a verdict);
- "margin_mean": the mean of the per-seed margins;
- "margin_ci95": the 95% interval of that mean, a two-level bootstrap (seeds, then queries
  within each seed; `tlm.eval.stats` says why). Null where no per-query numbers exist and
  there is one seed (C13 is computed from aggregate F1 numbers, so its within-seed interval is
  null and its interval over several seeds resamples the seeds only).

Output (ids and keys fixed; other tools read them):
  {"claims": [{"id", "statement", "source", "holds", "hold_rate", "margin_mean",
               "margin_ci95": [lo, hi], "units", "compound", "missing", "per_seed": [...]}],
   "mechanism": {"M1": {... as a claim ..., "f1": {model: [per seed]}},
                 "M2": {... as a claim ..., "shares": {model: [per seed]}}},
   "seeds": [...]}
"""

from collections.abc import Mapping, Sequence

import numpy as np

from tlm.eval import claims as C
from tlm.eval import measurements as M
from tlm.eval import stats
from tlm.eval.claim_parts import Claim, Component


def _finite(x) -> bool:
  return x is not None and bool(np.isfinite(x))


def _pool_sizes(components: Sequence[Component]) -> dict[str, int]:
  sizes: dict[str, int] = {}
  for c in components:
    for pool, n in c.pools.items():
      if sizes.setdefault(pool, n) != n:
        raise ValueError(f"pool {pool!r} has {sizes[pool]} items in one component, {n} in another")
  return sizes


def _statistic(components: Sequence[Component]):
  return lambda draw: min(c.margin(draw) for c in components)


def seed_verdict(claim: Claim, meas: Mapping, *, resamples: int | None = None) -> dict:
  """One seed's verdict on one claim (see the module docstring)."""
  resamples = resamples or stats.RESAMPLES  # read at call time: tests may lower it
  components, missing = claim.components(meas)
  sizes = _pool_sizes(components)
  everything = stats.identity_indices(sizes)
  margins = {c.name: c.margin(everything) for c in components}
  undefined = [f"{name}: undefined on this seed (an empty group)" for name, v in margins.items()
               if not _finite(v)]  # fmt: skip
  missing = missing + undefined
  margin = min(margins.values()) if components and not undefined else None
  ci = None
  if margin is not None and any(sizes.values()):
    ci = list(stats.hierarchical_bootstrap([_statistic(components)], [sizes], resamples=resamples))
  return {
    "seed": meas["seed"],
    "holds": None if missing or margin is None else bool(margin > 0),
    "margin": margin,
    "ci95": ci,
    "components": [
      {"name": c.name, "unit": c.unit, "margin": v, "holds": bool(v > 0)}
      for c, v in ((c, margins[c.name]) for c in components)
      if _finite(v)
    ],
    "missing": missing,
    "_stat": (_statistic(components), sizes) if margin is not None else None,
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
  margin_mean = ci = None
  if complete:
    margin_mean = float(np.mean([p["margin"] for p in per_seed]))
    stats_, sizes = zip(*(p["_stat"] for p in per_seed))
    if len(seeds) > 1 or any(sizes[0].values()):
      ci = list(stats.hierarchical_bootstrap(list(stats_), list(sizes), resamples=resamples))
  units = sorted({c["unit"] for p in per_seed for c in p["components"]})
  return {
    "id": claim.id,
    "statement": claim.statement,
    "source": claim.source,
    "holds": all(verdicts) if complete else None,
    "hold_rate": float(np.mean(decided)) if decided else None,
    "margin_mean": margin_mean,
    "margin_ci95": ci,
    "units": units,
    "compound": "margin = min of the components' margins" if _compound(per_seed) else None,
    "missing": missing,
    "per_seed": [{k: v for k, v in p.items() if k != "_stat"} for p in per_seed],
  }


def _compound(per_seed) -> bool:
  return any(len(p["components"]) > 1 or p["missing"] for p in per_seed)


def _f1_not_most_frequent(meas: Mapping, model: str) -> float | None:
  try:
    cols = M.templama(meas, model, C.SEEN)
  except M.MissingInput:
    return None
  keep = ~cols["most_frequent_is_correct"].astype(bool)
  return float(100.0 * np.mean(cols["f1"][keep])) if keep.any() else None


def _shares(meas: Mapping, models: Sequence[str]) -> dict[str, float | None]:
  present = [m for m in models if m in meas["models"]]
  if not present:
    return {m: None for m in models}
  changed = C.changing_pair_shares(meas, present)
  return {m: float(np.mean(changed[m])) if m in changed and len(changed[m]) else None
          for m in models}  # fmt: skip


def summarize(seeds: Sequence[Mapping], *, resamples: int | None = None) -> dict:
  """`summary.json` from each seed's per-query numbers (`measurements.collect`)."""
  models = ("temporal", "uniform", "yearly")
  mechanism = {c.id: summarize_claim(c, seeds, resamples=resamples) for c in C.MECHANISM}
  mechanism["M1"]["f1"] = {m: [_f1_not_most_frequent(s, m) for s in seeds] for m in models}
  shares = [_shares(s, models) for s in seeds]
  mechanism["M2"]["shares"] = {m: [sh[m] for sh in shares] for m in models}
  return {
    "claims": [summarize_claim(c, seeds, resamples=resamples) for c in C.CLAIMS],
    "mechanism": mechanism,
    "seeds": [s["seed"] for s in seeds],
  }


def claims_table(summary: Mapping) -> str:
  """Markdown: one row per claim and mechanism item, with the hold-rate and the interval."""
  from tlm.eval.tables import markdown_table

  def fmt(x):
    return "-" if x is None else f"{x:+.2f}"

  rows = []
  for c in list(summary["claims"]) + list(summary["mechanism"].values()):
    verdict = {True: "yes", False: "no", None: "n/a"}[c["holds"]]
    rate = "-" if c["hold_rate"] is None else f"{c['hold_rate']:.0%}"
    ci = c["margin_ci95"]
    interval = "-" if not ci else f"[{fmt(ci[0])}, {fmt(ci[1])}]"
    note = "; ".join(c["missing"]) if c["missing"] else ", ".join(c["units"])
    cells = [c["id"], c["statement"], verdict, rate, fmt(c["margin_mean"]), interval, note]
    rows.append([x.replace("|", "\\|") for x in cells])  # C9's |gap| is not a column
  headers = ["Claim", "Statement", "Holds", "Hold-rate", "Margin", "95% interval",
             "Units / missing"]  # fmt: skip
  return markdown_table(headers, rows)
