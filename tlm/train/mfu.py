"""Model FLOP utilisation: the compiled step's FLOPs over the step time and the device's peak.

The FLOPs are XLA's cost analysis of the compiled, SPMD-partitioned train step, i.e. per
device (with `train.microbatches` > 1, of the lowered step without the microbatch loop, divided
by the devices: XLA counts a loop's body once); with `model.remat` they include the recomputed
forward pass, so the figure is closer to PaLM's "hardware FLOP utilisation" than to 6 * N * D.
The peaks are the vendors' dense bfloat16 figures per JAX device (a TPU v3 device is one of
the chip's two cores; v4 and v5p devices are whole megacore chips). A device not in the table
has no MFU: the progress line leaves it out and `metrics.jsonl` has no `mfu` field. The FLOPs
themselves are `tlm.sharding.cost.compiled_flops`.
"""

# (substring of the lower-cased jax device_kind, peak bf16 FLOP/s per device); the first match
# wins, so the specific names come before the general ones.
PEAK_FLOPS: tuple[tuple[str, float], ...] = (
  ("tpu v3", 123e12 / 2),
  ("tpu v4 lite", 138e12),
  ("tpu v4", 275e12),
  ("tpu v5 lite", 197e12),
  ("tpu v5e", 197e12),
  ("tpu v5p", 459e12),
  ("tpu v5", 459e12),
  ("a100", 312e12),
  ("h100 pcie", 756e12),
  ("h100", 989e12),
  ("h200", 989e12),
)


def peak_flops(device_kind: str) -> float | None:
  """The peak bf16 FLOP/s of one device of this kind, or None when unknown."""
  kind = device_kind.lower()
  for pattern, peak in PEAK_FLOPS:
    if pattern in kind:
      return peak
  return None


def utilisation(flops_per_step: float | None, seconds_per_step: float, peak: float | None):
  """flops / seconds / peak, or None when either figure is unknown."""
  if not flops_per_step or not peak or seconds_per_step <= 0:
    return None
  return flops_per_step / seconds_per_step / peak
