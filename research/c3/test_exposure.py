"""The C3 exposure lever (`research.c3.exposure`): the pre-registered steps and committed numbers,
the criterion on hand-made numbers, and the whole run on a tiny stand-in world in seconds."""

import json
import os

import pytest

from research.c3 import exposure


def test_the_pre_registered_steps_come_from_w3():
  ratios = [exposure.exposure_ratio(s) for s in (0, 1, 2)]
  assert ratios == pytest.approx([0.5698871869, 0.6309272248, 0.6361101292], abs=1e-10)
  assert [exposure.expert_steps(r) for r in ratios] == [1596, 1767, 1781]


def test_the_committed_numbers_of_the_seeds():
  got = {s: exposure.committed(s) for s in (0, 1, 2)}
  assert [round(got[s]["temporal_f1"], 4) for s in got] == [63.9544, 75.2083, 74.2954]
  assert [round(got[s]["c3_margin"], 4) for s in got] == [-4.7705, 0.5248, -2.2342]
  assert [round(got[s]["yearly_f1"], 4) for s in got] == [68.7249, 74.6835, 76.5296]
  assert [(got[s]["queries"], got[s]["pairs"]) for s in got] == [(850, 97), (891, 102), (911, 103)]
  assert got[0]["temporal_800_f1"] == 53.25971479500892
  assert got[0]["temporal_800_loss"] == 0.4701745085013929


def _seed(seed, old, new, v1=True, v3=None):
  return {
    "seed": seed,
    "committed": {"c3_margin": old},
    "new_margin": new,
    "change": new - old,
    "V1": {"ok": v1},
    "V3": v3,
  }


def test_the_criterion():
  # H and E: every change above zero with its t-interval, every new margin above zero
  v = exposure.verdict(
    [_seed(0, -4, 2, v3={"ok": True}), _seed(1, 0, 3), _seed(2, -2, 3)], [0, 1, 2]
  )
  assert v["H"] and v["E"] and v["prediction_held"]
  assert v["outcome"].startswith("fails for a measured reason")
  assert v["change_mean"] == pytest.approx(14 / 3)
  # H without E: the margin rises everywhere but stays below zero on one seed
  v = exposure.verdict([_seed(0, -4, -1), _seed(1, 0, 3), _seed(2, -2, 2)], [0, 1, 2])
  assert v["H"] is True and v["E"] is False and v["outcome"].startswith("not explained (H holds")
  # not H: one seed's margin falls
  v = exposure.verdict([_seed(0, -4, 1), _seed(1, 2, 1), _seed(2, -2, 3)], [0, 1, 2])
  assert v["H"] is False and not v["prediction_held"]
  # every change above zero, but the t-interval of their mean reaches below zero
  v = exposure.verdict([_seed(0, -4, -3.9), _seed(1, 0, 10), _seed(2, -2, 1)], [0, 1, 2])
  assert v["change_t95"][0] < 0 and v["H"] is False
  # seeds missing: undecided, unless a measured seed already fails the criterion
  assert exposure.verdict([_seed(0, -4, 2)], [0, 1, 2])["outcome"] == "no verdict: seeds missing"
  v = exposure.verdict([_seed(0, -4, -1)], [0, 1, 2])
  assert v["E"] is False and v["outcome"].startswith("not explained")
  # a failed check of the setup: no verdict
  v = exposure.verdict(
    [_seed(0, -4, 2, v3={"ok": False}), _seed(1, 0, 3), _seed(2, -2, 3)], [0, 1, 2]
  )
  assert v["H"] is None and v["outcome"].startswith("no verdict: a check")


SMALL = [
  "data.world_scale=0.2",
  "data.train_years=2017,2018",
  "eval.years=2017,2018,2019",
  "train.log_every=1",
  "train.eval_every=0",
  "train.checkpoint_every=1",
  "eval.max_decode_length=4",
  "train.steps=2",  # the start's
  "reproduce.workers=1",
]


def _losses(workdir) -> dict[int, float]:
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return {r["step"]: r["loss"] for r in map(json.loads, f) if "loss" in r}


def test_the_run_on_a_tiny_stand_in(tmp_path):
  """Experts at half of a 4-step Temporal's steps, seed 0 of a small world; V3 against made-up
  committed numbers fails (no verdict), against the measured ones it passes; a rerun trains
  nothing; the 2-step expert is the 4-step one stopped early."""
  overrides = SMALL + [f"data.cache_dir={tmp_path / 'cache'}"]
  root, out = str(tmp_path / "c3"), str(tmp_path / "out")
  base = {
    "temporal_f1": 50.0,
    "c3_margin": -2.0,
    "c3_ci95": [-5.0, 1.0],
    "yearly_f1": 52.0,
    "queries": 0,
    "pairs": 0,
    "temporal_800_f1": 1.0,
    "temporal_800_loss": 1.0,
  }
  kwargs = dict(ratios={0: 0.5}, base_steps=4, verify_step=2, resamples=20, log=lambda line: None)
  result = exposure.run([0], root, out, overrides, bases={0: base}, **kwargs)
  (seed,) = result["seeds"]
  assert seed["steps"] == 2 and set(seed["experts"]) == {"2017", "2018"}
  assert all(e["step"] == 2 for e in seed["experts"].values())
  assert seed["yearly"]["queries"] > 0 and set(seed["yearly"]["by_year"]) >= {"2017", "2018"}
  assert seed["new_margin"] == pytest.approx(50.0 - seed["yearly"]["f1"])
  assert seed["change"] == pytest.approx(seed["new_margin"] + 2.0)
  assert seed["V1"]["ok"] is False and seed["V3"]["ok"] is False and seed["V2"] is None
  assert result["verdict"]["outcome"].startswith("no verdict: a check")
  assert os.path.isfile(os.path.join(out, "result.md"))

  # the committed numbers as measured: the checks pass; the experts are not trained again
  os.remove(os.path.join(root, "seed=0", "c3_seed.json"))
  base |= {
    "queries": seed["V1"]["queries"],
    "pairs": seed["V1"]["pairs"],
    "temporal_800_f1": seed["V3"]["f1"],
    "temporal_800_loss": seed["V3"]["loss"],
  }
  expert = os.path.join(root, "seed=0", "yearly", "year=2018")
  before = _losses(expert)
  again = exposure.run([0], root, out, overrides, bases={0: base}, **kwargs)
  assert _losses(expert) == before
  assert again["seeds"][0]["V1"]["ok"] and again["seeds"][0]["V3"]["ok"]
  assert again["verdict"]["checks_ok"] and again["verdict"]["complete"]  # seed 0 of [0]
  assert not again["verdict"]["outcome"].startswith("no verdict")
  with open(os.path.join(out, "result.json")) as f:
    assert json.load(f)["seeds"][0]["yearly"]["f1"] == seed["yearly"]["f1"]

  # the default expert (4 steps, same start) passes through the 2-step expert's losses
  from tlm import configs
  from tlm.miniature import parallel

  p = exposure.plan(0, root, overrides, 0.5, 4)
  config = configs.replace(configs.replace(p.yearly, "train.steps", 4), "data.year", 2018)
  longer = str(tmp_path / "longer")
  parallel.run_job(parallel.Job("longer", "train", ((config, longer),)), log=lambda line: None)
  got = _losses(longer)
  assert set(got) == {1, 2, 3, 4} and {k: got[k] for k in (1, 2)} == before
