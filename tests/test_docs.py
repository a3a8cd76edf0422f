"""Every file path, link and dotted name the documentation mentions exists.

Reads only the tracked files (`git ls-files`, no network). It checks:
1. Markdown links and images `[..](target)` outside code fences: a relative target (from the
   document's directory, without `#anchor`) is a tracked file or directory, and an anchor into
   a tracked .md file is one of its headings (GitHub's slug).
2. Backticked paths in Markdown, outside code fences, whose first component is a tracked
   top-level name (`tlm/...`, `docs/...`): they exist.
3. Paths in .py docstrings and comments (`tlm/...`, `docs/...`, ...): they exist.
4. Backticked dotted names `tlm.x.y[.attr]` and `research.x.y` in either kind of file: the
   longest prefix that is a module, then its next part defined in it (def, class, assignment,
   import; found with `ast`, never imported). And any `NAME.md` in capitals (DESIGN.md,
   STYLE.md) is the name of a tracked file.
Placeholders (an ALL-CAPS stem such as `WORKDIR` or `NAME.py`, a component with `=`, `*`, `{`,
`<` or `...`), globs (a token followed by `*`), runtime paths (`~`, `/`, `gs://`, `runs/`) and
code fences (commands there name outputs) are not checked.
"""

import ast
import functools
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP = ("tlm", "docs", "tests", "benchmarks", "research", ".ci")


@functools.lru_cache(maxsize=1)
def tracked() -> frozenset[str]:
  out = subprocess.run(
    ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
  ).stdout.split("\n")
  files = {f for f in out if f}
  # Files added but not yet committed are tracked too once added; the working tree's new
  # files are listed by --others --exclude-standard.
  others = subprocess.run(
    ["git", "ls-files", "--others", "--exclude-standard"],
    cwd=ROOT,
    capture_output=True,
    text=True,
    check=True,
  ).stdout.split("\n")
  files |= {f for f in others if f}
  files = {f for f in files if os.path.exists(os.path.join(ROOT, f))}
  dirs = {os.path.dirname(f) for f in files}
  while any(d and os.path.dirname(d) not in dirs for d in dirs):
    dirs |= {os.path.dirname(d) for d in dirs}
  return frozenset(files | dirs)


def exists(path: str) -> bool:
  return os.path.normpath(path).rstrip("/") in tracked()


def markdown_files() -> list[str]:
  """The documents whose paths and names must exist. A pre-registration is a dated record,
  committed before its experiment ran, and is never edited after: the names it gives are those
  of its commit, and a later move of a module leaves them behind."""
  return sorted(
    f
    for f in tracked()
    if f.endswith(".md")
    and (
      f in ("README.md", "tlm/models/formats/README.md")
      or f.startswith(("docs/", "research/"))
      or f.endswith("meshtf/README.md")
    )
    and not os.path.basename(f).startswith("PREREGISTRATION")
  )


def python_files() -> list[str]:
  return sorted(
    f
    for f in tracked()
    if (f.endswith(".py") and f.startswith(("tlm/", "research/", "benchmarks/", "tests/")))
    or f in ("run.py", ".ci/run")
  )


def slug(heading: str) -> str:
  """GitHub's anchor of a heading."""
  text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
  return text.replace(" ", "-")


@functools.cache
def anchors(path: str) -> frozenset[str]:
  with open(os.path.join(ROOT, path), encoding="utf-8") as f:
    return frozenset(slug(m.group(1)) for m in re.finditer(r"(?m)^#+\s+(.*)$", f.read()))


def placeholder(token: str) -> bool:
  for part in token.strip("/").split("/"):
    stem = part.split(".")[0]
    if any(c in part for c in "=*{<") or "..." in part:
      return True
    if len(stem) > 1 and re.fullmatch(r"[A-Z][A-Z0-9_]*", stem):
      return True
  return False


def runtime(token: str) -> bool:
  return token.startswith(("~", "/", "gs://", "runs/", "WORKDIR"))


def prose_lines(text: str):
  """(line number, line) of a Markdown text outside code fences."""
  fenced = False
  for n, line in enumerate(text.split("\n"), 1):
    if line.lstrip().startswith("```"):
      fenced = not fenced
      continue
    if not fenced:
      yield n, line


@functools.cache
def definitions(module_path: str) -> frozenset[str]:
  with open(os.path.join(ROOT, module_path), encoding="utf-8") as f:
    tree = ast.parse(f.read())
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      names.add(node.name)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      for t in targets:
        for n in ast.walk(t):
          if isinstance(n, ast.Name):
            names.add(n.id)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      for a in node.names:
        names.add((a.asname or a.name).split(".")[0])
  return frozenset(names)


def dotted_problem(name: str) -> str | None:
  """Why `tlm.x.y.attr` does not resolve, or None."""
  parts = name.split(".")
  for k in range(len(parts), 0, -1):
    base = "/".join(parts[:k])
    module = base + ".py" if base + ".py" in tracked() else base + "/__init__.py"
    if module in tracked() or (k and base in tracked() and base + "/__init__.py" in tracked()):
      rest = parts[k:]
      if not rest:
        return None
      if rest[0] in definitions(module) or "/".join(parts[: k + 1]) in tracked():
        return None
      return f"no definition {rest[0]} in {'.'.join(parts[:k])}"
  return "no such module"


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
BACKTICK = re.compile(r"`([^`]+)`")
PATH = re.compile(r"^[A-Za-z0-9_.=\-/]+$")
DOTTED = re.compile(r"^(?:tlm|research)(?:\.[A-Za-z_]\w*)+$")
CAPS_MD = re.compile(r"\b([A-Z][A-Z_]+\.md)\b")
PY_PATH = re.compile(
  r"(?<![\w/.\-])((?:tlm|docs|tests|benchmarks|research|\.ci)/[A-Za-z0-9_.=\-/]*)"
)


def check_path(token: str, base: str = "") -> str | None:
  if placeholder(token) or runtime(token):
    return None
  if not exists(os.path.join(base, token) if base else token):
    return "no such file"
  return None


def markdown_problems(path: str) -> list[str]:
  out = []
  with open(os.path.join(ROOT, path), encoding="utf-8") as f:
    text = f.read()
  base = os.path.dirname(path)
  basenames = {os.path.basename(t) for t in tracked()}
  for n, line in prose_lines(text):
    for m in LINK.finditer(line):
      target = m.group(1)
      if re.match(r"^(https?:|mailto:)", target):
        continue
      file, _, anchor = target.partition("#")
      resolved = os.path.normpath(os.path.join(base, file)) if file else path
      if file and not exists(resolved):
        out.append(f"{path}:{n}: {target} (no such file)")
      elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
        out.append(f"{path}:{n}: {target} (no heading #{anchor})")
    for m in BACKTICK.finditer(line):
      token = m.group(1).strip()
      after = line[m.end() : m.end() + 1]
      if after == "*":
        continue
      if PATH.match(token) and "/" in token and token.split("/")[0] in TOP:
        if (why := check_path(token)) is not None:
          out.append(f"{path}:{n}: {token} ({why})")
      elif DOTTED.match(token) and (why := dotted_problem(token)) is not None:
        out.append(f"{path}:{n}: {token} ({why})")
    for m in CAPS_MD.finditer(line):
      if m.group(1) not in basenames:
        out.append(f"{path}:{n}: {m.group(1)} (no such file)")
  return out


def python_problems(path: str) -> list[str]:
  out = []
  with open(os.path.join(ROOT, path), encoding="utf-8") as f:
    text = f.read()
  basenames = {os.path.basename(t) for t in tracked()}
  for n, line in enumerate(text.split("\n"), 1):
    for m in PY_PATH.finditer(line):
      token = m.group(1).rstrip(".,;:)")
      after = line[m.end() : m.end() + 1]
      if after == "*" or token.endswith("/") and not token.strip("/"):
        continue
      if "'" in line[: m.start()].split("#")[-1][-1:] or '"' in line[m.start() - 1 : m.start()]:
        continue  # a string literal: a path the code builds, not a pointer
      if (why := check_path(token)) is not None:
        out.append(f"{path}:{n}: {token} ({why})")
    for m in BACKTICK.finditer(line):
      token = m.group(1).strip()
      if DOTTED.match(token) and (why := dotted_problem(token)) is not None:
        out.append(f"{path}:{n}: {token} ({why})")
    for m in CAPS_MD.finditer(line):
      if m.group(1) not in basenames:
        out.append(f"{path}:{n}: {m.group(1)} (no such file)")
  return out


def test_the_checker_finds_what_it_should():
  assert slug("At the paper's scale") == "at-the-papers-scale"
  assert placeholder("tlm/eval/NAME.py") and placeholder("W_SMALL") and not placeholder("tlm/x.py")
  assert dotted_problem("tlm.configs.years.TRAIN_YEARS") is None
  assert (
    dotted_problem("tlm.configs.years.NO_SUCH_NAME")
    == "no definition NO_SUCH_NAME in tlm.configs.years"
  )
  assert dotted_problem("tlm.no_such_module") is not None
  assert check_path("tlm/configs/years.py") is None and check_path("tlm/nowhere.py") is not None


def test_every_documented_path_link_and_name_exists():
  problems = [p for f in markdown_files() for p in markdown_problems(f)]
  # This file's own docstring names placeholders on purpose.
  problems += [p for f in python_files() if f != "tests/test_docs.py" for p in python_problems(f)]
  assert not problems, "\n".join(problems)


# "issue 19", "Issue #3", "issues 29 and 30": a tracker the reader of the repository cannot see.
ISSUE_NUMBER = re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)


def issue_number_problems(path: str) -> list[str]:
  with open(os.path.join(ROOT, path), encoding="utf-8") as f:
    lines = f.read().split("\n")
  return [
    f"{path}:{n}: {m.group(0)!r}"
    for n, line in enumerate(lines, 1)
    for m in ISSUE_NUMBER.finditer(line)
  ]


def test_no_issue_numbers_in_code_or_docs():
  """The code and the documents explain themselves; pre-registrations stay as committed."""
  assert ISSUE_NUMBER.search("(issue 19, item 4)") and ISSUE_NUMBER.search("Issue #3")
  assert not ISSUE_NUMBER.search("the tissue 4") and not ISSUE_NUMBER.search(
    "an issue with 4 seeds"
  )
  # This file names the pattern's examples on purpose.
  files = markdown_files() + [f for f in python_files() if f != "tests/test_docs.py"]
  problems = [p for f in files for p in issue_number_problems(f)]
  assert not problems, "\n".join(problems)
