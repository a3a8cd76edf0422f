"""Multi-host evaluation: every process computes the results, only process 0 writes them
(`tlm.eval.experiments.writes_results`). The model and data are stubbed: what is under test is
which process writes `results/`."""

import types

import jax
import pytest

from tlm import configs
from tlm.eval import experiments


@pytest.fixture
def stubbed(monkeypatch):
  monkeypatch.setattr(experiments, "require_model", lambda config, workdir: None)
  data = types.SimpleNamespace(templama=[], durations={})
  monkeypatch.setattr(experiments, "eval_data", lambda config: data)
  monkeypatch.setattr(experiments, "load_model", lambda config, workdir, **kw: None)
  monkeypatch.setattr(experiments, "answer_baselines", lambda *a: {})
  monkeypatch.setattr(experiments.tables, "table2", lambda *a: "table\n")
  result = {"templama": {"metrics": {}}}
  monkeypatch.setattr(experiments, "evaluate_model", lambda *a: dict(result))
  return configs.get("tiny_temporal")


@pytest.mark.parametrize("process", [0, 1])
def test_only_process_0_writes_eval_results(stubbed, tmp_path, monkeypatch, process):
  monkeypatch.setattr(jax, "process_index", lambda: process)
  result = experiments.evaluate(stubbed, str(tmp_path))
  assert "config" in result  # every process computes and returns the result
  written = sorted(p.name for p in (tmp_path / "results").glob("*"))
  assert written == (["eval.json", "table2_row.md"] if process == 0 else [])
