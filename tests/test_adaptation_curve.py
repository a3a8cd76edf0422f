"""Figure 5's adaptation curve (tlm.eval.adaptation.adapt) on a rerun: each point is the model
as it stood at its step, not the model a finished run left behind."""

import pytest

from tlm import configs
from tlm.errors import DataError
from tlm.eval import adaptation, during_training, experiments


@pytest.fixture
def fake_runs(monkeypatch):
  """Training that records the step each workdir reached (a finished run does nothing, as the
  trainer does), and an evaluation whose F1 is the step its model stands at."""
  reached: dict[str, int] = {}
  evaluated: list[tuple[str, int]] = []

  def train(config, workdir, evaluators=(), log=None):
    start = reached.get(workdir, 0)
    reached[workdir] = max(start, config.train.steps)
    return {"step": config.train.steps, "from_step": start}

  def evaluate(model, data, log, label):
    evaluated.append((model, reached.get(model, 0)))
    return {"step": reached.get(model, 0)}

  monkeypatch.setattr("tlm.train.loop.train", train)
  monkeypatch.setattr(adaptation, "require_model", lambda config, workdir: None)
  monkeypatch.setattr(adaptation, "load_model", lambda config, path: path)
  monkeypatch.setattr(adaptation, "slices", lambda result, new: {"2010-18": result["step"]})
  monkeypatch.setattr(adaptation, "draw_figure5", lambda *a, **k: None)
  monkeypatch.setattr(experiments, "evaluate_model", evaluate)
  monkeypatch.setattr(experiments, "eval_data", lambda config: None)
  monkeypatch.setattr(during_training, "evaluators", lambda config: ())
  return reached, evaluated


def _config():
  return configs.override(
    configs.get("tiny_temporal"), ["adapt.steps=8", "adapt.eval_points=4", "adapt.alphas=0.5"]
  )


def test_a_rerun_keeps_the_curve_as_the_first_run_measured_it(tmp_path, fake_runs):
  reached, evaluated = fake_runs
  first = adaptation.adapt(_config(), str(tmp_path), log=lambda _: None)
  assert {s: r["2010-18"] for s, r in first["curve"].items()} == {2: 2, 4: 4, 6: 6, 8: 8}
  evaluated.clear()
  again = adaptation.adapt(_config(), str(tmp_path), log=lambda _: None)
  assert again["curve"] == first["curve"] and again["alphas"] == first["alphas"]
  alpha_dir = str(tmp_path / "adapt" / "alpha=0.5")
  # The kept points were read, only the finished model was evaluated again.
  assert [e for e in evaluated if e[0] == alpha_dir] == [(alpha_dir, 8)]


def test_a_run_past_a_point_whose_evaluation_is_lost_is_refused(tmp_path, fake_runs):
  reached, _ = fake_runs
  adaptation.adapt(_config(), str(tmp_path), log=lambda _: None)
  kept = tmp_path / "adapt" / "alpha=0.5" / "results" / "curve_step=4.json"
  kept.unlink()
  with pytest.raises(DataError, match=r"trained to step 8, past the curve's step 4"):
    adaptation.adapt(_config(), str(tmp_path), log=lambda _: None)
