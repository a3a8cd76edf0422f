"""The paper's years: the training slices, the held-out ones, the future probes, and the names
results and tables give the slices.

One home for them: the config defaults (`schema`), the evaluations (`tlm.eval`), the claims
(`tlm.miniature`) and the lever study all read these. The result files keep their string keys
("2010-18", "2019-20"), so nothing written to disk depends on where the names live.
"""

TRAIN_YEARS = tuple(range(2010, 2019))  # §2.1: the training slices, 2010-18
FUTURE_YEARS = (2019, 2020)  # held out: never trained on (adaptation aside)
EVAL_YEARS = TRAIN_YEARS + FUTURE_YEARS  # `eval.years`' default
TRAIN_SLICE, FUTURE_SLICE = "2010-18", "2019-20"  # the slices' names in results and tables
SLICES = {TRAIN_SLICE: TRAIN_YEARS, FUTURE_SLICE: FUTURE_YEARS}
REFERENCE_YEAR = 2018  # Figure 3: the last training year, the future probes' reference
PROBE_YEARS = tuple(range(2019, 2030))  # Figures 3 and 4: the future probe years
