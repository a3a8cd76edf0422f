"""The machine and software a seed ran on: the record `reproduce` writes into seed_summary.json.

A tiny model's training on CPU is bit-reproducible only on the same arithmetic: XLA's CPU
backend compiles for the host's instruction set (capped by `--xla_cpu_max_isa`) and splits a
matrix product over the threads of its CPU client, which has as many threads as the process's
CPU affinity has cores unless PJRT_NPROC (or NPROC) says otherwise
(`research/seed4/README.md` measured what each changes). So a seed's record names the CPU and
its ISA flags, the cores and the affinity, the variables that set threads, memory and XLA's
options, the library versions and the commit: enough to tell whether a rerun can give the same
numbers and, where it does not, which of these differs (`tlm.miniature.regeneration` prints a
run's record beside the committed one).

`record()` reads only this process: /proc/cpuinfo, os.sched_getaffinity, os.environ, the
installed packages' metadata (nothing is imported) and `git` in the checkout this file is in.
A fact that cannot be read is recorded as None.
"""

import importlib.metadata
import os
import platform
import subprocess
import sys
from collections.abc import Mapping

CPUINFO = "/proc/cpuinfo"
PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "orbax-checkpoint", "ml_dtypes")
# Environment variables that set threads, memory or XLA's compilation (exact names, then
# prefixes). TF_ only where it is TensorFlow's/XLA's (not Terraform's TF_CLI_* and the like).
THREAD_VARIABLES = ("PJRT_NPROC", "NPROC", "GLIBC_TUNABLES", "TLM_HUGEPAGES")
THREAD_PREFIXES = (
  "XLA_",
  "JAX_",
  "OMP_",
  "MKL_",
  "OPENBLAS_",
  "MALLOC_",
  "TF_CPP_",
  "TF_XLA_",
  "TF_ENABLE_",
  "TF_NUM_",
  "TF_DETERMINISTIC",
)
# XLA's CPU ISA tiers (`--xla_cpu_max_isa` values), oldest first, with the cpuinfo flag each needs.
XLA_ISAS = (("SSE4_2", "sse4_2"), ("AVX", "avx"), ("AVX2", "avx2"), ("AVX512", "avx512f"))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cpu(cpuinfo: str = CPUINFO) -> dict:
  """The first processor of /proc/cpuinfo: vendor, model name, family/model/stepping, flags."""
  try:
    with open(cpuinfo, encoding="utf-8", errors="replace") as f:
      text = f.read(1 << 20)
  except OSError:
    return {"model_name": platform.processor() or None, "flags": None}
  first: dict[str, str] = {}
  for line in text.split("\n\n", 1)[0].splitlines():
    key, sep, value = line.partition(":")
    if sep:
      first.setdefault(key.strip(), value.strip())
  flags = first.get("flags", first.get("Features"))
  return {
    "vendor": first.get("vendor_id"),
    "model_name": first.get("model name"),
    "family": first.get("cpu family"),
    "model": first.get("model"),
    "stepping": first.get("stepping"),
    "flags": sorted(flags.split()) if flags is not None else None,
  }


def xla_flag(flags: str, name: str) -> str | None:
  """The value of `--name=value` in an XLA_FLAGS string (the last one wins), or None."""
  value = None
  for token in flags.split():
    key, _, v = token.partition("=")
    if key == f"--{name}":
      value = v
  return value


def xla_cpu_isa(cpu_flags: list[str] | None, xla_flags: str) -> str | None:
  """The ISA tier XLA's CPU backend compiles for: the newest of `XLA_ISAS` the CPU has, capped
  by `--xla_cpu_max_isa` (a cap XLA does not know is ignored by it, and here), or None."""
  if cpu_flags is None:
    return None
  have = [name for name, flag in XLA_ISAS if flag in cpu_flags]
  if not have:
    return None
  cap = (xla_flag(xla_flags, "xla_cpu_max_isa") or "").upper()
  names = [name for name, _ in XLA_ISAS]
  if cap in names:
    have = [name for name in have if names.index(name) <= names.index(cap)]
  return have[-1] if have else None


def thread_variables(environ: Mapping[str, str]) -> dict[str, str]:
  """The environment variables (`THREAD_VARIABLES`, `THREAD_PREFIXES`) that are set."""
  return {
    k: environ[k] for k in sorted(environ) if k in THREAD_VARIABLES or k.startswith(THREAD_PREFIXES)
  }


def xla_cpu_threads(environ: Mapping[str, str], affinity: int) -> int:
  """Threads of XLA's CPU client: PJRT_NPROC, else NPROC (a whole number), else the cores in
  the process's affinity (XLA's own rule for its CPU client's thread pool)."""
  for name in ("PJRT_NPROC", "NPROC"):
    value = environ.get(name, "").strip()
    if value.lstrip("-").isdigit():
      return max(0, int(value))
  return affinity


def versions() -> dict[str, str | None]:
  """{package: installed version or None} of `PACKAGES` (from their metadata, not imported)."""
  out: dict[str, str | None] = {}
  for name in PACKAGES:
    try:
      out[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      out[name] = None
  return out


def _git(args: list[str], cwd: str) -> str | None:
  try:
    done = subprocess.run(
      ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False
    )
  except (OSError, subprocess.SubprocessError):
    return None
  return done.stdout.strip() if done.returncode == 0 else None


def git_commit(repo: str = REPO) -> str | None:
  """The commit checked out in `repo`, with " dirty" when its tree has changes (untracked files
  that git does not ignore included), or None outside a git checkout."""
  if not os.path.exists(os.path.join(repo, ".git")):
    return None
  commit = _git(["rev-parse", "HEAD"], repo)
  if commit is None:
    return None
  status = _git(["status", "--porcelain"], repo)
  return commit + (" dirty" if status else "") if status is not None else f"{commit} (status ?)"


def record(environ: Mapping[str, str] | None = None, reproduce: Mapping | None = None) -> dict:
  """This process's machine and software (the module docstring); `reproduce`: the worker
  settings of the run ({"workers": n, "pin_workers": bool, ...}), recorded as given."""
  environ = os.environ if environ is None else environ
  info = cpu()
  affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
  xla_flags = environ.get("XLA_FLAGS", "")
  cores_in_affinity = len(affinity) if affinity is not None else (os.cpu_count() or 1)
  return {
    "cpu": info,
    "xla_cpu_isa": xla_cpu_isa(info["flags"], xla_flags),
    "cpu_count": os.cpu_count(),
    "affinity": affinity,
    "xla_cpu_threads": xla_cpu_threads(environ, cores_in_affinity),
    "environment": thread_variables(environ),
    "reproduce": dict(reproduce) if reproduce is not None else None,
    "python": platform.python_version(),
    "implementation": sys.implementation.name,
    "platform": platform.platform(),
    "libc": " ".join(platform.libc_ver()).strip() or None,
    "packages": versions(),
    "git_commit": git_commit(),
  }
