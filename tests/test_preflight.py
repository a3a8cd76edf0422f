"""Preflight: settings at their extremes, the workdir's layout, and builders that validate
before they commit.

Each case is checked where the input enters: numeric limits when the config is validated
(`tlm.configs.validate`, milliseconds), the workdir's layout and a memory floor before the data
is built and the step compiled (`tlm.train.preflight`), and a builder's arguments and every
value of its output before the output directory is committed. At the command line every case is
one `error:` line, exit status 1, no traceback, and nothing written: not in the workdir, not in
the data cache (no world built), not in the current directory.
"""

import json
import os
import typing

import jax
import pytest

from tests.helpers import ROOT, one_error, run_tlm, tree
from tlm import configs
from tlm.configs import schema
from tlm.data import templama
from tlm.data.wikidata_facts import read_entities, read_facts
from tlm.errors import ConfigError, DataError, UserError
from tlm.files import check_layout
from tlm.train import preflight
from tlm.train.state import seed_key

FACTS = os.path.join(ROOT, "tests", "fixtures", "data", "templama_facts.tsv")
ENTITIES = os.path.join(ROOT, "tests", "fixtures", "data", "templama_entities.tsv")

# --- numeric limits, checked when the config is validated --------------------------------------

_LIMITS = [
  ("train.seed=-1", "config key 'train.seed' must be in [0, 2**64 - 1], got -1"),
  (f"train.seed={2**64}", "must be in [0, 2**64 - 1]"),
  ("data.seed=-7", "config key 'data.seed' must be in [0, 2**64 - 1]"),
  (f"data.world_seed={2**70}", "config key 'data.world_seed' must be in [0, 2**64 - 1]"),
  ("reproduce.seeds=0,-1", "config key 'reproduce.seeds' must be in [0, 2**64 - 1], got -1"),
  ("data.input_length=131073", "config key 'data.input_length' must be in [1, 131072]"),
  ("data.target_length=1000000000", "config key 'data.target_length' must be in [1, 131072]"),
  ("eval.max_decode_length=131073", "must be in [1, 131072]"),
  (f"train.steps={2**31}", "config key 'train.steps' must be in [1, 2**31 - 1]"),
  (f"train.warmup_steps={2**31}", "config key 'train.warmup_steps' must be in [0, 2**31 - 1]"),
  (f"train.checkpoint_every={2**40}", "the step counter is int32"),
  (f"train.profile_steps=0,{2**31}", "config key 'train.profile_steps' must be in [0, 2**31 - 1]"),
  (f"adapt.steps={2**31}", "config key 'adapt.steps'"),
  (f"eval.finetune_steps={2**31}", "config key 'eval.finetune_steps'"),
  ("train.batch_size=1000000000000", "train.batch_size=1000000000000 x (data.input_length=64 + "),
  ("train.microbatches=128", "train.microbatches=128 splits train.batch_size=64 rows"),
  ("data.year=99999", "config key 'data.year' must be 0 (every year of data.train_years) or a "),
  ("data.train_years=2010,99999", "config key 'data.train_years' must be a year in [1000, 9999]"),
  ("data.new_years=-2019", "config key 'data.new_years' must be a year"),
  ("adapt.new_year=999", "config key 'adapt.new_year' must be a year"),
  ("eval.years=2010,10000", "config key 'eval.years' must be a year"),
  ("data.world_scale=1001", "config key 'data.world_scale' must be in (0, 1000]"),
  ("eval.beam_size=1025", "config key 'eval.beam_size' must be in [1, 1024]"),
  (f"model.emb_dim={2**63}", "config key 'model.emb_dim' must fit in 64 bits"),
  (f"train.keep_checkpoints={2**64}", "config key 'train.keep_checkpoints' must fit in 64 bits"),
  ("eval.max_examples=-1", "config key 'eval.max_examples' must be >= 0"),
]


@pytest.mark.parametrize("assignment,message", _LIMITS)
def test_limits_name_the_key_in_one_line(assignment, message):
  base = configs.get("tiny_temporal")
  key, _, text = assignment.partition("=")
  with pytest.raises(ConfigError) as e:
    configs.override(base, [assignment])
  assert message in str(e.value) and key in str(e.value) and "\n" not in str(e.value)
  # A workdir's config.json is checked the same way.
  section, field = key.split(".")
  hint = typing.get_type_hints(type(getattr(base, section)))[field]
  saved = configs.to_dict(configs.replace(base, key, configs.parse_value(key, text, hint)))
  with pytest.raises(ConfigError) as e:
    configs.from_dict(json.loads(json.dumps(saved)))
  assert message in str(e.value)


def test_an_unknown_model_dtype_names_its_key():
  # It was T5Config's error ("T5Config.dtype must be ..."), raised after the data was built.
  base = configs.get("tiny_temporal")
  with pytest.raises(
    ConfigError, match=r"^model.dtype must be one of float32, bfloat16, got 'f7'$"
  ):
    configs.override(base, ["model.dtype=f7"])
  saved = configs.to_dict(base)
  saved["model"]["dtype"] = "f7"
  with pytest.raises(ConfigError, match=r"^model.dtype must be one of"):
    configs.from_dict(saved)
  assert configs.override(base, ["model.dtype=bfloat16"]).model.dtype == "bfloat16"


def test_adaptation_evaluations_fit_its_steps():
  base = configs.get("tiny_temporal")
  configs.override(base, ["adapt.steps=10", "adapt.eval_points=10"])
  with pytest.raises(ConfigError, match=r"^adapt.eval_points=11 evaluations along adapt.steps=10"):
    configs.override(base, ["adapt.steps=10", "adapt.eval_points=11"])


def test_the_limits_themselves_are_valid():
  base = configs.get("tiny_temporal")
  edge = [
    f"train.seed={schema.MAX_SEED}",
    f"data.seed={schema.MAX_SEED}",
    f"data.world_seed={schema.MAX_SEED}",
    f"reproduce.seeds=0,{schema.MAX_SEED}",
    f"data.input_length={schema.MAX_LENGTH}",
    f"train.steps={schema.MAX_STEPS}",
    f"eval.beam_size={schema.MAX_BEAM}",
    f"data.year={schema.MAX_YEAR}",
    f"adapt.new_year={schema.MIN_YEAR}",
    f"data.world_scale={schema.MAX_WORLD_SCALE}",
  ]
  for assignment in edge:
    configs.override(base, [assignment])
  # The token limit is inclusive: rows x (input + target) = 2**31 - 1.
  rows = (2**31 - 1) // 80
  configs.override(base, [f"train.batch_size={rows}", "train.microbatches=1"])
  with pytest.raises(ConfigError, match="tokens per step"):
    configs.override(base, [f"train.batch_size={rows + 1}"])


def test_seed_key_is_jax_key_below_2_32_and_64_bit_above():
  data = lambda k: tuple(int(x) for x in jax.random.key_data(k))
  for seed in (0, 1, 2**31, 2**32 - 1):  # the key every run trained before
    assert data(seed_key(seed)) == data(jax.random.key(seed))
  # jax alone keeps only the low 32 bits (2**32 is seed 0); seed_key keeps them all apart.
  assert data(jax.random.key(2**32)) == data(jax.random.key(0))
  seeds = (0, 2**32, 2**33, 2**32 + 1, 2**63, 2**64 - 1)
  assert len({data(seed_key(s)) for s in seeds}) == len(seeds)
  with pytest.raises(ConfigError):
    seed_key(2**64)


# --- the workdir's layout ----------------------------------------------------------------------


def test_check_layout(tmp_path):
  w = tmp_path / "w"
  check_layout(str(w / "new" / "run"), ("config.json",), ("checkpoints",))  # creatable
  w.mkdir()
  (w / "checkpoints").mkdir()
  (w / "config.json").write_text("{}")
  check_layout(str(w), ("config.json", "metrics.jsonl"), ("checkpoints", "profile"))
  (w / "profile").write_text("")
  with pytest.raises(UserError, match=r"w/profile: exists and is not a directory \(the run "):
    check_layout(str(w), dirs=("profile",))
  os.mkfifo(w / "metrics.jsonl")  # never opened: a FIFO would block a writer
  with pytest.raises(UserError, match="metrics.jsonl: exists and is not a regular file"):
    check_layout(str(w), files=("metrics.jsonl",))
  with pytest.raises(UserError, match="exists and is not a directory"):
    check_layout(str(w / "config.json"))
  with pytest.raises(UserError, match="is not a directory"):
    check_layout(str(w / "config.json" / "run"))
  check_layout("gs://bucket/run", ("config.json",), ("checkpoints",))  # nothing to check there


@pytest.mark.parametrize("name", ["tensorboard", "profile"])
def test_check_layout_dangling_link(tmp_path, name):
  """A dangling link where the run makes a directory: exists() says absent, makedirs fails."""
  (tmp_path / name).symlink_to(tmp_path / "nowhere")
  with pytest.raises(UserError, match=rf"{name}: is a link to .*nowhere, which does not exist"):
    check_layout(str(tmp_path), dirs=(name,))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_check_layout_unwritable(tmp_path):
  (tmp_path / "checkpoints").mkdir()
  (tmp_path / "checkpoints").chmod(0o500)
  try:
    with pytest.raises(UserError, match="checkpoints: is not writable"):
      check_layout(str(tmp_path), dirs=("checkpoints",))
  finally:
    (tmp_path / "checkpoints").chmod(0o700)


_TRAIN = ["--mode=train", "--config=tiny_temporal", "--set=train.steps=2"]


@pytest.mark.parametrize(
  "entry,kind,extra",
  [
    ("profile", "file", ["--set=train.profile_steps=0,1"]),
    ("tensorboard", "file", []),
    ("checkpoints", "file", []),
    ("best", "file", ["--set=train.keep_best=eval_loss"]),
    ("config.json", "dir", []),
    ("metrics.jsonl", "fifo", []),
  ],
)
def test_cli_workdir_layout_fails_before_any_work(tmp_path, entry, kind, extra):
  cache, w = tmp_path / "cache", tmp_path / "w"
  w.mkdir()
  if kind == "file":
    (w / entry).write_text("x")
  elif kind == "dir":
    (w / entry).mkdir()
  else:
    os.mkfifo(w / entry)
  before = tree(str(tmp_path))
  proc = run_tlm(*_TRAIN, f"--workdir={w}", f"--set=data.cache_dir={cache}", *extra, cwd=str(w))
  kind_word = "a regular file" if kind != "file" else "a directory"
  one_error(proc, f"{w / entry}: exists and is not {kind_word}")
  assert tree(str(tmp_path)) == before  # no world built, no lock, nothing


def test_cli_checks_every_yearly_expert_workdir_first(tmp_path):
  cache, w = tmp_path / "cache", tmp_path / "w"
  (w / "year=2017").mkdir(parents=True)
  (w / "year=2017" / "checkpoints").write_text("")
  proc = run_tlm(
    "--mode=train",
    "--config=tiny_yearly",
    f"--workdir={w}",
    f"--set=data.cache_dir={cache}",
    cwd=str(tmp_path),
  )
  one_error(proc, "year=2017/checkpoints: exists and is not a directory")
  assert tree(str(tmp_path)) == ["w", "w/year=2017", "w/year=2017/checkpoints"]


def test_trainer_checks_the_layout_before_building_the_data(tmp_path):
  """Runs that train without the train CLI (reproduce, adapt, cronquestions) get the same
  check from the Trainer, before the data (here: the synthetic world) is built."""
  from tlm.train import loop

  cache, w = tmp_path / "cache", tmp_path / "w"
  w.mkdir()
  (w / "tensorboard").write_text("")
  config = configs.override(
    configs.get("tiny_temporal"), ["train.steps=2", f"data.cache_dir={cache}"]
  )
  with pytest.raises(UserError, match="tensorboard: exists and is not a directory"):
    loop.train(config, str(w), log=lambda _: None)
  assert not cache.exists()


# --- the memory floor --------------------------------------------------------------------------


def _small(*extra):
  return configs.override(
    configs.get("tiny_temporal"),
    [
      "model.emb_dim=32",
      "model.num_heads=2",
      "model.head_dim=16",
      "model.mlp_dim=64",
      "model.num_layers=2",
      "train.batch_size=64",
      "data.input_length=64",
      "data.target_length=16",
      "train.eval_every=100",
      "train.eval_batches=2",
      *extra,
    ],
  )


def test_memory_floor_by_hand():
  # Batches: 3 held (the step's and 2 held-out) x 64 rows x 4 bytes x (3 x 64 + 5 x 16).
  # Attention: 4 bytes x 64 rows x 2 heads x 64 x 64.
  # Parameters (float32 and gradients), T5.1.1 (gated MLP: wi_0, wi_1, wo; untied output):
  # encoder 2 x (4 x 32 x 32 + 3 x 32 x 64), decoder 2 x (8 x 32 x 32 + 3 x 32 x 64), the
  # embedding 128 x 32 (the tiny preset's smallest vocabulary) and the output layer 32 x 128.
  floor = preflight.memory_floor(_small(), data_devices=1, devices=1)
  expected = {"batches": 208_896, "attention": 2_097_152, "parameters": 8 * 57_344}
  assert floor == {**expected, "total": sum(expected.values())}
  # On a 2 x 2 mesh: the batch splits over the data axis, the rest over all 4 devices.
  floor = preflight.memory_floor(_small("train.microbatches=4"), data_devices=2, devices=4)
  assert floor["batches"] == 208_896 // 2
  assert floor["attention"] == 2_097_152 // 4 // 4
  assert floor["parameters"] == 8 * 57_344 // 4
  # Without evaluation the held-out batches are not held.
  assert preflight.memory_floor(_small("train.eval_every=0"), 1, 1)["batches"] == 208_896 // 3


def test_parameter_floor_is_below_the_real_count():
  from tlm.models.shapes import model_config, param_count
  from tlm.models.t5 import Transformer
  from tlm.sharding.partitioning import make_mesh
  from tlm.train.optim import make_optimizer
  from tlm.train.state import state_layout

  for config in (_small(), configs.get("tiny_temporal"), configs.get("small_temporal")):
    t5 = model_config(config.model, 1)
    layout = state_layout(
      Transformer(t5), make_optimizer("constant", 1e-3, 0), make_mesh(1, 1, jax.devices()[:1])
    )
    real = param_count(layout.abstract.params)
    floor = preflight._parameters_floor(config)
    assert floor <= real < 1.01 * floor + 10_000  # only norms and position biases left out


def test_memory_floor_is_below_what_xla_allocates():
  """The floor against XLA's own buffer assignment of the compiled step (`--dry_run`): a
  config where the attention logits dominate, so the floor is not trivially small."""
  from tlm.train import train_dry_run as dry_run

  config = configs.override(
    configs.get("tiny_temporal"),
    [
      "train.batch_size=8",
      "data.input_length=256",
      "data.target_length=16",
      "model.num_layers=1",
      "model.emb_dim=32",
      "model.mlp_dim=64",
      "train.eval_every=0",
    ],
  )
  floor = preflight.memory_floor(config, 1, 1)
  compiled = dry_run.dry_run(config, log=lambda _: None)["memory_per_device"]
  assert floor["attention"] > floor["batches"] + floor["parameters"]
  assert floor["total"] <= compiled["peak_estimate"]


def test_check_memory_against_small_devices(monkeypatch):
  from tlm.sharding.partitioning import make_mesh

  mesh = make_mesh(1, 1, jax.devices()[:1])
  config = _small()
  need = preflight.memory_floor(config, 1, 1)["total"]
  monkeypatch.setattr(preflight, "device_memory", lambda d, n: (need, "each test device"))
  preflight.check_memory(config, mesh, host_rows=64)  # exactly enough
  monkeypatch.setattr(preflight, "device_memory", lambda d, n: (need - 1, "each test device"))
  with pytest.raises(ConfigError) as e:
    preflight.check_memory(config, mesh, host_rows=64)
  message = str(e.value)
  assert message.startswith("train.batch_size=64 (train.microbatches=1), data.input_length=64, ")
  assert "needs at least 2.6 MiB per device" in message and "each test device" in message
  # The model keys that size the parameters are named too (a huge model.num_layers, say).
  sizes = "model.num_layers=2, model.emb_dim=32, model.num_heads=2, model.head_dim=16, "
  assert f"target_length=16, model.preset=tiny-v1_1, {sizes}model.mlp_dim=64: a " in message
  monkeypatch.setattr(preflight, "device_memory", lambda d, n: (2**60, "each test device"))
  monkeypatch.setattr(preflight, "host_memory", lambda: 1000)
  with pytest.raises(ConfigError, match="this process assembles 68.0 KiB of batch per step"):
    preflight.check_memory(config, mesh, host_rows=64)


def test_cli_memory_floor_fails_before_the_world_is_built(tmp_path):
  cache = tmp_path / "cache"
  proc = run_tlm(
    *_TRAIN,
    f"--workdir={tmp_path / 'w'}",
    f"--set=data.cache_dir={cache}",
    "--set=data.input_length=131072",
    cwd=str(tmp_path),
  )
  one_error(proc, "a train step needs at least 16.0 TiB per device", "of attention")
  assert tree(str(tmp_path)) == []


_INFER = ["--checkpoint=m", "--input_file=i", "--output_file=o"]


@pytest.mark.parametrize(
  "args,fragment",
  [
    (_TRAIN + ["--set=train.batch_size=1000000000000"], "tokens per step"),
    (_TRAIN + ["--set=data.input_length=1000000000"], "'data.input_length' must be in [1, 131072]"),
    (_TRAIN + [f"--set=train.seed={2**70}"], "'train.seed' must be in [0, 2**64 - 1]"),
    (["--mode=reproduce", "--set=reproduce.seeds=-1"], "'reproduce.seeds' must be in [0, 2**64"),
    (["--mode=predict", *_INFER, "--beam_size=5000"], "--beam_size must be in [1, 1024]"),
    (
      ["--mode=predict", *_INFER, "--max_decode_length=1000000000"],
      "--max_decode_length must be in [1, 131072]",
    ),
    (["--mode=score", *_INFER, "--batch_size=0"], "--batch_size must be >= 1, got 0"),
    (
      ["--mode=eval", "--set=eval.batch_size=1000000000000"],
      "eval.batch_size=1000000000000: every evaluation batch is padded to that many rows",
    ),
    (
      _TRAIN + ["--coordinator_address=localhost:1", "--num_processes=2", "--process_id=2"],
      "--process_id=2 must be in [0, --num_processes=2)",
    ),
  ],
)
def test_cli_extreme_settings_are_one_line(tmp_path, args, fragment):
  if args[0] in ("--mode=train", "--mode=reproduce", "--mode=eval"):
    args = [*args, f"--workdir={tmp_path / 'w'}", f"--set=data.cache_dir={tmp_path / 'cache'}"]
  one_error(run_tlm(*args, cwd=str(tmp_path)), fragment)
  assert tree(str(tmp_path)) == []


def test_cli_eval_batch_of_a_saved_config_names_the_file(tmp_path):
  """A value read from the workdir's config.json names that file; a --set one names the key."""
  from tlm.files import write_json

  w = tmp_path / "w"
  saved = configs.override(configs.get("tiny_temporal"), ["eval.batch_size=1000000000000000"])
  write_json(str(w / "config.json"), configs.to_dict(saved))
  write_json(str(w / "model_config.json"), {})
  before = tree(str(tmp_path))
  proc = run_tlm("--mode=eval", f"--workdir={w}", cwd=str(tmp_path))
  one_error(proc, f"{w / 'config.json'}: eval.batch_size=1000000000000000: every evaluation")
  proc = run_tlm(
    "--mode=eval", f"--workdir={w}", "--set=eval.batch_size=2000000000000000", cwd=str(tmp_path)
  )
  one_error(proc, "error: eval.batch_size=2000000000000000: every evaluation batch")
  assert tree(str(tmp_path)) == before


# --- builders validate before they commit -------------------------------------------------------


@pytest.mark.parametrize(
  "args,fragment",
  [
    (["--max_year=99999"], "error: max_year must be a year in [1000, 9999], got 99999"),
    (["--min_year=-5"], "error: min_year must be a year in [1000, 9999], got -5"),
    (["--seed=-1"], "error: seed must be in [0, 2**64 - 1], got -1"),
    (["--min_year=2015", "--max_year=2012"], "min_year 2015 is after max_year 2012"),
  ],
)
def test_cli_build_templama_checks_before_writing(tmp_path, args, fragment):
  out = tmp_path / "out"
  proc = run_tlm(
    "--mode=build_templama",
    f"--facts={FACTS}",
    f"--entities={ENTITIES}",
    f"--output_dir={out}",
    *args,
    cwd=str(tmp_path),
  )
  one_error(proc, fragment)
  assert tree(str(tmp_path)) == []


@pytest.mark.parametrize(
  "mode,args,fragment",
  [
    ("build_world", ["--scale=1001"], "--scale must be in (0, 1000]"),
    ("build_world", ["--scale=nan"], "--scale must be a finite number"),
    ("build_world", ["--scale=0"], "--scale must be in (0, 1000]"),
    ("build_world", ["--seed=-3"], "--seed must be in [0, 2**64 - 1], got -3"),
    ("build_ssm", ["--news=n.jsonl", "--seed=-3"], "--seed must be in [0, 2**64 - 1], got -3"),
  ],
)
def test_cli_other_builders_check_before_writing(tmp_path, mode, args, fragment):
  proc = run_tlm(f"--mode={mode}", f"--output_dir={tmp_path / 'out'}", *args, cwd=str(tmp_path))
  one_error(proc, fragment)
  assert tree(str(tmp_path)) == []


def test_build_templama_arguments_and_output_values_are_checked_before_commit(
  tmp_path, monkeypatch
):
  out = str(tmp_path / "out")
  for kwargs, message in (
    ({"max_year": 10000}, "max_year must be a year in [1000, 9999], got 10000"),
    ({"min_year": 999}, "min_year must be a year in [1000, 9999], got 999"),
    ({"seed": 2**64}, "seed must be in [0, 2**64 - 1]"),
    ({"granularity": "week"}, "granularity must be one of year, quarter, month"),
  ):
    with pytest.raises(UserError) as e:
      templama.build_templama(FACTS, ENTITIES, out, **kwargs)
    assert str(e.value).startswith(message)
  # A date key that would not read back stops the build before the output is committed.
  real = templama._bucket_key
  monkeypatch.setattr(templama, "_bucket_key", lambda b, g: "2O14" if b == 2014 else real(b, g))
  with pytest.raises(ValueError, match="bad date key '2O14'"):
    templama.build_templama(FACTS, ENTITIES, out)
  assert tree(str(tmp_path)) == []
  monkeypatch.undo()
  counts = templama.build_templama(FACTS, ENTITIES, out)
  assert counts["queries"]["total"] > 0 and sorted(os.listdir(out)) == [
    "test.json",
    "train.json",
    "val.json",
  ]


def test_facts_and_entities_values_are_checked(tmp_path):
  entities = tmp_path / "entities.tsv"
  for bad in ("nan", "inf", "-inf"):
    entities.write_text(f"Q1\tAlice\t3\nQ2\tBob\t{bad}\n")
    with pytest.raises(DataError, match=f"entities.tsv:2: popularity '{bad}' is not a finite"):
      read_entities(str(entities))
  facts = tmp_path / "facts.tsv"
  entities.write_text("Q1\tAlice\t3\nQ2\tRed FC\t2\n")
  templates = {"P54": "<subject> plays for <object>."}
  for date in ("²⁰¹⁴", "２０１４", "2014-1"):
    facts.write_text(f"P54\tQ1\tQ2\tP580={date}\n")
    with pytest.raises(DataError, match="facts.tsv:1: unparsable date"):
      read_facts(str(facts), templates, read_entities(str(entities)), 2010)
  assert read_entities(str(entities))["Q2"] == ("Red FC", 2.0)
