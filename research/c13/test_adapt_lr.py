"""The C13 learning-rate lever (research/c13/adapt_lr.py): the committed numbers it starts from,
its component, its checks and verdict on hand-made curves, and a few steps on a tiny world."""

import json
import os

import pytest

from research.c13 import adapt_lr

RETRAINED = {"2019-20": 0.50, "2010-18": 0.70}


def _curve(*points):
  return {s: {"2019-20": f, "2010-18": o, "2019": f} for s, f, o in points}


def test_the_committed_numbers_of_the_seeds():
  """adapt.json's curve gives summary.json's C13 component on every seed (-6.46 / -6.80 /
  -2.74), and Temporal before adaptation is the pre-registration's."""
  got = {s: adapt_lr.committed(s) for s in (0, 1, 2)}
  assert [round(got[s]["component"], 4) for s in got] == [-6.4568, -6.799, -2.7444]
  assert [round(100 * got[s]["before"]["2010-18"], 4) for s in got] == [63.9544, 75.2083, 74.2954]
  assert all(sorted(got[s]["curve"]) == [96, 192, 288, 384, 480] for s in got)


def test_the_component_is_the_best_step_of_the_worse_slice():
  curve = _curve((1, 0.60, 0.60), (2, 0.55, 0.69), (3, 0.90, 0.90))
  # step 1: min(+10, -10) = -10; step 2: min(+5, -1) = -1; step 3 is not below the limit
  assert adapt_lr.reaches_retrained(curve, RETRAINED, limit=3) == pytest.approx(-1.0)
  assert adapt_lr.reaches_retrained(curve, RETRAINED, limit=4) == pytest.approx(20.0)


def _base(curve):
  return {
    "before": {"2010-18": 0.72, "2019-20": 0.3, "2019": 0.3},
    "curve": curve,
    "retrained": RETRAINED,
    "retrained_steps": 10,
    "component": adapt_lr.reaches_retrained(curve, RETRAINED, 10),
  }


def test_checks_and_the_change_on_hand_made_curves():
  old = _curve((1, 0.60, 0.60), (2, 0.55, 0.65))
  lever = _curve((1, 0.58, 0.71), (2, 0.56, 0.72))
  before = {"2010-18": 0.72, "2019-20": 0.3, "2019": 0.3}
  m = adapt_lr.measure_seed(0, _base(old), before, {3e-2: old, 3e-3: lever})
  assert m["V1"]["ok"] and m["V2"]["ok"]
  assert m["committed_component"] == pytest.approx(-5.0)
  assert m["new_margin"] == pytest.approx(2.0) and m["change"] == pytest.approx(7.0)
  # a control that is not the committed run, or another Temporal: the checks fail
  moved = _curve((1, 0.60, 0.60), (2, 0.55, 0.65 + 1e-6))
  assert not adapt_lr.measure_seed(0, _base(old), before, {3e-2: moved, 3e-3: lever})["V2"]["ok"]
  other = dict(before, **{"2010-18": 0.7201})
  assert not adapt_lr.measure_seed(0, _base(old), other, {3e-2: old, 3e-3: lever})["V1"]["ok"]


def _seed(seed, change, margin, ok=True):
  return {
    "seed": seed,
    "change": change,
    "new_margin": margin,
    "V1": {"ok": ok},
    "V2": {"ok": True},
  }


def test_verdict_follows_the_preregistered_criterion():
  both = adapt_lr.verdict([_seed(0, 5, 1), _seed(1, 6, 2), _seed(2, 7, 0.5)], [0, 1, 2])
  assert both["H"] and both["E"] and both["outcome"].endswith("the miniature's learning rate")
  part = adapt_lr.verdict([_seed(0, 5, -1), _seed(1, 6, 2), _seed(2, 7, 0.5)], [0, 1, 2])
  assert part["H"] and part["E"] is False and part["outcome"].startswith("not explained (H holds")
  none = adapt_lr.verdict([_seed(0, -1, 1), _seed(1, 6, 2), _seed(2, 7, 0.5)], [0, 1, 2])
  assert none["H"] is False and "not supported" in none["outcome"]
  early = adapt_lr.verdict([_seed(0, 5, 1)], [0, 1, 2])
  assert early["outcome"] == "no verdict: seeds missing"
  failed = adapt_lr.verdict([_seed(0, 5, 1, ok=False), _seed(1, 6, 2), _seed(2, 7, 1)], [0, 1, 2])
  assert failed["H"] is None and failed["outcome"].startswith("no verdict: a check")


SMALL = [
  "data.world_scale=0.2",
  "data.train_years=2017,2018",
  "eval.years=2017,2018,2019",
  "train.log_every=1",
  "train.eval_every=0",
  "train.checkpoint_every=1",
  "eval.max_decode_length=4",
  "train.steps=2",  # the start's
  "adapt.steps=2",
  "adapt.eval_points=2",
]


def _losses(workdir) -> dict[int, float]:
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    return {r["step"]: r["loss"] for r in map(json.loads, f) if "loss" in r}


def test_the_run_on_a_tiny_stand_in(tmp_path):
  """Temporal 2 steps, adaptation 2 steps at both rates on seed 0 of a small world, in this
  process: made-up committed numbers fail V1 and V2 (no verdict); the two rates train different
  models from the same Temporal; a rerun reads the seed back and trains nothing."""
  overrides = SMALL + [f"data.cache_dir={tmp_path / 'cache'}"]
  root, out = str(tmp_path / "root"), str(tmp_path / "out")
  made_up = _base(_curve((1, 0.5, 0.5), (2, 0.5, 0.5)))
  kwargs = dict(steps=2, workers=1, log=lambda line: None)
  result = adapt_lr.run([0], root, out, overrides, bases={0: made_up}, **kwargs)
  (seed,) = result["seeds"]
  assert set(seed["curves"]) == {"0.03", "0.003"}
  assert all(sorted(c) == ["1", "2"] for c in seed["curves"].values())
  assert not seed["V1"]["ok"] and not seed["V2"]["ok"]
  assert result["verdict"]["outcome"].startswith("no verdict: a check")
  assert os.path.isfile(os.path.join(out, "result.md"))
  work = os.path.join(root, "seed=0")
  control, lever = (_losses(os.path.join(work, "c13", f"lr={lr}")) for lr in ("0.03", "0.003"))
  assert sorted(control) == sorted(lever) == [1, 2]
  assert control[1] == lever[1] and control[2] != lever[2]  # same start, other step size
  assert max(_losses(os.path.join(work, "temporal"))) == 2

  before = os.path.getmtime(os.path.join(work, "c13", "lr=0.03", "metrics.jsonl"))
  again = adapt_lr.run([0], root, out, overrides, bases={0: made_up}, **kwargs)
  assert again["seeds"] == result["seeds"]
  assert os.path.getmtime(os.path.join(work, "c13", "lr=0.03", "metrics.jsonl")) == before
