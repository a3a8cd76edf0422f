"""Reading a T5X legacy checkpoint: tlm's reader against TensorStore; prints ONE JSON line.

  python benchmarks/t5x_read.py [--preset=t5-small] [--repeats=3] [--threads=8]

Writes the parameters of a `--preset` T5 (random, float32) as a T5X legacy checkpoint
(`tlm.models.formats.t5x.write`: msgpack + gzip zarr, as T5X's `Checkpointer.save`) in a
temporary directory, then times, alternating, in one process:

- tlm: `tlm.models.formats.t5x.read_legacy` (tlm's own msgpack and zarr decoding, with its
  hostile-file checks, arrays inflated in `READ_THREADS` threads);
- tensorstore: what T5X's `load_t5x_checkpoint` does, which is what a user would run
  otherwise: the msgpack through flax, then every array opened and read with TensorStore,
  all reads in flight at once.

The JSON holds the parameters' bytes, the best wall time of each and their ratio (tlm /
tensorstore; > 1 is slower), and checks that both read the same values.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tlm.models import checkpoints, t5  # noqa: E402
from tlm.models.formats import t5x  # noqa: E402


def _tensorstore_read(step_dir: str) -> dict:
  """T5X's read: flax msgpack_restore, then `ts.open(spec).read()` for every spec, at once."""
  import tensorstore as ts
  from flax import serialization, traverse_util

  with open(os.path.join(step_dir, "checkpoint"), "rb") as f:
    contents = serialization.msgpack_restore(f.read())
  is_spec = lambda x: isinstance(x, dict) and x.keys() >= {"driver", "kvstore", "metadata"}
  flat = traverse_util.flatten_dict(
    contents["optimizer"]["target"], sep="/", is_leaf=lambda _, x: is_spec(x)
  )
  futures = {}
  for name, spec in flat.items():
    spec = dict(spec, metadata=dict(spec["metadata"]))
    del spec["metadata"]["chunks"], spec["metadata"]["compressor"]
    spec["kvstore"] = dict(spec["kvstore"], path=os.path.join(step_dir, spec["kvstore"]["path"]))
    futures[name] = ts.open(spec, open=True).result().read()
  return {name: future.result() for name, future in futures.items()}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--preset", default="t5-small")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--threads", type=int, default=t5x.READ_THREADS)
  args = parser.parse_args()
  t5x.READ_THREADS = args.threads
  cfg = t5.get_preset(args.preset)
  rs = np.random.RandomState(0)
  params = {k: rs.randn(*s).astype(np.float32) for k, s in checkpoints.param_shapes(cfg).items()}
  nbytes = sum(v.nbytes for v in params.values())
  tmp = tempfile.mkdtemp(prefix="tlm-bench-t5x-")
  try:
    step_dir = t5x.write(tmp, params, 0)
    ours = t5x.read_legacy(step_dir)
    theirs = _tensorstore_read(step_dir)
    same = sorted(ours) == sorted(theirs) and all(
      np.array_equal(ours[k], theirs[k]) and np.array_equal(ours[k], params[k]) for k in params
    )
    times = {"tlm": [], "tensorstore": []}
    for _ in range(args.repeats):
      for name, read in (("tlm", t5x.read_legacy), ("tensorstore", _tensorstore_read)):
        t0 = time.perf_counter()
        read(step_dir)
        times[name].append(time.perf_counter() - t0)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  best = {name: min(values) for name, values in times.items()}
  print(
    json.dumps(
      {
        "benchmark": "t5x_read",
        "preset": args.preset,
        "parameter_bytes": nbytes,
        "threads": args.threads,
        "tlm_s": round(best["tlm"], 3),
        "tensorstore_s": round(best["tensorstore"], 3),
        "tlm_over_tensorstore": round(best["tlm"] / best["tensorstore"], 2),
        "tlm_MB_per_s": round(nbytes / best["tlm"] / 1e6, 1),
        "same_values": same,
      }
    )
  )


if __name__ == "__main__":
  main()
