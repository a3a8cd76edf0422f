"""The claims on the paper's tables (C1-C8: Tables 2 and 7), as components with margins.

The registry (ids, statements, sources) is `tlm.miniature.claims`, with the rules all claims follow
(margins, thresholds fixed before any result was seen); the parts they share are
`tlm.miniature.claim_parts`.
"""

import numpy as np

from tlm.configs.years import FUTURE_SLICE, FUTURE_YEARS, TRAIN_SLICE, TRAIN_YEARS
from tlm.miniature import measurements
from tlm.miniature.claim_parts import (
  NEWS_UNIT,
  Component,
  collect,
  mean,
  news_better,
  templama_better,
  templama_f1,
)
from tlm.miniature.stats import Pool, take

WITHIN_F1 = 2.0  # C6: "within 2 F1" (F1 points)

# ---- TempLAMA and news F1 (Table 2) -----------------------------------------------------------


def c1_temporal_beats_uniform_2010_18(meas):
  return templama_better(meas, "temporal", "uniform", TRAIN_SLICE)


def c2_yearly_beats_uniform_2010_18(meas):
  return templama_better(meas, "yearly", "uniform", TRAIN_SLICE)


def c3_temporal_beats_yearly_2010_18(meas):
  return templama_better(meas, "temporal", "yearly", TRAIN_SLICE)


def c4_yearly_best_on_news_2010_18(meas):
  return collect(lambda: news_better(meas, "yearly", ("temporal", "uniform"), TRAIN_SLICE))


def c5_temporal_beats_uniform_2019_20(meas):
  return templama_better(meas, "temporal", "uniform", FUTURE_SLICE)


def c6_temporal_leads_news_2019_20_yearly_within_2_f1(meas):
  def news():
    return news_better(meas, "temporal", ("uniform", "yearly"), FUTURE_SLICE)

  def templama():
    pool = f"TempLAMA {FUTURE_SLICE}"
    f1, n = templama_f1(meas, ("yearly", "temporal"), FUTURE_YEARS, pool)

    def within(d):
      return WITHIN_F1 - abs(mean(take(f1["yearly"], d[pool]) - take(f1["temporal"], d[pool])))

    return [Component("2 - |yearly - temporal|", "F1 points", {pool: n}, within)]

  return collect(news, templama)


def c7_news_training_beats_cbqa_ft_2010_18(meas):
  return templama_better(meas, "uniform", "cbqa_ft", TRAIN_SLICE)


# ---- perplexity (Table 7) ---------------------------------------------------------------------


def c8_temporal_lowest_perplexity(meas):
  models = ("uniform", "temporal", "yearly")

  def build():
    comps, log_ppl = [], {}
    for name, years in ((TRAIN_SLICE, TRAIN_YEARS), (FUTURE_SLICE, FUTURE_YEARS)):
      cols = {m: measurements.news(meas, m, years) for m in models}
      pool = f"news {name}"

      def lp(m, d, cols=cols, pool=pool):
        ll, n = take(cols[m]["loglik"], d[pool]), take(cols[m]["tokens"], d[pool])
        return -float(np.sum(ll)) / float(np.sum(n)) if np.sum(n) else float("nan")

      log_ppl[name] = lp
      n = Pool.items(len(cols["uniform"]["loglik"]), NEWS_UNIT)
      for other in ("uniform", "yearly"):
        comps.append(
          Component(
            f"{name}: log ppl {other} - temporal",
            "nats/token",
            {pool: n},
            lambda d, o=other, lp=lp: lp(o, d) - lp("temporal", d),
          )
        )
      comps.append(
        Component(
          f"{name}: log ppl yearly - uniform",
          "nats/token",
          {pool: n},
          lambda d, lp=lp: lp("yearly", d) - lp("uniform", d),
        )
      )
    seen, fut = log_ppl[TRAIN_SLICE], log_ppl[FUTURE_SLICE]
    pools = {p: c.pools[p] for c in comps for p in c.pools}
    comps.append(
      Component(
        "log(ppl yearly / ppl uniform): 2019-20 - 2010-18",
        "nats/token",
        pools,
        lambda d: (fut("yearly", d) - fut("uniform", d)) - (seen("yearly", d) - seen("uniform", d)),
      )
    )
    return comps

  return collect(build)
