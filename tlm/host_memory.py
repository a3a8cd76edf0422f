"""Large host buffers on transparent huge pages: glibc's `malloc.hugetlb` tunable, set at start.

Why: XLA's CPU runtime allocates each execution's temporary buffer afresh. On the default
miniature that is one 111 MB allocation per training step. glibc serves an allocation that
large with a new mmap and returns it with munmap, and the kernel faults the fresh mapping in
and zeroes it 4 KiB at a time: about 29,000 page faults per step, a third of the CPU time of
a tiny training spent in the kernel (`strace`/`perf`, docs/reproduction.md "Run time").
glibc's tunable `glibc.malloc.hugetlb=1` makes malloc advise transparent huge pages
(MADV_HUGEPAGE) on the memory it maps, so the same buffer is faulted in 2 MiB at a time.
`benchmarks/host_hugepages.py` measures the gain against the default in one run and checks
that the trained parameters are bit-identical: where memory comes from does not change what
XLA computes.

Tunables are read only when a process starts, so the entry point (`run.py`) sets the variable
and executes itself again, once, before it imports anything heavy. Worker processes
(`tlm.miniature.parallel`) inherit the environment. Nothing is done where it cannot help or
where the user has decided: off Linux/glibc, when the kernel's transparent huge pages are not
in `madvise` mode (`always` already gives them; `never` refuses them), when GLIBC_TUNABLES is
already set (the user's tunables are kept as they are), or with TLM_HUGEPAGES=0.

The miniature's reproduction (`run.py --mode=reproduce`, one CPU machine, tiny models) goes
one step further, `reuse_heap` (`HEAP_TUNABLES`): malloc never maps (`mmap_max=0`), keeps one
arena (a thread arena's heaps are 64 MiB, too small for the buffer, and would map it anyway)
and never returns its heap to the kernel, so the buffer a step frees is the next step's, with
no fault and no zeroing. `benchmarks/host_hugepages.py` (arm `heap`) measured seconds per step
0.88-0.92x the huge-page tunable's, kernel CPU 0.45x, the same logged numbers to the bit, and
1.3x the peak resident memory (1.24 GB a training process against 0.96). Only there: a process
that never gives memory back is wrong for a pod host whose input pipeline and checkpoint
restores allocate and free many gigabytes, and one arena serialises many threads' allocations.
"""

import os
import platform
import sys

TUNABLE = "glibc.malloc.hugetlb=1"
# --mode=reproduce's (`reuse_heap`): huge pages, and the per-step buffer reused, not mapped anew.
HEAP_TUNABLES = (
  "glibc.malloc.hugetlb=1:glibc.malloc.mmap_max=0:glibc.malloc.arena_max=1"
  ":glibc.malloc.trim_threshold=4294967295"
)
THP_MODE_FILE = "/sys/kernel/mm/transparent_hugepage/enabled"
OPT_OUT = "TLM_HUGEPAGES"


def _thp_mode() -> str:
  """The kernel's transparent-huge-page mode ('always', 'madvise', 'never'), or '' if unknown."""
  try:
    with open(THP_MODE_FILE) as f:
      text = f.read(256)
  except OSError:
    return ""
  start, end = text.find("["), text.find("]")
  return text[start + 1 : end] if 0 <= start < end else ""


def wanted(environ=os.environ) -> bool:
  """Whether this process should be restarted with the tunable (see the module docstring)."""
  return (
    sys.platform == "linux"
    and platform.libc_ver()[0] == "glibc"
    and "GLIBC_TUNABLES" not in environ
    and environ.get(OPT_OUT, "1") != "0"
    and _thp_mode() == "madvise"
  )


def restart_with_hugepages(reuse_heap: bool = False) -> None:
  """Executes this Python command again with the tunable set, if `wanted`; else returns.

  The new process has the same pid, arguments (`sys.orig_argv`: interpreter flags included)
  and environment plus GLIBC_TUNABLES, which also keeps it from restarting a second time. If
  the exec fails the process goes on as it is: the tunable changes speed, never results.
  `reuse_heap`: `HEAP_TUNABLES` in place of `TUNABLE` (the miniature's reproduction only; see
  the module docstring).
  """
  if not wanted():
    return
  os.environ["GLIBC_TUNABLES"] = HEAP_TUNABLES if reuse_heap else TUNABLE
  sys.stdout.flush()
  sys.stderr.flush()
  try:
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
  except OSError:
    del os.environ["GLIBC_TUNABLES"]


def mode_of(argv: list[str], default: str) -> str:
  """The value of `--mode` in `argv` (`--mode=X` or `--mode X`, the last one wins, as absl
  parses it), or `default`: read before absl parses the flags, to pick the tunables."""
  mode = default
  for i, arg in enumerate(argv):
    if arg.startswith("--mode="):
      mode = arg.split("=", 1)[1]
    elif arg == "--mode" and i + 1 < len(argv):
      mode = argv[i + 1]
  return mode
