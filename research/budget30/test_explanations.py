"""The registered verdicts of research/budget30/explanations.py on hand-made numbers."""

from research.budget30 import explanations as ex


def _clamp(asked, asked_lo, uniform):
  return {
    "clamped - asked": {"margin": asked, "ci95": [asked_lo, asked + 1]},
    "clamped - uniform": {"margin": uniform, "ci95": [uniform - 1, uniform + 1]},
  }


def test_clamp_verdict_needs_every_registered_seed_and_both_margins():
  both = {s: _clamp(10.0, 5.0, 3.0) for s in ex.VERDICT_SEEDS}
  assert ex.clamp_verdict(both)["outcome"].startswith("fails for a measured reason")
  asked_only = {**both, 6: _clamp(10.0, 5.0, -0.5)}
  assert ex.clamp_verdict(asked_only)["outcome"].startswith("the untrained year inputs cost")
  interval_low = {**both, 0: _clamp(10.0, -0.1, 3.0)}
  assert ex.clamp_verdict(interval_low)["outcome"].startswith("not the year inputs")
  missing = {s: both[s] for s in ex.VERDICT_SEEDS[:-1]}
  assert ex.clamp_verdict(missing)["outcome"].startswith("description only")
  # A seed outside the registered five changes nothing.
  assert ex.clamp_verdict({**both, 5: _clamp(-9.0, -12.0, -9.0)})["outcome"].startswith(
    "fails for a measured reason"
  )


def _lever(change, new_margin, ok=True):
  check = {"ok": ok}
  return {
    "change": change,
    "new_margin": new_margin,
    **{k: check for k in ("V0", "V1", "V2", "V3")},
  }


def test_lever_verdict_reads_t_intervals_over_the_five_seeds():
  seeds = dict(zip(ex.VERDICT_SEEDS, [4.0, 5.0, 3.0, 6.0, 4.5]))
  both = {s: _lever(d, d - 1.0) for s, d in seeds.items()}
  v = ex.lever_verdict(both)
  assert v["R"] and v["E5"] and v["outcome"].startswith("fails for a measured reason")
  assert v["change_mean"] == sum(seeds.values()) / 5
  r_only = {s: _lever(d, d - 4.6) for s, d in seeds.items()}  # new margins straddle zero
  v = ex.lever_verdict(r_only)
  assert v["R"] and not v["E5"] and v["outcome"].startswith("exposure accounts for part")
  noisy = {s: _lever(d, 1.0) for s, d in zip(ex.VERDICT_SEEDS, [6.0, -5.0, 4.0, -6.0, 1.0])}
  assert not ex.lever_verdict(noisy)["R"]
  # A failed check voids its seed, and four seeds give no verdict.
  void = {**both, 6: _lever(4.0, 3.0, ok=False)}
  v = ex.lever_verdict(void)
  assert 6 not in v["seeds"] and v["outcome"].startswith("description only") and not v["R"]


def test_clamp_markdown_reads_clamp_json_as_research_years_clamp_writes_it():
  r = _clamp(12.0, 5.0, 2.5)
  r.update(queries=183, pairs=92, clamped_f1_2019_20={"count": 183, "overall": {"f1": 0.37}})
  result = {
    "preregistration": ex.REGISTRATION,
    "commit": "abc",
    "seeds": {"0": r},
    "verdict": ex.clamp_verdict({0: r}),
  }
  md = ex.clamp_markdown(result)
  assert "| 0 | 183 / 92 | 37.00 | +12.00 [+5.00, +13.00] | +2.50 [+1.50, +3.50] |" in md
  assert "description only" in md


def test_config_differences_names_dotted_keys():
  a = {"model": {"init_checkpoint": "/a/t5", "d": 64}, "reproduce": {"seeds": [0]}, "x": 1}
  b = {"model": {"init_checkpoint": "/b/t5", "d": 64}, "reproduce": {"seeds": [1]}, "y": 2}
  assert ex.config_differences(a, b) == ["model.init_checkpoint", "reproduce.seeds", "x", "y"]
  assert ex.config_differences(a, a) == []
  assert set(ex.V0_IGNORED) == {"model.init_checkpoint", "reproduce.seeds"}
