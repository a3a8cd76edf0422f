"""Fixtures shared by several test files."""

import os

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
