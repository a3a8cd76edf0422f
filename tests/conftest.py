"""Fixtures shared by several test files."""

import os
import shutil
import subprocess
import sys

import pytest

from tests import objstore


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
