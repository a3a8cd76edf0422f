"""The claims on the paper's figures (C9-C13: Figures 2-5), as components with margins.

The registry (ids, statements, sources) is `tlm.miniature.claims`, with the rules all claims follow
(margins, thresholds fixed before any result was seen); the parts they share are
`tlm.miniature.claim_parts`.
"""

from collections.abc import Mapping

import numpy as np

from tlm.configs.years import FUTURE_SLICE, PROBE_YEARS, REFERENCE_YEAR, TRAIN_SLICE, TRAIN_YEARS
from tlm.miniature import measurements
from tlm.miniature.claim_parts import (
  FUTURE_QUERY,
  PAIR,
  PAIR_2018,
  Component,
  collect,
  mean,
  per_draw,
  slope,
  templama_f1,
)
from tlm.miniature.stats import Pool, take

# ---- Figure 2 ---------------------------------------------------------------------------------

MAX_GAP = 8  # C9: gaps compared on both sides
LONG_LIVED_YEARS = 5  # C10: the paper's split


def gap_curve(years: np.ndarray, f1: Mapping[int, np.ndarray]) -> dict[int, float]:
  """F1 by gap (test year - expert year): the mean over experts of each (expert, year) mean."""
  uniq, inv = np.unique(np.asarray(years), return_inverse=True)
  counts = np.bincount(inv, minlength=len(uniq))
  cells: dict[int, list[float]] = {}
  for expert, scores in f1.items():
    sums = np.bincount(inv, weights=np.asarray(scores, dtype=float), minlength=len(uniq))
    for y, total, n in zip(uniq, sums, counts):
      if n:
        cells.setdefault(int(y) - expert, []).append(total / n)
  return {g: mean(v) for g, v in sorted(cells.items())}


def c9_expert_f1_falls_with_year_gap(meas):
  def build():
    years, f1 = measurements.experts(meas)
    pool = "TempLAMA 2010-20"
    n = Pool.of(measurements.expert_pairs(meas), PAIR)

    @per_draw
    def slopes(d):
      idx = np.arange(len(years)) if d[pool] is None else d[pool]
      curve = gap_curve(years[idx], {e: 100.0 * v[idx] for e, v in f1.items()})
      past = [(abs(g), v) for g, v in curve.items() if -MAX_GAP <= g <= 0]
      future = [(g, v) for g, v in curve.items() if 0 <= g <= MAX_GAP]
      return slope(*zip(*past)), slope(*zip(*future))

    return [
      Component(
        "falls into the past: -slope", "F1 points/year", {pool: n}, lambda d: -slopes(d)[0]
      ),
      Component(
        "falls into the future: -slope", "F1 points/year", {pool: n}, lambda d: -slopes(d)[1]
      ),
      Component(
        "faster into the future: past slope - future slope",
        "F1 points/year",
        {pool: n},
        lambda d: slopes(d)[0] - slopes(d)[1],
      ),
    ]

  return collect(build)


def c10_uniform_long_lived_yearly_short_lived(meas):
  def build():
    pool = f"TempLAMA {TRAIN_SLICE}"
    cols = measurements.templama(meas, "uniform", TRAIN_YEARS)
    f1, n = templama_f1(meas, ("uniform", "yearly"), TRAIN_YEARS, pool)
    long = cols["duration"] >= LONG_LIVED_YEARS
    diff = f1["uniform"] - f1["yearly"]

    def part(d, want_long: bool, sign: float):
      keep = take(long, d[pool]) == want_long
      return sign * mean(take(diff, d[pool])[keep])

    return [
      Component(
        "long-lived (5+ years): uniform - yearly",
        "F1 points",
        {pool: n},
        lambda d: part(d, True, 1.0),
      ),
      Component(
        "short-lived (under 5): yearly - uniform",
        "F1 points",
        {pool: n},
        lambda d: part(d, False, -1.0),
      ),
    ]

  return collect(build)


# ---- Figures 3 and 4 --------------------------------------------------------------------------


def c11_loglik_falls_faster_for_multiple_answers(meas):
  def build():
    groups = measurements.loglik_change(meas, "temporal")
    sizes = {g: len(next(iter(v.values()), [])) for g, v in groups.items()}
    pools = {f"Figure 3 {g}": Pool.items(n, PAIR_2018) for g, n in sizes.items()}

    @per_draw
    def curves(d):
      return {
        g: [mean(take(groups[g].get(y, []), d[f"Figure 3 {g}"])) for y in PROBE_YEARS]
        for g in groups
      }

    def curve(g, d):
      return curves(d)[g]

    def slope_all(d):
      # The mean over both groups, weighted by their sizes as in the pooled mean.
      per = [np.array(curve(g, d)) * n for g, n in sizes.items() if n]
      total = sum(sizes.values())
      return slope(PROBE_YEARS, sum(per) / total) if total else float("nan")

    return [
      Component("falls: -slope over all", "nats/year", pools, lambda d: -slope_all(d)),
      Component(
        "faster for multiple: slope single - slope multiple",
        "nats/year",
        pools,
        lambda d: slope(PROBE_YEARS, curve("single", d)) - slope(PROBE_YEARS, curve("multiple", d)),
      ),
    ]

  return collect(build)


def _entropy_parts(meas, model: str):
  """(query ids, sets, pool, years from 2018, mean_of(draw, set or None, years))."""
  ids, sets, ent = measurements.entropy(meas, model)
  pool = "Figure 4 queries"
  years = sorted(ent)
  matrix = np.stack([ent[y] for y in years]) if years else np.zeros((0, len(sets)))

  @per_draw
  def table(d):  # {set or None (all): {year: mean entropy over the drawn queries}}
    idx = d[pool]
    e, s = (matrix, sets) if idx is None else (matrix[:, idx], sets[idx])
    out = {}
    for which in (None, "frequent", "rare", "never"):
      keep = np.ones(len(s), dtype=bool) if which is None else s == which
      means = e[:, keep].mean(axis=1) if keep.any() else np.full(len(years), np.nan)
      out[which] = dict(zip(years, means))
    return out

  def mean_of(d, which=None, years=tuple(y for y in PROBE_YEARS if y in ent)):
    return [float(table(d)[which][y]) for y in years]

  return ids, sets, pool, [y for y in years if y >= REFERENCE_YEAR], mean_of


def c12_entropy_ordered_and_rising(meas):
  def model_parts(model: str):
    def build():
      _, sets, pool, rising, mean_of = _entropy_parts(meas, model)
      n = {pool: Pool.items(len(sets), FUTURE_QUERY)}
      order = lambda a, b: lambda d: mean(mean_of(d, a)) - mean(mean_of(d, b))  # noqa: E731
      comps = [
        Component(f"{model}: frequent - rare (mean 2019-29)", "nats", n, order("frequent", "rare")),
        Component(f"{model}: rare - never (mean 2019-29)", "nats", n, order("rare", "never")),
      ]
      for s in ("frequent", "rare", "never"):
        comps.append(
          Component(
            f"{model}: slope of {s} over 2018-29",
            "nats/year",
            n,
            lambda d, s=s: slope(rising, mean_of(d, s, rising)),
          )
        )
      return comps

    return build

  def cbqa_ft():
    parts = {m: _entropy_parts(meas, m) for m in ("cbqa_ft", "uniform", "temporal")}
    if len({tuple(p[0]) for p in parts.values()}) > 1:
      raise ValueError("Figure 4: the models were probed on different queries")
    n = {parts["cbqa_ft"][2]: Pool.items(len(parts["cbqa_ft"][0]), FUTURE_QUERY)}

    def level(m, d):
      return mean(parts[m][4](d))

    def trend(m, d):
      return slope(parts[m][3], parts[m][4](d, None, parts[m][3]))

    return [
      Component(
        "cbqa_ft low: min(uniform, temporal) - cbqa_ft (mean 2019-29)",
        "nats",
        n,
        lambda d: min(level("uniform", d), level("temporal", d)) - level("cbqa_ft", d),
      ),
      Component(
        "cbqa_ft flat: min(slope uniform, temporal) - |slope cbqa_ft|",
        "nats/year",
        n,
        lambda d: min(trend("uniform", d), trend("temporal", d)) - abs(trend("cbqa_ft", d)),
      ),
    ]

  return collect(model_parts("uniform"), model_parts("temporal"), cbqa_ft)


# ---- Figure 5 ---------------------------------------------------------------------------------

ADAPT_ALPHA_LIMIT = 0.6  # C13: "up to alpha 0.6"


def _f1_points(slices: Mapping, key: str, news: bool = False) -> float:
  src = (slices.get("news") or {}) if news else slices
  value = src.get(key)
  return float("nan") if value is None else 100.0 * float(value)


def c13_adaptation_cheaper_than_retraining(meas):
  def fixed(name, value):
    return Component(name, "F1 points", {}, lambda d: value)

  def build():
    a = {m: measurements.adaptation(meas, m) for m in ("uniform", "temporal")}
    new = "2019"
    benchmarks = [("TempLAMA", False)] + (
      [("news", True)] if a["uniform"]["before"].get("news") else []
    )
    comps = []
    for bench, news in benchmarks:
      before = {m: a[m]["before"] for m in a}
      for alpha in sorted(a["uniform"]["alphas"], key=float):
        after = {m: a[m]["alphas"][alpha] for m in a}
        gain = {m: _f1_points(after[m], new, news) - _f1_points(before[m], new, news) for m in a}
        loss = {
          m: _f1_points(before[m], TRAIN_SLICE, news) - _f1_points(after[m], TRAIN_SLICE, news)
          for m in a
        }
        tag = f"{bench} alpha {alpha}"
        comps += [
          fixed(f"{tag}: uniform gain on 2019", gain["uniform"]),
          fixed(f"{tag}: uniform loss on 2010-18", loss["uniform"]),
          fixed(f"{tag}: temporal gain on 2019", gain["temporal"]),
        ]
        if float(alpha) <= ADAPT_ALPHA_LIMIT:
          less = loss["uniform"] - loss["temporal"]
          comps.append(fixed(f"{tag}: uniform loss - temporal loss", less))
    t = a["temporal"]
    retrained, limit = t["retrained"], t.get("retrain_steps")
    curve = {int(s): r for s, r in (t.get("curve") or {}).items()}
    if not curve or not limit:
      raise measurements.MissingInput("no evaluations along the alpha-0.5 run or no retrain steps")
    best = max(
      min(_f1_points(r, k) - _f1_points(retrained, k) for k in (FUTURE_SLICE, TRAIN_SLICE))
      for s, r in curve.items()
      if s < limit
    )
    comps.append(fixed("temporal alpha 0.5 reaches retrained (2019-20 and 2010-18)", best))
    return comps

  return collect(build)
