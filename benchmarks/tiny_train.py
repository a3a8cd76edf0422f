"""The miniature's train step: tokens/s and FLOP fraction of the matmul peak, one model and
`--experts` models trained as one vmapped ensemble (the Yearly experts' case).

  python benchmarks/tiny_train.py                 # the tiny configs' model, 64 rows of 64 + 16
  python benchmarks/tiny_train.py --experts 9 --steps 20
  python benchmarks/tiny_train.py --rows 32 --emb_dim 128 --mlp_dim 256 --num_heads 8

The tiny configs' shapes (`tlm.configs.tiny_temporal`: its model, batch 64, rows of 64 + 16
tokens, the synthetic world's ~900-id vocabulary, T5's Adafactor; `--rows` and the model sizes
may be changed) on random full rows; every row counts as
useful (the world's packing fills ~90% of it). The step is `tlm.train.step.make_train_step`
compiled ahead of time; the ensemble step is `jax.vmap` of the same step over `--experts`
stacked states and batches, as one would train the nine Yearly experts at once. FLOPs are
XLA's cost analysis of each compiled step; the matmul peak is the fastest of 3 `--matmul`^3
float32 matmuls. Prints ONE JSON line. The machine may be shared: the fastest step is
reported beside the mean, and the process's CPU seconds per model step (`ensemble_cpu_saving`:
one model's over the ensemble's), which the other users of a shared machine change less.
"""

import argparse
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tlm import configs  # noqa: E402
from tlm.models import t5  # noqa: E402
from tlm.models.shapes import model_config  # noqa: E402
from tlm.sharding import partitioning  # noqa: E402
from tlm.train.optim import make_optimizer  # noqa: E402
from tlm.train.state import init_state, state_layout  # noqa: E402
from tlm.train.step import make_train_step  # noqa: E402

ROWS, INPUT_LENGTH, TARGET_LENGTH, VOCAB = 64, 64, 16, 900
MODEL_FIELDS = (
  "emb_dim",
  "num_heads",
  "head_dim",
  "mlp_dim",
  "num_encoder_layers",
  "mlp_activations",
  "logits_via_embedding",
)


def random_batch(rng: np.random.Generator, rows: int) -> dict:
  """Full rows of random ids, one example per row (segment 1, positions 0..L-1)."""
  enc = rng.integers(3, VOCAB, (rows, INPUT_LENGTH)).astype(np.int32)
  tgt = rng.integers(3, VOCAB, (rows, TARGET_LENGTH)).astype(np.int32)
  dec_in = np.concatenate([np.zeros((rows, 1), np.int32), tgt[:, :-1]], axis=1)
  ones = lambda n: np.ones((rows, n), np.int32)
  pos = lambda n: np.tile(np.arange(n, dtype=np.int32), (rows, 1))
  return {
    "encoder_input_tokens": enc,
    "decoder_input_tokens": dec_in,
    "decoder_target_tokens": tgt,
    "encoder_segment_ids": ones(INPUT_LENGTH),
    "decoder_segment_ids": ones(TARGET_LENGTH),
    "encoder_positions": pos(INPUT_LENGTH),
    "decoder_positions": pos(TARGET_LENGTH),
    "decoder_loss_weights": ones(TARGET_LENGTH).astype(np.float32),
  }


def stack(trees: list):
  """Same-structured pytrees (states, batches) stacked on a new leading (expert) axis."""
  return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)


def _flops(compiled) -> float:
  cost = compiled.cost_analysis()
  return float((cost[0] if isinstance(cost, list) else cost)["flops"])


def _cpu_seconds() -> float:
  t = os.times()
  return t.user + t.system


def _time_steps(fn, state, batches) -> tuple[list[float], float]:
  """Each step's wall time, and this process's CPU seconds per step (all its threads: on a
  shared machine, the cost that does not depend on how much of the CPU the others take)."""
  state = jax.block_until_ready(fn(state, batches[0])[0])  # warm-up
  times, cpu = [], _cpu_seconds()
  for b in batches[1:]:
    start = time.perf_counter()
    state = jax.block_until_ready(fn(state, b)[0])
    times.append(time.perf_counter() - start)
  return times, (_cpu_seconds() - cpu) / len(times)


def matmul_flops_per_second(n: int, repeats: int = 3) -> float:
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
  f = jax.jit(lambda x, y: x @ y)
  f(a, a).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    f(a, a).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2.0 * n**3 / best


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--experts", type=int, default=9)
  parser.add_argument("--steps", type=int, default=10, help="timed steps of each kind")
  parser.add_argument("--matmul", type=int, default=1024)
  parser.add_argument("--rows", type=int, default=ROWS)
  sizes = ("emb_dim", "num_heads", "head_dim", "mlp_dim", "num_layers")
  for name in sizes:
    parser.add_argument(f"--{name}", type=int, default=0, help="0: the tiny configs'")
  parser.add_argument("--preset", default="", help="default: the tiny configs'")
  args = parser.parse_args()

  tiny = configs.get("tiny_temporal")
  overrides = [f"model.{k}={getattr(args, k)}" for k in sizes if getattr(args, k)]
  overrides += [f"model.preset={args.preset}"] if args.preset else []
  model_section = configs.override(tiny, overrides).model
  cfg = model_config(model_section, VOCAB)
  rows = args.rows
  model = t5.Transformer(cfg)
  optimizer = make_optimizer("constant", tiny.train.learning_rate)
  mesh = partitioning.make_mesh(1, 1, jax.devices()[:1])
  rng = np.random.default_rng(0)
  step_fn = make_train_step(model, optimizer, loss_normalizing_factor=0.0)
  with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.AXIS_RULES):
    layout = state_layout(model, optimizer, mesh)
    state = init_state(model, optimizer, layout, seed=0)
    single = jax.jit(step_fn, donate_argnums=(0,))
    batches = [random_batch(rng, rows) for _ in range(args.steps + 1)]
    single_compiled = single.lower(state, batches[0]).compile()
    single_times, single_cpu = _time_steps(single_compiled, state, batches)

    states = stack([init_state(model, optimizer, layout, seed=s) for s in range(args.experts)])
    stacked = [
      stack([random_batch(rng, rows) for _ in range(args.experts)]) for _ in range(args.steps + 1)
    ]
    multi = jax.jit(jax.vmap(step_fn), donate_argnums=(0,))
    multi_compiled = multi.lower(states, stacked[0]).compile()
    multi_times, multi_cpu = _time_steps(multi_compiled, states, stacked)
  peak = matmul_flops_per_second(args.matmul)
  tokens = rows * (INPUT_LENGTH + TARGET_LENGTH)

  def report(times, cpu, flops, models):
    return {
      "cpu_seconds_per_model_step": round(cpu / models, 4),
      "tokens_per_second_mean": round(models * tokens * len(times) / sum(times)),
      "tokens_per_second_best": round(models * tokens / min(times)),
      "seconds_per_step_mean": round(sum(times) / len(times), 4),
      "step_flops": flops,
      "fraction_of_matmul_best": round(flops / min(times) / peak, 3),
      "fraction_of_matmul_mean": round(flops * len(times) / sum(times) / peak, 3),
    }

  one = report(single_times, single_cpu, _flops(single_compiled), 1)
  many = report(multi_times, multi_cpu, _flops(multi_compiled), args.experts)
  print(
    json.dumps(
      {
        "benchmark": "tiny_train",
        "device": jax.devices()[0].device_kind,
        "cpu_count": os.cpu_count(),
        "model": {k: getattr(cfg, k) for k in MODEL_FIELDS},
        "rows": rows,
        "lengths": [INPUT_LENGTH, TARGET_LENGTH],
        "timed_steps": args.steps,
        "matmul_flops_per_second": peak,
        "one_model": one,
        f"vmapped_{args.experts}_models": many,
        "ensemble_speedup_mean": round(
          many["tokens_per_second_mean"] / one["tokens_per_second_mean"], 2
        ),
        "ensemble_cpu_saving": round(
          one["cpu_seconds_per_model_step"] / many["cpu_seconds_per_model_step"], 2
        ),
      }
    )
  )


if __name__ == "__main__":
  main()
