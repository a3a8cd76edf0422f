"""What verifying a checkpoint against its manifest costs next to loading it; prints ONE JSON line.

  python benchmarks/verify_checkpoint.py [--megabytes=512 --arrays=64 --repeats=3]

Every load of a tlm checkpoint first checks its files against `tlm_checksums.json`
(`tlm.checksums.check`: one stat per file for the sizes, then the SHA-256 of every file, several
at once). This writes a tlm model directory (`save_tlm`'s layout: orbax `params/` + manifest) of
`--megabytes` of float32 parameters in `--arrays` arrays, then times, in one run, interleaved,
the best of `--repeats`:

- `load_s`: the load a user runs anyway, `orbax_params.restore` to host numpy arrays;
- `verify_s`: the check, with the hash threads tlm uses (`hash_threads`) and with one;
- `sizes_only_s`: the check's stat pass alone (what a manifest with sizes costs without hashing).

It reports `verify_s / load_s` (the overhead a load pays), the hashing throughput in GB/s and
the orbax data files (hashing runs in parallel across files, not within one). Both read from
the page cache here (the files were just written): on a cold cache the check reads the files
from disk first and the load then finds them in the page cache, so the disk is read once either
way and the overhead is the hashing's CPU time.
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tlm import checksums  # noqa: E402
from tlm.models.formats import orbax_params  # noqa: E402


def _best(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return min(times)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--megabytes", type=int, default=512)
  parser.add_argument("--arrays", type=int, default=64)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  per_array = args.megabytes * (1 << 20) // 4 // args.arrays
  rs = np.random.RandomState(0)
  params = {f"w{i}": rs.standard_normal(per_array).astype(np.float32) for i in range(args.arrays)}
  with tempfile.TemporaryDirectory(prefix="tlm_verify_bench.") as tmp:
    orbax_params.save(os.path.join(tmp, "params"), params)
    checksums.write_manifest(tmp)
    del params
    files = checksums.read_manifest(tmp)
    size = sum(s for s, _ in files.values())
    data_files = sum(1 for rel in files if "/d/" in f"/{rel}")
    threads = checksums._HASH_THREADS
    timings = {"load_s": [], "verify_s": [], "verify_1_thread_s": [], "sizes_only_s": []}

    def verify_one_thread():
      checksums._HASH_THREADS = 1
      try:
        assert checksums.check(tmp, ("params",)) is None
      finally:
        checksums._HASH_THREADS = threads

    def sizes_only():
      for rel in files:
        checksums._size(tmp, rel)

    for _ in range(args.repeats):  # interleaved, so that machine load affects all alike
      timings["load_s"].append(_best(lambda: orbax_params.restore(os.path.join(tmp, "params")), 1))
      timings["verify_s"].append(_best(lambda: checksums.check(tmp, ("params",)), 1))
      timings["verify_1_thread_s"].append(_best(verify_one_thread, 1))
      timings["sizes_only_s"].append(_best(sizes_only, 1))
  best = {k: min(v) for k, v in timings.items()}
  print(
    json.dumps(
      {
        "bytes": size,
        "files": len(files),
        "data_files": data_files,
        "hash_threads": threads,
        "cpus": os.cpu_count(),
        **{k: round(v, 4) for k, v in best.items()},
        "verify_over_load": round(best["verify_s"] / best["load_s"], 3),
        "verify_1_thread_over_load": round(best["verify_1_thread_s"] / best["load_s"], 3),
        "hash_gb_per_s": round(size / best["verify_s"] / 1e9, 3),
        "hash_gb_per_s_1_thread": round(size / best["verify_1_thread_s"] / 1e9, 3),
      }
    )
  )


if __name__ == "__main__":
  main()
