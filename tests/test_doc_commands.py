"""Every `python run.py --mode=... --flag` the README and docs/*.md show names a mode of run.py's
`MODES` and flags that run.py defines; the README's test command is the one .ci/run runs.

Nothing is run: run.py is read with `ast` (the `MODES` keys and every `flags.DEFINE_*` name), and
the commands are read from the Markdown:
- in code fences, each line holding `run.py` (lines ending in a backslash joined), up to a
  comment (` #`) or the next command (`&&`, `;`, `|`);
- in prose, each backticked span holding `run.py` or starting with `--mode=` (a span may wrap
  lines), and the modes named alone (`--mode=eval`);
- docs/ARCHITECTURE.md's table of run.py's modes: every mode has one row, and its flags exist.
A mode or a flag written as a placeholder (`--mode=...`, `--mode=MODE`) is not checked; a bool
flag may be negated (`--nodry_run`). docs/results/ (measured outputs) is left out.
"""

import ast
import functools
import os
import re
import shlex

from tests.helpers import ROOT

# absl's own flags, defined by `absl.app` for every program.
ABSL_FLAGS = frozenset({"help", "helpfull", "helpshort", "helpxml", "flagfile", "undefok"})


@functools.cache
def run_py() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
  """(run.py's modes, its flags, its bool flags), read with `ast`."""
  modes, names, bools, _ = _read_run_py()
  return modes, names, bools


@functools.cache
def enum_choices() -> dict[str, tuple[str, ...]]:
  """{flag: its values} of run.py's `DEFINE_enum` flags with a literal list (not --mode)."""
  return _read_run_py()[3]


@functools.cache
def _read_run_py():
  with open(os.path.join(ROOT, "run.py"), encoding="utf-8") as f:
    tree = ast.parse(f.read())
  modes, names, bools, enums = set(), set(), set(), {}
  for node in ast.walk(tree):
    if isinstance(node, ast.Assign) and any(
      isinstance(t, ast.Name) and t.id == "MODES" for t in node.targets
    ):
      modes |= {k.value for k in node.value.keys}
    if (
      isinstance(node, ast.Call)
      and isinstance(node.func, ast.Attribute)
      and node.func.attr.startswith("DEFINE")
      and node.args
      and isinstance(node.args[0], ast.Constant)
    ):
      names.add(node.args[0].value)
      if node.func.attr == "DEFINE_bool":
        bools.add(node.args[0].value)
      if node.func.attr == "DEFINE_enum" and isinstance(node.args[2], ast.List):
        enums[node.args[0].value] = tuple(e.value for e in node.args[2].elts)
  return frozenset(modes), frozenset(names), frozenset(bools), enums


def markdown_files() -> list[str]:
  docs = sorted(f"docs/{f}" for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
  return ["README.md", *docs]


def placeholder(value: str) -> bool:
  return not re.fullmatch(r"[a-z_0-9]+", value)


def fenced_and_prose(text: str) -> tuple[list[tuple[int, str]], str]:
  """The code fences' lines (line number, line; continuations joined) and the prose, with
  the fenced lines blanked (line numbers kept)."""
  code, prose, fenced, pending = [], [], False, None
  for n, line in enumerate(text.split("\n"), 1):
    if line.lstrip().startswith("```"):
      fenced = not fenced
      prose.append("")
      continue
    if not fenced:
      prose.append(line)
      continue
    prose.append("")
    head = pending or (n, "")
    joined = head[1] + " " + line.rstrip()
    if joined.endswith("\\"):
      pending = (head[0], joined[:-1])
    else:
      code.append((head[0], joined))
      pending = None
  return code, "\n".join(prose)


def commands(text: str) -> list[tuple[int, str]]:
  """(line number, the arguments after `run.py`) of each command the Markdown shows."""
  code, prose = fenced_and_prose(text)
  out = []
  for n, line in code:
    line = re.split(r"\s#", line)[0]
    for part in re.split(r"&&|;|\|", line):
      if "run.py" in part:
        out.append((n, part.split("run.py", 1)[1]))
  for m in re.finditer(r"`([^`]+)`", prose):
    span, n = m.group(1), prose.count("\n", 0, m.start()) + 1
    if "run.py" in span:
      out.append((n, span.split("run.py", 1)[1]))
    elif span.startswith("--mode="):
      out.append((n, span))
  return out


def command_problems(args: str) -> list[str]:
  modes, names, bools = run_py()
  try:
    tokens = shlex.split(args)
  except ValueError:
    tokens = args.split()
  out = []
  for token in tokens:
    token = token.strip("[]")
    if not token.startswith("--") or token == "--":
      continue
    name, _, value = token[2:].partition("=")
    if name == "mode":
      if not placeholder(value) and value not in modes:
        out.append(f"no mode {value}")
    elif placeholder(name):
      continue
    elif name not in names | ABSL_FLAGS and not (name[:2] == "no" and name[2:] in bools):
      out.append(f"no flag --{name}")
    elif name in enum_choices() and not placeholder(value) and value not in enum_choices()[name]:
      out.append(f"--{name}={value} is not one of {', '.join(enum_choices()[name])}")
  return out


def read(path: str) -> str:
  with open(os.path.join(ROOT, path), encoding="utf-8") as f:
    return f.read()


def docs_problems(path: str) -> list[str]:
  return [f"{path}:{n}: {p}" for n, args in commands(read(path)) for p in command_problems(args)]


def modes_table(text: str) -> dict[str, list[str]]:
  """docs/ARCHITECTURE.md's "run.py modes" table: {mode: the flags named in its row}."""
  section = text.split("## run.py modes", 1)[1].split("\n\n", 1)[0]
  rows = {}
  for line in section.split("\n"):
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
    if len(cells) == 3 and cells[0] not in ("mode", "---"):
      for mode in cells[0].split(","):
        rows[mode.strip()] = re.findall(r"--(\w+)", cells[2])
  return rows


def test_the_reader_finds_commands_and_problems():
  text = (
    "Run `python run.py --mode=eval --config=x\n  --no_such_flag` or `--mode=nomode`.\n"
    "```bash\npython run.py --mode=train --nodry_run \\\n  --workdir=w  # --not_a_flag\n"
    "pip install x && python run.py --mode=MODE --helpfull [--vocab=v]\n```\n"
  )
  found = commands(text)
  assert [n for n, _ in found] == [4, 6, 1, 2]
  problems = [p for _, args in found for p in command_problems(args)]
  assert problems == ["no flag --no_such_flag", "no mode nomode"]
  assert command_problems("--mode=convert --format=t5x --set=a.b=1") == []
  assert command_problems("--mode=convert --format=onnx") == [
    "--format=onnx is not one of hf, tlm, t5x"
  ]


def test_every_documented_command_names_a_mode_and_flags_that_exist():
  problems = [p for f in markdown_files() for p in docs_problems(f)]
  assert not problems, "\n".join(problems)
  assert sum(len(commands(read(f))) for f in markdown_files()) > 30  # the reader finds them


def test_the_modes_table_has_every_mode_and_only_flags_that_exist():
  modes, names, _ = run_py()
  with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
    text = f.read()
  rows = modes_table(text)
  assert sorted(rows) == sorted(modes)
  unknown = {m: [f for f in flags if f not in names] for m, flags in rows.items()}
  assert not any(unknown.values()), unknown
  # The formats the table lists (`--format=hf\|tlm\|t5x`, pipes escaped) are all of them.
  for mode, values in re.findall(r"^\| (\w+) .*--format=([\w\\|]+)", text, re.M):
    assert sorted(values.split("\\|")) == sorted(enum_choices()["format"]), (mode, values)


def test_the_readmes_test_command_is_the_one_ci_runs():
  """.ci/run runs the README's test command (the library's suite) and then the studies' tests
  (docs/testing.md), each exactly as written there."""
  with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
    ci = [line.strip() for line in f if re.match(r"python3? -m pytest", line.strip())]
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    readme = f.read()
  with open(os.path.join(ROOT, "docs", "testing.md"), encoding="utf-8") as f:
    testing = f.read()
  assert len(ci) == 2, ci
  library, studies = (c.replace("python3 ", "python ", 1) for c in ci)
  assert studies == library + " research", ci
  # The quick start's command, and both in docs/testing.md.
  assert re.search(r"&& " + re.escape(library) + r"\s+# the tests\n", readme), library
  assert re.search(r"(?m)^" + re.escape(library) + r"\s+# the library's suite", testing), library
  assert re.search(r"(?m)^" + re.escape(studies) + r"\s+# the studies' tests", testing), studies
