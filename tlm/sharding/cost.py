"""What a compiled program costs on one device: XLA's FLOPs and memory analyses.

One home for the figures the training loop (MFU, `tlm.train.mfu`), the train step's dry run
(`tlm.train.train_dry_run`) and the inference dry run (`tlm.infer.eval_dry_run`) report.
"""

from typing import Any


def compiled_flops(compiled: Any) -> float | None:
  """FLOPs of a compiled computation (per device) or of a lowered one (the whole program), by
  XLA's cost analysis; None if unknown. XLA counts a loop's body once, whatever its trip count.
  """
  try:
    cost = compiled.cost_analysis()
  except Exception:  # some backends do not implement it; the figure is then unknown
    return None
  flops = float((cost or {}).get("flops", 0.0))
  return flops if flops > 0 else None


def compiled_memory(compiled: Any) -> dict:
  """Bytes per device of a compiled program (XLA's memory analysis): arguments, outputs,
  temporaries (the activations), aliased, and their peak estimate."""
  memory = compiled.memory_analysis()
  mem = {
    "arguments": int(memory.argument_size_in_bytes),
    "outputs": int(memory.output_size_in_bytes),
    "temporaries": int(memory.temp_size_in_bytes),
    "aliased": int(memory.alias_size_in_bytes),
  }
  # A donated argument is aliased to an output: count it once.
  mem["peak_estimate"] = mem["arguments"] + mem["outputs"] + mem["temporaries"] - mem["aliased"]
  return mem


def gib(n: float) -> str:
  """Bytes as `1.23 GiB`."""
  return f"{n / 2**30:.2f} GiB"
