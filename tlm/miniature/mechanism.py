"""The mechanism behind the paper's claims (M1, M2), as components with margins.

The registry (ids, statements, sources) is `tlm.miniature.claims`, with the rules all claims follow;
the parts they share are `tlm.miniature.claim_parts`.
"""

from tlm.configs.years import TRAIN_SLICE, TRAIN_YEARS
from tlm.miniature import year_tracking
from tlm.miniature.claim_parts import PAIR, Component, better, collect, templama_f1
from tlm.miniature.stats import Pool


def m1_temporal_beats_uniform_off_most_frequent(meas):
  def build():
    pool = f"TempLAMA {TRAIN_SLICE}, answer not the most frequent"
    f1, n = templama_f1(
      meas,
      ("temporal", "uniform"),
      TRAIN_YEARS,
      pool,
      keep=lambda c: ~c["most_frequent_is_correct"],
    )
    return [better(f1, "temporal", "uniform", pool, n)]

  return collect(build)


# M2, pre-registered (fixed before any run of this measure was looked at). On the
# (subject, relation) pairs whose gold answer changes inside 2010-18, the right-year rate of a
# model is the share of its answers that are the asked year's gold answer among those that are
# some year's gold answer of the pair; the chance rate is the rate of the same answers shuffled
# over the pair's years, computed exactly (`tlm.miniature.year_tracking` defines both). M2 holds on
# a seed iff both margins are > 0:
#   temporal - chance:  Temporal's rate minus its own chance rate;
#   temporal - yearly:  Temporal's rate minus the Yearly experts' (each year's expert answering
#                       its year's queries: the models that cannot mix years up except
#                       through what the common start knows).
# How it fails: answers that do not change over a pair's years (as Uniform's, whose input has
# no year) give rate == chance exactly, a margin of 0, which does not hold; answers that
# change without following the gold answers (at random, or a year late) give rate == chance
# in expectation, so the margin is <= 0 on about half the seeds and its interval covers 0;
# and Temporal fails against Yearly whenever it gives another year's answer more often than
# the one-year experts do. A seed where Temporal gives none of a pair's gold answers has no
# rate (an undefined margin: "holds": null). Unit: the pair (all its queries together).
CHANGING = "(subject, relation) pairs whose gold answer changes inside 2010-18"


def m2_temporal_tracks_the_asked_year(meas):
  def build():
    counts = year_tracking.right_year_counts(meas, ("temporal", "yearly"))
    t, y = counts["temporal"], counts["yearly"]
    pool = {CHANGING: Pool.items(len(t["hit"]), PAIR)}
    return [
      Component(
        "temporal - chance (right-year rate)",
        "share",
        pool,
        lambda d: year_tracking.rate(t, d[CHANGING]) - year_tracking.rate(t, d[CHANGING], "chance"),
      ),
      Component(
        "temporal - yearly (right-year rate)",
        "share",
        pool,
        lambda d: year_tracking.rate(t, d[CHANGING]) - year_tracking.rate(y, d[CHANGING]),
      ),
    ]

  return collect(build)
