"""Each explanation's criterion is its registration's, as written before the result: the quoted
words are in the registration's text committed before every result file the checks read, and
each check (JSON path, op, value) says what the quoted words say.

The history is read with git (`--follow`, so a registration moved since keeps its first text).
A shallow clone (or a copy without git) has no history: there the quotes are checked against the
current text only.
"""

import functools
import os
import re
import subprocess

import pytest

from research.verdicts import registry, table
from research.verdicts.registry import CANNOT, MEASURED, UNDECIDED, Explanation

REPO = table.REPO


def _git(*args: str) -> str:
  return subprocess.run(
    ["git", "-C", REPO, *args], capture_output=True, text=True, check=True
  ).stdout


def _words(text: str) -> str:
  """The text with each run of whitespace one space: a quote may span the file's line breaks."""
  return " ".join(text.split())


@functools.cache
def _shallow() -> bool:
  """Whether the history is missing: a shallow clone, or no git repository at all."""
  try:
    return _git("rev-parse", "--is-shallow-repository").strip() != "false"
  except (OSError, subprocess.CalledProcessError):
    return True


@functools.cache
def _versions(path: str) -> tuple[tuple[str, str], ...]:
  """(commit, the file's words at that commit), oldest first, across renames."""
  log = _git("log", "--follow", "--format=%x00%H", "--name-only", "--", path)
  out = []
  for block in log.split("\0")[1:]:
    sha, *names = block.split()
    if names:  # a commit that deleted the file under an older name names nothing to show
      out.append((sha, _words(_git("show", f"{sha}:{names[-1]}"))))
  return tuple(reversed(out))


@functools.cache
def _added(path: str) -> str:
  """The commit that first added `path` (across renames)."""
  return _git("log", "--follow", "--diff-filter=A", "--format=%H", "--", path).split()[-1]


def _current(path: str) -> str:
  with open(os.path.join(REPO, path), encoding="utf-8") as f:
    return _words(f.read())


def quote_problems(e: Explanation) -> list[str]:
  """Where a quoted criterion is not the registration's as committed before its results."""
  problems = []
  for quote in map(_words, e.criterion):
    if quote not in _current(e.registration):
      problems.append(f"{e.registration} does not say: {quote!r}")
      continue
    if _shallow():
      continue
    first = next(sha for sha, words in _versions(e.registration) if quote in words)
    for result in table.result_files(e):
      added = _added(result)
      ancestor = subprocess.run(["git", "-C", REPO, "merge-base", "--is-ancestor", first, added])
      before = first != added and ancestor.returncode == 0
      if not before:
        problems.append(f"{e.registration}: {quote!r} first in {first}, not before {result}")
  return problems


# How a registration writes an op on a value ("{}": the value in one of its written forms).
_OP_FORMS = {
  ">": ("> {}", "above {}"),
  ">=": (">= {}", "at least {}"),
  "<=": ("<= {}", "at most {}"),
  "<": ("< {}", "fewer than {}", "below {}"),
  "abs<": ("| < {}",),  # |a - b| < v
  "==": ("{} times",),
}
_VALUE_FORMS = {0: ("0", "zero"), 0.5: ("0.5", "half")}
# The words a registration uses for the class each kind gives.
_KIND_WORDS = {
  MEASURED: ("measured reason",),
  CANNOT: ("cannot be tested",),
  UNDECIDED: ("at this size", "sampling noise"),
}


def check_problems(e: Explanation) -> list[str]:
  """Where a check, or the class, is not what the quoted criterion says."""
  said = " ".join(map(_words, e.criterion))
  problems = []
  if not any(w in said for w in _KIND_WORDS[e.kind]):
    problems.append(f"the quote gives no class {e.kind!r}")
  for path, op, value in e.checks:
    keys = path.split(".")
    if keys[-1] == "seed" and op == "==":
      # Which seed a record is: the explanation's own seeds.
      ok = value in e.seeds
    elif value is True and op == "==":
      # A verdict the result recorded under the quote's own words ("contains_zero").
      ok = keys[-1].replace("_", " ") in said
    else:
      values = _VALUE_FORMS.get(value, (str(value),))
      ok = any(
        re.search(re.escape(form.format(v)) + r"(?![\d]|\.\d)", said)
        for form in _OP_FORMS[op]
        for v in values
      )
    if "ci95" in keys and "interval" not in said:
      ok = False
    if any(k.endswith("t95") for k in keys) and "t-interval" not in said:
      ok = False
    # A named difference ("clamped - asked") is the quote's.
    if any(" - " in k and k not in said for k in keys if "_" not in k):
      ok = False
    if not ok:
      problems.append(f"{path} {op} {value!r} is not in the quote")
  return problems


def test_each_criterion_is_quoted_from_its_registration_before_the_result():
  """Every explanation quotes its registration, and the quote was committed before every result
  its checks read (in the registration's first text, or added to it before the result)."""
  problems = [(e.claim, e.seeds, p) for e in registry.EXPLANATIONS for p in quote_problems(e)]
  assert problems == []
  assert all(e.criterion for e in registry.EXPLANATIONS)


def test_each_check_is_what_the_quoted_criterion_says():
  problems = [(e.claim, e.seeds, p) for e in registry.EXPLANATIONS for p in check_problems(e)]
  assert problems == []


def _w2(**changes) -> Explanation:
  """The world registration's W2 on seed 3, with `changes`."""
  e = next(x for x in registry.EXPLANATIONS if x.claim == "C9" and x.seeds == (3,))
  return e._replace(**changes)


def test_a_check_the_quote_does_not_say_is_found():
  assert check_problems(_w2()) == []
  loose = _w2(checks=(("seeds.3.W2_symmetry.future_slope", "abs<", 0.02),))
  assert check_problems(loose) == ["seeds.3.W2_symmetry.future_slope abs< 0.02 is not in the quote"]
  other_seed = _w2(checks=(("cells.A.seed", "==", 4),))
  assert len(check_problems(other_seed)) == 1
  first = next(x for x in registry.EXPLANATIONS if x.claim == "C9" and x.seeds == (0, 1, 2))
  assert check_problems(first) == []
  wrong_class = first._replace(kind=CANNOT)
  assert check_problems(wrong_class) == ["the quote gives no class 'cannot be tested here'"]


def test_a_quote_the_registration_does_not_hold_is_found():
  assert quote_problems(_w2()) == []
  changed = _w2(criterion=("**W2**: |future slope - past slope| < 0.02 per year on each seed.",))
  (problem,) = quote_problems(changed)
  assert problem.startswith("research/world/PREREGISTRATION_seeds3456.md does not say")


@pytest.mark.skipif(_shallow(), reason="a shallow clone has no history")
def test_a_criterion_written_after_its_result_is_found():
  """research/fresh/PREREGISTRATION.md's clamp criterion was added to it (2221ef4) before the
  clamp's results; held against a result committed before that, it is found late."""
  clamp = next(e for e in registry.EXPLANATIONS if e.claim == "C5" and e.seeds == (3, 4))
  assert quote_problems(clamp) == []
  first_added = _versions(clamp.registration)[0][0]
  assert _words(clamp.criterion[0]) not in _versions(clamp.registration)[0][1]
  early = clamp._replace(result="docs/results/preregistered/PREREGISTRATION_seeds3_4.md")
  # That file is the registration itself under its first name: added with the first text,
  # before the clamp criterion was written.
  assert _added(early.result) == first_added
  assert len(quote_problems(early)) == 1
