"""Peak memory reading a large safetensors file: tlm's reader against the `safetensors` package.

  python benchmarks/safetensors_memory.py [--megabytes=1024] [--tensors=64] [--repeats=2]

Writes `--tensors` float32 tensors of `--megabytes` in all to a temporary `model.safetensors`
(tlm's writer), then reads it in a fresh child process per reader and repeat, each child
reporting its resident memory after its imports (where Linux's peak is reset to it:
/proc/self/clear_refs) and its peak resident memory after the read (VmHWM, /proc/self/status),
and the read's wall time (Linux only):

- tlm: `tlm.models.formats.safetensors.read(path)`: the file opened once, each tensor read
  straight into its own array, tensor after tensor (a local file, or an object store's by
  ranged reads);
- package_bytes: `safetensors.numpy.load(data)` of the file's bytes, the package's API for a
  source other than a local file by name (what tlm would call on an object store's file, or on
  one it opened and vetted itself);
- package_deserialize: `safetensors.deserialize(data)` and `np.frombuffer` per tensor, the
  package's route for the dtypes `safetensors.numpy.load` does not make (BF16, float8);
- package_file: `safetensors.numpy.load_file(path)`, a local file by name (memory-mapped).

Prints one JSON line per reader and repeat, then one summary line: the peak above the child's
baseline (MB, 2**20 bytes) per reader, its ratio to the tensors' bytes, and whether every
reader returned the same values (a checksum of every tensor).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

READERS = ("tlm", "package_bytes", "package_deserialize", "package_file")

# The child: imports everything any reader needs first (so that the baseline holds the same
# modules for every reader), then reads, then reports.
_CHILD = r"""
import json, sys, time, zlib
import ml_dtypes, numpy as np, safetensors, safetensors.numpy
from tlm.models.formats import safetensors as tlm_safetensors

reader, path = sys.argv[1], sys.argv[2]
DTYPES = {"F32": np.float32, "BF16": ml_dtypes.bfloat16, "F8_E4M3": ml_dtypes.float8_e4m3fn}

def read():
  if reader == "tlm":
    return tlm_safetensors.read(path)
  if reader == "package_file":
    return safetensors.numpy.load_file(path)
  with open(path, "rb") as f:
    data = f.read()
  if reader == "package_bytes":
    return safetensors.numpy.load(data)
  return {
    name: np.frombuffer(t["data"], DTYPES[t["dtype"]]).reshape(t["shape"])
    for name, t in safetensors.deserialize(data)
  }

def peak_mb():  # the process's peak resident set (VmHWM, proc(5)), in MB
  with open("/proc/self/status") as f:
    return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024  # kB

# The imports' own transient peak is forgotten: Linux resets the peak resident set to the
# current one on "5" written to clear_refs (proc(5)), so the read's peak is measured from here
# (getrusage's ru_maxrss keeps the process's lifetime peak).
with open("/proc/self/clear_refs", "w") as f:
  f.write("5")
base = peak_mb()
start = time.perf_counter()
tensors = read()
seconds = time.perf_counter() - start
peak = peak_mb()
held = sum(a.nbytes for a in tensors.values()) / 2**20
checksum = 0
for name in sorted(tensors):  # every byte, after the peak was taken
  checksum = zlib.crc32(name.encode(), checksum)
  checksum = zlib.crc32(np.ascontiguousarray(tensors[name]).reshape(-1).view(np.uint8), checksum)
print(json.dumps({"reader": reader, "baseline_mb": round(base, 1), "peak_mb": round(peak, 1),
  "above_baseline_mb": round(peak - base, 1), "tensors_mb": round(held, 1),
  "seconds": round(seconds, 3), "checksum": checksum}))
"""


def write_file(path: str, megabytes: int, tensors: int) -> int:
  """`tensors` float32 tensors of `megabytes` MB in all; returns their bytes."""
  from tlm.models.formats import safetensors

  per = megabytes * 2**20 // tensors // 4
  rng = np.random.default_rng(0)
  arrays = {f"layer_{i}/kernel": rng.standard_normal(per, np.float32) for i in range(tensors)}
  safetensors.write(path, arrays)
  return sum(a.nbytes for a in arrays.values())


def measure(reader: str, path: str) -> dict:
  env = dict(os.environ, PYTHONPATH=ROOT)
  proc = subprocess.run(
    [sys.executable, "-c", _CHILD, reader, path], env=env, capture_output=True, text=True
  )
  if proc.returncode:
    raise SystemExit(f"{reader}: {proc.stderr.strip().splitlines()[-1]}")
  return json.loads(proc.stdout)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--megabytes", type=int, default=1024)
  parser.add_argument("--tensors", type=int, default=64)
  parser.add_argument("--repeats", type=int, default=2)
  args = parser.parse_args()
  tmp = tempfile.mkdtemp(prefix="tlm-safetensors-memory-")
  try:
    path = os.path.join(tmp, "model.safetensors")
    nbytes = write_file(path, args.megabytes, args.tensors)
    rows = []
    for _ in range(args.repeats):
      for reader in READERS:  # alternating: a slow spell of the machine hits every reader
        row = measure(reader, path)
        print(json.dumps(row), flush=True)
        rows.append(row)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  tensors_mb = nbytes / 2**20
  summary = {
    "file_mb": round(tensors_mb, 1),
    "tensors": args.tensors,
    "peak_above_baseline_mb": {
      r: max(x["above_baseline_mb"] for x in rows if x["reader"] == r) for r in READERS
    },
    "peak_over_tensor_bytes": {
      r: round(max(x["above_baseline_mb"] for x in rows if x["reader"] == r) / tensors_mb, 2)
      for r in READERS
    },
    "best_seconds": {r: min(x["seconds"] for x in rows if x["reader"] == r) for r in READERS},
    "same_values": len({x["checksum"] for x in rows}) == 1,
  }
  print(json.dumps({"summary": summary}))


if __name__ == "__main__":
  main()
