"""`build_ssm --shuffle_seed`: every table in a seeded order (tlm/store/store_shuffle.py).

The default build is the store built before the option existed, byte for byte; a shuffled one
holds, per table, the same examples as the corpus-order one, in an order that does not depend
on the chunks, the workers, the buckets of the merge or the builder (local or Beam); its
manifest says so; the block sampler warns once about a store in corpus order; and a window of
consecutive examples of a shuffled table spans its year."""

import hashlib
import json
import os
import re

import numpy as np
import pytest

from tests.helpers import (
  BEAM_MULTI_PROCESS,
  ENTITIES_SAMPLE,
  FIXTURE_DATA_SETS,
  NEWS_SAMPLE,
  ROOT,
  SPIECE_MODEL,
  Crash,
  beam_or_skip,
  fail_on_call,
  file_hashes,
)
from tlm import configs
from tlm.data import ssm
from tlm.errors import DataError, UserError
from tlm.input import block_sampling
from tlm.store import store, store_build, store_shuffle
from tlm.store.build_ssm import build_ssm

# The default (corpus-order) build of the fixture news, tokenized, two workers, as the builder
# at the commit before `--shuffle_seed` wrote it: its manifest (which holds every table file's
# SHA-256) and stats.json.
DEFAULT_MANIFEST_SHA256 = "d02826232c8b65e23d1fbc9c2b47149ddaf40267499b5fc6f28c04668d0236ba"
DEFAULT_STATS_SHA256 = "8edb5f10a2f804c63b193ccc52f94b73a20480edf73fd1d1504500dc84c08f8f"


def _sha(path: str) -> str:
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def _build(out, **kw):
  build_ssm(NEWS_SAMPLE, str(out), gazetteer=ENTITIES_SAMPLE, seed=3, vocab=SPIECE_MODEL, **kw)
  return str(out)


@pytest.fixture(scope="module")
def corpus_store(tmp_path_factory):
  return _build(tmp_path_factory.mktemp("corpus") / "ssm", num_workers=2)


@pytest.fixture(scope="module")
def shuffled_store(tmp_path_factory):
  return _build(tmp_path_factory.mktemp("shuffled") / "ssm", num_workers=1, shuffle_seed=0)


def _examples(path: str, key: str) -> list[bytes]:
  """A table's examples, each as the bytes of its fields (tokens, then text if held)."""
  split, year = key.split("/")
  table = store.Store(path).table(split, int(year))
  try:
    ins, tgs = table.token_run(0, len(table))
    out = [a.tobytes() + b"|" + b.tobytes() for a, b in zip(ins, tgs)]
    if table.has_text:
      out = [o + repr(t).encode() for o, t in zip(out, table.texts(np.arange(len(table))))]
    return out
  finally:
    table.close()


def test_default_build_is_the_store_built_before_the_option(corpus_store, tmp_path):
  assert _sha(os.path.join(corpus_store, store.MANIFEST)) == DEFAULT_MANIFEST_SHA256
  assert _sha(os.path.join(corpus_store, "stats.json")) == DEFAULT_STATS_SHA256
  assert "order" not in store.read_manifest(corpus_store)
  assert store.Store(corpus_store).order == store.CORPUS
  negative = _build(tmp_path / "negative", num_workers=1, shuffle_seed=-1)  # the flag's default
  assert file_hashes(negative) == file_hashes(corpus_store)


def test_shuffled_tables_are_permutations_of_the_corpus_order_ones(corpus_store, shuffled_store):
  manifest = store.read_manifest(shuffled_store)
  assert manifest["order"] == {"kind": "shuffled", "seed": 0}
  assert store.Store(shuffled_store).order == store.SHUFFLED
  corpus_manifest = store.read_manifest(corpus_store)
  assert {k: v["examples"] for k, v in manifest["tables"].items()} == {
    k: v["examples"] for k, v in corpus_manifest["tables"].items()
  }  # the same held-out articles, the same tables
  moved = 0
  for key in manifest["tables"]:
    want, got = _examples(corpus_store, key), _examples(shuffled_store, key)
    assert sorted(got) == sorted(want), key  # text and tokens moved together
    moved += got != want
  assert moved >= len(manifest["tables"]) - 2  # a one- or two-example table may stay put
  with open(os.path.join(shuffled_store, "stats.json")) as a:
    with open(os.path.join(corpus_store, "stats.json")) as b:
      assert json.load(a) == json.load(b)
  assert store.verify(shuffled_store)["examples"] == store.verify(corpus_store)["examples"]


def test_shuffled_order_does_not_depend_on_workers_chunks_or_buckets(
  shuffled_store, tmp_path, monkeypatch
):
  """Two processes over 4 KB chunks, the merge in ~1 KB buckets (dozens per table): the one
  process, whole-file, one-bucket build's bytes."""
  monkeypatch.setattr(store_build, "MIN_CHUNK_BYTES", 4096)
  monkeypatch.setattr(store_shuffle, "BUCKET_BYTES", 1024)
  assert len(store_build.plan_chunks([NEWS_SAMPLE], 2)) > 6
  out = _build(tmp_path / "ssm", num_workers=2, shuffle_seed=0)
  assert file_hashes(out) == file_hashes(shuffled_store)
  other = _build(tmp_path / "seed1", num_workers=1, shuffle_seed=1)
  assert file_hashes(other) != file_hashes(out)
  assert store.read_manifest(other)["order"] == {"kind": "shuffled", "seed": 1}


def test_merge_in_any_number_of_buckets_is_one_sort(tmp_path):
  """Keyed parts merged in 1, 3 or 50 buckets: the same files, in key order."""
  from tlm.store import store_write

  rng = np.random.default_rng(0)
  parts, keys = str(tmp_path / "parts"), []
  for unit in range(4):
    writer = store_write.PartWriter(parts, unit, keyed=True)
    for i in range(40):
      k = int(rng.integers(2**64, dtype=np.uint64))
      keys.append(k)
      writer.add_text("train", 2014, f"in {unit}.{i}" + "x" * i, f"t{k}", k)
    writer.close()
  prefixes = [store_write.part_prefix(parts, u, "train", 2014, store.TEXT) for u in range(4)]
  results = []
  for bucket_bytes in (1 << 30, 2000, 100):
    out = str(tmp_path / f"b{bucket_bytes}")
    got = store_shuffle.merge_shuffled(out, "train", 2014, store.TEXT, 1, prefixes, bucket_bytes)
    results.append((got.pop("buckets"), got, file_hashes(out)))
  assert [r[0] for r in results][0] == 1 and results[2][0] > 30
  assert results[0][1:] == results[1][1:] == results[2][1:]
  data = open(os.path.join(str(tmp_path / "b100"), "train/2014.text.bin"), "rb").read()
  assert [int(t) for t in re.findall(rb"t(\d+)", data)] == sorted(keys)
  with pytest.raises(ValueError):  # a keyed writer needs keys
    store_write.PartWriter(parts, 9, keyed=True).add_text("train", 2014, "a", "b")


def test_manifest_order_entry_is_checked(corpus_store, tmp_path):
  import shutil

  out = str(tmp_path / "s")
  shutil.copytree(corpus_store, out)
  path = os.path.join(out, store.MANIFEST)
  manifest = json.loads(open(path).read())
  for bad in (
    {"kind": "sorted"},
    {"kind": "shuffled"},
    "shuffled",
    {"kind": "shuffled", "seed": "0"},
  ):
    manifest["order"] = bad
    with open(path, "w") as f:
      json.dump(manifest, f)
    with pytest.raises(DataError, match="order"):
      store.read_manifest(out)
  with pytest.raises(UserError):
    ssm.BuildSettings(None, 0, 1, 0.1, 8, None, -2)


def _positions(corpus: list[bytes], shuffled: list[bytes]) -> np.ndarray:
  """The corpus-order position of each example of the shuffled table."""
  where: dict[bytes, list[int]] = {}
  for i, e in enumerate(corpus):
    where.setdefault(e, []).append(i)
  return np.array([where[e].pop() for e in shuffled])


def test_a_window_of_a_shuffled_table_spans_its_year(corpus_store, shuffled_store):
  """The statistic: the spread (max - min) of the corpus positions (articles are in corpus
  order) of a window of w consecutive examples, as a share of the table. Corpus order:
  ~w / n; shuffled: ~(w - 1) / (w + 1), the spread of w uniform draws."""
  spreads = {"corpus": [], "shuffled": []}
  for year in range(2010, 2021):
    key = f"train/{year}"
    corpus, shuffled = _examples(corpus_store, key), _examples(shuffled_store, key)
    n, w = len(corpus), len(corpus) // 10
    pos = _positions(corpus, shuffled)
    for start in range(0, n - w + 1, w):
      window = pos[start : start + w]
      spreads["shuffled"].append((window.max() - window.min()) / n)
      spreads["corpus"].append((w - 1) / n)  # a window of corpus order is consecutive
  corpus_spread, shuffled_spread = np.mean(spreads["corpus"]), np.mean(spreads["shuffled"])
  assert corpus_spread < 0.11 and shuffled_spread > 0.75, (corpus_spread, shuffled_spread)


def test_block_sampler_warns_once_about_a_store_in_corpus_order(shuffled_store, capsys):
  from tlm.input import mixture as train_data

  def start(ssm_dir, sampler):
    train_data._WARNED.clear()
    sets = [*FIXTURE_DATA_SETS, f"data.ssm_dir={ssm_dir}", f"data.sampler={sampler}"]
    config = configs.override(configs.get("tiny_temporal"), [*sets, "train.batch_size=8"])
    data = train_data.TrainingData(config)
    train_data.make_batcher(config.data, data.sources, data.vocab, rows=8)  # a second batcher
    data.close()
    return [line for line in capsys.readouterr().err.splitlines() if "corpus order" in line]

  corpus_dir = dict(s.split("=", 1) for s in FIXTURE_DATA_SETS)["data.ssm_dir"]
  lines = start(corpus_dir, "block")
  assert len(lines) == 1 and lines[0].startswith("warning: ") and "--shuffle_seed" in lines[0]
  assert start(corpus_dir, "example") == []
  assert start(shuffled_store, "block") == []
  tables = [store.Store(shuffled_store).table("train", 2014)]
  assert block_sampling.corpus_order_warning(tables) == ""


def test_beam_writes_the_local_shuffled_store(tmp_path, monkeypatch, shuffled_store):
  beam_or_skip()
  monkeypatch.setenv("PYTHONPATH", ROOT)  # the worker processes import tlm
  monkeypatch.setattr(store_build, "MIN_CHUNK_BYTES", 4096)  # several chunks of the 80 KB input
  out = _build(tmp_path / "beam", beam_options=BEAM_MULTI_PROCESS, shuffle_seed=0)
  assert file_hashes(out) == file_hashes(shuffled_store)
  direct = _build(tmp_path / "direct", beam_options="--runner=DirectRunner", shuffle_seed=0)
  assert file_hashes(direct) == file_hashes(shuffled_store)


def test_shuffled_merge_failed_half_way_then_run_again_is_one_run(tmp_path, monkeypatch):
  """A merge lost after some buckets (a preempted worker) and retried, then run a second time:
  the files of one clean run; its parts are only read."""
  from tlm.store import store_write

  parts = str(tmp_path / "parts")
  for unit in range(3):
    writer = store_write.PartWriter(parts, unit, keyed=True)
    for i in range(30):
      writer.add_text("val", 2019, f"u{unit} e{i}", "t", store_shuffle.key(5, 2019, unit, i))
    writer.close()
  prefixes = [store_write.part_prefix(parts, u, "val", 2019, store.TEXT) for u in range(3)]
  before = file_hashes(parts)
  clean = store_shuffle.merge_shuffled(
    str(tmp_path / "clean"), "val", 2019, "text", 1, prefixes, 64
  )
  out = str(tmp_path / "out")
  fail_on_call(monkeypatch, store_shuffle, "_read_range", 20)
  with pytest.raises(Crash):
    store_shuffle.merge_shuffled(out, "val", 2019, store.TEXT, 1, prefixes, 64)
  assert not os.path.exists(os.path.join(out, "val/2019.text.bin"))  # nothing half-written
  again = store_shuffle.merge_shuffled(out, "val", 2019, store.TEXT, 1, prefixes, 64)
  assert again == clean and again["buckets"] >= 8
  assert store_shuffle.merge_shuffled(out, "val", 2019, store.TEXT, 1, prefixes, 64) == clean
  assert file_hashes(out) == file_hashes(str(tmp_path / "clean")) and file_hashes(parts) == before
