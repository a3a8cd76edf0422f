"""Runs `run.py` as a user would, from a directory of the test's choosing, and checks the
one-line error rule: a non-zero exit status, exactly one `error:` line on stderr, no traceback.

`hide` makes packages look uninstalled in the child (`sys.modules[name] = None`, which
`importlib.util.find_spec` reports as absent), so that "gcsfs is missing" is tested whether or
not the machine has it.
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_PY = os.path.join(ROOT, "run.py")
_LAUNCH = (
  "import runpy, sys; [sys.modules.__setitem__(n, None) for n in sys.argv[1].split(',') if n]; "
  "sys.argv = sys.argv[2:]; "
  "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def run_tlm(*args: str, cwd: str, hide: tuple[str, ...] = (), timeout: float = 300):
  """`python run.py ARGS` in `cwd` (CPU only); returns the CompletedProcess."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  command = [sys.executable, "-c", _LAUNCH, ",".join(hide), RUN_PY, *args]
  return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def one_error(proc, *fragments: str) -> str:
  """Asserts the one-line error rule and that the line holds every fragment; returns it."""
  assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
  assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
  for fragment in fragments:
    assert fragment in lines[0], (fragment, lines[0])
  return lines[0]


def tree(root: str) -> list[str]:
  """Every file and directory under `root`, relative to it, sorted."""
  out = []
  for top, dirs, names in os.walk(root):
    for name in dirs + names:
      out.append(os.path.relpath(os.path.join(top, name), root))
  return sorted(out)
