"""`build_ssm --shuffle_seed` and `--mode=shuffle_store`: every table in a seeded order
(tlm/store/store_shuffle.py, tlm/store/store_reorder.py).

The default build is the store built before the option existed, byte for byte; a shuffled one
holds, per table, the same examples as the corpus-order one, in an order that does not depend
on the chunks, the workers, the slices or buckets of the merge or the builder (local or Beam);
its manifest says so; `--mode=shuffle_store` of the corpus-order build is the shuffled build,
byte for byte, locally and on gs://, resumes after a kill and does nothing when run again; the
block sampler refuses a store in corpus order in one line (unless data.allow_corpus_order);
and a window of consecutive examples of a shuffled table spans its year."""

import hashlib
import json
import os
import re
import shutil

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
  one_error,
  run_tlm,
)
from tlm import configs
from tlm.data import ssm
from tlm.errors import ConfigError, DataError, UserError
from tlm.input.sampling import MixtureSampler
from tlm.store import store, store_build, store_reorder, store_shuffle
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
  assert manifest["order"] == {"kind": "shuffled", "seed": 0, "version": 2}
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


def test_shuffled_order_does_not_depend_on_workers_chunks_slices_or_buckets(
  shuffled_store, tmp_path, monkeypatch
):
  """Two processes over 4 KB chunks, parts keyed in ~500-byte slices, the merge in ~1 KB
  buckets (dozens per table): the one process, whole-file, one-bucket build's bytes."""
  monkeypatch.setattr(store_build, "MIN_CHUNK_BYTES", 4096)
  monkeypatch.setattr(store_shuffle, "BUCKET_BYTES", 1024)
  monkeypatch.setattr(store_shuffle, "SLICE_BYTES", 500)
  assert len(store_build.plan_chunks([NEWS_SAMPLE], 2)) > 6
  out = _build(tmp_path / "ssm", num_workers=2, shuffle_seed=0)
  assert file_hashes(out) == file_hashes(shuffled_store)
  other = _build(tmp_path / "seed1", num_workers=1, shuffle_seed=1)
  assert file_hashes(other) != file_hashes(out)
  assert store.read_manifest(other)["order"] == {"kind": "shuffled", "seed": 1, "version": 2}


def _keyed_parts(
  tmp_path, split="train", year=2014, units=4, per_unit=40, seed=5, slice_bytes=None
):
  """Unkeyed parts of texts numbered by their corpus position ("p<i>"), keyed in slices."""
  from tlm.store import store_write

  parts, i = str(tmp_path / "parts"), 0
  for unit in range(units):
    writer = store_write.PartWriter(parts, unit)
    for k in range(per_unit):
      writer.add_text(split, year, f"in {unit}.{k}" + "x" * k, f"p{i}")
      i += 1
    writer.close()
  prefixes = [store_write.part_prefix(parts, u, split, year, store.TEXT) for u in range(units)]
  runs = [store_shuffle.PartRun(p) for p in prefixes]
  scratch = str(tmp_path / "keyed" / str(slice_bytes))
  return store_shuffle.key_runs(runs, seed, split, year, 1, scratch, slice_bytes), i


def test_merge_in_any_number_of_buckets_and_slices_is_one_sort(tmp_path):
  """Parts keyed in 1 or many slices, merged in 1, 3 or 50 buckets: the same files, the
  examples in the order of their positions' keys."""
  results = []
  for slice_bytes, bucket_bytes in ((1 << 30, 1 << 30), (300, 2000), (120, 100)):
    keyed, n = _keyed_parts(tmp_path, slice_bytes=slice_bytes)
    out = str(tmp_path / f"b{bucket_bytes}")
    got = store_shuffle.merge_shuffled(out, "train", 2014, store.TEXT, 1, keyed, bucket_bytes)
    results.append((got.pop("buckets"), len(keyed), got, file_hashes(out)))
  assert results[0][:2] == (1, 4) and results[2][0] > 30 and results[2][1] > 20
  assert results[0][2:] == results[1][2:] == results[2][2:]
  data = open(os.path.join(str(tmp_path / "b100"), "train/2014.text.bin"), "rb").read()
  positions = [int(t) for t in re.findall(rb"p(\d+)", data)]
  want = np.argsort(store_shuffle.keys(5, "train", 2014, 0, n), kind="stable")
  np.testing.assert_array_equal(positions, want)
  assert sorted(positions) == list(range(n))
  # The keys: distinct, and the same function for the builder and shuffle_store.
  k = store_shuffle.keys(5, "train", 2014, 0, 100_000)
  assert np.unique(k).size == k.size and k.dtype == np.uint64
  np.testing.assert_array_equal(store_shuffle.keys(5, "train", 2014, 700, 5), k[700:705])
  assert not np.array_equal(store_shuffle.keys(5, "val", 2014, 0, 5), k[:5])


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
    {"kind": "shuffled", "seed": 0, "version": 3},
    {"kind": "shuffled", "seed": 0, "version": True},
  ):
    manifest["order"] = bad
    with open(path, "w") as f:
      json.dump(manifest, f)
    with pytest.raises(DataError, match="order"):
      store.read_manifest(out)
  for old in ({"kind": "shuffled", "seed": 0}, {"kind": "shuffled", "seed": 0, "version": 1}):
    manifest["order"] = old  # shuffled before the position keys: still read
    with open(path, "w") as f:
      json.dump(manifest, f)
    assert store.Store(out).order == store.SHUFFLED
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


def test_block_sampler_refuses_a_store_in_corpus_order(shuffled_store, capsys):
  """One line naming --mode=shuffle_store; data.allow_corpus_order=true warns once instead."""
  from tlm.input import mixture as train_data

  def start(ssm_dir, sampler, *sets):
    train_data._WARNED.clear()
    sets = [*FIXTURE_DATA_SETS, f"data.ssm_dir={ssm_dir}", f"data.sampler={sampler}", *sets]
    config = configs.override(configs.get("tiny_temporal"), [*sets, "train.batch_size=8"])
    data = train_data.TrainingData(config)
    train_data.make_batcher(config.data, data.sources, data.vocab, rows=8)  # a second batcher
    data.close()
    return [line for line in capsys.readouterr().err.splitlines() if "corpus order" in line]

  corpus_dir = dict(s.split("=", 1) for s in FIXTURE_DATA_SETS)["data.ssm_dir"]
  with pytest.raises(ConfigError) as refused:
    start(corpus_dir, "block")
  message = str(refused.value)
  assert message.startswith(f"{corpus_dir}: example store in corpus order") and "\n" not in message
  assert f"--mode=shuffle_store --data={corpus_dir} --output_dir=NEW_DIR" in message
  assert "data.allow_corpus_order=true" in message
  lines = start(corpus_dir, "block", "data.allow_corpus_order=true")
  assert len(lines) == 1 and lines[0].startswith("warning: ") and "shuffle_store" in lines[0]
  assert start(corpus_dir, "example") == []
  assert start(shuffled_store, "block") == []
  sources = {"news_ssm": {2014: store.Store(shuffled_store).table("train", 2014)}}
  sampler = MixtureSampler(sources, seed=0, years=[2014], source_weights={"news_ssm": 1})
  assert sampler.corpus_order_stores() == []
  corpus = {"news_ssm": {2014: store.Store(corpus_dir).table("train", 2014)}}
  sampler = MixtureSampler(corpus, seed=0, years=[2014], source_weights={"news_ssm": 1})
  assert sampler.corpus_order_stores() == [corpus_dir]


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
  prefixes, _ = _keyed_parts(tmp_path, "val", 2019, units=3, per_unit=30)
  before = file_hashes(str(tmp_path / "keyed"))
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
  assert file_hashes(out) == file_hashes(str(tmp_path / "clean"))
  assert file_hashes(str(tmp_path / "keyed")) == before


# ---- --mode=shuffle_store ----------------------------------------------------------------------


def test_shuffle_store_is_the_build_with_shuffle_seed(corpus_store, shuffled_store, tmp_path):
  """The corpus-order build re-ordered (in ~1 KB buckets) is the shuffled build, byte for
  byte; run again it does nothing, and so it does on a shuffled store."""
  out = str(tmp_path / "out")
  got = store_reorder.shuffle_store(corpus_store, out, 0, bucket_bytes=1024)
  assert not got["unchanged"] and got["fields_done"] == 55 and got["fields_resumed"] == 0
  assert file_hashes(out) == file_hashes(shuffled_store)  # .shuffle/ is gone too
  mtimes = {p: os.stat(os.path.join(out, p)).st_mtime_ns for p in file_hashes(out)}
  assert store_reorder.shuffle_store(corpus_store, out, 0)["unchanged"]
  assert {p: os.stat(os.path.join(out, p)).st_mtime_ns for p in file_hashes(out)} == mtimes
  assert store_reorder.shuffle_store(shuffled_store, str(tmp_path / "x"), 0)["unchanged"]
  assert not os.path.exists(tmp_path / "x")
  with pytest.raises(UserError, match="already shuffled with seed 0; re-order the store"):
    store_reorder.shuffle_store(shuffled_store, str(tmp_path / "x"), 1)
  with pytest.raises(UserError, match="must differ from --data"):
    store_reorder.shuffle_store(corpus_store, corpus_store, 0)
  with pytest.raises(UserError, match="holds other files"):
    store_reorder.shuffle_store(corpus_store, os.path.dirname(corpus_store), 0)


def test_shuffle_store_killed_then_run_again_resumes(
  corpus_store, shuffled_store, tmp_path, monkeypatch
):
  """A run lost in its 20th table field, then run again: it keeps the 19 it finished (bar one
  whose record was damaged) and writes the shuffled build's bytes; an older store in the output
  directory stops being one at the start."""
  out = str(tmp_path / "out")
  shutil.copytree(corpus_store, out)  # a store there already: replaced
  calls = fail_on_call(monkeypatch, store_shuffle, "merge_shuffled", 20)
  with pytest.raises(Crash):
    store_reorder.shuffle_store(corpus_store, out, 0)
  assert not os.path.exists(os.path.join(out, store.MANIFEST))
  work = os.listdir(os.path.join(out, store_reorder.WORK_DIR))
  assert len(work) == 1 and len(os.listdir(os.path.join(out, ".shuffle", work[0], "done"))) == 19
  done = os.path.join(out, ".shuffle", work[0], "done")
  with open(os.path.join(done, sorted(os.listdir(done))[0]), "w") as f:
    f.write("{not json")  # a damaged record: its table field is done again
  got = store_reorder.shuffle_store(corpus_store, out, 0)
  assert (got["fields_resumed"], got["fields_done"]) == (18, 37) and len(calls) == 20 + 37
  assert file_hashes(out) == file_hashes(shuffled_store)


def test_shuffle_store_on_gs_equals_the_local_one(corpus_store, shuffled_store, tmp_path):
  """gs:// to gs:// through the latency double (no latency): the same objects."""
  from tests import objstore, remote_store

  remote_store.install(str(tmp_path / "bucket-root"), latency_s=0.0)
  try:
    shutil.copytree(corpus_store, objstore.local_path("gs://bucket/corpus"))
    got = store_reorder.shuffle_store(
      "gs://bucket/corpus", "gs://bucket/shuffled", 0, bucket_bytes=4096
    )
    assert got["fields_done"] == 55
    assert file_hashes(objstore.local_path("gs://bucket/shuffled")) == file_hashes(shuffled_store)
  finally:
    objstore.uninstall()


def test_shuffle_store_from_the_command_line(corpus_store, shuffled_store, tmp_path):
  out = str(tmp_path / "out")
  proc = run_tlm(
    "--mode=shuffle_store", f"--data={corpus_store}", f"--output_dir={out}", cwd=str(tmp_path)
  )
  one_error(proc, "--mode=shuffle_store needs --shuffle_seed=N (N >= 0)")
  args = [
    "--mode=shuffle_store",
    f"--data={corpus_store}",
    f"--output_dir={out}",
    "--shuffle_seed=0",
  ]
  proc = run_tlm(*args, "--num_workers=2", cwd=str(tmp_path))
  assert proc.returncode == 0, proc.stderr
  assert "shuffled with seed 0, 33 tables, 2102 examples" in proc.stdout
  assert file_hashes(out) == file_hashes(shuffled_store)
  proc = run_tlm(*args, cwd=str(tmp_path))
  assert proc.returncode == 0 and "nothing to do" in proc.stdout, proc.stderr
