"""The example store (tlm/store/store*.py): batches bit-identical to the in-memory ones of the
code before the store, the builder's output identical for any number of workers and any
sharding, hostile store files refused with one line naming the file, gs:// reads, and the
conversion of JSON-lines SSM directories."""

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

from tests.fixtures.data.store import make_golden
from tests.helpers import DATA
from tlm.data.vocab import Vocabulary, train_sentencepiece
from tlm.errors import DataError, UserError
from tlm.input import datasets
from tlm.input.packing import Batcher
from tlm.input.sampling import MixtureSampler
from tlm.store import store, store_build, store_convert
from tlm.store.build_ssm import build_ssm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "data", "store")
JSONL_SSM = os.path.join(FIXTURES, "tiny_ssm_jsonl")  # the fixture's SSM before the store
NEWS = os.path.join(FIXTURES, "news_sample.jsonl")  # every 40th article of the world's news
ENTITIES = os.path.join(FIXTURES, "entities_sample.tsv")
VOCAB = os.path.join(DATA, "spiece.model")

# Written by tests/fixtures/data/store/make_golden.py with the code of commit a1c6c45 (before
# the store): name -> (split, conditioning, seed, years, new_years, alpha, packed, steps).
GOLDEN_CASES = make_golden.CASES


def _batcher(ssm_dir, case, cache_size=1 << 17):
  split, cond, seed, years, new_years, alpha, packed, _ = GOLDEN_CASES[case]
  years = tuple(years)
  sources = datasets.load_sources(
    ssm_dir, os.path.join(DATA, "templama"), years=years + tuple(new_years), split=split
  )
  sampler = MixtureSampler(
    sources,
    seed=seed,
    years=years,
    source_weights={"news_ssm": 1000.0, "templama": 1.0},
    new_years=new_years,
    new_year_prob=alpha,
  )
  return Batcher(
    sampler,
    Vocabulary(VOCAB),
    conditioning=cond,
    rows=8,
    input_length=32,
    target_length=8,
    packed=packed,
    cache_size=cache_size,
  )


@pytest.fixture(scope="module")
def text_store(tmp_path_factory):
  """The fixture's JSON-lines SSM directory, converted in place (a text store)."""
  path = str(tmp_path_factory.mktemp("text") / "ssm")
  shutil.copytree(JSONL_SSM, path)
  store_convert.open_ssm_store(path)
  return path


@pytest.mark.parametrize("kind", ["tokenized", "text", "text_small_cache"])
def test_batches_bit_identical_to_before_the_store(kind, text_store):
  golden = np.load(os.path.join(FIXTURES, "golden_batches.npz"))
  ssm_dir = os.path.join(DATA, "ssm") if kind == "tokenized" else text_store
  assert store.Store(ssm_dir).vocab_sha256 == ("" if kind != "tokenized" else _sha(VOCAB))
  checked = 0
  for case, spec in GOLDEN_CASES.items():
    # A cache of 3 entries: the batches may not depend on what is cached.
    b = _batcher(ssm_dir, case, cache_size=3 if kind == "text_small_cache" else 1 << 17)
    for step in spec[-1]:
      full = b.batch(step)
      for k, v in full.items():
        np.testing.assert_array_equal(v, golden[f"{case}/{step}/all/{k}"], f"{case} {step} {k}")
        checked += 1
      for proc in range(2):  # each of two processes builds its half, the same rows
        half = b.batch(step, proc, 2)
        for k, v in half.items():
          np.testing.assert_array_equal(v, full[k][proc * 4 : (proc + 1) * 4])
    if kind == "text_small_cache":
      assert len(b._text_cache) <= 3 and len(b._example_cache) <= 3
  assert checked == len(golden.files)


def _sha(path):
  return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _tree(path):
  out = {}
  for top, _, names in os.walk(path):
    for name in names:
      with open(os.path.join(top, name), "rb") as f:
        out[os.path.relpath(os.path.join(top, name), path)] = f.read()
  return out


def test_build_ssm_equals_the_builder_before_the_store(tmp_path):
  """Same examples, split and statistics as the JSON-lines builder of commit a1c6c45."""
  golden = json.load(open(os.path.join(FIXTURES, "golden_ssm.json")))
  for seed, want in golden.items():
    out = str(tmp_path / f"seed{seed}")
    stats = build_ssm(NEWS, out, gazetteer=ENTITIES, seed=int(seed))
    assert stats == want["stats"]
    with open(os.path.join(out, "stats.json")) as f:
      assert json.load(f) == stats
    built = store.Store(out)
    for key, (n, digest) in want["examples"].items():
      split, year = key.split("/")
      table = built.table(split, int(year))
      pairs = [list(p) for p in table.texts(np.arange(len(table)))] if len(table) else []
      assert len(pairs) == n, key
      text = json.dumps(pairs, ensure_ascii=False).encode("utf-8")
      assert hashlib.sha256(text).hexdigest() == digest, key
    assert store.verify(out)["examples"] == stats["totals"]["examples"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
  """The news sample as 4 shards (the third gzipped) and as one gzipped file."""
  d = tmp_path_factory.mktemp("shards")
  lines = open(NEWS, encoding="utf-8").read().splitlines(keepends=True)
  names = []
  for i in range(4):
    part = "".join(lines[i * 100 : (i + 1) * 100])
    name = d / (f"news-{i}.jsonl.gz" if i == 2 else f"news-{i}.jsonl")
    if i == 2:
      with gzip.open(name, "wt", encoding="utf-8") as f:
        f.write(part)
    else:
      name.write_text(part, encoding="utf-8")
    names.append(str(name))
  with gzip.open(d / "all.jsonl.gz", "wt", encoding="utf-8") as f:
    f.write("".join(lines))
  return {"list": ",".join(names), "glob": str(d / "news-*"), "gz": str(d / "all.jsonl.gz")}


@pytest.mark.parametrize("vocab", [None, VOCAB], ids=["text", "tokenized"])
def test_build_identical_for_workers_and_shardings(tmp_path, monkeypatch, shards, vocab):
  monkeypatch.setattr(store_build, "MIN_CHUNK_BYTES", 4096)  # many chunks of the 80 KB input
  assert len(store_build.plan_chunks([NEWS], 3)) > 6
  ref = None
  runs = [
    (1, NEWS),
    (2, NEWS),
    (3, NEWS),
    (2, shards["list"]),
    (1, shards["glob"]),
    (2, shards["gz"]),
  ]
  for workers, news in runs:
    out = str(tmp_path / f"out-{workers}-{len(news)}")
    build_ssm(news, out, gazetteer=ENTITIES, seed=7, vocab=vocab, num_workers=workers)
    tree = _tree(out)
    ref = ref or tree
    assert tree == ref, (workers, news, sorted(k for k in tree if tree[k] != ref.get(k)))
  assert ("train/2014.tokens.bin" in ref) == (vocab is not None)
  assert ("train/2014.text.bin" in ref) == (vocab is None)
  assert "val/2014.text.bin" in ref  # held-out text is kept for evaluation


@pytest.mark.parametrize("workers", [1, 2])
def test_bad_line_in_a_later_chunk_is_named_with_its_line(tmp_path, monkeypatch, workers):
  monkeypatch.setattr(store_build, "MIN_CHUNK_BYTES", 4096)
  lines = open(NEWS, encoding="utf-8").read().splitlines(keepends=True)
  lines[300] = '{"date": "2014", "text": 7}\n'
  lines[350] = "{broken\n"  # later: the first bad line of the corpus is the one reported
  news = tmp_path / "news.jsonl"
  news.write_text("".join(lines), encoding="utf-8")
  assert len(store_build.plan_chunks([str(news)], workers)) > 6
  with pytest.raises(DataError, match=f"^{news}:301: 'text' must be a string$"):
    build_ssm(str(news), str(tmp_path / "out"), num_workers=workers)
  assert sorted(os.listdir(tmp_path)) == ["news.jsonl"]  # nothing written, no temporaries


def test_beam_direct_runner_writes_the_same_store(tmp_path, monkeypatch):
  if os.environ.get("TLM_REQUIRE_BEAM") != "1":  # .ci/run's Beam environment sets it
    pytest.importorskip("apache_beam")
  monkeypatch.setattr(store_build, "MIN_CHUNK_BYTES", 4096)
  local, beam = str(tmp_path / "local"), str(tmp_path / "beam")
  want = build_ssm(NEWS, local, gazetteer=ENTITIES, seed=3, vocab=VOCAB, num_workers=2)
  got = build_ssm(
    NEWS, beam, gazetteer=ENTITIES, seed=3, vocab=VOCAB, beam_options="--runner=DirectRunner"
  )
  assert got == want
  assert _tree(beam) == _tree(local)
  bad = tmp_path / "bad.jsonl"
  bad.write_text(open(NEWS).read() + '{"date": "2014-13-01", "text": "A."}\n')
  with pytest.raises(UserError, match=f"{bad}:380: unparsable date '2014-13-01'"):
    build_ssm(str(bad), beam, beam_options="--runner=DirectRunner")
  assert not store.is_store(beam)  # the old store was removed first, and nothing replaced it


def test_tokenized_store_holds_the_vocabulary_ids(tmp_path):
  out = str(tmp_path / "tok")
  build_ssm(NEWS, str(tmp_path / "text"), gazetteer=ENTITIES)
  vocab_path = os.path.join(DATA, "spiece.model")
  build_ssm(NEWS, out, gazetteer=ENTITIES, vocab=vocab_path)
  vocab = Vocabulary(vocab_path)
  text, tok = store.Store(str(tmp_path / "text")), store.Store(out)
  assert tok.manifest["token_dtype"] == "uint16" and tok.vocab_sha256 == _sha(vocab_path)
  for split in ("train", "val"):
    t, k = text.table(split, 2015), tok.table(split, 2015)
    ids = np.arange(len(t))
    inputs, targets = k.tokens(ids)
    for (i, g), a, b in zip(t.texts(ids), inputs, targets):
      assert a.tolist() == vocab.encode(i) and b.tolist() == vocab.encode(g)
  assert tok.table("val", 2015).texts([0]) == text.table("val", 2015).texts([0])
  with pytest.raises(DataError, match="stored as tokens only"):
    tok.table("train", 2015)[0]


# --- hostile store files ------------------------------------------------------------------------


def _copy_store(tmp_path):
  path = str(tmp_path / "ssm")
  shutil.copytree(os.path.join(DATA, "ssm"), path)
  return path


def _damage(path, how):
  """Damages train/2014 of a copied store; returns the file the error must name."""
  tokens, index = f"{path}/train/2014.tokens.bin", f"{path}/train/2014.tokens.idx"
  manifest = f"{path}/manifest.json"
  offsets = np.fromfile(index, "<i8")
  if how == "truncated_tokens":
    with open(tokens, "r+b") as f:
      f.truncate(os.path.getsize(tokens) - 2)
    return tokens, "truncated"
  if how == "missing_index":
    os.remove(index)
    return index, "missing store file"
  if how == "truncated_index":
    with open(index, "r+b") as f:
      f.truncate(os.path.getsize(index) - 8)
    return index, "truncated"
  if how in ("decreasing", "out_of_range", "first_not_zero"):
    if how == "decreasing":
      offsets[5], offsets[6] = offsets[6], offsets[5] - 1
    elif how == "out_of_range":
      offsets[-1] += 1
    else:
      offsets[0] = 1
    offsets.astype("<i8").tofile(index)
    return index, "corrupt index"
  m = json.load(open(manifest))
  if how == "manifest_count":
    m["tables"]["train/2014"]["examples"] += 1
  elif how == "manifest_bytes":
    m["files"]["train/2014.tokens.bin"]["bytes"] += 2
  elif how == "manifest_garbage":
    open(manifest, "w").write("{not json")
    return manifest, "cannot read a JSON manifest"
  elif how == "manifest_version":
    m["version"] = 99
  json.dump(m, open(manifest, "w"))
  what = {
    "manifest_count": "examples need",
    "manifest_bytes": "manifest.json says",
    "manifest_version": "format version 99",
  }[how]
  return (tokens if how == "manifest_bytes" else manifest), what


HOSTILE = [
  "truncated_tokens",
  "truncated_index",
  "missing_index",
  "decreasing",
  "out_of_range",
  "first_not_zero",
  "manifest_count",
  "manifest_bytes",
  "manifest_garbage",
  "manifest_version",
]


@pytest.mark.parametrize("how", HOSTILE)
def test_hostile_store_files_name_the_file(tmp_path, how):
  path = _copy_store(tmp_path)
  named, what = _damage(path, how)
  with pytest.raises(DataError) as err:
    datasets.load_sources(path, years=range(2010, 2019), split="train")
  message = str(err.value)
  assert message.startswith(f"{named}: ") and what in message and "\n" not in message, message


def test_hostile_token_ids_and_another_vocabulary(tmp_path):
  path = _copy_store(tmp_path)
  bad = np.fromfile(f"{path}/train/2014.tokens.bin", "<u2")
  bad[:] = 999  # the fixture's vocabulary has 180 ids
  bad.tofile(f"{path}/train/2014.tokens.bin")
  sources = datasets.load_sources(path, years=[2014], split="train")
  sampler = MixtureSampler(sources, seed=0, years=[2014], source_weights={"news_ssm": 1})
  b = Batcher(sampler, Vocabulary(VOCAB), rows=2, input_length=32, target_length=8)
  with pytest.raises(DataError, match=r"2014.tokens.bin: token id 999 is not below"):
    b.batch(0)
  other = Vocabulary(train_sentencepiece(["Some other words, trained apart."] * 20, vocab_size=20))
  with pytest.raises(DataError, match=r"manifest.json: tokenized with the vocabulary of SHA-256"):
    Batcher(sampler, other, rows=2, input_length=32, target_length=8)


def test_verify_finds_a_changed_byte(tmp_path):
  path = _copy_store(tmp_path)
  assert store.verify(path)["examples"] == 162
  tokens = f"{path}/val/2016.tokens.bin"
  data = bytearray(open(tokens, "rb").read())
  data[3] ^= 1  # same size, same offsets: only the checksum sees it
  open(tokens, "wb").write(data)
  store.Store(path).table("val", 2016)  # opening checks sizes and offsets, not hashes
  with pytest.raises(DataError, match=f"^{tokens}: SHA-256 differs from manifest.json"):
    store.verify(path)


def _verify_within(path, seconds=60):
  """`store.verify(path)` in a daemon thread: a reader blocked on a FIFO fails the test
  instead of hanging the suite. Returns the exception it raised (None if none)."""
  outcome = {}

  def target():
    try:
      outcome["value"] = store.verify(path)
    except BaseException as e:  # noqa: BLE001 - handed to the test to assert on
      outcome["error"] = e

  thread = threading.Thread(target=target, daemon=True)
  thread.start()
  thread.join(seconds)
  assert not thread.is_alive(), f"store.verify hung on {path}"
  return outcome.get("error")


@pytest.mark.parametrize("how", ["fifo", "dev_zero"])
def test_verify_never_opens_a_special_file_listed_in_the_manifest(tmp_path, how):
  path = _copy_store(tmp_path)
  tokens = f"{path}/val/2016.tokens.bin"
  os.remove(tokens)
  if how == "fifo":
    os.mkfifo(tokens)
  else:
    os.symlink("/dev/zero", tokens)
  err = _verify_within(path)
  assert isinstance(err, DataError), err
  message = str(err)
  assert message.startswith(f"{tokens}: ") and "\n" not in message, message
  assert ("a FIFO" if how == "fifo" else "a character device") in message


@pytest.mark.parametrize("how", ["fifo", "sparse"])
def test_verify_reads_a_manifest_only_if_a_bounded_regular_file(tmp_path, how):
  path = _copy_store(tmp_path)
  manifest = f"{path}/manifest.json"
  os.remove(manifest)
  if how == "fifo":
    os.mkfifo(manifest)
  else:
    with open(manifest, "wb") as f:
      f.truncate(2 << 30)  # sparse: 2 GiB of NULs, no disk used
  err = _verify_within(path)
  assert isinstance(err, DataError), err
  message = str(err)
  assert message.startswith(f"{manifest}: ") and "\n" not in message, message
  assert ("a FIFO" if how == "fifo" else "larger than") in message


def _run(*args, timeout=300):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  return subprocess.run(
    [sys.executable, os.path.join(ROOT, "run.py"), *args],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=timeout,
  )


@pytest.mark.parametrize("how", ["decreasing", "truncated_tokens"])
def test_train_refuses_a_hostile_store_before_any_step(tmp_path, how):
  path = _copy_store(tmp_path)
  named, _ = _damage(path, how)
  workdir = tmp_path / "wd"
  sets = [
    f"data.ssm_dir={path}",
    f"data.templama_dir={DATA}/templama",
    f"data.vocab={VOCAB}",
    "data.synthetic=false",
    "train.steps=2",
  ]
  proc = _run(
    "--mode=train", "--config=tiny_temporal", f"--workdir={workdir}", *[f"--set={s}" for s in sets]
  )
  assert proc.returncode == 1
  lines = proc.stderr.strip().splitlines()
  assert lines[-1].startswith(f"error: {named}: "), proc.stderr[-2000:]
  assert not (workdir / "metrics.jsonl").exists() and not (workdir / "checkpoints").exists()


# --- gs:// and JSON-lines directories --------------------------------------------------------


def test_store_on_the_object_store_reads_like_local(bucket, tmp_path):
  from tests import objstore

  remote = f"{bucket}/data/ssm"
  shutil.copytree(os.path.join(DATA, "ssm"), objstore.local_path(remote))
  golden = np.load(os.path.join(FIXTURES, "golden_batches.npz"))
  b = _batcher(remote, "train_temporal")
  for step in range(6):
    for k, v in b.batch(step).items():
      np.testing.assert_array_equal(v, golden[f"train_temporal/{step}/all/{k}"])
  assert store.verify(remote)["tables"] == 27
  os.truncate(objstore.local_path(f"{remote}/train/2012.tokens.idx"), 16)
  with pytest.raises(DataError, match=f"^{remote}/train/2012.tokens.idx: truncated"):
    store.Store(remote).table("train", 2012)


def test_jsonl_directory_converted_once_in_place(tmp_path, capfd):
  path = str(tmp_path / "ssm")
  shutil.copytree(JSONL_SSM, path)
  store_convert.open_ssm_store(path)
  err = capfd.readouterr().err.strip().splitlines()
  assert len(err) == 1
  assert err[0].startswith(f"notice: converted the JSON-lines SSM directory {path} ")
  assert "162 examples in 27 tables" in err[0]
  manifest = open(f"{path}/manifest.json", "rb").read()
  store_convert.open_ssm_store(path)  # once: no second notice, nothing rewritten
  assert capfd.readouterr().err == "" and open(f"{path}/manifest.json", "rb").read() == manifest
  # The same tables as --mode=convert_ssm into a new directory (text: no --vocab).
  proc = _run("--mode=convert_ssm", f"--data={JSONL_SSM}", f"--output_dir={tmp_path / 'new'}")
  assert proc.returncode == 0, proc.stderr
  assert "162 examples" in proc.stdout
  new = _tree(str(tmp_path / "new"))
  assert all(new[k] == open(os.path.join(path, k), "rb").read() for k in new if k != "stats.json")


def test_jsonl_directory_with_a_bad_line_is_not_converted(tmp_path):
  path = tmp_path / "ssm"
  shutil.copytree(JSONL_SSM, path)
  with open(path / "val" / "2013.jsonl", "a") as f:
    f.write('{"inputs": "x <extra_id_0>"}\n')
  with pytest.raises(DataError, match=r"val/2013.jsonl:4: field 'targets' missing"):
    store_convert.open_ssm_store(str(path))
  assert not (path / "manifest.json").exists()
  assert sorted(os.listdir(path / "train")) == sorted(os.listdir(os.path.join(JSONL_SSM, "train")))


def test_cli_build_ssm_workers_vocab_and_check_store(tmp_path):
  out = tmp_path / "out"
  proc = _run(
    "--mode=build_ssm",
    f"--news={NEWS}",
    f"--output_dir={out}",
    f"--entities={ENTITIES}",
    f"--vocab={VOCAB}",
    "--num_workers=2",
  )
  assert proc.returncode == 0, proc.stderr
  assert "2102 examples" in proc.stdout and "tokenized (uint16" in proc.stdout
  proc = _run("--mode=check_store", f"--data={out}")
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.startswith(f"{out}: 33 tables, 2102 examples")
  os.truncate(out / "train" / "2019.tokens.bin", 10)
  proc = _run("--mode=check_store", f"--data={out}")
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1].startswith("error: ")
  assert "2019.tokens.bin" in proc.stderr


def test_the_store_and_its_builders_never_import_jax():
  code = (
    "import sys, tlm.cli.data, tlm.store.store, tlm.store.store_build, tlm.store.store_convert, "
    "tlm.store.ssm_beam, tlm.input.prefetch, tlm.input.datasets; "
    "assert not [m for m in sys.modules if m.split('.')[0] in ('jax', 'flax')]"
  )
  proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr


# --- token ids, links out of the store, read-only and interrupted conversions ------------------


def _rewrite(path, name, array):
  """Writes a store file and makes the manifest agree (a hostile user who knows the format)."""
  array.tofile(f"{path}/{name}")
  m = json.load(open(f"{path}/manifest.json"))
  m["files"][name] = {"bytes": os.path.getsize(f"{path}/{name}"), "sha256": _sha(f"{path}/{name}")}
  json.dump(m, open(f"{path}/manifest.json", "w"))


def _as_int32(path, edit=lambda ids: None):
  """The copied store's tokens as int32 (as a store of a vocabulary above 65,536 ids holds
  them), `edit(ids)` applied to train/2014's."""
  m = json.load(open(f"{path}/manifest.json"))
  m["token_dtype"] = "int32"
  json.dump(m, open(f"{path}/manifest.json", "w"))
  for name in [n for n in m["files"] if n.endswith(".tokens.bin")]:
    ids = np.fromfile(f"{path}/{name}", "<u2").astype("<i4")
    if name == "train/2014.tokens.bin":
      edit(ids)
    _rewrite(path, name, ids)


def _batcher_2014(path):
  sources = datasets.load_sources(path, years=[2014], split="train")
  sampler = MixtureSampler(sources, seed=0, years=[2014], source_weights={"news_ssm": 1})
  return Batcher(sampler, Vocabulary(VOCAB), rows=2, input_length=32, target_length=8)


def test_negative_token_ids_are_refused_by_batches_and_check_store(tmp_path):
  path = _copy_store(tmp_path)
  _as_int32(path)
  assert store.verify(path)["examples"] == 162  # int32 ids are fine as such
  _batcher_2014(path).batch(0)
  _as_int32(_copy_store(tmp_path / "neg"), lambda ids: ids.__setitem__(slice(None), -3))
  bad = str(tmp_path / "neg" / "ssm")
  tokens = f"{bad}/train/2014.tokens.bin"
  with pytest.raises(DataError, match=f"^{tokens}: token id -3 is negative"):
    _batcher_2014(bad).batch(0)
  with pytest.raises(DataError, match=f"^{tokens}: token id -3 at element 0 is outside"):
    store.verify(bad)


def test_check_store_reports_token_ids_beyond_the_vocabulary(tmp_path):
  path = _copy_store(tmp_path)
  ids = np.fromfile(f"{path}/train/2014.tokens.bin", "<u2")
  ids[7] = 180  # the fixture's vocabulary has ids 0..179
  _rewrite(path, "train/2014.tokens.bin", ids)
  with pytest.raises(DataError, match=r"2014.tokens.bin: token id 180 at element 7 is outside"):
    store.verify(path)


@pytest.mark.parametrize(
  "vocab_size, dtype, match",
  [
    (70_000, "uint16", "token_dtype uint16 cannot hold the ids of a vocabulary of 70000"),
    (0, "uint16", "vocab_size 0 is not a vocabulary's size"),
    (-5, "int32", "vocab_size -5 is not a vocabulary's size"),
  ],
)
def test_token_dtype_must_hold_the_vocabulary_at_open(tmp_path, vocab_size, dtype, match):
  path = _copy_store(tmp_path)
  m = json.load(open(f"{path}/manifest.json"))
  m["vocab"]["vocab_size"], m["token_dtype"] = vocab_size, dtype
  json.dump(m, open(f"{path}/manifest.json", "w"))
  with pytest.raises(DataError, match=f"^{path}/manifest.json: manifest: {match}"):
    store.Store(path)


def test_check_store_compares_the_manifest_vocab_size_with_the_vocabulary(tmp_path):
  path = _copy_store(tmp_path)
  m = json.load(open(f"{path}/manifest.json"))
  m["vocab"]["vocab_size"] = 60_000  # would let ids up to 59,999 through
  json.dump(m, open(f"{path}/manifest.json", "w"))
  with pytest.raises(DataError, match="vocab_size 60000, but spiece.model has 180 ids"):
    store.verify(path)


def test_store_file_linked_outside_the_store_is_refused(tmp_path):
  path = _copy_store(tmp_path)
  tokens = f"{path}/train/2014.tokens.bin"
  shutil.move(tokens, tmp_path / "elsewhere.bin")  # the same bytes: the manifest still matches
  os.symlink(tmp_path / "elsewhere.bin", tokens)
  for read in (lambda: store.Store(path).table("train", 2014), lambda: store.verify(path)):
    with pytest.raises(DataError, match=f"^{tokens}: a link to .*elsewhere.bin, outside the store"):
      read()
  # A link inside the store is followed.
  os.remove(tokens)
  shutil.move(tmp_path / "elsewhere.bin", f"{path}/train/moved.bin")
  os.symlink("moved.bin", tokens)
  store.Store(path).table("train", 2014).close()


def test_read_only_jsonl_directory_is_one_line_not_converted(tmp_path, monkeypatch):
  path = str(tmp_path / "ssm")
  shutil.copytree(JSONL_SSM, path)
  before = _tree(path)
  real_open = open

  def read_only(name, *args, **kwargs):  # a read-only file system, as root sees one
    if os.path.dirname(str(name)) == path and args and args[0] != "r":
      raise OSError(30, "Read-only file system", name)
    return real_open(name, *args, **kwargs)

  monkeypatch.setattr(store_convert, "open", read_only, raising=False)
  with pytest.raises(UserError) as err:
    store_convert.open_ssm_store(path)
  message = str(err.value)
  assert message.startswith(f"{path}: cannot convert this JSON-lines SSM directory in place")
  assert "(Read-only file system)" in message and "--mode=convert_ssm" in message
  assert _tree(path) == before


def test_interrupted_in_place_conversion_is_cleaned_up(tmp_path):
  path = tmp_path / "ssm"
  shutil.copytree(JSONL_SSM, path)
  os.makedirs(path / ".tlm-convert-k1ll3d" / "train")  # a conversion killed while staging
  (path / ".tlm-convert-k1ll3d" / "train" / "2010.text.bin").write_bytes(b"x" * 1000)
  store_convert.open_ssm_store(str(path))
  assert not [n for n in os.listdir(path) if n.startswith(".tlm-convert-")]


def test_staging_left_by_killed_builds_is_removed_under_the_lock(tmp_path, capfd):
  from tlm.cli.data import clean_interrupted

  out = tmp_path / "ssm"
  stale = [tmp_path / ".ssm.k1ll3d00.tmp", tmp_path / ".ssm.abcdefgh.tmp.old"]
  for d in stale:
    os.makedirs(d / "train")
    (d / "train" / "2010.tokens.bin").write_bytes(b"\0" * 4096)
  others = [tmp_path / ".ssm.tlm.lock", tmp_path / ".ssmx.abcdefgh.tmp", tmp_path / ".ssm.notes"]
  for p in others:
    os.makedirs(p)
  clean_interrupted(str(out))
  assert not any(d.exists() for d in stale) and all(p.exists() for p in others)
  err = capfd.readouterr().err
  assert err.startswith("notice: removed 2 staging directories (8,192 bytes)") and str(out) in err


def test_output_directory_under_a_regular_file_is_not_a_directory(tmp_path):
  from tlm.files import atomic_output_dir, check_replaceable
  from tlm.workdir_lock import WorkdirLock

  (tmp_path / "file").write_text("x")
  out = str(tmp_path / "file" / "sub" / "out")
  want = f"{tmp_path / 'file'} is not a directory"
  with pytest.raises(UserError, match=f"^{out}: cannot be created, {want}$"):
    check_replaceable(out, store_build.OUTPUT_NAMES)
  with pytest.raises(UserError, match=f"cannot create the lock \\({want}\\)$"):
    WorkdirLock.beside(out, "build_ssm").acquire()
  with pytest.raises(UserError, match=f"^{out}: cannot write \\({want}\\); not written$"):
    with atomic_output_dir(out):
      pass


def test_a_source_without_examples_for_a_year_names_its_store(tmp_path):
  from tlm.errors import ConfigError

  path = _copy_store(tmp_path)
  m = json.load(open(f"{path}/manifest.json"))
  m["tables"]["train/2014"]["examples"] = 0
  for name in ("train/2014.tokens.bin", "train/2014.tokens.idx"):
    np.zeros(1 if name.endswith("idx") else 0, "<i8" if name.endswith("idx") else "<u2").tofile(
      f"{path}/{name}"
    )
    m["files"][name] = {"bytes": os.path.getsize(f"{path}/{name}"), "sha256": "0" * 64}
  json.dump(m, open(f"{path}/manifest.json", "w"))
  sources = datasets.load_sources(path, years=[2014], split="train")
  with pytest.raises(ConfigError, match=f"no examples for year 2014 \\(example store {path}\\)"):
    MixtureSampler(sources, seed=0, years=[2014], source_weights={"news_ssm": 1})


def _truncate_half(path):
  os.truncate(path, os.path.getsize(path) // 2)


def _overwrite_beyond(path):
  with open(path, "r+b") as f:
    f.write(np.full(os.path.getsize(path) // 2, 60000, "<u2").tobytes())


def _replace_by_rename(path):
  with open(path + ".new", "wb") as f:
    f.write(np.full(os.path.getsize(path) // 2, 60000, "<u2").tobytes())
  os.replace(path + ".new", path)


# A store damaged while batches are drawn from it: (damage of its token file, the error a
# later batch raises naming that file, or None: the batches go on as before).
DAMAGED_WHILE_READ = [
  (_truncate_half, "data file shorter than at open"),
  (_overwrite_beyond, "token id 60000 is not below"),
  (_replace_by_rename, None),  # the open file is still read: what the run opened, unchanged
]


@pytest.mark.parametrize(
  "damage, match", DAMAGED_WHILE_READ, ids=lambda x: getattr(x, "__name__", "")
)
def test_store_damaged_while_batches_are_drawn(tmp_path, damage, match):
  path = _copy_store(tmp_path)
  tokens = f"{path}/train/2014.tokens.bin"
  before = [_batcher_2014(path).batch(step) for step in range(1, 4)]
  b = _batcher_2014(path)
  b.batch(0)
  damage(tokens)
  if match is None:
    for step, want in zip(range(1, 4), before):
      for k, v in b.batch(step).items():
        np.testing.assert_array_equal(v, want[k])
    return
  with pytest.raises(DataError, match=f"^{tokens}: {match}"):
    for step in range(1, 4):
      b.batch(step)
