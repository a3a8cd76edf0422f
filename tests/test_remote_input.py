"""The input path on an object store (tlm/store/ranged.py, block_sampling.py, store.py's lazy
index), through tests/remote_store.py, a gs:// with gcsfs's request costs: batches equal to the
local store's on 1, 4 and 16 simulated hosts, resume equal to an uninterrupted run, requests per
host and block bounded as its rows grow, transient failures retried with the same batches, a
persistent one a line naming the object, start-up reads independent of the store's size, the
block sampler's mixture the per-example sampler's, no example drawn twice in a pass, batch-mates
drawn again every pass, and the windows' order a counter-based function of (seed, slice, pass)."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests import objstore, remote_store
from tests.helpers import DATA, FIXTURE_DATA_SETS, ROOT, SamplerFace
from tlm.data.vocab import Vocabulary
from tlm.errors import DataError
from tlm.input import datasets
from tlm.input.block_sampling import BLOCK_STEPS, BlockSampler, draws_per_row
from tlm.input.packing import Batcher
from tlm.input.prefetch import Prefetcher
from tlm.input.sampling import MixtureSampler
from tlm.store import store, store_field, store_files, store_write

YEARS = tuple(range(2010, 2019))
VOCAB = os.path.join(DATA, "spiece.model")


def make_store(out: str, examples: int, seed: int = 0) -> None:
  """A tokenized store of `examples` random examples per train year (3-20 input ids, 1-4
  target ids), in the format `build_ssm` writes, with the fixture's vocabulary."""
  vocab = Vocabulary(VOCAB)
  rng = np.random.default_rng(seed)
  tables, files = {}, {}
  os.makedirs(os.path.join(out, "train"))
  for year in YEARS:
    n_in = rng.integers(3, 21, examples)
    n_tg = rng.integers(1, 5, examples)
    lens = np.stack([n_in, n_tg], 1).ravel()
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype("<i8")
    ids = rng.integers(3, vocab.vocab_size, int(offsets[-1])).astype("<u2")
    name = f"train/{year}.tokens"
    for ext, data in (("bin", ids), ("idx", offsets)):
      f = store_files.HashedFile(os.path.join(out, f"{name}.{ext}"))
      f.write(data.tobytes())
      files[f"{name}.{ext}"] = f.close()
    tables[f"train/{year}"] = {"examples": examples, "fields": ["tokens"]}
  shutil.copy(VOCAB, os.path.join(out, store.VOCAB_FILE))
  model = open(VOCAB, "rb").read()
  meta = {"sha256": store.vocab_fingerprint(model), "vocab_size": vocab.vocab_size}
  store_write.write_manifest(out, store_write.manifest_bytes(tables, files, "uint16", meta))


@pytest.fixture(scope="module")
def local_store(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("local") / "ssm")
  make_store(path, 3000)
  return path


@pytest.fixture
def remote(tmp_path, monkeypatch, local_store):
  """The store on gs://bucket/ssm behind the double (no latency: the tests count, not time)."""
  remote_store.install(str(tmp_path / "bucket-root"), latency_s=0.0)
  shutil.copytree(local_store, objstore.local_path("gs://bucket/ssm"))
  # Retries within a second or two (each request still has half a second: a loaded machine).
  monkeypatch.setenv("TLM_STORAGE_DEADLINE_S", "4")
  remote_store.COUNTS.reset()
  yield "gs://bucket/ssm"
  remote_store.inject(None)
  objstore.uninstall()


def _batcher(ssm_dir, rows=32, block_draws=6, seed=0, **kw):
  sources = datasets.load_sources(ssm_dir, years=YEARS, split="train")
  sampler = MixtureSampler(sources, seed=seed, years=YEARS, source_weights={"news_ssm": 1.0})
  return Batcher(
    sampler,
    Vocabulary(VOCAB),
    rows=rows,
    input_length=32,
    target_length=8,
    block_draws=block_draws,
    **kw,
  )


def test_the_batcher_asks_the_sampler_through_its_public_methods(local_store):
  """Per example and per block, a batcher whose sampler shows only its public methods builds the
  same batches (a tokenized store; tests/test_packing.py has the text slices)."""
  for block_draws in (0, 6):
    direct = _batcher(local_store, block_draws=block_draws)
    faced = Batcher(
      SamplerFace(direct.sampler),
      Vocabulary(VOCAB),
      rows=32,
      input_length=32,
      target_length=8,
      block_draws=block_draws,
    )
    for step in (0, 17):
      _equal(direct.batch(step), faced.batch(step), f"block_draws={block_draws} step {step}")


def _hosts(batcher, step, hosts):
  parts = [batcher.batch(step, h, hosts) for h in range(hosts)]
  return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _equal(a, b, what=""):
  assert a.keys() == b.keys()
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], f"{what} {k}")


@pytest.mark.parametrize("block_draws", [0, 6])
def test_batches_from_the_double_equal_local_on_1_4_16_hosts(local_store, remote, block_draws):
  local = _batcher(local_store, block_draws=block_draws)
  far = _batcher(remote, block_draws=block_draws)
  for step in (0, 1, 7, 17, 40):  # blocks 0, 1 and 2
    want = local.batch(step)
    for hosts in (1, 4, 16):
      _equal(_hosts(far, step, hosts), want, f"step {step}, {hosts} hosts")
  assert remote_store.COUNTS.snapshot()["requests"] > 0


def test_resume_equals_an_uninterrupted_run(local_store):
  run = _batcher(local_store)
  steps = [run.batch(s, 1, 4) for s in range(6)]
  resumed = _batcher(local_store)  # a new process, started at step 4
  for s in (4, 5):
    _equal(resumed.batch(s, 1, 4), steps[s], f"step {s}")
  pool = Prefetcher(lambda s: run.batch(s, 1, 4), depth=4, workers=4)  # several steps at once
  try:
    for s in (3, 4, 5, 0, 1):
      _equal(pool.get(s), steps[s], f"prefetched step {s}")
  finally:
    pool.close()


def test_requests_per_host_and_block_bounded_as_rows_grow(remote):
  per_block = {}
  steps = BLOCK_STEPS
  for rows in (8, 32, 128):
    b = _batcher(remote, rows=rows)
    b.batch(0)  # opened and warm
    remote_store.COUNTS.reset()
    counts = []
    for step in range(steps, 3 * steps):  # blocks 1 and 2
      b.batch(step)
      counts.append(remote_store.COUNTS.snapshot()["requests"] - sum(counts))
    per_block[rows] = sum(counts) / 2
    # The block's first step reads its runs; its other steps read nothing.
    assert counts[1:steps] == [0] * (steps - 1) and counts[steps + 1 :] == [0] * (steps - 1)
  # Two per year (a run's offsets, then its data); a run that wraps at a window's end, a third.
  assert all(n <= 2 * len(YEARS) + 4 for n in per_block.values()), per_block
  example = _batcher(remote, rows=128, block_draws=0)
  remote_store.COUNTS.reset()
  example.batch(1)
  assert remote_store.COUNTS.snapshot()["requests"] > 10 * per_block[128]  # one per example


def test_transient_failures_are_retried_with_the_same_batches(local_store, remote):
  want = [_batcher(local_store).batch(s) for s in range(3)]
  failed = []

  def flaky(key, start, end):
    if key.endswith(".bin") and len(failed) < 6 and (start // 7) % 2:
      failed.append(key)
      return OSError("503 Service Unavailable") if len(failed) % 2 else 1  # or a short read
    return None

  remote_store.inject(flaky)
  b = _batcher(remote)
  for s in range(3):
    _equal(b.batch(s), want[s], f"step {s}")
  assert len(failed) == 6


def test_a_persistent_failure_is_one_line_naming_the_object_and_range(remote):
  b = _batcher(remote)
  remote_store.inject(
    lambda key, start, end: OSError("connection reset\nby peer") if "2013" in key else None
  )
  pool = Prefetcher(lambda s: b.batch(s), depth=2, workers=2)
  with pytest.raises(DataError) as err:
    pool.get(0)
  pool.close()
  message = str(err.value)
  assert message.startswith(f"{remote}/train/2013.tokens.") and "\n" not in message, message
  assert "read of bytes [" in message and " failed 8 times in " in message, message
  assert message.endswith("; the last: connection reset by peer"), message


def test_start_up_reads_do_not_grow_with_the_store(tmp_path, remote, monkeypatch):
  monkeypatch.setattr(store_field, "SMALL_INDEX_BYTES", 1024)  # every index here is "large"
  got = {}
  for n in (2000, 20000):
    path = f"gs://bucket/s{n}"
    make_store(str(tmp_path / f"s{n}"), n)
    shutil.copytree(tmp_path / f"s{n}", objstore.local_path(path))
    remote_store.COUNTS.reset()
    datasets.load_sources(path, years=YEARS, split="train")
    got[n] = remote_store.COUNTS.snapshot()
  assert got[2000]["requests"] == got[20000]["requests"] < 60, got
  # The manifest (a few KB, its sizes one digit longer) and 16 bytes of offsets per index.
  assert got[2000]["bytes"] < got[20000]["bytes"] < 8 << 10, got


def test_a_hostile_offset_in_a_large_index_is_named_when_read(tmp_path, monkeypatch, local_store):
  monkeypatch.setattr(store_field, "SMALL_INDEX_BYTES", 1024)
  path = str(tmp_path / "ssm")
  shutil.copytree(local_store, path)
  index = f"{path}/train/2014.tokens.idx"
  offsets = np.fromfile(index, "<i8")
  offsets[5], offsets[6] = offsets[6], offsets[5] - 1
  offsets.tofile(index)
  table = store.Store(path).table("train", 2014)  # its ends are sound: opens
  table.token_run(100, 200)
  table.tokens([1, 3])
  with pytest.raises(DataError, match=f"^{index}: corrupt index: an example's offsets"):
    table.tokens([2])  # offsets 4, 5, 6
  with pytest.raises(DataError, match=f"^{index}: corrupt index: offsets of examples \\[0, 10\\)"):
    table.token_run(0, 10)
  with pytest.raises(DataError, match=f"^{index}: corrupt index: offset 6 decreases"):
    table.check_all()  # what --mode=check_store runs on every table, after the hashes


def test_block_mixture_is_the_example_samplers(local_store):
  """The sources and years of the examples trained on: the block sampler's candidates are
  drawn exactly as the per-example sampler's draws; what a row keeps, then, has the same
  proportions (a chi-square test of the 18 (source, year) cells against the mixture, and the
  two samplers' shares within 1.5 points)."""
  sources = datasets.load_sources(local_store, years=YEARS, split="train")
  words = Vocabulary(VOCAB).decode(list(range(40, 90)))
  sources["templama"] = {y: [(f"{words} {i}", f"{y}") for i in range(50)] for y in YEARS}
  weights = {"news_ssm": 3.0, "templama": 1.0}
  shares = {}
  for draws in (0, 6):
    sampler = MixtureSampler(sources, seed=0, years=YEARS, source_weights=weights)
    b = Batcher(
      sampler, Vocabulary(VOCAB), rows=64, input_length=32, target_length=8, block_draws=draws
    )
    cells = []
    for step in range(40):
      ids, _ = b.select(step, np.arange(64))
      source, year = sampler.source_and_year(ids)
      cells.append(source * len(YEARS) + year - YEARS[0])
    counts = np.bincount(np.concatenate(cells), minlength=2 * len(YEARS))
    # What a row keeps depends on lengths: the expected shares are the per-example sampler's
    # sources (measured once, below) spread uniformly over the years.
    by_source = counts.reshape(2, -1).sum(1)
    expected = np.repeat(by_source / len(YEARS), len(YEARS))
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 39.25, (draws, counts)  # the 0.1% point of chi-square with 16 degrees
    shares[draws] = counts / counts.sum()
  np.testing.assert_allclose(shares[6], shares[0], atol=0.015)
  np.testing.assert_allclose(shares[6].reshape(2, -1).sum(1), [0.75, 0.25], atol=0.05)


def test_no_example_is_drawn_twice_within_a_pass(local_store):
  b = _batcher(local_store, rows=16, block_draws=4)
  blocks = BlockSampler(b.sampler, 16, 4)
  slot = 3
  steps = blocks.pass_steps(slot)
  assert steps >= 5 * BLOCK_STEPS
  seen = []
  for step in range(steps):  # one pass of slice 3
    s, index = blocks.draws(step)
    seen.append(index[s == slot])
  seen = np.concatenate(seen)
  assert np.unique(seen).size == seen.size and seen.size > 0.8 * steps * 16 * 4 / 9
  # The next pass visits the table in another order.
  s, index = blocks.draws(steps)
  assert not np.array_equal(index[s == slot], seen[: (s == slot).sum()])


def _shared_again(blocks: BlockSampler, slot: int) -> float:
  """Of the pairs of slice `slot`'s examples drawn at one step of pass 0, the share drawn at
  one step again in pass 1."""
  steps = blocks.pass_steps(slot)
  at = []  # per pass: example -> step
  for p in range(2):
    where = {}
    for step in range(p * steps, (p + 1) * steps):
      s, index = blocks.draws(step)
      for i in index[s == slot].tolist():
        where[i] = step
    at.append(where)
  by_step: dict = {}
  for i, step in at[0].items():
    by_step.setdefault(step, []).append(at[1].get(i, -1 - i))  # not drawn again: alone
  pairs = again = 0
  for later in by_step.values():
    _, counts = np.unique(later, return_counts=True)
    pairs += len(later) * (len(later) - 1) // 2
    again += int((counts * (counts - 1) // 2).sum())
  return again / pairs


def test_batch_mates_are_drawn_again_every_pass(local_store):
  """Pairs of a year's examples at one step of a pass share a step in the next pass about
  1 / BLOCK_STEPS as often as with a window per step (a block of one step)."""
  sampler = _batcher(local_store).sampler
  per_step = _shared_again(BlockSampler(sampler, 32, 6, steps=1), 3)
  blocked = _shared_again(BlockSampler(sampler, 32, 6), 3)
  assert per_step > 0.2 and blocked < 2 / BLOCK_STEPS * per_step, (per_step, blocked)


_M64 = 2**64 - 1


def _ref_chain(*values):
  """tlm.counter_hash.chain in pure Python (SplitMix64's finaliser, written out)."""
  h = values[0]
  for c in values[1:]:
    x = (h + 0x9E3779B97F4A7C15 * (c + 1)) & _M64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _M64
    h = x ^ (x >> 31)
  return h


def test_window_order_is_a_counter_based_function_of_seed_slice_and_pass(local_store):
  """Pinned to a pure-Python reference: no NumPy stream, whatever its release."""
  sampler = _batcher(local_store, seed=7).sampler
  blocks = BlockSampler(sampler, 16, 4)
  slot = 5
  allot, count = int(blocks.allot[slot]), int(blocks.sizes[slot] // blocks.allot[slot])
  for p in (0, 1, 3):
    hashes = [_ref_chain(sampler.key, 12, slot, p, w) for w in range(count)]
    order = sorted(range(count), key=lambda w: hashes[w])
    shift = _ref_chain(sampler.key, 13, slot, p) % allot
    starts = [blocks._window(slot, p * count + w) for w in range(count)]
    assert starts == [order[w] * allot + shift for w in range(count)], p


def test_draws_per_row_from_the_store(local_store):
  sources = datasets.load_sources(local_store, years=YEARS, split="train")
  sampler = MixtureSampler(sources, seed=0, years=YEARS, source_weights={"news_ssm": 1.0})
  means = sampler.mean_lengths()
  assert len(means) == len(YEARS)
  # 11.5 input ids and 2.5 target ids on average, EOS each: 32 + 8 tokens hold 2.3 examples
  # (the decoder's 8 / 3.5 is the tighter), 128 + 32 with a 4-id prefix 7.8 (the encoder's).
  assert draws_per_row(means, 32, 8) == 4
  assert draws_per_row(means, 128, 32, prefix_ids=4) == 9
  assert draws_per_row([], 128, 32) == 8


def test_a_store_lost_mid_run_stops_training_with_one_line_and_its_checkpoint(tmp_path):
  """tiny_temporal from the double: once step 2's checkpoint is written every data read fails;
  the run stops with one line naming the object and range, its last checkpoint complete (the
  reads' deadline set to 3 s: `--storage_deadline_s`)."""
  bucket = tmp_path / "bucket-root"
  shutil.copytree(os.path.join(DATA, "ssm"), bucket / "bucket" / "ssm")
  workdir = tmp_path / "wd"
  sets = [s for s in FIXTURE_DATA_SETS if not s.startswith("data.ssm_dir=")]
  sets += ["data.ssm_dir=gs://bucket/ssm", "train.batch_size=8", "train.steps=40"]
  sets += ["train.checkpoint_every=2", "train.eval_every=0", "train.log_every=1"]
  env = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    PYTHONPATH=ROOT,
    REMOTE_STORE_FAIL_ONCE_EXISTS=str(workdir / "checkpoints" / "2"),
  )
  args = ["--mode=train", "--config=tiny_temporal", f"--workdir={workdir}"]
  args += ["--storage_deadline_s=3"]
  proc = subprocess.run(
    [sys.executable, os.path.join(ROOT, "tests", "remote_store.py"), str(bucket), "0"]
    + [os.path.join(ROOT, "run.py"), *args, *[f"--set={s}" for s in sets]],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 1, proc.stderr[-2000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error: gs://bucket/ssm/train/") and ".tokens.bin: read of bytes [" in last
  assert " failed " in last and last.endswith("; the last: 503 Service Unavailable"), last
  # The batches built ahead before the loss carried it a few steps further; the last checkpoint
  # written is complete.
  steps = [int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit()]
  assert steps and 2 <= max(steps) < 40, steps
  assert (workdir / "checkpoints" / str(max(steps)) / "tlm_checksums.json").is_file()


def test_the_paper_configs_read_blocks_and_the_miniature_keeps_its_batches():
  """The miniature's pre-registered results were computed with the per-example sampler."""
  from tlm import configs

  samplers = {name: configs.get(name).data.sampler for name in configs.names()}
  assert samplers["large_temporal"] == "block" and samplers["tiny_temporal"] == "example"
  paper = {n for n in samplers if n.split("_")[0] in ("small", "base", "large", "xl", "xxl")}
  assert paper and all(samplers[n] == "block" for n in paper), samplers
  assert all(samplers[n] == "example" for n in samplers if n.startswith("tiny")), samplers
