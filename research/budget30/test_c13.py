"""The registered verdict of research/budget30/c13.py on hand-made numbers."""

from research.budget30 import c13


def _seed(seed, change, lever_main, zero=True, ok=True):
  parts = {
    name: {"margin": -1.0, "ci95": [-2.0, 0.5] if zero else [-2.0, -0.1], "items": 10}
    for s, name in c13.CELLS.values()
    if s == seed
  }
  return {
    "V0": ok,
    "V1": True,
    "V2": True,
    "V3": True,
    "V4": {"ok": True},
    "change": change,
    "lever_main": lever_main,
    "parts": parts,
  }


def test_c13_verdict_needs_the_lever_on_every_seed_and_every_cell_within_noise():
  good = {s: _seed(s, 10.0 + s, 3.0) for s in c13.SEEDS}
  j = c13.judge(good)
  assert j["H"] and j["E"] and j["outcome"].startswith("fails for a measured reason")
  below = {**good, 6: _seed(6, 12.0, -0.5)}  # the lever moves it, but not above the retrained
  j = c13.judge(below)
  assert j["H"] and not j["E"] and "the main part" in j["outcome"]
  resolved = {**good, 1: _seed(1, 11.0, 3.0, zero=False)}  # N3 and N4 lie below zero
  j = c13.judge(resolved)
  assert j["outcome"] == "not explained at the default: N3, N4"
  void = {**good, 3: _seed(3, 13.0, 3.0, ok=False)}
  assert c13.judge(void)["outcome"].startswith("no verdict")
