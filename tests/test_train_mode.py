"""What `--mode=train` runs: it imports what it runs and no more (the design's rule: "training
never loads a builder, a table or a figure"), and checks each thing once.

A training run is started as a user starts it (`python run.py --mode=train`, tiny_temporal on
the committed fixture data, one step) in a child process, which writes the names of its modules
as it exits, and how many times the preflight checks ran. No builder (the SSM build, Beam, the
store's shuffle and conversion), no table or figure, no evaluation the config does not ask for,
no synthetic world it does not use, and no torch (tensorboardX imports it where it is
installed) may be among them; the tlm modules are counted against a bound, so that an import
that drags in a package shows as a failing test.
"""

import json
import os
import re
import sys

import pytest

from tests.helpers import FIXTURE_DATA_SETS, ROOT, run_child, tiny_train_argv

# What the train mode of a config without evaluators (train.eval_examples=0) never runs.
NEVER = (
  # the builders: the SSM examples, the Beam pipeline, the store's writers, shuffle, conversion
  "tlm.store.build_ssm",
  "tlm.store.ssm_beam",
  "tlm.store.store_build",
  "tlm.store.store_write",
  "tlm.store.store_shuffle",
  "tlm.store.store_reorder",
  "tlm.store.store_convert",
  "tlm.data.ssm",
  "tlm.data.salient_spans",
  "apache_beam",
  # the tables and figures, and the evaluations a config without evaluators does not run
  "tlm.eval",
  "tlm.infer",
  "tlm.miniature",
  "matplotlib",
  # the synthetic world, which this config (the fixture data) does not use
  "tlm.synthetic",
  # torch (tensorboardX's writer imports it where installed: about a second and 1,000 modules)
  "torch",
)
# tlm modules the run imports, pinned at what it imports today: 101 before the builders
# (through tlm.input.datasets) and the tables and figures (through tlm.eval.experiments) were
# cut away, 76 since. Among the 76, imported though this run does not use them: the remote
# clients and retries and the store's ranged reads (no gs:// here), TensorStore's GCS settings,
# the TempLAMA builder's facts reader (tlm.data.templama holds the reader and the builder), the
# block sampler (this config samples per example) and the paper's configs (the registry).
MAX_TLM_MODULES = 76

# The child: counts the calls of the two preflight checks, runs run.py, and writes its modules
# and the counts as it exits.
_REPORT = """
import atexit, json, runpy, sys
from tlm import configs
from tlm.train import preflight
out, calls = sys.argv[1], {"check_required": 0, "check_workdir": 0}
def counted(module, name):
  check = getattr(module, name)
  def call(*args, **kwargs):
    calls[name] += 1
    return check(*args, **kwargs)
  setattr(module, name, call)
counted(configs, "check_required")
counted(preflight, "check_workdir")
atexit.register(lambda: json.dump({"modules": sorted(sys.modules), "calls": calls}, open(out, "w")))
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _matches(name: str, prefix: str) -> bool:
  return name == prefix or name.startswith(prefix + ".")


@pytest.fixture(scope="module")
def train_run(tmp_path_factory):
  """{"modules": loaded by a one-step `--mode=train` run, "calls": of the preflight checks}."""
  tmp = tmp_path_factory.mktemp("train_imports")
  sets = [
    *FIXTURE_DATA_SETS,
    "data.sampler=block",  # the paper's configs' sampler (the fixture store: in corpus order)
    "data.allow_corpus_order=true",
    "train.steps=1",
    "train.batch_size=8",
    "train.eval_every=0",
    "model.num_layers=1",
  ]
  argv = tiny_train_argv(str(tmp / "w"), sets)
  out = str(tmp / "modules.json")
  command = [sys.executable, "-c", _REPORT, out, os.path.join(ROOT, argv[1]), *argv[2:]]
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  proc = run_child(command, env)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "step 1/1" in proc.stdout + proc.stderr
  with open(out) as f:
    return json.load(f)


def test_train_imports_no_builder_table_figure_or_torch(train_run):
  loaded = [p for p in NEVER if any(_matches(m, p) for m in train_run["modules"])]
  assert loaded == []


def test_task_evaluators_import_no_table_or_figure():
  """The evaluators a config may ask for during training (`train.eval_examples`) decode and
  score; they draw nothing."""
  probe = (
    "import sys, tlm.eval.during_training; "
    "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'torch') "
    "or m in ('tlm.eval.tables', 'tlm.eval.figures', 'tlm.eval.experiments', 'tlm.eval.future')))"
  )
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  proc = run_child([sys.executable, "-c", probe], env)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.strip() == "[]"


def test_train_imports_a_bounded_number_of_tlm_modules(train_run):
  ours = [m for m in train_run["modules"] if _matches(m, "tlm")]
  assert len(ours) <= MAX_TLM_MODULES, (len(ours), ours)


def _reading_path() -> list[str]:
  """The files of docs/paper.md's numbered path through the train mode, in order."""
  with open(os.path.join(ROOT, "docs", "paper.md"), encoding="utf-8") as f:
    text = f.read()
  section = text[text.index("**How Temporal is trained") :]
  section = section[: section.index("\n\n", section.index("\n1. "))]
  return re.findall(r"^\d+\. `([\w/]+)\.py:", section, flags=re.M)


def test_the_papers_reading_path_is_what_the_train_mode_loads(train_run):
  """docs/paper.md's path for `--mode=train` names at most twelve files, each one the run
  loads (this run samples as the paper's configs do: data.sampler=block)."""
  path = _reading_path()
  assert 10 <= len(path) <= 12 and len(set(path)) == len(path), path
  modules = set(train_run["modules"])
  assert [p for p in path if p.replace("/", ".") not in modules] == []


def test_train_checks_the_config_and_the_workdir_once(train_run):
  """Before jax starts (tlm.cli.train), not again in the trainer (tlm.train.loop)."""
  assert train_run["calls"] == {"check_required": 1, "check_workdir": 1}
