"""The entry point's restart with glibc's huge-page tunable (tlm/host_memory.py)."""

import os
import subprocess
import sys

import pytest

from tlm import host_memory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLIBC = sys.platform == "linux" and host_memory.platform.libc_ver()[0] == "glibc"


@pytest.mark.parametrize(
  "environ, mode, expected",
  [
    ({}, "madvise", True),
    ({}, "always", False),  # the kernel already gives huge pages
    ({}, "never", False),  # the kernel refuses them
    ({}, "", False),  # no such file: not Linux's THP
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=1"}, "madvise", False),  # the user's own
    ({"TLM_HUGEPAGES": "0"}, "madvise", False),  # opted out
    ({"TLM_HUGEPAGES": "1"}, "madvise", True),
  ],
)
def test_wanted_only_where_it_helps_and_the_user_has_not_decided(
  monkeypatch, environ, mode, expected
):
  monkeypatch.setattr(host_memory, "_thp_mode", lambda: mode)
  assert host_memory.wanted(environ) is (expected and GLIBC)


def test_thp_mode_reads_the_bracketed_choice(tmp_path, monkeypatch):
  path = tmp_path / "enabled"
  path.write_text("always [madvise] never\n")
  monkeypatch.setattr(host_memory, "THP_MODE_FILE", str(path))
  assert host_memory._thp_mode() == "madvise"
  path.write_text("garbage")
  assert host_memory._thp_mode() == ""
  monkeypatch.setattr(host_memory, "THP_MODE_FILE", str(tmp_path / "missing"))
  assert host_memory._thp_mode() == ""


@pytest.mark.skipif(not GLIBC or host_memory._thp_mode() != "madvise", reason="needs THP madvise")
def test_restart_executes_the_same_command_once_with_the_tunable():
  code = (
    "import os, sys; from tlm import host_memory;"
    "print('start', os.environ.get('GLIBC_TUNABLES'), flush=True);"
    "host_memory.restart_with_hugepages(); print('end', sys.argv[1:])"
  )
  env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "TLM_HUGEPAGES")}
  out = subprocess.run(
    [sys.executable, "-c", code, "a1", "--b=2"], env=env, cwd=ROOT, capture_output=True, text=True
  )
  assert out.returncode == 0, out.stderr
  # Restarted exactly once, with the arguments kept; the second start sees the variable.
  assert out.stdout.splitlines() == [
    "start None",
    f"start {host_memory.TUNABLE}",
    "end ['a1', '--b=2']",
  ]


@pytest.mark.parametrize(
  "argv, mode",
  [
    ([], "reproduce"),  # run.py's default mode
    (["--set=reproduce.seeds=0"], "reproduce"),
    (["--mode=train", "--config=tiny_temporal"], "train"),
    (["--mode", "eval_future"], "eval_future"),
    (["--mode=train", "--mode=reproduce"], "reproduce"),  # the last one wins, as in absl
    (["--modes=train"], "reproduce"),  # another flag
  ],
)
def test_mode_of_reads_the_mode_flag_before_absl(argv, mode):
  assert host_memory.mode_of(argv, "reproduce") == mode


@pytest.mark.skipif(not GLIBC or host_memory._thp_mode() != "madvise", reason="needs THP madvise")
def test_the_reproduction_restarts_with_the_heap_tunables_and_train_without():
  """run.py picks the tunables from --mode: the heap's for the reproduction, else huge pages."""
  env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "TLM_HUGEPAGES")}
  code = (
    "import sys; from tlm import host_memory;"
    "host_memory.restart_with_hugepages(reuse_heap=sys.argv[1] == 'heap');"
    "import os; print(os.environ['GLIBC_TUNABLES'])"
  )
  for arg, want in (("heap", host_memory.HEAP_TUNABLES), ("plain", host_memory.TUNABLE)):
    out = subprocess.run(
      [sys.executable, "-c", code, arg], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [want]
