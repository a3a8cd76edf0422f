"""Greedy decoding and candidate ranking throughput: tlm (jit, KV cache) against HF transformers.

  python benchmarks/decode.py                  # t5-small size, random weights, CPU or GPU
  python benchmarks/decode.py --repeats 5 --rank_inputs 8

One process, one random t5-small-size model (the same weights in both), the same inputs:
- greedy: batch 16, inputs of 128 tokens, 16 new tokens (EOS disabled on both sides so both
  decode exactly 16 steps); tlm's `greedy_decode` after a warm-up compile against
  `T5ForConditionalGeneration.generate(do_sample=False, num_beams=1, use_cache=True)`;
- ranking: 249 candidates per input (the paper's country set size), tlm's `rank_candidates`
  (encoder once per input) against tlm's `score` on every (input, candidate) pair.
Prints ONE JSON line with both throughputs and their ratios. The machine may be shared and
noisy: compare ratios, and absolute numbers only on an accelerator.
"""

import argparse
import json
import os
import sys
import time

import jax
import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tlm.models import checkpoints, decoding, t5  # noqa: E402
from tlm.models.formats.hf_config import to_hf_config  # noqa: E402


def random_params(cfg, seed=0):
  """T5X-scaled random weights (numpy)."""
  rs = np.random.RandomState(seed)
  flat = {}
  for path, shape in checkpoints.param_shapes(cfg).items():
    if path.endswith("scale"):
      value = np.ones(shape)
    elif path.endswith("embedding"):
      value = rs.randn(*shape)
    else:
      value = rs.randn(*shape) / np.sqrt(shape[0])
    flat[path] = value.astype(np.float32)
  return checkpoints.unflatten(flat)


def best_times(fns, repeats):
  """Fastest of `repeats` runs of each function (seconds), after a warm-up call each.

  The runs alternate between the functions so that load changes on a shared machine hit
  both sides alike.
  """
  for fn in fns:
    fn()
  best = [float("inf")] * len(fns)
  for _ in range(repeats):
    for i, fn in enumerate(fns):
      start = time.perf_counter()
      fn()
      best[i] = min(best[i], time.perf_counter() - start)
  return best


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--preset", default="t5-small")
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--input_len", type=int, default=128)
  parser.add_argument("--new_tokens", type=int, default=16)
  parser.add_argument("--candidates", type=int, default=249)
  parser.add_argument("--candidate_len", type=int, default=6)
  parser.add_argument("--rank_inputs", type=int, default=4)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()

  cfg = t5.get_preset(args.preset)
  params = jax.device_put(random_params(cfg))
  hf_device = "cuda" if torch.cuda.is_available() else "cpu"
  hf = transformers.T5ForConditionalGeneration(transformers.T5Config(**to_hf_config(cfg)))
  state = {k: torch.tensor(v) for k, v in checkpoints.params_to_hf(params, cfg).items()}
  for name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"):
    state.setdefault(name, state["shared.weight"])
  hf.load_state_dict(state, strict=True)
  hf = hf.eval().to(hf_device)
  hf.generation_config.eos_token_id = None  # decode exactly new_tokens steps

  rs = np.random.RandomState(0)
  x = rs.randint(2, cfg.vocab_size - 128, (args.batch, args.input_len)).astype(np.int32)
  x_device = jax.device_put(x)
  x_torch = torch.from_numpy(x.astype(np.int64)).to(hf_device)

  # --- greedy: exactly new_tokens steps on both sides (an EOS id that never occurs) ---------
  def tlm_greedy():
    return np.asarray(decoding.greedy_decode(cfg, params, x_device, args.new_tokens, eos_id=-1))

  def hf_greedy():
    with torch.no_grad():
      out = hf.generate(
        input_ids=x_torch,
        attention_mask=torch.ones_like(x_torch),
        max_new_tokens=args.new_tokens,
        do_sample=False,
        num_beams=1,
        use_cache=True,
        decoder_start_token_id=0,
        pad_token_id=0,
      )
    return out.cpu().numpy()[:, 1:]

  same = float(np.mean(tlm_greedy() == hf_greedy()))
  tlm_s, hf_s = best_times([tlm_greedy, hf_greedy], args.repeats)
  tokens = args.batch * args.new_tokens

  # --- ranking: encoder once per input vs every (input, candidate) pair scored -------------
  n = args.rank_inputs
  inputs = x[:n]
  candidates = rs.randint(2, cfg.vocab_size - 128, (args.candidates, args.candidate_len))
  candidates[:, -1] = decoding.EOS_ID
  pairs_x = jax.device_put(np.repeat(inputs, args.candidates, 0))
  pairs_y = jax.device_put(np.tile(candidates, (n, 1)))

  def tlm_rank():
    return np.asarray(decoding.rank_candidates(cfg, params, inputs, candidates))

  def tlm_pairs(count=n):
    # One input's candidates per call, as a batch of pairs (memory like rank_candidates').
    c = args.candidates
    out = [
      decoding.score(cfg, params, pairs_x[i : i + c], pairs_y[i : i + c])[0]
      for i in range(0, count * c, c)
    ]
    return np.concatenate([np.asarray(o) for o in out]).reshape(count, args.candidates)

  (rank_s,) = best_times([tlm_rank], args.repeats)
  # The pairwise baseline is slow and steady: compile on one input, then one timed run.
  tlm_pairs(1)
  start = time.perf_counter()
  pairwise = tlm_pairs()
  pairs_s = time.perf_counter() - start
  rank_max_diff = float(np.abs(tlm_rank() - pairwise).max())
  pairs = n * args.candidates

  print(
    json.dumps(
      {
        "benchmark": "decode",
        "model": f"{args.preset} (random weights)",
        "jax_device": str(jax.devices()[0].device_kind),
        "torch_device": hf_device,
        "batch": args.batch,
        "input_len": args.input_len,
        "new_tokens": args.new_tokens,
        "tlm_greedy_tokens_per_s": round(tokens / tlm_s, 1),
        "hf_generate_tokens_per_s": round(tokens / hf_s, 1),
        "greedy_speedup": round(hf_s / tlm_s, 2),
        "greedy_outputs_agree": same,
        "rank_candidates": args.candidates,
        "rank_inputs": n,
        "tlm_rank_pairs_per_s": round(pairs / rank_s, 1),
        "tlm_pairwise_score_pairs_per_s": round(pairs / pairs_s, 1),
        "rank_speedup": round(pairs_s / rank_s, 2),
        "rank_max_abs_diff": rank_max_diff,
      }
    )
  )


if __name__ == "__main__":
  main()
