"""The import graph between the modules of tlm, research, tests and benchmarks: no cycle, lazy
imports included; no private name imported from another module; no test module imported by
another module of tests (what test modules share is in tests/helpers.py); and tlm and research
never import tests or benchmarks, nor tests benchmarks (a benchmark may measure through a double
of tests/, such as tests/remote_store.py).

`lint-imports` (pyproject.toml) checks layers of packages: a cycle between two modules of one
package (say `tlm.store.store_build` and `tlm.store.ssm_beam`, one importing the other inside a
function) passes it, and it sees neither tests/ nor benchmarks/. This test reads every `import`
statement of every module, at any depth of the file, and fails on any strongly connected group
of more than one module.
"""

import ast
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("tlm", "research", "tests", "benchmarks")

# The packages each may import, of the four walked.
MAY_IMPORT = {
  "tlm": {"tlm"},
  # The studies use the library and its test helpers; the library's tests never use a study.
  "research": {"research", "tlm", "tests"},
  "tests": {"tests", "tlm"},
  "benchmarks": {"benchmarks", "tests", "tlm"},
}


def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
  parts = path.relative_to(root).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(module: str, package: str, scripts: bool, files: dict) -> str:
  """An absolute import's module; in a directory of scripts, a sibling's full name."""
  sibling = f"{package}.{module.partition('.')[0]}"
  return f"{package}.{module}" if module and scripts and sibling in files else module


def _from_base(node: ast.ImportFrom, package: str, scripts: bool, files: dict) -> str:
  """The module of `from BASE import ...`, a relative one resolved against `package`."""
  if not node.level:
    return _absolute(node.module or "", package, scripts, files)
  up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
  return ".".join(up + ([node.module] if node.module else []))


def module_graph(root: pathlib.Path, packages=PACKAGES) -> tuple[dict, list]:
  """({module: set of modules it imports}, [(module, private name, from module)]).

  Every import statement counts, at module level or inside a function. `from a import b`
  is an edge to `a.b` when that is a module, else to `a`; a relative import is resolved
  against the importing module's package. In a directory without `__init__.py` whose scripts
  are run by path (`python benchmarks/data_remote.py`: Python puts the directory on `sys.path`),
  an absolute import of a sibling (`import data_store`) is that sibling.
  """
  files = {}
  for package in packages:
    for path in sorted((root / package).rglob("*.py")):
      files[_module_name(path, root)] = path
  graph, private = {}, []
  for name, path in files.items():
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    scripts = not (path.parent / "__init__.py").exists()
    edges = graph.setdefault(name, set())
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.Import):
        for alias in node.names:
          target = _absolute(alias.name, package, scripts, files)
          while target and target not in files:
            target = target.rpartition(".")[0]
          if target:
            edges.add(target)
      elif isinstance(node, ast.ImportFrom):
        base = _from_base(node, package, scripts, files)
        for alias in node.names:
          submodule = f"{base}.{alias.name}"
          if submodule in files:
            edges.add(submodule)
          elif base in files:
            edges.add(base)
            if alias.name.startswith("_"):
              private.append((name, alias.name, base))
    edges.discard(name)
  return graph, private


def cycles(graph: dict) -> list[list[str]]:
  """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
  index, low, on_stack, stack, groups = {}, {}, set(), [], []
  counter = 0
  for start in sorted(graph):
    if start in index:
      continue
    work = [(start, iter(sorted(graph[start])))]
    index[start] = low[start] = counter
    counter += 1
    stack.append(start)
    on_stack.add(start)
    while work:
      node, children = work[-1]
      child = next(children, None)
      if child is not None:
        if child not in graph:
          continue
        if child not in index:
          index[child] = low[child] = counter
          counter += 1
          stack.append(child)
          on_stack.add(child)
          work.append((child, iter(sorted(graph[child]))))
        elif child in on_stack:
          low[node] = min(low[node], index[child])
        continue
      work.pop()
      if work:
        low[work[-1][0]] = min(low[work[-1][0]], low[node])
      if low[node] == index[node]:
        group = []
        while True:
          member = stack.pop()
          on_stack.discard(member)
          group.append(member)
          if member == node:
            break
        if len(group) > 1:
          groups.append(sorted(group))
  return groups


def imported_test_modules(graph: dict) -> list[tuple[str, str]]:
  """[(importer, test module)]: a module of tests importing a test module (`test_*.py`)."""
  return sorted(
    (name, target)
    for name, edges in graph.items()
    if name.split(".")[0] == "tests"
    for target in edges
    if target.rpartition(".")[2].startswith("test_")
  )


def wrong_way(graph: dict) -> list[tuple[str, str]]:
  """[(importer, imported)] that `MAY_IMPORT` does not allow."""
  return sorted(
    (name, target)
    for name, edges in graph.items()
    for target in edges
    if target.split(".")[0] not in MAY_IMPORT[name.split(".")[0]]
  )


def test_no_module_imports_itself_through_others():
  graph, _ = module_graph(ROOT)
  assert len(graph) > 250  # the walk found the code
  assert {name.split(".")[0] for name in graph} == set(PACKAGES)
  assert cycles(graph) == []


def test_no_private_name_is_imported_from_another_module():
  _, private = module_graph(ROOT)
  assert private == []


def test_no_test_module_is_imported_by_another_module_of_tests():
  graph, _ = module_graph(ROOT)
  assert imported_test_modules(graph) == []


def test_the_packages_import_one_another_one_way():
  graph, _ = module_graph(ROOT)
  assert wrong_way(graph) == []


def _write(root: pathlib.Path, files: dict) -> None:
  for rel, text in files.items():
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(
  "files, want",
  [
    # A lazy import inside a function closes the cycle (what lint-imports' layers let pass).
    (
      {
        "tlm/__init__.py": "",
        "tlm/a.py": "from tlm import b\n",
        "tlm/b.py": "def f():\n  from tlm.a import g\n  return g\n",
      },
      [["tlm.a", "tlm.b"]],
    ),
    # Three modules of one package, by relative imports.
    (
      {
        "tlm/__init__.py": "",
        "tlm/p/__init__.py": "",
        "tlm/p/x.py": "from . import y\n",
        "tlm/p/y.py": "import tlm.p.z\n",
        "tlm/p/z.py": "from .x import thing\n",
        "tlm/p/w.py": "from . import x\n",
      },
      [["tlm.p.x", "tlm.p.y", "tlm.p.z"]],
    ),
    ({"tlm/__init__.py": "", "tlm/a.py": "import os\n", "tlm/b.py": "from tlm import a\n"}, []),
    # Two test modules (tests/ has no __init__.py), one importing the other inside a test.
    (
      {
        "tests/test_a.py": "from tests.test_b import g\n",
        "tests/test_b.py": "def test_g():\n  from tests.test_a import f\n  return f\n",
      },
      [["tests.test_a", "tests.test_b"]],
    ),
    # A benchmark and a test double, the double importing the benchmark lazily.
    (
      {
        "tests/double.py": "def f():\n  import benchmarks.b\n",
        "benchmarks/b.py": "from tests import double\n",
      },
      [["benchmarks.b", "tests.double"]],
    ),
    # Benchmark scripts: a sibling imported by its bare name, lazily.
    (
      {
        "benchmarks/a.py": "import sys\nimport b\n",
        "benchmarks/b.py": "def f():\n  from a import thing\n  return thing\n",
      },
      [["benchmarks.a", "benchmarks.b"]],
    ),
    ({"tests/helpers.py": "import os\n", "tests/test_a.py": "import tests.helpers\n"}, []),
  ],
)
def test_a_deliberate_cycle_is_found(tmp_path, files, want):
  _write(tmp_path, files)
  graph, _ = module_graph(tmp_path, sorted({rel.split("/")[0] for rel in files}))
  assert cycles(graph) == want


def test_a_private_import_is_found(tmp_path):
  _write(
    tmp_path, {"tlm/__init__.py": "", "tlm/a.py": "_w = 1\n", "tlm/b.py": "from .a import _w\n"}
  )
  assert module_graph(tmp_path, ("tlm",))[1] == [("tlm.b", "_w", "tlm.a")]
  _write(
    tmp_path,
    {
      "tests/helpers.py": "_y = 1\n",
      "tests/test_a.py": "def _tree():\n  pass\n",
      "tests/test_b.py": "def test_x():\n  from tests.test_a import _tree\n",
      "benchmarks/x.py": "from tests.helpers import _y\nfrom tlm.a import w\n",
    },
  )
  assert sorted(module_graph(tmp_path, PACKAGES)[1]) == [
    ("benchmarks.x", "_y", "tests.helpers"),
    ("tests.test_b", "_tree", "tests.test_a"),
    ("tlm.b", "_w", "tlm.a"),
  ]


def test_a_test_module_imported_and_an_import_the_wrong_way_are_found(tmp_path):
  _write(
    tmp_path,
    {
      "tlm/__init__.py": "",
      "tlm/a.py": "def f():\n  from tests import helpers\n",
      "tests/helpers.py": "import benchmarks.b\n",
      "tests/test_a.py": "X = 1\n",
      "tests/test_b.py": "from tests.test_a import X\n",
      "tests/cases/c.py": "def f():\n  import tests.test_a\n",
      "benchmarks/b.py": "from tests import test_a\nfrom tlm import a\n",
    },
  )
  graph, _ = module_graph(tmp_path, ("tlm", "tests", "benchmarks"))
  assert imported_test_modules(graph) == [
    ("tests.cases.c", "tests.test_a"),
    ("tests.test_b", "tests.test_a"),
  ]
  assert wrong_way(graph) == [("tests.helpers", "benchmarks.b"), ("tlm.a", "tests.helpers")]


def test_the_real_tree_is_walked():
  graph, _ = module_graph(ROOT)
  assert "tlm.store.store" in graph["tlm.store.store_write"]
  assert "tests.helpers" in graph["tests.test_store_shuffle"]
  assert "benchmarks.data_store" in graph["benchmarks.data_remote"]  # `import data_store`
  assert os.path.exists(ROOT / "tlm" / "store" / "build_ssm.py")
