"""Tests for tlm/input/datasets.py: loading sources from directories, building the world once."""

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tlm.data.formatting import SPLITS, TextExample
from tlm.data.vocab import Vocabulary, train_sentencepiece
from tlm.errors import ConfigError, DataError
from tlm.input import datasets
from tlm.input.packed_rows import unpack, with_eos
from tlm.input.packing import Batcher
from tlm.input.sampling import MixtureSampler
from tlm.store import store


def _write(path, lines):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    for line in lines:
      f.write(line if isinstance(line, str) else json.dumps(line))
      f.write("\n")


def _templama_row(subject, name, year, answers):
  return {
    "query": f"{name} plays for _X_.",
    "answer": [{"wikidata_id": f"Q{100 + i}", "name": a} for i, a in enumerate(answers)],
    "date": str(year),
    "id": f"{subject}_P54_{year}",
    "relation": "P54",
    "most_frequent_answer": {"wikidata_id": "Q100", "name": answers[0]},
    "most_recent_answer": {"wikidata_id": "Q100", "name": answers[0]},
  }


@pytest.fixture
def data_dirs(tmp_path):
  ssm, tl = str(tmp_path / "ssm"), str(tmp_path / "templama")
  _write(
    f"{ssm}/train/2014.jsonl",
    [
      {"inputs": "The club was founded in <extra_id_0>.", "targets": "1899", "year": 2014},
      "",
      {"inputs": "<extra_id_0> won the cup.", "targets": "Northfield Rovers", "year": 2014},
    ],
  )
  _write(f"{ssm}/train/2015.jsonl", [{"inputs": "It rained in <extra_id_0>.", "targets": "Oslo"}])
  _write(
    f"{tl}/train.json",
    [
      _templama_row("Q1", "Ann Lee", 2014, [["Rovers FC", "Rovers"], "United"]),
      _templama_row("Q1", "Ann Lee", 2016, ["City"]),
      _templama_row("Q2", "Bo Dahl", 2015, ["United"]),
    ],
  )
  return ssm, tl


def test_load_sources_exact(data_dirs):
  ssm, tl = data_dirs
  sources = datasets.load_sources(ssm, tl, years=[2014, 2015], split="train")
  # The JSON-lines directory is converted to an example store on first use; its tables are
  # sequences read by index.
  assert os.path.isfile(os.path.join(ssm, "manifest.json"))
  sources["news_ssm"] = {y: list(t) for y, t in sources["news_ssm"].items()}
  assert sources == {
    "news_ssm": {
      2014: [
        ("The club was founded in <extra_id_0>.", "1899", 2014),
        ("<extra_id_0> won the cup.", "Northfield Rovers", 2014),
      ],
      2015: [("It rained in <extra_id_0>.", "Oslo", 2015)],
    },
    "templama": {
      2014: [("Ann Lee plays for <extra_id_0>.", "Rovers FC", 2014)],
      2015: [("Bo Dahl plays for <extra_id_0>.", "United", 2015)],
    },
  }
  assert all(isinstance(e, TextExample) for s in sources.values() for y in s.values() for e in y)
  assert datasets.load_sources(templama_dir=tl, years=[2016], split="train") == {
    "templama": {2016: [("Ann Lee plays for <extra_id_0>.", "City", 2016)]}
  }


@pytest.mark.parametrize(
  "line, message",
  [
    ("{not json", "2014.jsonl:2: malformed JSON"),
    ("[1, 2]", "2014.jsonl:2: expected a JSON object"),
    ('{"inputs": "x <extra_id_0>"}', "2014.jsonl:2: field 'targets' missing or not a string"),
    ('{"inputs": "x <extra_id_0>", "targets": 3}', "2014.jsonl:2: field 'targets' missing"),
    ('{"inputs": "x", "targets": "y", "year": 2013}', "2014.jsonl:2: year 2013 in a file for 2014"),
  ],
)
def test_bad_ssm_lines_name_file_and_line(tmp_path, line, message):
  ok = json.dumps({"inputs": "a <extra_id_0>", "targets": "b"})
  _write(str(tmp_path / "train" / "2014.jsonl"), [ok, line])
  with pytest.raises(DataError, match=message):
    datasets.load_sources(str(tmp_path), years=[2014], split="train")


def test_missing_files_and_bad_arguments(data_dirs, tmp_path):
  ssm, tl = data_dirs
  with pytest.raises(DataError, match=r"manifest.json: no train examples for 2016 in this store "):
    datasets.load_sources(ssm, years=[2016], split="train")
  with pytest.raises(DataError, match=r"val.json: no such file"):
    datasets.load_sources(templama_dir=tl, years=[2014], split="val")
  with pytest.raises(ConfigError, match="unknown split 'dev'"):
    datasets.load_sources(ssm, years=[2014], split="dev")
  with pytest.raises(ConfigError, match="needs an SSM directory"):
    datasets.load_sources(years=[2014], split="train")
  _write(str(tmp_path / "bad" / "train.json"), ['{"query": "no blank"}'])
  with pytest.raises(DataError, match=r"train.json:1: "):
    datasets.load_sources(templama_dir=str(tmp_path / "bad"), years=[2014], split="train")


def test_loaded_sources_drive_sampler_and_batcher(data_dirs):
  ssm, tl = data_dirs
  sources = datasets.load_sources(ssm, tl, years=[2014, 2015], split="train")
  texts = [
    e.inputs.replace("<extra_id_0>", "") + " " + e.targets
    for s in sources.values()
    for y in s.values()
    for e in y
  ]
  vocab = Vocabulary(train_sentencepiece(texts * 4 + ["year: 2014 2015"], vocab_size=45))
  sampler = MixtureSampler(
    sources, seed=0, years=[2014, 2015], source_weights={"news_ssm": 2, "templama": 1}
  )
  batcher = Batcher(sampler, vocab, rows=4, input_length=64, target_length=32)
  batch = batcher.batch(0)
  ids, _ = batcher.select(0, np.arange(4))
  # Vocabulary.decode puts spaces around sentinels, so compare without spaces.
  nospace = lambda pair: tuple(x.replace(" ", "") for x in pair)
  decoded = [nospace((vocab.decode(i), vocab.decode(t))) for row in unpack(batch) for i, t in row]
  drawn = [sampler.example(f) for f in ids.tolist()]
  assert decoded == [nospace((f"year: {d.year} {d.inputs}", d.targets)) for d in drawn]


# --- ensure_synthetic_data ----------------------------------------------------------------


def _fake_builders(monkeypatch, calls):
  """Replaces the three builders with quick ones that record their calls (for the race test)."""

  def world(out, params):
    calls.append("world")
    time.sleep(0.2)  # long enough for the other threads to arrive while the lock is held
    os.makedirs(out)
    open(os.path.join(out, "news.jsonl"), "w").close()
    with open(os.path.join(out, datasets._BUILD_INFO), "w") as f:
      json.dump(params, f)

  def part(name):
    def build(world_dir, out, *args):
      calls.append(name)
      os.makedirs(out)
      open(os.path.join(out, "done"), "w").close()

    return build

  monkeypatch.setattr(datasets, "_build_world", world)
  monkeypatch.setattr(datasets, "_build_templama", part("templama"))
  monkeypatch.setattr(datasets, "_build_ssm", part("ssm"))


def test_concurrent_first_use_builds_once(tmp_path, monkeypatch):
  calls = []
  _fake_builders(monkeypatch, calls)
  results, errors = [], []

  def use():
    try:
      results.append(datasets.ensure_synthetic_data(str(tmp_path / "cache"), seed=3, scale=0.5))
    except Exception as e:  # surfaced below
      errors.append(e)

  threads = [threading.Thread(target=use) for _ in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors
  assert sorted(calls) == ["ssm", "templama", "world"]
  cache = str(tmp_path / "cache")
  assert (
    results
    == [
      datasets.SyntheticData(
        world_dir=f"{cache}/world",
        news_ssm_dir=f"{cache}/ssm",
        templama_dir=f"{cache}/templama",
        vocab_path=f"{cache}/world/spiece.model",
        future_relations_dir=f"{cache}/world/future_relations",
      )
    ]
    * 4
  )
  assert sorted(os.listdir(cache)) == [".lock", "ssm", "templama", "world"]  # no temp dirs left
  with pytest.raises(ConfigError, match=r"seed': 3, 'scale': 0.5, 'version': 4}, not \{'seed': 4"):
    datasets.ensure_synthetic_data(cache, seed=4, scale=0.5)


def test_failed_build_leaves_nothing_and_is_retried(tmp_path, monkeypatch):
  calls = []
  _fake_builders(monkeypatch, calls)

  def broken(world_dir, out, *args):
    os.makedirs(out)
    raise DataError("bad line", "facts.tsv", 7)

  monkeypatch.setattr(datasets, "_build_templama", broken)
  cache = str(tmp_path / "cache")
  with pytest.raises(DataError, match="facts.tsv:7: bad line"):
    datasets.ensure_synthetic_data(cache)
  assert sorted(os.listdir(cache)) == [".lock", "world"]
  _fake_builders(monkeypatch, calls)
  datasets.ensure_synthetic_data(cache)
  assert calls == ["world", "templama", "ssm"]  # the world was kept, the rest built now


# --- the real builders on a small synthetic world -----------------------------------------

_USE = """
import sys
from tlm.input import datasets
from tlm.store import store
print(datasets.ensure_synthetic_data(sys.argv[1], seed=0, scale=1.0).news_ssm_dir)
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  """The default world, built by two processes racing on an empty cache directory."""
  cache = str(tmp_path_factory.mktemp("cache") / "world-s0-x1")
  env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
  procs = [
    subprocess.Popen(
      [sys.executable, "-c", _USE, cache],
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      env=env,
    )
    for _ in range(2)
  ]
  outs = [p.communicate(timeout=600) for p in procs]
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err
    assert out.strip() == os.path.join(cache, "ssm")
  return cache


def test_ensure_synthetic_data_builds_every_part(world):
  assert sorted(os.listdir(world)) == [".lock", "ssm", "templama", "world"]  # no temp dirs
  t0 = time.perf_counter()
  paths = datasets.ensure_synthetic_data(world, seed=0, scale=1.0)
  assert time.perf_counter() - t0 < 1.0  # already built: nothing is rebuilt
  assert os.path.isfile(paths.vocab_path) and os.path.isdir(paths.future_relations_dir)
  for split in SPLITS:
    assert os.path.isfile(os.path.join(paths.templama_dir, f"{split}.json"))
    for year in range(2010, 2021):
      assert os.path.isfile(os.path.join(paths.news_ssm_dir, split, f"{year}.text.idx"))
  assert store.is_store(paths.news_ssm_dir)
  with pytest.raises(ConfigError, match="use another cache directory"):
    datasets.ensure_synthetic_data(world, seed=0, scale=2.0)


def test_synthetic_world_drives_the_temporal_mixture(world):
  paths = datasets.ensure_synthetic_data(world, seed=0, scale=1.0)
  years = tuple(range(2010, 2019))
  sources = datasets.load_sources(
    paths.news_ssm_dir, paths.templama_dir, years=years, split="train"
  )
  for name, by_year in sources.items():
    assert all(by_year[y] for y in years), name
  news_sizes = [len(sources["news_ssm"][y]) for y in years]
  assert news_sizes[-1] > news_sizes[0]  # more recent news, as in CustomNews
  sampler = MixtureSampler(
    sources, seed=0, years=years, source_weights={"news_ssm": 1000, "templama": 1}
  )
  n = 90_000
  drawn = sampler.source_and_year(sampler.flat_ids(0, np.arange(n), 0))[1]
  sigma = np.sqrt(n * (1 / 9) * (8 / 9))
  for y in years:  # uniform over years although the slices grow with the year
    assert abs((drawn == y).sum() - n / 9) <= 4 * sigma, y
  vocab = Vocabulary(paths.vocab_path)
  batcher = Batcher(sampler, vocab, rows=16, input_length=64, target_length=16)
  batch, stats = batcher.batch_with_stats(0)
  ids, _ = batcher.select(0, np.arange(16))
  assert stats.examples == ids.size > 16
  for (inputs, targets), f in zip([e for row in unpack(batch) for e in row], ids.tolist()):
    draw = sampler.example(f)
    prefix = vocab.encode(f"year: {draw.year}")
    assert inputs[: len(prefix)] == prefix
    assert inputs == with_eos(vocab.encode(f"year: {draw.year} {draw.inputs}"), 64)[0].tolist()
    assert targets == with_eos(vocab.encode(draw.targets), 16)[0].tolist()
  held_out = datasets.load_sources(paths.news_ssm_dir, years=[2019, 2020], split="test")
  assert all(held_out["news_ssm"][y] for y in (2019, 2020))
