"""Every testable claim of the paper, as a margin computed from one seed's per-query numbers.

This module is the registry (`CLAIMS`, `MECHANISM`: id | statement | source | function) and
the rules every claim follows; each claim is one named function: C1-C8 (the tables) in
`tlm.miniature.table_claims`, C9-C13 (the figures) in `tlm.miniature.figure_claims`, M1, M2 in
`tlm.miniature.mechanism`, the parts they share in `tlm.miniature.claim_parts`.

The claims (ids and statements fixed; other code and tests read them) are the testable ones
of the paper's §3 (Tables 2 and 7, Figures 2-5), and the mechanism M1, M2 behind them. Each
claim is one or more *components*, each a margin that is positive exactly when that part of
the claim holds: "A > B" has the margin A - B, and a claim holds on a seed iff every component
margin is > 0 (a tie does not hold). A compound claim's margin is the minimum of its
components' margins (it holds iff the minimum is > 0); the components are listed with their
own margins, verdicts and intervals so a reader sees which part fails. Where the components
have different units (C12: nats and nats/year), only the sign of that minimum is meaningful,
and `tlm.miniature.claim_summary` reports no interval for it (the components' intervals instead).

Each component names the pools of items it is a statistic of, and each pool its resampling
unit (`tlm.miniature.stats.Pool`; the units are defined below, each with why): TempLAMA queries
are resampled by (subject, relation) pair, the Figure 3 and Figure 4 probes by query (one per
pair, one per subject), the news examples one by one (no article id is recorded: their
intervals are too narrow by an unmeasured factor), and C13 has none (aggregate F1 numbers).

Every threshold is fixed here, before any result is seen, and none was changed after:
- F1 margins are in F1 points (0-100); C6's "within 2 F1" is the paper's 2 points:
  the margin is 2 - |Yearly - Temporal| on TempLAMA 2019-20.
- Perplexity (C8) is compared as log-perplexity, nats per masked token: "Uniform < Yearly, by
  more on 2019-20" is the log of the perplexity ratio Yearly / Uniform being larger on 2019-20
  than on 2010-18. The models compared are Uniform, Yearly and Temporal (Table 7).
- Slopes are least-squares slopes against the year. C9 compares the F1 of the Yearly experts
  by |test year - expert year| over gaps 0..8 on each side (the past side has at most 8:
  2010-18), from the mean F1 of each (expert, test year) cell averaged per gap, as Figure 2
  draws it. C11 takes the slopes over 2019-29 of the mean change of log-likelihood; "falls"
  is the slope over all 2018-correct queries. C12 takes each set's slope over 2018-29 and the
  order of the sets' mean entropy over 2019-29; T5-CBQA-ft is "low" if its mean entropy over
  2019-29 (all sets) is below both Uniform's and Temporal's, and "flat" if the absolute slope
  of its mean entropy is below both of theirs.
- C10 splits at 5 years, the paper's split: long-lived facts last 5 years or more
  (`tlm.data.fact_durations`, from the facts' own dates).
- C13 uses the TempLAMA F1 and, where measured, the news F1 of Figure 5; "loses less up to
  alpha 0.6" covers the alphas <= 0.6; "reaches the retrained model in a fraction of its
  steps" is: at some evaluated step of the alpha-0.5 run, below the retrained model's steps,
  the adapted Temporal model is above the retrained one on both 2019-20 and 2010-18.
- M2 (pre-registered, replacing a share of changing predictions that could not fail): the
  right-year rate against chance and against the Yearly experts, by the comment above
  `mechanism.m2_temporal_tracks_the_asked_year`.

Inputs that a run did not produce (T5-CBQA rows, a model not adapted, ...) make the claim
"holds": null with the reason; the components that could be computed are still reported.
"""

from tlm.miniature import figure_claims, mechanism, table_claims
from tlm.miniature.claim_parts import Claim

CLAIMS = (
  Claim("C1", "TempLAMA 2010-18: Temporal > Uniform", "Table 2",
        table_claims.c1_temporal_beats_uniform_2010_18),
  Claim("C2", "TempLAMA 2010-18: Yearly > Uniform", "Table 2",
        table_claims.c2_yearly_beats_uniform_2010_18),
  Claim("C3", "TempLAMA 2010-18: Temporal > Yearly", "Table 2",
        table_claims.c3_temporal_beats_yearly_2010_18),
  Claim("C4", "news 2010-18: Yearly > Temporal and > Uniform", "Table 2",
        table_claims.c4_yearly_best_on_news_2010_18),
  Claim("C5", "TempLAMA 2019-20: Temporal > Uniform", "Table 2",
        table_claims.c5_temporal_beats_uniform_2019_20),
  Claim("C6", "news 2019-20: Temporal > Uniform, and Yearly (the 2018 expert) below Temporal; "
        "on TempLAMA 2019-20 Yearly within 2 F1 of Temporal", "Table 2",
        table_claims.c6_temporal_leads_news_2019_20_yearly_within_2_f1),
  Claim("C7", "TempLAMA 2010-18: Uniform > T5-CBQA-ft (training on news helps)", "Table 2",
        table_claims.c7_news_training_beats_cbqa_ft_2010_18),
  Claim("C8", "Table 7: Temporal has the lowest perplexity on 2010-18 and on 2019-20; "
        "Uniform < Yearly, by more on 2019-20", "Table 7",
        table_claims.c8_temporal_lowest_perplexity),
  Claim("C9", "Figure 2 (left): an expert's F1 falls with |test year - its year| on both "
        "sides, faster into the future", "Figure 2 (left)",
        figure_claims.c9_expert_f1_falls_with_year_gap),
  Claim("C10", "Figure 2 (right): Uniform > Yearly on facts lasting 5+ years, Yearly > Uniform "
        "under 5", "Figure 2 (right)",
        figure_claims.c10_uniform_long_lived_yearly_short_lived),
  Claim("C11", "Figure 3: Temporal's log-likelihood of 2018-correct answers falls over 2019-29, "
        "faster for queries with multiple answers over 2010-20 than for single-answer ones",
        "Figure 3", figure_claims.c11_loglik_falls_faster_for_multiple_answers),
  Claim("C12", "Figure 4: for Uniform and Temporal, entropy ordered frequent > rare > never and "
        "rising after 2018 (each set's slope, not an average of the three); T5-CBQA-ft low and "
        "flat", "Figure 4", figure_claims.c12_entropy_ordered_and_rising),
  Claim("C13", "Figure 5: at each alpha, Uniform gains on 2019 and loses on 2010-18; Temporal "
        "gains on 2019 and loses less on 2010-18 than Uniform up to alpha 0.6; at alpha 0.5 "
        "Temporal reaches the retrained model on 2019-20 and 2010-18 in a fraction of its steps",
        "Figure 5", figure_claims.c13_adaptation_cheaper_than_retraining),
)  # fmt: skip
MECHANISM = (
  Claim("M1", "on seen-year TempLAMA queries whose answer is not the subject's most frequent "
        "one, Temporal > Uniform", "mechanism",
        mechanism.m1_temporal_beats_uniform_off_most_frequent),
  Claim("M2", "on (subject, relation) pairs whose gold answer changes inside 2010-18, Temporal's "
        "answer for a year is that year's gold answer rather than another year's more often "
        "than chance (its own answers shuffled over the pair's years) and than the Yearly "
        "experts'", "mechanism", mechanism.m2_temporal_tracks_the_asked_year),
)  # fmt: skip
