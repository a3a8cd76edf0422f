"""Where trained models are found and how each variant is wrapped (`tlm.infer.trained_models`),
on directory layouts made by hand and a stand-in for the checkpoint loader."""

import json
import os

import pytest

from tlm import configs
from tlm.errors import ConfigError
from tlm.infer import trained_models
from tlm.infer.conditioned import TimeConditioned, YearlyEnsemble


def _training_workdir(path, step=4, config=None):
  os.makedirs(path / "checkpoints" / str(step))
  if config is not None:
    (path / "config.json").write_text(json.dumps(configs.to_dict(config)))
    (path / "model_config.json").write_text("{}")
  return path


def test_trained_knows_each_layout(tmp_path):
  assert trained_models.trained(str(_training_workdir(tmp_path / "workdir")))
  os.makedirs(tmp_path / "unsaved" / "checkpoints" / "tmp")  # no numbered step yet
  assert not trained_models.trained(str(tmp_path / "unsaved"))
  os.makedirs(tmp_path / "tlm_model" / "params")
  assert not trained_models.trained(str(tmp_path / "tlm_model"))
  (tmp_path / "tlm_model" / "model_config.json").write_text("{}")
  assert trained_models.trained(str(tmp_path / "tlm_model"))
  os.makedirs(tmp_path / "hf")
  (tmp_path / "hf" / "config.json").write_text("{}")
  assert not trained_models.trained(str(tmp_path / "hf"))
  (tmp_path / "hf" / "model.safetensors").write_bytes(b"")
  assert trained_models.trained(str(tmp_path / "hf"))


def test_a_missing_expert_is_named_with_the_command_to_run(tmp_path):
  config = configs.replace(configs.get("tiny_yearly"), "data.train_years", (2017, 2018))
  workdir = tmp_path / "yearly"
  _training_workdir(workdir / "year=2017")
  assert trained_models.model_dirs(config, str(workdir)) == [
    str(workdir / "year=2017"),
    str(workdir / "year=2018"),
  ]
  command = r"run `python run.py --mode=train --config=tiny_yearly --workdir=.*year=2018` first"
  with pytest.raises(ConfigError, match=r"no trained model in .*year=2018: " + command):
    trained_models.require_model(config, str(workdir))
  _training_workdir(workdir / "year=2018")
  trained_models.require_model(config, str(workdir))
  temporal = configs.get("tiny_temporal")
  with pytest.raises(ConfigError, match="no trained model in"):
    trained_models.require_model(temporal, str(workdir))  # the experts are not the model


def test_saved_config_of_a_workdir_and_of_a_yearly_workdir(tmp_path):
  uniform = configs.replace(configs.get("tiny_uniform"), "train.steps", 7)
  _training_workdir(tmp_path / "uniform", config=uniform)
  assert trained_models.saved_config(str(tmp_path / "uniform")) == uniform
  expert = configs.replace(configs.get("tiny_yearly"), "data.year", 2017)
  _training_workdir(tmp_path / "yearly" / "year=2017", config=expert)
  assert trained_models.saved_config(str(tmp_path / "yearly")) == expert
  # An HF directory's config.json is not a tlm config.
  os.makedirs(tmp_path / "hf")
  (tmp_path / "hf" / "config.json").write_text('{"d_model": 8}')
  assert trained_models.saved_config(str(tmp_path / "hf")) is None
  (tmp_path / "uniform" / "config.json").write_text("{not json")
  with pytest.raises(ConfigError, match="uniform/config.json: cannot read the saved config"):
    trained_models.saved_config(str(tmp_path / "uniform"))


def test_each_variant_is_queried_as_the_paper_does(tmp_path, monkeypatch):
  loaded = []
  monkeypatch.setattr(trained_models, "predictor", lambda path, config: loaded.append(path) or path)
  temporal = configs.get("tiny_temporal")
  uniform = configs.get("tiny_uniform")
  _training_workdir(tmp_path / "w")
  for config, probe, conditioning in [
    (temporal, False, "temporal"),
    (temporal, True, "temporal"),  # the year is already an input
    (uniform, False, "none"),
    (uniform, True, "in_text"),  # "In 2025, <query>"
  ]:
    model = trained_models.load_model(config, str(tmp_path / "w"), future_probe=probe)
    assert isinstance(model, TimeConditioned) and model.conditioning == conditioning
    assert model.predictor == str(tmp_path / "w")
  yearly = configs.replace(configs.get("tiny_yearly"), "data.train_years", (2016, 2017))
  for year in (2016, 2017):
    _training_workdir(tmp_path / "y" / f"year={year}")
  ensemble = trained_models.load_model(yearly, str(tmp_path / "y"), future_probe=True)
  assert isinstance(ensemble, YearlyEnsemble) and sorted(ensemble.experts) == [2016, 2017]
  for year, expert in ensemble.experts.items():
    assert expert.conditioning == "none"  # routed by year; the query alone
    assert expert.predictor == trained_models.expert_dir(str(tmp_path / "y"), year)
  assert trained_models.load_expert(yearly, str(tmp_path / "y"), 2016).predictor.endswith(
    "year=2016"
  )
