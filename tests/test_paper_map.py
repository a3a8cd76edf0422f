"""docs/paper.md, the map from the paper to the code, names only what exists.

Every backticked `path.py:name` (or `path.py:Class.method`) must be a file of the repository
defining that name at its top level (a def, class or assignment; the method in the class's
body), found with `ast`, so that nothing is imported; every `--mode=` must be a key of run.py's
MODES, every `--config=` a named config, every `--set=section.key=` a config key. The map must
also name each table, figure, appendix and section of the paper, and be linked from the front
door. `test_a_wrong_name_is_caught` shows that each check fails when a name is wrong.
"""

import ast
import functools
import os
import re

import pytest

from tlm.configs import overrides, registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAP = os.path.join(ROOT, "docs", "paper.md")

CODE_NAME = re.compile(r"`([\w./-]+\.py):([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)`")
MODE = re.compile(r"--mode=(\w+)")
CONFIG = re.compile(r"--config=(\w+)")
SET_KEY = re.compile(r"--set=([a-z_]+\.[a-z_]+)=")
# What a reader must find: every table, figure and appendix of the paper, and its sections.
PAPER_PARTS = (
  *(f"Table {n}" for n in range(1, 9)),
  *(f"Figure {n}" for n in range(1, 6)),
  "Appendix A",
  "Appendix B",
  *("§1", "§2.1", "§2.2", "§2.3", "§3.1", "§3.2", "§3.3", "§4"),
)


def _read(path: str) -> str:
  with open(path, encoding="utf-8") as f:
    return f.read()


@functools.cache
def _definitions(path: str) -> dict[str, frozenset[str]]:
  """{top-level name: names defined in its body (a class's methods and attributes)}."""
  tree = ast.parse(_read(os.path.join(ROOT, path)))
  out: dict[str, frozenset[str]] = {}
  for node in tree.body:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
      body = node.body if isinstance(node, ast.ClassDef) else []
      out[node.name] = frozenset(_assigned(body))
    else:
      for name in _assigned([node]):
        out[name] = frozenset()
  return out


def _assigned(body) -> list[str]:
  names = []
  for node in body:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
      names.append(node.name)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      names += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
  return names


@functools.cache
def _modes() -> frozenset[str]:
  for node in ast.parse(_read(os.path.join(ROOT, "run.py"))).body:
    if isinstance(node, ast.Assign) and any(
      isinstance(t, ast.Name) and t.id == "MODES" for t in node.targets
    ):
      return frozenset(ast.literal_eval(node.value))
  raise AssertionError("run.py has no MODES table")


def code_problem(path: str, name: str) -> str | None:
  """Why `path:name` does not resolve, or None."""
  if not os.path.isfile(os.path.join(ROOT, path)):
    return "no such file"
  top, _, member = name.partition(".")
  defined = _definitions(path)
  if top not in defined:
    return f"no {top} in {path}"
  if member and member not in defined[top]:
    return f"no {member} in {path}:{top}"
  return None


def map_problems(text: str) -> list[str]:
  """Every name in a map's text that does not exist, as 'name (why)'."""
  out = []
  for m in CODE_NAME.finditer(text):
    if (why := code_problem(m.group(1), m.group(2))) is not None:
      out.append(f"{m.group(1)}:{m.group(2)} ({why})")
  out += [f"--mode={m} (not in run.py's MODES)" for m in MODE.findall(text) if m not in _modes()]
  configs = set(registry.names())
  out += [f"--config={c} (no such config)" for c in CONFIG.findall(text) if c not in configs]
  keys = set(overrides.valid_keys())
  out += [f"--set={k} (no such config key)" for k in SET_KEY.findall(text) if k not in keys]
  return out


def test_every_name_in_the_map_exists():
  text = _read(MAP)
  assert len(CODE_NAME.findall(text)) >= 80, "the map names too few functions: a broken pattern?"
  assert MODE.findall(text) and CONFIG.findall(text) and SET_KEY.findall(text)
  assert map_problems(text) == []


@pytest.mark.parametrize(
  "right, wrong, named",
  [
    ("conditioning.py:prefix_text`", "conditioning.py:prefix_txt`", "prefix_txt"),
    ("/conditioning.py:prefix_text`", "/conditionin.py:prefix_text`", "conditionin.py"),
    ("predictor.py:Predictor.rank`", "predictor.py:Predictor.rnk`", "rnk"),
    ("predictor.py:Predictor.rank`", "predictor.py:Predicter.rank`", "Predicter"),
    ("--mode=eval_future", "--mode=eval_futur", "eval_futur"),
    ("--config=large_yearly", "--config=large_yearl", "large_yearl"),
    ("--set=data.news_to_templama=", "--set=data.news_to_templam=", "news_to_templam"),
  ],
)
def test_a_wrong_name_is_caught(right, wrong, named):
  text = _read(MAP)
  assert right in text
  problems = map_problems(text.replace(right, wrong, 1))
  assert len(problems) == 1 and named in problems[0], problems


def test_the_map_names_every_part_of_the_paper():
  text = _read(MAP)
  assert [part for part in PAPER_PARTS if part not in text] == []


def test_the_map_is_linked_from_the_readme_and_the_architecture():
  assert "(docs/paper.md)" in _read(os.path.join(ROOT, "README.md"))
  assert "(paper.md)" in _read(os.path.join(ROOT, "docs", "ARCHITECTURE.md"))
