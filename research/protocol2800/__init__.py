"""The 2800-step protocol: the settings on which every claim was first judged and explained.

Until 2026-12-06 `--mode=reproduce` trained each model 2800 steps (480 adaptation steps) with
unpinned workers; its results, registrations and studies (docs/results/, research/) keep that
record. The default is now 2000 steps with pinned workers (research/budget30/PREREGISTRATION.md),
so a study that replays the 2800-step protocol passes these overrides to the library, which
holds no study's constants.
"""

STEPS_2800 = 2800
ADAPT_STEPS_2800 = 480
# `--set` overrides that give --mode=reproduce the 2800-step protocol (computed unpinned, so
# unpinned again for the same numbers).
OVERRIDES_2800 = (
  f"reproduce.steps={STEPS_2800}",
  f"adapt.steps={ADAPT_STEPS_2800}",
  "reproduce.pin_workers=false",
)
