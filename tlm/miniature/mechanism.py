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


# M2 as first registered (fixed before any run of this measure was looked at). On the
# (subject, relation) pairs whose gold answer changes inside 2010-18, the right-year rate of a
# model is the share of its answers that are the asked year's gold answer among those that are
# some year's gold answer of the pair; the chance rate is the rate of the same answers shuffled
# over the pair's years, computed exactly (`tlm.miniature.year_tracking` defines both). It held
# on a seed iff both margins are > 0:
#   temporal - chance:  Temporal's rate minus its own chance rate;
#   temporal - yearly:  Temporal's rate minus the Yearly experts' (each year's expert answering
#                       its year's queries: the models that cannot mix years up except
#                       through what the common start knows).
# M2 as the paper states it (a post-hoc reframing, made after the three seeds were seen): the
# test is the first margin alone, "Temporal's answers follow the asked year more often than
# chance". The paper does not predict the second: the experts are its example of a model that
# avoids averaging, and "Adding temporal context strikes a trade-off between these two extremes"
# (the experts and Uniform, paper section 3.1), so Temporal below the experts' right-year rate is
# what it expects. Temporal against the experts is kept as a description (`M2_FIRST`, computed
# and reported beside M2 in summary.json), not a test.
# How the test fails: answers that do not change over a pair's years (as Uniform's, whose input
# has no year) give rate == chance exactly, a margin of 0, which does not hold; answers that
# change without following the gold answers (at random, or a year late) give rate == chance
# in expectation, so the margin is <= 0 on about half the seeds and its interval covers 0. A
# seed where Temporal gives none of a pair's gold answers has no rate (an undefined margin:
# "holds": null). Unit: the pair (all its queries together).
CHANGING = "(subject, relation) pairs whose gold answer changes inside 2010-18"
PAPER_LINE = "Adding temporal context strikes a trade-off between these two extremes"


def _right_year_components(meas, against_yearly: bool):
  models = ("temporal", "yearly") if against_yearly else ("temporal",)
  counts = year_tracking.right_year_counts(meas, models)
  t = counts["temporal"]
  pool = {CHANGING: Pool.items(len(t["hit"]), PAIR)}
  out = [
    Component(
      "temporal - chance (right-year rate)",
      "share",
      pool,
      lambda d: year_tracking.rate(t, d[CHANGING]) - year_tracking.rate(t, d[CHANGING], "chance"),
    )
  ]
  if against_yearly:
    y = counts["yearly"]
    out.append(
      Component(
        "temporal - yearly (right-year rate)",
        "share",
        pool,
        lambda d: year_tracking.rate(t, d[CHANGING]) - year_tracking.rate(y, d[CHANGING]),
      )
    )
  return out


def m2_temporal_tracks_the_asked_year(meas):
  """M2 as the paper states it: Temporal's right-year rate above its own chance rate."""
  return collect(lambda: _right_year_components(meas, against_yearly=False))


def m2_as_first_registered(meas):
  """M2 as first registered: above chance and above the Yearly experts (both must hold)."""
  return collect(lambda: _right_year_components(meas, against_yearly=True))
