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
