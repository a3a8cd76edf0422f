"""Tracked paths that survive any checkout: no two differ only in case.

A checkout on macOS or Windows (case-insensitive file systems by default) keeps one file of
such a pair and silently loses the other.
"""

import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def case_clashes(paths: list[str]) -> list[list[str]]:
  """Groups of paths (files, or the folders above them) that are equal but for case."""
  names: dict[str, set[str]] = {}
  for path in paths:
    parts = path.split("/")
    for i in range(1, len(parts) + 1):
      prefix = "/".join(parts[:i])
      names.setdefault(prefix.lower(), set()).add(prefix)
  return sorted(sorted(group) for group in names.values() if len(group) > 1)


def test_a_clash_of_case_is_found_in_files_and_in_folders():
  assert case_clashes(["a/Notes", "a/notes", "b/x"]) == [["a/Notes", "a/notes"]]
  assert case_clashes(["Docs/a", "docs/b"]) == [["Docs", "docs"]]
  assert case_clashes(["a/Report", "a/result"]) == []


def test_no_two_tracked_paths_differ_only_in_case():
  try:
    out = subprocess.run(
      ["git", "-C", ROOT, "ls-files", "-z"], capture_output=True, check=True
    ).stdout.decode("utf-8")
  except (OSError, subprocess.CalledProcessError) as e:
    pytest.fail(f"git ls-files failed in {ROOT}: {e}")
  paths = [p for p in out.split("\0") if p]
  assert len(paths) > 300  # the listing found the repository
  assert case_clashes(paths) == []
