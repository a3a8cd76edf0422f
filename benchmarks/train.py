"""Training throughput: tlm's packed, jit-compiled train step against HF transformers' T5 with
torch's Adafactor padding each batch to its longest example; and the tlm step's FLOP/s against
a large matmul's, measured in the same run.

  python benchmarks/train.py                    # t5-v1_1-small size, CPU or GPU
  python benchmarks/train.py --rows 64 --steps 10

One process, one model size, the same weights in both (tlm's random initialisation copied into
transformers), the same stream of SSM-shaped examples: a salient-span-masked sentence as input
(log-normal length, median ~22 tokens) and a short span as target (1-8 tokens), as the paper's
CustomNews examples (§2.1). Each step trains on the same examples on both sides:
- tlm: the examples packed T5X-style into `--rows` rows of 128 + 32 tokens
  (`tlm.data.packing.pack`), `tlm.train.loop.make_train_step` (T5's Adafactor, z-loss, dropout
  0.1) compiled ahead of time;
- transformers: `T5ForConditionalGeneration` + `transformers.optimization.Adafactor` with T5's
  settings (lr 1e-3, no relative step, parameter scaling, clip 1.0, decay -0.8, no beta1), the
  examples padded to the longest input and target of the step.
Useful tokens are the non-pad input + target tokens (with EOS). Prints ONE JSON line with both
throughputs, their ratio, the packing / padding efficiencies, and the tlm step's achieved
FLOP/s (XLA's cost analysis of the compiled step / its fastest time; also its mean time)
against `--matmul`^3 matmuls on the same device (fastest of 3). The machine may be shared
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

from tlm.data.packing import pack, with_eos  # noqa: E402
from tlm.models import checkpoints, t5  # noqa: E402
from tlm.train import partitioning  # noqa: E402
from tlm.train.loop import compile_train_step, make_train_step  # noqa: E402
from tlm.train.optim import make_optimizer  # noqa: E402
from tlm.train.state import init_state, state_layout  # noqa: E402

INPUT_LENGTH, TARGET_LENGTH = 128, 32


def ssm_examples(n: int, vocab: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
  """SSM-shaped examples: (inputs, targets) token ids, EOS appended and trimmed."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    n_in = int(np.clip(rng.lognormal(np.log(22), 0.45), 6, INPUT_LENGTH - 1))
    n_tg = int(rng.integers(1, 9))
    inputs = rng.integers(3, vocab - 100, n_in)
    targets = rng.integers(3, vocab - 100, n_tg)
    out.append((with_eos(inputs, INPUT_LENGTH)[0], with_eos(targets, TARGET_LENGTH)[0]))
  return out


def packed_steps(examples, rows: int, steps: int):
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
        if n_in + a.size > INPUT_LENGTH or n_tg + b.size > TARGET_LENGTH:
          break
        ins.append(a)
        tgs.append(b)
        row_of.append(r)
        used.append(examples[i])
        n_in, n_tg, i = n_in + a.size, n_tg + b.size, i + 1
    out.append((pack(ins, tgs, row_of, rows, INPUT_LENGTH, TARGET_LENGTH), used))
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
  return {"input_ids": to(ids), "attention_mask": to((ids > 0).astype(np.int64)),
          "labels": to(labels)}  # fmt: skip


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
  args = parser.parse_args()

  cfg = t5.get_preset(args.preset, dropout_rate=0.1, dtype=args.dtype)
  examples = ssm_examples(args.rows * 8 * (args.steps + 2), cfg.vocab_size)
  steps = packed_steps(examples, args.rows, args.steps + 1)  # the first one warms up

  # --- tlm ---
  model = t5.Transformer(cfg)
  optimizer = make_optimizer("constant", 1e-3)
  mesh = partitioning.make_mesh(1, 1, jax.devices()[:1])
  with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.AXIS_RULES):
    layout = state_layout(model, optimizer, mesh)
    state = init_state(model, optimizer, layout, seed=0)
    params0 = jax.device_get(state.params)
    batch_spec = partitioning.abstract_batch(mesh, args.rows, INPUT_LENGTH, TARGET_LENGTH)
    step_fn = make_train_step(model, optimizer, loss_normalizing_factor=0.0)
    t0 = time.perf_counter()
    compiled = compile_train_step(step_fn, layout, batch_spec, mesh)
    compile_seconds = time.perf_counter() - t0
  cost = compiled.cost_analysis()
  step_flops = float((cost[0] if isinstance(cost, list) else cost)["flops"])
  batches = [partitioning.global_batch(mesh, b, args.rows) for b, _ in steps]
  useful = sum(sum(a.size + b.size for a, b in used) for _, used in steps[1:])
  capacity = args.steps * args.rows * (INPUT_LENGTH + TARGET_LENGTH)

  # --- transformers ---
  device = "cuda" if torch.cuda.is_available() else "cpu"
  hf = transformers.T5ForConditionalGeneration(transformers.T5Config(**t5.to_hf_config(cfg)))
  if not cfg.logits_via_embedding:
    # transformers 5 always ties lm_head to the embedding; T5.1.1 has its own output layer.
    hf.lm_head.weight = torch.nn.Parameter(hf.lm_head.weight.detach().clone())
  weights = {k: torch.tensor(np.asarray(v)) for k, v in
             checkpoints.params_to_hf(params0, cfg).items()}  # fmt: skip
  for name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"):
    weights.setdefault(name, weights["shared.weight"])
  hf.load_state_dict(weights, strict=True)
  hf = hf.train().to(device)
  opt = transformers.optimization.Adafactor(
    hf.parameters(), lr=1e-3, scale_parameter=True, relative_step=False, warmup_init=False,
    clip_threshold=1.0, decay_rate=-0.8, beta1=None, weight_decay=0.0,
  )  # fmt: skip
  hf_batches = [padded_batch(used, device) for _, used in steps]

  def hf_step(batch):
    loss = hf(**batch).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
      torch.cuda.synchronize()
    return loss.item()

  def tlm_step(batch):
    nonlocal state
    state = jax.block_until_ready(compiled(state, batch)[0])

  # Each side runs its steps as one block after a warm-up step, as a user's job would. (Not
  # interleaved: after a torch step its OpenMP workers keep the cores busy for a while, and an
  # XLA step right after one measured 6.0-6.7 s instead of 4.8 s on a 2-core CPU.)
  tlm_step(batches[0])
  tlm_times = [_timed(lambda b=b: tlm_step(b)) for b in batches[1:]]
  tlm_time = sum(tlm_times)
  hf_step(hf_batches[0])
  hf_time = sum(_timed(lambda b=b: hf_step(b)) for b in hf_batches[1:])
  hf_capacity = sum(int(b["input_ids"].numel() + b["labels"].numel()) for b in hf_batches[1:])

  matmul = matmul_flops_per_second(args.matmul, repeats=3)
  tlm_tps, hf_tps = useful / tlm_time, useful / hf_time
  print(
    json.dumps(
      {
        "benchmark": "train",
        "device": jax.devices()[0].device_kind,
        "torch_device": device,
        "preset": args.preset,
        "dtype": args.dtype,
        "rows": args.rows,
        "examples_per_step": round(sum(len(u) for _, u in steps[1:]) / args.steps, 1),
        "timed_steps": args.steps,
        "tlm_useful_tokens_per_second": round(tlm_tps, 1),
        "hf_useful_tokens_per_second": round(hf_tps, 1),
        "tlm_over_hf": round(tlm_tps / hf_tps, 3),
        "tlm_packing_efficiency": round(useful / capacity, 3),
        "hf_padding_efficiency": round(useful / hf_capacity, 3),
        "tlm_compile_seconds": round(compile_seconds, 1),
        "tlm_step_flops": step_flops,
        # Every tlm step has the same shapes and FLOPs: its fastest run against the fastest
        # matmul (both best-of, so load on a shared machine does not favour either), and the
        # mean step against the same matmul.
        "tlm_flops_per_second": step_flops / min(tlm_times),
        "matmul_flops_per_second": matmul,
        "tlm_fraction_of_matmul": round(step_flops / min(tlm_times) / matmul, 3),
        "tlm_mean_step_fraction_of_matmul": round(step_flops * args.steps / tlm_time / matmul, 3),
      }
    )
  )


if __name__ == "__main__":
  main()
