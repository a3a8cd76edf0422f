"""Bounds on user values that every layer checks against: seeds and years.

Kept at the bottom of the layers so that the config schema (`tlm.configs.overrides.validate`) and
the data layer's readers (`tlm.data.templama`) check the same numbers without one importing
the other.
"""

# Seeds are 64-bit: numpy's SeedSequence takes any non-negative integer, and
# `tlm.train.state.seed_key` folds the high 32 bits into jax's key (which keeps only the low
# 32 without 64-bit mode).
MAX_SEED = 2**64 - 1
# Years are written as four digits in every format (TempLAMA's "2014", "2014-Q2", news dates).
MIN_YEAR, MAX_YEAR = 1000, 9999
