"""Named configs carry the paper's settings; --set overrides parse by type; errors list keys."""

import dataclasses
import inspect
import json
import os
import subprocess
import sys

import pytest

from tlm import configs
from tlm.configs import schema
from tlm.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_size_and_variant_is_named():
  want = {f"{s}_{v}" for s in configs.SIZES for v in configs.VARIANTS} | {"tiny_t5", "tiny_cbqa"}
  assert set(configs.names()) == want
  for name in want:
    config = configs.get(name)
    assert config.name == name
    doc = configs.describe(name)
    for part in ("Command:", "Run time:", "Expected:", f"--config={name}"):
      assert part in doc, (name, part)


def test_paper_settings():
  # §2.3: Adafactor, constant LR 1e-3, dropout 0.1, batch 2048, 300K steps, 1000:1, 2010-18.
  for size, preset in (
    ("small", "t5-v1_1-small"),
    ("large", "t5-v1_1-large"),
    ("xxl", "t5-v1_1-xxl"),
  ):
    for variant in ("temporal", "uniform", "yearly"):
      c = configs.get(f"{size}_{variant}")
      assert c.model.preset == preset
      assert c.model.dropout_rate == 0.1
      assert c.train.learning_rate == 1e-3 and c.train.schedule == "constant"
      assert c.train.batch_size == 2048 and c.train.steps == 300_000
      assert c.train.z_loss == 1e-4
      assert c.data.news_to_templama == 1000.0
      assert c.data.train_years == tuple(range(2010, 2019))
      assert not c.data.synthetic
      assert "model.init_checkpoint" in c.required and "data.ssm_dir" in c.required
  assert configs.get("large_temporal").data.conditioning == "temporal"
  assert configs.get("large_uniform").data.conditioning == "none"
  assert configs.get("large_yearly").variant == "yearly"
  cbqa = configs.get("large_cbqa_ft")  # T5-CBQA-ft: 5K steps on TempLAMA alone
  assert cbqa.train.steps == 5000 and cbqa.data.news_to_templama == 0.0
  assert cbqa.data.conditioning == "none"
  assert "google/t5-v1_1-large" in configs.describe("large_temporal")  # public T5.1.1
  assert "-ssm" not in configs.describe("large_temporal")
  assert "google/t5-large-ssm" in configs.describe("large_cbqa_ft")  # T5-CBQA's checkpoint
  assert configs.get("large_temporal").adapt.steps == 50_000
  assert configs.get("large_temporal").adapt.new_year == 2019


def _neutral_defaults(monkeypatch, cls, **values) -> None:
  """Replaces defaults of a schema dataclass (its __init__'s) for the test."""
  names = list(inspect.signature(cls.__init__).parameters)[1:]
  defaults = list(cls.__init__.__defaults__)
  names = names[len(names) - len(defaults) :]
  for key, value in values.items():
    defaults[names.index(key)] = value
  monkeypatch.setattr(cls.__init__, "__defaults__", tuple(defaults))


def test_paper_settings_are_set_where_its_runs_are_defined(monkeypatch):
  """The paper's runs do not rest on the schema's defaults: with other defaults, they keep the
  paper's values (tlm/configs/paper.py states them)."""
  _neutral_defaults(
    monkeypatch, schema.TrainConfig, steps=7, batch_size=8, learning_rate=0.5, schedule="rsqrt"
  )
  _neutral_defaults(monkeypatch, schema.ModelConfig, dropout_rate=0.0)
  _neutral_defaults(monkeypatch, schema.DataConfig, news_to_templama=3.0, train_years=(2015,))
  _neutral_defaults(monkeypatch, schema.AdaptConfig, steps=9, new_year=2020, match_alpha=0.3)
  assert schema.TrainConfig().batch_size == 8  # the defaults are replaced
  for name in ("small_temporal", "large_uniform", "xxl_yearly", "large_cbqa_ft"):
    c = configs.get(name)
    steps = 5000 if name.endswith("cbqa_ft") else 300_000
    assert (c.train.steps, c.train.batch_size, c.train.learning_rate) == (steps, 2048, 1e-3)
    assert c.train.schedule == "constant" and c.model.dropout_rate == 0.1
    assert c.data.news_to_templama == (0.0 if name.endswith("cbqa_ft") else 1000.0)
    assert c.data.train_years == tuple(range(2010, 2019))
    assert (c.adapt.steps, c.adapt.new_year, c.adapt.match_alpha) == (50_000, 2019, 0.5)


# Key values of some generated paper configs, written out by hand (§2.3 and the public
# checkpoints), against which the table in tlm/configs/paper.py is checked.
_PAPER_VALUES = {
  "large_temporal": {
    "start": "google/t5-v1_1-large", "model.init_checkpoint": "", "model.preset": "t5-v1_1-large",
    "model.dtype": "bfloat16", "model.remat": "full", "train.steps": 300_000,
    "train.batch_size": 2048, "train.checkpoint_every": 5000, "mesh.model": 1,
    "data.conditioning": "temporal", "data.news_to_templama": 1000.0,
    "required": ("model.init_checkpoint", "data.templama_dir", "data.ssm_dir"),
  },
  "small_uniform": {
    "start": "google/t5-v1_1-small", "model.remat": "none", "data.conditioning": "none",
    "train.steps": 300_000, "mesh.model": 1,
  },
  "xl_yearly": {
    "start": "google/t5-v1_1-xl", "variant": "yearly", "data.year": 0, "mesh.model": 4,
    "model.remat": "full",
  },
  "xxl_cbqa_ft": {
    "start": "google/t5-xxl-ssm", "model.preset": "t5-v1_1-xxl", "train.steps": 5000,
    "train.checkpoint_every": 500, "data.news_to_templama": 0.0, "data.conditioning": "none",
    "mesh.model": 8, "required": ("model.init_checkpoint", "data.templama_dir"),
  },
  "base_cbqa_ft": {"start": "google/t5-v1_1-base", "train.steps": 5000},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(_PAPER_VALUES))
def test_generated_paper_configs_have_the_expected_values(name):
  config = configs.get(name)
  size, variant = name.split("_", 1)
  for key, want in _PAPER_VALUES[name].items():
    got = configs.paper_checkpoint(size, variant) if key == "start" else configs.lookup(config, key)
    assert got == want, (name, key)
  # Every paper config shares the defaults of the schema outside the keys the table varies.
  assert config.train == dataclasses.replace(
    configs.TrainConfig(), steps=config.train.steps, checkpoint_every=config.train.checkpoint_every
  )
  assert config.adapt == configs.AdaptConfig() and config.eval == configs.EvalConfig()


def test_paper_descriptions_come_from_the_table():
  doc = configs.describe("large_temporal")
  assert doc.startswith("Large Temporal") and "(Table 2)" in doc
  assert "Run time: about 4 days on 32 TPU v3 cores" in doc
  # The row's expected result spans three lines of the table: joined into one.
  assert (
    "on 2010-18 and on 2019-20, above Uniform; the lowest CustomNews perplexity (Table 7)." in doc
  )
  assert "--set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL" in doc
  yearly = configs.describe("xxl_yearly")
  assert "(not in the paper)" in yearly and "about 2 months per expert" in yearly
  assert "[--set=data.year=2014]" in yearly
  cbqa = configs.describe("small_cbqa_ft")
  assert "data.ssm_dir" not in cbqa and "google/t5-small-ssm" in cbqa


def test_tiny_configs_need_nothing():
  for variant in ("temporal", "uniform", "yearly"):
    c = configs.get(f"tiny_{variant}")
    assert c.data.synthetic and c.required == ()
    configs.check_required(c)
    assert c.model.preset == "tiny-v1_1"


def test_required_key_names_exist():
  keys = configs.valid_keys()
  for key in (
    "train.steps",
    "train.batch_size",
    "train.checkpoint_every",
    "train.log_every",
    "data.seed",
    "model.init_checkpoint",
  ):
    assert key in keys


def test_override_types():
  c = configs.override(
    configs.get("tiny_temporal"),
    [
      "train.steps=12",
      "train.learning_rate=3e-4",
      "model.remat=full",
      "adapt.alphas=0.3,0.5,0.7",
      "data.train_years=2012,2013",
      "model.init_checkpoint=/x/y=z",  # only the first "=" separates key and value
      "mesh.data=-1",
      "train.steps=13",  # later assignments win
    ],
  )
  assert c.train.steps == 13 and isinstance(c.train.steps, int)
  assert c.train.learning_rate == 3e-4
  assert c.model.remat == "full"
  assert c.adapt.alphas == (0.3, 0.5, 0.7) and all(isinstance(a, float) for a in c.adapt.alphas)
  assert c.data.train_years == (2012, 2013)
  assert c.model.init_checkpoint == "/x/y=z"
  assert configs.override(c, ["data.train_years="]).data.train_years == ()
  assert configs.get("tiny_temporal").train.steps != 13  # frozen: the registry is unchanged


def test_override_errors_list_valid_keys():
  base = configs.get("tiny_temporal")
  with pytest.raises(ConfigError) as e:
    configs.override(base, ["train.stepz=3"])
  msg = str(e.value)
  assert "train.stepz" in msg and "did you mean train.steps" in msg
  assert "valid keys:" in msg and "model.init_checkpoint" in msg and "\n" not in msg
  for bad, what in (
    ("train.steps=3.5", "expects int"),
    ("train.learning_rate=fast", "expects float"),
    ("data.synthetic=maybe", "expects bool"),
    ("model.remat=maybe", "model.remat must be one of none, full, dots"),
    ("model.remat=true", "model.remat must be one of none, full, dots"),
    ("adapt.alphas=0.3,x", "comma-separated floats"),
    ("nosuchsection.x=1", "unknown config key"),
    ("train=3", "unknown config key"),
    ("train.steps", "dotted.key=value"),
  ):
    with pytest.raises(ConfigError, match=what):
      configs.override(base, [bad])
  with pytest.raises(ConfigError, match="unknown config 'large_temporl'.*large_temporal"):
    configs.get("large_temporl")


def test_set_parse_errors_name_the_flag():
  """A `--set` that does not parse names the flag and what was typed, whatever the type."""
  base = configs.get("tiny_temporal")
  for bad, message in (
    ("mesh.data=nan", "--set mesh.data=nan: expects int"),
    ("train.learning_rate=fast", "--set train.learning_rate=fast: expects float"),
    ("data.synthetic=maybe", "--set data.synthetic=maybe: expects bool"),
    ("eval.years=2010,x", "--set eval.years=2010,x: expects comma-separated ints"),
    # a control character is shown escaped, so the error stays one line
    ("adapt.eval_points=\r", "--set adapt.eval_points='\\r': expects int"),
  ):
    with pytest.raises(ConfigError) as e:
      configs.override(base, [bad])
    assert str(e.value) == message


def test_json_round_trip_is_strict():
  c = configs.override(configs.get("large_yearly"), ["data.year=2014", "adapt.alphas=0.5"])
  d = json.loads(json.dumps(configs.to_dict(c)))
  assert d["train"]["steps"] == 300_000 and d["adapt"]["alphas"] == [0.5]
  assert configs.from_dict(d) == c
  d["train"]["stepz"] = 1
  with pytest.raises(ConfigError, match="stepz"):
    configs.from_dict(d)
  d = configs.to_dict(c)
  d["train"]["steps"] = "many"
  with pytest.raises(ConfigError, match="train.steps"):
    configs.from_dict(d)


def test_paper_config_without_checkpoint_or_data_fails_at_once():
  with pytest.raises(ConfigError) as e:
    configs.check_required(configs.get("large_temporal"))
  msg = str(e.value)
  for key in ("model.init_checkpoint", "data.ssm_dir", "data.templama_dir", "tiny_temporal"):
    assert key in msg
  ok = configs.override(
    configs.get("large_temporal"),
    ["model.init_checkpoint=/c", "data.ssm_dir=/s", "data.templama_dir=/t"],
  )
  configs.check_required(ok)
  # On the synthetic world only the checkpoint is needed.
  with pytest.raises(ConfigError, match="model.init_checkpoint") as e:
    configs.check_required(configs.override(configs.get("large_temporal"), ["data.synthetic=1"]))
  assert "data.ssm_dir" not in str(e.value)


def test_cli_fails_fast_naming_the_keys(tmp_path):
  proc = subprocess.run(
    [
      sys.executable,
      "run.py",
      "--mode=train",
      "--config=large_temporal",
      f"--workdir={tmp_path / 'w'}",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 1
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error: config 'large_temporal' needs model.init_checkpoint")
  assert "tiny_temporal" in last
  assert not (tmp_path / "w").exists()  # nothing written


# Every numeric key with a value out of its range; the error must name the key.
_OUT_OF_RANGE = {
  "model.dropout_rate": ("1.0", "-0.1"),
  "model.emb_dim": ("-1",),
  "model.num_heads": ("-2",),
  "model.head_dim": ("-1",),
  "model.mlp_dim": ("-1",),
  "model.num_layers": ("-1",),
  "data.world_scale": ("0", "-1"),
  "data.forward_looking": ("yes",),
  "data.forward_share": ("0", "0.5"),
  "data.year": ("-2014",),
  "data.new_year_prob": ("1.5", "-0.5"),
  "data.news_to_templama": ("-1",),
  "data.input_length": ("0",),
  "data.target_length": ("-3",),
  "train.steps": ("0",),
  "train.batch_size": ("0", "-64"),
  "train.learning_rate": ("0", "-1e-3", "nan", "inf"),
  "train.warmup_steps": ("-1",),
  "train.microbatches": ("0",),
  "train.z_loss": ("-1e-4",),
  "train.loss_normalizing_factor": ("-1",),
  "train.checkpoint_every": ("0",),
  "train.keep_checkpoints": ("0",),
  "train.log_every": ("0",),
  "train.eval_every": ("-1",),
  "train.eval_batches": ("0",),
  "mesh.data": ("0", "-2"),
  "mesh.model": ("0",),
  "adapt.alphas": ("0.5,1.1", "-0.1"),
  "adapt.steps": ("0",),
  "adapt.match_alpha": ("2",),
  "adapt.eval_points": ("0",),
  "eval.batch_size": ("0",),
  "eval.max_decode_length": ("0",),
  "eval.beam_size": ("0",),
  "eval.max_examples": ("-1",),
  "eval.finetune_steps": ("0",),
}


@pytest.mark.parametrize("key", sorted(_OUT_OF_RANGE))
def test_out_of_range_values_name_the_key(key):
  base = configs.get("tiny_temporal")
  for text in _OUT_OF_RANGE[key]:
    with pytest.raises(ConfigError, match=f"^config key '{key}' must be ") as e:
      configs.override(base, [f"{key}={text}"])
    assert "\n" not in str(e.value)
    # A workdir's config.json is checked the same way.
    d = configs.to_dict(base)
    section, field = key.split(".")
    kind = type(d[section][field])
    d[section][field] = [float(t) for t in text.split(",")] if kind is list else kind(text)
    with pytest.raises(ConfigError, match=f"^config key '{key}' must be "):
      configs.from_dict(json.loads(json.dumps(d)))


def test_every_named_config_and_boundary_value_is_valid():
  for name in configs.names():
    assert configs.validate(configs.get(name)) == configs.get(name)
  base = configs.get("tiny_temporal")
  for ok in (
    "train.eval_every=0",
    "model.num_layers=0",
    "mesh.data=-1",
    "mesh.model=-1",
    "data.year=0",
    "data.new_year_prob=1",
    "adapt.alphas=0,1",
    "model.dropout_rate=0",
    "train.warmup_steps=0",
    "train.loss_normalizing_factor=0",
    "eval.max_examples=0",
    "data.news_to_templama=0",
    "train.batch_size=1",
    "data.world_seed=0",
    f"train.seed={2**64 - 1}",
    "data.input_length=131072",
    "eval.beam_size=1024",
    "data.year=9999",
    "train.steps=2147483647",
    "data.world_scale=1000",
  ):
    configs.override(base, [ok])


def test_cli_names_the_out_of_range_key(tmp_path):
  proc = subprocess.run(
    [
      sys.executable,
      "run.py",
      "--mode=train",
      "--config=tiny_temporal",
      "--set=train.batch_size=0",
      f"--workdir={tmp_path / 'w'}",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines() == [
    "error: config key 'train.batch_size' must be >= 1, got 0"
  ]
  assert not (tmp_path / "w").exists()


def test_world_versions_are_the_worlds_and_an_older_config_means_v3():
  """`data.world_version` takes the synthetic world's versions; a config.json written before
  the key existed had world v3, the only world then (`schema.ABSENT_MEANS`)."""
  from tlm.configs import schema
  from tlm.synthetic.settings import DEFAULT_VERSION, VERSIONS

  assert schema.WORLD_VERSIONS == tuple(sorted(VERSIONS))
  assert configs.get("tiny_temporal").data.world_version == DEFAULT_VERSION
  old = configs.to_dict(configs.get("tiny_temporal"))
  del old["data"]["world_version"]
  assert configs.from_dict(old).data.world_version == 3
  with pytest.raises(ConfigError, match="data.world_version' must be one of 3, 4"):
    configs.override(configs.get("tiny_temporal"), ["data.world_version=2"])
