"""The paper's protocol in miniature, without training: the starting points of every model,
the retraining baseline of Figure 5 and its match criterion, and the pre-training objectives.

(The workdirs of a real reproduction are checked in tests/test_experiments.py.)
"""

import numpy as np
import pytest

from tlm import configs
from tlm.data import pretraining
from tlm.eval import adaptation
from tlm.miniature import starts


@pytest.mark.parametrize("name", ["small_temporal", "large_temporal", "large_uniform"])
def test_retraining_a_paper_config_keeps_its_public_start(name):
  config = configs.override(
    configs.get(name),
    ["model.init_checkpoint=/ckpt/t5_1_1_large", "data.ssm_dir=/s", "data.templama_dir=/t"],
  )
  retrained = adaptation.retrained_config(config)
  configs.check_required(retrained)  # raised ConfigError when the start was dropped
  assert retrained.model.init_checkpoint == "/ckpt/t5_1_1_large"
  assert retrained.data.train_years == tuple(range(2010, 2020))
  assert retrained.train.steps == config.train.steps


def test_paper_configs_name_public_t5_and_ssm_only_for_cbqa():
  for size in ("small", "large", "xl", "xxl"):
    for variant in ("temporal", "uniform", "yearly"):
      assert configs.paper_checkpoint(size, variant) == f"google/t5-v1_1-{size}"
      assert "-ssm" not in configs.describe(f"{size}_{variant}")
    assert configs.paper_checkpoint(size, "cbqa_ft") == f"google/t5-{size}-ssm"
    assert "ssm-nq" not in configs.describe(f"{size}_cbqa_ft")
  # No public Base SSM: a checkpoint name to load, and the deviation in the description.
  assert configs.paper_checkpoint("base", "cbqa_ft") == "google/t5-v1_1-base"
  assert "(no public Base SSM checkpoint: a deviation)" in configs.describe("base_cbqa_ft")


def test_the_miniature_starts_every_model_from_its_pretrained_t5(tmp_path):
  work = str(tmp_path)
  cfgs = starts.starting_configs(["train.steps=7"], work)
  assert cfgs["t5"].model.init_checkpoint == "" and cfgs["t5"].variant == "t5"
  assert cfgs["cbqa"].model.init_checkpoint == str(tmp_path / "t5")
  assert cfgs["cbqa_ft"].model.init_checkpoint == str(tmp_path / "cbqa")
  assert cfgs["cbqa_ft"].data.news_to_templama == 0.0
  steps = set()
  for v in ("uniform", "temporal", "yearly"):
    c = starts.from_start(configs.get(f"tiny_{v}"), str(tmp_path / "t5"))
    assert c.model.init_checkpoint == str(tmp_path / "t5")
    steps.add(c.train.steps)
  assert len(steps) == 1  # every Yearly expert trains as long as Temporal and Uniform


def _slices(t_new, t_old, n_new, n_old):
  return {"2019-20": t_new, "2010-18": t_old, "news": {"2019-20": n_new, "2010-18": n_old}}


def test_match_needs_the_future_and_the_old_years_on_both_sources():
  retrained = _slices(0.5, 0.6, 0.4, 0.45)
  curve = {
    10: _slices(0.55, 0.50, 0.41, 0.40),  # ahead on 2019-20, behind on 2010-18
    20: _slices(0.55, 0.61, 0.39, 0.46),  # news 2019-20 still behind
    30: _slices(0.50, 0.60, 0.40, 0.45),  # reaches all four
  }
  m = adaptation.match_steps(curve, retrained)
  assert m == {
    "templama 2019-20": 10,
    "templama 2010-18": 20,
    "news 2019-20": 10,
    "news 2010-18": 20,
    "all": 30,
  }
  assert adaptation.match_steps({10: curve[10]}, retrained)["all"] is None
  no_news = {k: v for k, v in retrained.items() if k != "news"}
  assert set(adaptation.match_steps(curve, no_news)) == {
    "templama 2019-20",
    "templama 2010-18",
    "all",
  }


def test_span_corruption_hides_about_15_percent_in_sentinel_spans():
  rng = np.random.default_rng(0)
  text = " ".join(f"w{i}" for i in range(40))
  hidden = 0
  for _ in range(50):
    inputs, targets = pretraining.span_corrupt(text, rng)
    # Filling each sentinel of the input with its span of the target gives the text back.
    spans, sentinel = {}, None
    for word in targets.split():
      if word.startswith("<extra_id_"):
        sentinel = word
        spans[sentinel] = []
      else:
        spans[sentinel].append(word)
    restored = " ".join(" ".join(spans[w]) if w in spans else w for w in inputs.split())
    assert restored == text
    hidden += sum(map(len, spans.values()))
  assert hidden / (50 * 40) == pytest.approx(0.15, abs=0.01)


def test_pretraining_examples_are_deterministic(tmp_path):
  corpus = tmp_path / "c.jsonl"
  corpus.write_text('{"text": "Kelvar FC is a football club in Arden."}\n' * 3)
  a = pretraining.examples(str(corpus), "span_corruption", seed=1, copies=4)
  assert a == pretraining.examples(str(corpus), "span_corruption", seed=1, copies=4)
  assert len(a) == 12 and a != pretraining.examples(
    str(corpus), "span_corruption", seed=2, copies=4
  )
  ssm = pretraining.examples(str(corpus), "ssm", seed=0)
  assert ("<extra_id_0> is a football club in Arden.", "Kelvar FC") in ssm


def test_a_checkpoint_of_an_older_world_version_is_not_resumed():
  from tlm.errors import ConfigError
  from tlm.train.data_state import check_data_state, data_state

  config = configs.get("tiny_temporal")
  state = data_state(config, 10)
  assert state["world"].startswith("world-v")
  check_data_state(state, config, "ckpt/10")  # the same world: resumed
  older = {k: v for k, v in state.items() if k != "world"}  # saved before the version existed
  with pytest.raises(ConfigError, match="synthetic world"):
    check_data_state(older, config, "ckpt/10")


def test_a_checkpoint_from_before_a_data_key_existed_is_resumed():
  """A DataConfig key added later (data.pretrain_corpus) counts as its default when a saved
  data state lacks it; a saved non-default value is still refused."""
  from tlm.errors import ConfigError
  from tlm.train.data_state import check_data_state, data_state

  config = configs.get("tiny_t5")
  state = data_state(config, 10)
  older = dict(state, data={k: v for k, v in state["data"].items() if k != "pretrain_corpus"})
  check_data_state(older, config, "ckpt/10")
  other = configs.replace(config, "data.pretrain_corpus", "/c.jsonl")
  with pytest.raises(ConfigError, match="data.pretrain_corpus"):
    check_data_state(older, other, "ckpt/10")


def test_resuming_on_another_store_or_sampler_is_refused_in_one_line():
  """The stream record (the store's manifest SHA-256, the sampler's derived parameters) is
  compared on resume; a checkpoint from before it is resumed with the example sampler only."""
  from tlm.errors import ConfigError
  from tlm.train.data_state import check_data_state, data_state

  config = configs.replace(configs.get("tiny_temporal"), "data.sampler", "block")
  block = {"kind": "block", "version": 2, "block_draws": 7, "block_steps": 16, "allot": [9]}
  stream = {"store": "a" * 64, "sampler": block}
  state = data_state(config, 10, stream)
  check_data_state(state, config, "ckpt/10", stream)
  allowed = configs.replace(config, "data.allow_corpus_order", True)  # not a stream change
  check_data_state(state, allowed, "ckpt/10", stream)
  other_store = dict(stream, store="b" * 64)
  with pytest.raises(ConfigError) as e:
    check_data_state(state, config, "ckpt/10", other_store)
  assert "example store (manifest SHA-256 aaaaaaaaaaaa..., now bbbbbbbbbbbb...)" in str(e.value)
  assert str(e.value).startswith("ckpt/10 was trained with other ") and "\n" not in str(e.value)
  other_draws = dict(stream, sampler=dict(block, block_draws=8, allot=[10]))
  with pytest.raises(ConfigError, match=r"sampler parameters \(allot, block_draws\)"):
    check_data_state(state, config, "ckpt/10", other_draws)
  older = {k: v for k, v in state.items() if k != "stream"}  # saved before the record
  with pytest.raises(ConfigError, match="block sampler \\(an earlier version's draws\\)"):
    check_data_state(older, config, "ckpt/10", stream)
  example = configs.get("tiny_temporal")
  check_data_state(data_state(example, 10), example, "ckpt/10", {"store": "", "sampler": {}})
  check_data_state(state, config, "ckpt/10")  # a batch source without a record: unchecked
  from tlm.errors import CheckpointError

  for bad in ([], {"store": 5}, {"sampler": []}):
    with pytest.raises(CheckpointError, match="not a data state written by tlm"):
      check_data_state(dict(state, stream=bad), config, "ckpt/10", stream)


def test_pretrain_corpus_replaces_the_worlds_and_only_for_pretraining(tmp_path):
  from tlm.errors import ConfigError
  from tlm.input.mixture import PretrainingData, TrainingData

  small = ["data.world_scale=0.2", f"data.cache_dir={tmp_path / 'cache'}", "train.batch_size=2"]
  corpus = tmp_path / "c.jsonl"
  corpus.write_text('{"text": "Kelvar FC was founded in 2019 and won in 2020."}\n' * 3)
  config = configs.override(configs.get("tiny_t5"), small)
  world_data = PretrainingData(config)
  world = world_data.train_batch(0, 0, 2)[0]
  world_data.close()  # its prefetching thread
  mine = configs.replace(config, "data.pretrain_corpus", str(corpus))
  data = PretrainingData(mine)
  batch = data.train_batch(0, 0, 2)[0]
  data.close()
  text = " ".join(data.vocab.decode(list(row)) for row in batch["encoder_input_tokens"])
  assert "Kelvar" in text
  assert not np.array_equal(batch["encoder_input_tokens"], world["encoder_input_tokens"])
  with pytest.raises(ConfigError, match="data.pretrain_corpus is for the pre-training"):
    TrainingData(
      configs.replace(
        configs.override(configs.get("tiny_temporal"), small), "data.pretrain_corpus", str(corpus)
      )
    )
