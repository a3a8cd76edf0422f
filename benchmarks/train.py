"""Training throughput: tlm's packed, jit-compiled train step against HF transformers' T5 with
torch's Adafactor padding each batch to its longest example; and the tlm step's FLOP/s against
a large matmul's, measured in the same run.

  python benchmarks/train.py                    # t5-v1_1-small size, CPU or GPU
  python benchmarks/train.py --rows 64 --steps 10
  python benchmarks/train.py --preset t5-v1_1-large --dtype bfloat16 \
    --input_length 512 --target_length 128       # T5X's published setting (512 -> 128)

One process, one model size, the same weights in both (tlm's random initialisation copied into
transformers), the same stream of SSM-shaped examples: a salient-span-masked sentence as input
(log-normal length, median ~22 tokens) and a short span as target (1-8 tokens), as the paper's
CustomNews examples (§2.1). Each step trains on the same examples on both sides:
- tlm: the examples packed T5X-style into `--rows` rows of `--input_length` +
  `--target_length` tokens (default 128 + 32, the paper's; `tlm.input.packed_rows.pack`),
  `tlm.train.step.make_train_step` (T5's Adafactor, z-loss, dropout
  0.1) compiled ahead of time;
- transformers: `T5ForConditionalGeneration` + `transformers.optimization.Adafactor` with T5's
  settings (lr 1e-3, no relative step, parameter scaling, clip 1.0, decay -0.8, no beta1), the
  examples padded to the longest input and target of the step.
Useful tokens are the non-pad input + target tokens (with EOS). Prints ONE JSON line with both
throughputs, their ratio, the packing / padding efficiencies, and the tlm step's achieved
FLOP/s (XLA's cost analysis of the compiled step / its fastest time; also its mean time)
against `--matmul`^3 matmuls on the same device (fastest of 3), and its model FLOP
utilisation (MFU: those FLOP/s over the device's published peak for `--dtype`, where
`PEAK_FLOPS` knows the device; no remat here, so XLA's count is the model's FLOPs).
`--no_hf` skips the transformers side (e.g. where torch has no GPU). The machine may be shared
and noisy: compare ratios, absolute numbers only on an accelerator.
"""

import argparse
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers
from flax import linen as nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tlm.input.packed_rows import pack, with_eos  # noqa: E402
from tlm.models import checkpoints, t5  # noqa: E402
from tlm.models.formats.hf_config import to_hf_config  # noqa: E402
from tlm.sharding import partitioning  # noqa: E402
from tlm.train.optim import make_optimizer  # noqa: E402
from tlm.train.state import init_state, state_layout  # noqa: E402
from tlm.train.step import compile_train_step, make_train_step  # noqa: E402

# Published dense peak FLOP/s per jax device, by `device_kind` substring (first match wins):
# NVIDIA's datasheets (bfloat16 and TF32 tensor cores, without sparsity; XLA runs float32
# matmuls in TF32 on these GPUs by default) and Google's Cloud TPU pages (per chip; a TPU v3
# jax device is one of its chip's two cores). Unknown devices report no MFU.
PEAK_FLOPS = (
  ("H100 PCIe", {"bfloat16": 756e12, "float32": 378e12}),
  ("H100", {"bfloat16": 989e12, "float32": 494e12}),  # SXM
  ("H200", {"bfloat16": 989e12, "float32": 494e12}),
  ("A100", {"bfloat16": 312e12, "float32": 156e12}),
  ("TPU v3", {"bfloat16": 61.5e12}),
  ("TPU v4", {"bfloat16": 275e12}),
  ("TPU v5 lite", {"bfloat16": 197e12}),
  ("TPU v5p", {"bfloat16": 459e12}),
)


def peak_flops(device_kind: str, dtype: str) -> float | None:
  """The device's published dense peak FLOP/s for `dtype`, or None if not known."""
  for name, peaks in PEAK_FLOPS:
    if name in device_kind:
      return peaks.get(dtype)
  return None


def ssm_examples(
  n: int, vocab: int, input_length: int, target_length: int, seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
  """SSM-shaped examples: (inputs, targets) token ids, EOS appended and trimmed."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    n_in = int(np.clip(rng.lognormal(np.log(22), 0.45), 6, input_length - 1))
    n_tg = int(rng.integers(1, min(9, target_length)))
    inputs = rng.integers(3, vocab - 100, n_in)
    targets = rng.integers(3, vocab - 100, n_tg)
    out.append((with_eos(inputs, input_length)[0], with_eos(targets, target_length)[0]))
  return out


def packed_steps(examples, rows: int, steps: int, input_length: int, target_length: int):
  """Greedy packing of the example stream into `steps` batches of `rows` rows.

  Returns:
    [(packed batch, the examples it holds)] per step.
  """
  out, i = [], 0
  for _ in range(steps):
    ins, tgs, row_of, used = [], [], [], []
    for r in range(rows):
      n_in = n_tg = 0
      while i < len(examples):
        a, b = examples[i]
        if n_in + a.size > input_length or n_tg + b.size > target_length:
          break
        ins.append(a)
        tgs.append(b)
        row_of.append(r)
        used.append(examples[i])
        n_in, n_tg, i = n_in + a.size, n_tg + b.size, i + 1
    out.append((pack(ins, tgs, row_of, rows, input_length, target_length), used))
  return out


def padded_batch(examples, device):
  """The examples padded to their longest input and target (HF labels: -100 on padding)."""
  n_in = max(a.size for a, _ in examples)
  n_tg = max(b.size for _, b in examples)
  ids = np.zeros((len(examples), n_in), np.int64)
  labels = np.full((len(examples), n_tg), -100, np.int64)
  for k, (a, b) in enumerate(examples):
    ids[k, : a.size] = a
    labels[k, : b.size] = b
  to = lambda x: torch.from_numpy(x).to(device)
  return {
    "input_ids": to(ids),
    "attention_mask": to((ids > 0).astype(np.int64)),
    "labels": to(labels),
  }


def matmul_flops_per_second(n: int, repeats: int) -> float:
  """FLOP/s of an n x n x n float32 matmul on the default jax device (best of `repeats`)."""
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
  f = jax.jit(lambda x, y: x @ y)
  f(a, a).block_until_ready()
  best = min(_timed(lambda: f(a, a).block_until_ready()) for _ in range(repeats))
  return 2.0 * n**3 / best


def _timed(fn) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--preset", default="t5-v1_1-small")
  parser.add_argument("--rows", type=int, default=16, help="packed rows per tlm step")
  parser.add_argument("--steps", type=int, default=4, help="timed steps per side")
  parser.add_argument("--matmul", type=int, default=2048, help="side of the reference matmul")
  parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
  parser.add_argument("--input_length", type=int, default=128, help="packed input tokens")
  parser.add_argument("--target_length", type=int, default=32, help="packed target tokens")
  parser.add_argument("--no_hf", action="store_true", help="skip the transformers side")
  args = parser.parse_args()
  lengths = (args.input_length, args.target_length)

  cfg = t5.get_preset(args.preset, dropout_rate=0.1, dtype=args.dtype)
  # Enough examples to fill every row (median input ~22 tokens).
  per_row = max(8, 2 * args.input_length // 16)
  examples = ssm_examples(args.rows * per_row * (args.steps + 2), cfg.vocab_size, *lengths)
  steps = packed_steps(examples, args.rows, args.steps + 1, *lengths)  # the first warms up

  # --- tlm ---
  model = t5.Transformer(cfg)
  optimizer = make_optimizer("constant", 1e-3)
  mesh = partitioning.make_mesh(1, 1, jax.devices()[:1])
  with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.AXIS_RULES):
    layout = state_layout(model, optimizer, mesh)
    state = init_state(model, optimizer, layout, seed=0)
    params0 = jax.device_get(state.params)
    batch_spec = partitioning.abstract_batch(mesh, args.rows, *lengths)
    step_fn = make_train_step(model, optimizer, loss_normalizing_factor=0.0)
    t0 = time.perf_counter()
    compiled = compile_train_step(step_fn, layout, batch_spec, mesh)
    compile_seconds = time.perf_counter() - t0
  cost = compiled.cost_analysis()
  step_flops = float((cost[0] if isinstance(cost, list) else cost)["flops"])
  batches = [partitioning.global_batch(mesh, b, args.rows) for b, _ in steps]
  useful = sum(sum(a.size + b.size for a, b in used) for _, used in steps[1:])
  capacity = args.steps * args.rows * sum(lengths)

  def tlm_step(batch):
    nonlocal state
    state = jax.block_until_ready(compiled(state, batch)[0])

  # Each side runs its steps as one block after a warm-up step, as a user's job would. (Not
  # interleaved: after a torch step its OpenMP workers keep the cores busy for a while, and an
  # XLA step right after one measured 6.0-6.7 s instead of 4.8 s on a 2-core CPU.)
  tlm_step(batches[0])
  tlm_times = [_timed(lambda b=b: tlm_step(b)) for b in batches[1:]]
  tlm_time = sum(tlm_times)
  tlm_tps = useful / tlm_time
  matmul = matmul_flops_per_second(args.matmul, repeats=3)
  kind = jax.devices()[0].device_kind
  peak = peak_flops(kind, args.dtype)
  report = {
    "benchmark": "train",
    "device": kind,
    "preset": args.preset,
    "dtype": args.dtype,
    "rows": args.rows,
    "input_length": args.input_length,
    "target_length": args.target_length,
    "examples_per_step": round(sum(len(u) for _, u in steps[1:]) / args.steps, 1),
    "timed_steps": args.steps,
    "tlm_useful_tokens_per_second": round(tlm_tps, 1),
    "tlm_packing_efficiency": round(useful / capacity, 3),
    "tlm_compile_seconds": round(compile_seconds, 1),
    "tlm_step_flops": step_flops,
    # Every tlm step has the same shapes and FLOPs: its fastest run against the fastest
    # matmul (both best-of, so load on a shared machine does not favour either), and the
    # mean step against the same matmul.
    "tlm_flops_per_second": step_flops / min(tlm_times),
    "matmul_flops_per_second": matmul,
    "tlm_fraction_of_matmul": round(step_flops / min(tlm_times) / matmul, 3),
    "tlm_mean_step_fraction_of_matmul": round(step_flops * args.steps / tlm_time / matmul, 3),
    "peak_flops_per_second": peak,
    "mfu": round(step_flops / min(tlm_times) / peak, 3) if peak else None,
    "mean_step_mfu": round(step_flops * args.steps / tlm_time / peak, 3) if peak else None,
  }
  if not args.no_hf:
    report.update(hf_side(cfg, params0, steps, useful, tlm_tps))
  print(json.dumps(report))


def hf_side(cfg, params0, steps, useful: int, tlm_tps: float) -> dict:
  """The transformers step on the same examples (padded), and how tlm compares."""
  device = "cuda" if torch.cuda.is_available() else "cpu"
  hf = transformers.T5ForConditionalGeneration(transformers.T5Config(**to_hf_config(cfg)))
  if not cfg.logits_via_embedding:
    # transformers 5 always ties lm_head to the embedding; T5.1.1 has its own output layer.
    hf.lm_head.weight = torch.nn.Parameter(hf.lm_head.weight.detach().clone())
  weights = {
    k: torch.tensor(np.asarray(v)) for k, v in checkpoints.params_to_hf(params0, cfg).items()
  }
  for name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"):
    weights.setdefault(name, weights["shared.weight"])
  hf.load_state_dict(weights, strict=True)
  hf = hf.train().to(device)
  opt = transformers.optimization.Adafactor(
    hf.parameters(),
    lr=1e-3,
    scale_parameter=True,
    relative_step=False,
    warmup_init=False,
    clip_threshold=1.0,
    decay_rate=-0.8,
    beta1=None,
    weight_decay=0.0,
  )
  hf_batches = [padded_batch(used, device) for _, used in steps]

  def hf_step(batch):
    loss = hf(**batch).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
      torch.cuda.synchronize()
    return loss.item()

  hf_step(hf_batches[0])
  hf_time = sum(_timed(lambda b=b: hf_step(b)) for b in hf_batches[1:])
  hf_capacity = sum(int(b["input_ids"].numel() + b["labels"].numel()) for b in hf_batches[1:])
  hf_tps = useful / hf_time
  return {
    "torch_device": device,
    "hf_useful_tokens_per_second": round(hf_tps, 1),
    "tlm_over_hf": round(tlm_tps / hf_tps, 3),
    "hf_padding_efficiency": round(useful / hf_capacity, 3),
  }


if __name__ == "__main__":
  main()
