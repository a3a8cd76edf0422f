"""research/seed4/chain.py: a setting applied before jax starts, and the table of the settings
(which of them gave the very same numbers)."""

import json
import os
import subprocess
import sys

import pytest

from research.seed4 import chain

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _python(code: str) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
  )


def test_a_setting_sets_cores_and_variables_before_jax_and_only_then():
  done = _python(
    "import os; from research.seed4 import chain; chain.apply('one_core_nproc_2'); "
    "print(sorted(os.sched_getaffinity(0)), os.environ['PJRT_NPROC'])"
  )
  assert done.returncode == 0, done.stderr
  assert done.stdout.split() == ["[0]", "2"]
  done = _python("import jax; from research.seed4 import chain; chain.apply('nproc_4')")
  assert done.returncode != 0
  assert "before jax is imported" in done.stderr


def _cbqa(folder, prediction, f1, loglik):
  folder.mkdir(parents=True)
  cbqa = {
    "templama": {"id": ["q1", "q2"], "prediction": [prediction, "x"], "f1": [f1, 0.0]},
    "news": {"loglik": [loglik, -2.0]},
  }
  meas = {"seed": 4, "models": {"cbqa": cbqa}, "loglik_change": {}, "entropy": {}}
  (folder / "per_query.json").write_text(json.dumps(meas))


def _setting(root, name, prediction, differ, wall):
  folder = root / name
  _cbqa(folder, prediction, 1.0 if prediction == "a" else 0.0, -1.0 - differ / 1000)
  parts = [
    {"part": "TempLAMA predictions", "items": 1106, "differ": differ},
    {"part": "news loglik", "items": 2750, "differ": 2750},
  ]
  cores, env = chain.SETTINGS[name]
  result = {
    "setting": name,
    "cores_and_env": {"cores": None if cores is None else sorted(cores), "env": env},
    "models": {"cbqa": {"model": "T5-CBQA", "equal": False, "parts": parts}},
    "environment": {"xla_cpu_threads": 1, "xla_cpu_isa": "AVX512"},
    "wall_minutes": wall,
  }
  (folder / "result.json").write_text(json.dumps(result))


def test_the_table_names_the_setting_whose_numbers_a_later_one_repeats(tmp_path, monkeypatch):
  root, out = tmp_path / "root", tmp_path / "out"
  _cbqa(tmp_path / "committed", "c", 0.5, -1.0)
  monkeypatch.setattr(chain, "COMMITTED", str(tmp_path / "committed"))
  _setting(root, "as_run", "a", 919, 2.0)
  _setting(root, "one_core", "b", 930, 3.5)
  _setting(root, "nproc_1", "b", 930, 5.5)
  got = chain.table(str(root), str(out))
  rows = {r["setting"]: r for r in got["settings"]}
  assert list(rows) == ["as_run", "one_core", "nproc_1"]  # the order of SETTINGS
  assert [rows[s]["same_numbers_as"] for s in rows] == [None, None, "one_core"]
  assert rows["one_core"]["models"]["cbqa"]["TempLAMA predictions"] == 930
  assert json.loads((out / "result.json").read_text()) == got
  md = (out / "result.md").read_text()
  assert "| nproc_1 | both | PJRT_NPROC=1 | 1 | AVX512 | 930 | 2750 | one_core | 5.5 |" in md
  assert "| one_core | [0] | - | 1 | AVX512 | 930 | 2750 | - | 3.5 |" in md
  # how far apart: the two settings of distinct numbers, and each from the committed model
  assert [(p["a"], p["b"], p["predictions"]) for p in got["pairs"]] == [("as_run", "one_core", 1)]
  assert got["pairs"][0]["median_loglik"] == pytest.approx(0.0055)  # median of 0.011 and 0
  assert [r["predictions"] for r in got["to_committed"]] == [1, 1]
  assert got["mean_f1"] == {"committed": 0.25, "as_run": 0.5, "one_core": 0.0}
  assert "Between the 2 settings of distinct numbers: 1-1 predictions differ" in md
  assert "0.0 to 50.0 over the settings, 25.0 committed." in md
