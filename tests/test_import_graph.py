"""The import graph between modules: no cycle, lazy imports included, and no private name
imported from another module.

`lint-imports` (pyproject.toml) checks layers of packages: a cycle between two modules of one
package (say `tlm.store.store_build` and `tlm.store.ssm_beam`, one importing the other inside a
function) passes it. This test reads every `import` statement of every module, at any depth of
the file, and fails on any strongly connected group of more than one module.
"""

import ast
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("tlm", "research")


def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
  parts = path.relative_to(root).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph(root: pathlib.Path, packages=PACKAGES) -> tuple[dict, list]:
  """({module: set of modules it imports}, [(module, private name, from module)]).

  Every import statement counts, at module level or inside a function. `from a import b`
  is an edge to `a.b` when that is a module, else to `a`; a relative import is resolved
  against the importing module's package.
  """
  files = {}
  for package in packages:
    for path in sorted((root / package).rglob("*.py")):
      files[_module_name(path, root)] = path
  graph, private = {}, []
  for name, path in files.items():
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges = graph.setdefault(name, set())
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.Import):
        for alias in node.names:
          target = alias.name
          while target and target not in files:
            target = target.rpartition(".")[0]
          if target:
            edges.add(target)
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
          up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
          base = ".".join(up + ([node.module] if node.module else []))
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


def test_no_module_imports_itself_through_others():
  graph, _ = module_graph(ROOT)
  assert len(graph) > 150  # the walk found the code
  assert cycles(graph) == []


def test_no_private_name_is_imported_from_another_module():
  _, private = module_graph(ROOT)
  assert private == []


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
  ],
)
def test_a_deliberate_cycle_is_found(tmp_path, files, want):
  _write(tmp_path, files)
  graph, _ = module_graph(tmp_path, ("tlm",))
  assert cycles(graph) == want


def test_a_private_import_is_found(tmp_path):
  _write(
    tmp_path, {"tlm/__init__.py": "", "tlm/a.py": "_w = 1\n", "tlm/b.py": "from .a import _w\n"}
  )
  assert module_graph(tmp_path, ("tlm",))[1] == [("tlm.b", "_w", "tlm.a")]


def test_the_real_tree_is_walked():
  graph, _ = module_graph(ROOT)
  assert "tlm.store.store" in graph["tlm.store.store_write"]
  assert os.path.exists(ROOT / "tlm" / "store" / "build_ssm.py")
