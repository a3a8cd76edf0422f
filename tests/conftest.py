"""Fixtures shared by several test files: an object store (`bucket`), small file systems
(`tmpfs`), and what the evaluation writes, run on fixture data with a hand-made model (`data`,
`model`, `written`: tests/test_results.py reads it, tests/test_state_files.py saves it as a
seed)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from tests import objstore
from tests.helpers import NEWS_YEARS
from tlm import configs
from tlm.data import fact_durations, templama
from tlm.data.formatting import TextExample, templama_query_input
from tlm.data.future_relations import RESOURCES
from tlm.eval import experiments, heldout

# ---- one compilation cache for the whole run ---------------------------------------------------

# Most of the suite's time is XLA compiling the same few tiny programs (a train step, a decode
# loop) in process after process: each xdist worker, and every child python (`run.py`, the
# fixture scripts, a reproduction's pool) starts with an empty in-memory cache. A persistent
# cache in the environment lets each program compile once per run, whichever process asks
# first; the others load it. Every program is cached (no minimum compile time or size). A test
# that sets its own cache for its children keeps it. The directory is new for each run, so a
# cached program never outlives the code that made it.
_COMPILATION_CACHE = {
  "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
  "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
}


def pytest_configure(config):
  """Sets the run's compilation cache in the environment before jax is imported (the test
  modules import it when collected): the controller of an xdist run makes the directory, and
  its workers and every child process inherit it. A cache the caller set is kept."""
  if "JAX_COMPILATION_CACHE_DIR" in os.environ:
    return
  path = tempfile.mkdtemp(prefix="tlm-tests-jax-cache-")
  config.add_cleanup(lambda: shutil.rmtree(path, ignore_errors=True))
  os.environ.update(_COMPILATION_CACHE, JAX_COMPILATION_CACHE_DIR=path)
  if "jax" in sys.modules:  # a plugin imported it first: it has read the environment already
    import jax

    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


# ---- the parallel run (pytest-xdist, `--dist loadgroup`) --------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
  """Keeps each test file on one worker: a test without an `xdist_group` mark joins its file's
  group, so a module-scoped fixture (a trained model, a reproduction) is built once, not once
  per worker. Files that share something across processes name a group of their own (the
  coordinator tests: `xdist_group("coordinator")`) and run one after the other on one worker.
  Runs before xdist's own hook, which reads the marks (hence `tryfirst`).

  On a worker the groups are handed out in this order (pyproject's `--no-loadscope-reorder`):
  first those holding a `slow` test (multi-process, minutes each), then the larger ones, so
  that no worker is left running one long group while the others wait."""
  groups: dict[str, list] = {}
  for item in items:
    if item.get_closest_marker("xdist_group") is None:
      item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    names = sorted({m.args[0] for m in item.iter_markers("xdist_group")})
    groups.setdefault("_".join(names), []).append(item)
  if os.environ.get("PYTEST_XDIST_WORKER"):
    slow = {g: any(i.get_closest_marker("slow") for i in group) for g, group in groups.items()}
    order = sorted(groups, key=lambda g: (not slow[g], -len(groups[g])))
    items[:] = [item for g in order for item in groups[g]]


@pytest.fixture
def bucket(tmp_path, monkeypatch):
  """gs://bucket served from tmp_path/store by tests/objstore.py (a filesystem that behaves
  like an object store); cwd in tmp_path/cwd, where a gs:// path mistaken for a local one
  would land, and the test fails if anything does."""
  objstore.install(str(tmp_path / "store"))
  cwd = tmp_path / "cwd"
  cwd.mkdir()
  monkeypatch.chdir(cwd)
  yield "gs://bucket"
  objstore.uninstall()
  assert os.listdir(cwd) == [], "a gs:// path was used as a local path"


@pytest.fixture
def tmpfs(tmp_path):
  """Mounts small tmpfs file systems (root on Linux), unmounted after the test; else skips."""
  if sys.platform != "linux" or os.geteuid() != 0 or shutil.which("mount") is None:
    pytest.skip("mounting a tmpfs needs root on Linux (ENOSPC is simulated in the tests above)")
  mounted = []

  def mount(size: str) -> str:
    mount_point = tmp_path / f"tmpfs{len(mounted)}"
    mount_point.mkdir()
    proc = subprocess.run(
      ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
      capture_output=True,
      text=True,
    )
    if proc.returncode != 0:
      pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()[:200]}")
    mounted.append(str(mount_point))
    return str(mount_point)

  yield mount
  for mount_point in mounted:
    subprocess.run(["umount", "-l", mount_point], check=False)


# ---- the evaluation's results on fixture data --------------------------------------------------

FACTS = "tests/fixtures/data/templama_facts.tsv"
ENTITIES = "tests/fixtures/data/templama_entities.tsv"


class _Model:
  """Knows the answers it is given (TempLAMA in even years, the first news example of each
  year), says "nobody" otherwise; log p = -(year % 3) per target token; ranks the candidates
  by index, flatter in later years."""

  def __init__(self, answers):
    self.answers = answers

  def predict(self, queries, years):
    return [self.answers.get((q, y), "nobody") for q, y in zip(queries, years)]

  def log_likelihood(self, queries, years, targets):
    n = np.array([len(t.split()) for t in targets])
    return -n * (np.asarray(years) % 3).astype(float), n

  def rank(self, queries, years, candidates):
    return np.array([[-i / (y - 2016) for i in range(len(candidates))] for y in years])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """Fixture TempLAMA (built from tests/fixtures/data), three news examples in each of
  `NEWS_YEARS`, the future relations and the facts' durations, as `--mode=eval` loads them."""
  out = tmp_path_factory.mktemp("templama") / "t"
  templama.build_templama(FACTS, ENTITIES, str(out))
  examples = [ex for split in templama.load_templama_splits(str(out)).values() for ex in split]
  examples = sorted(examples, key=lambda ex: ex.id)
  news = {
    y: [TextExample(f"text {y} {i} <extra_id_0>.", "a b" if i else "c", y) for i in range(3)]
    for y in NEWS_YEARS
  }
  durations = fact_durations.durations_from_facts(fact_durations.read_fact_spans(FACTS), examples)
  return heldout.EvalData(examples, news, RESOURCES, durations)


@pytest.fixture(scope="module")
def model(data):
  """A `_Model` that knows TempLAMA's answers in even years and the first news example of
  each year."""
  answers = {
    (templama_query_input(ex.query), ex.year): ex.answers[0][0]
    for ex in data.templama
    if ex.year % 2 == 0
  }
  answers.update({(r.inputs, y): r.targets for y, rows in data.news.items() for r in rows[:1]})
  return _Model(answers)


@pytest.fixture(scope="module")
def written(data, model, tmp_path_factory):
  """What `--mode=eval` and `eval_future` return ("eval", "future"), write ("eval.json",
  "future.json") and draw ("figure3", "figure4": the figures' inputs)."""
  workdir = str(tmp_path_factory.mktemp("workdir"))
  config = configs.get("tiny_temporal")
  out = {}
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(experiments, "require_model", lambda config, workdir: None)
    mp.setattr(experiments, "load_model", lambda config, workdir, future_probe=False: model)
    mp.setattr(experiments, "draw", lambda log, fn, args, path: out.update({fn.__name__: args}))
    out["eval"] = experiments.evaluate(config, workdir, log=lambda _: None, data=data)
    out["future"] = experiments.eval_future(config, workdir, log=lambda _: None, data=data)
  for name in ("eval", "future"):
    with open(os.path.join(workdir, "results", f"{name}.json")) as f:
      out[f"{name}.json"] = json.load(f)
  return out
