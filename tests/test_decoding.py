"""Decoding and scoring against references built from the plain forward pass
(tlm/models/decoding.py): greedy vs an uncached argmax loop, beam search vs exhaustive search,
scores vs log-softmax of the logits, candidate ranking vs pairwise scoring, and sharded params
inside jit on 4 simulated devices."""

import itertools
import os
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import BATCH, MAX_DECODE, VOCAB, inputs, random_params
from tlm.models import decoding, t5


def _forward(cfg, params, x, decoder_inputs):
  # The plain teacher-forced pass (no cache, no search) is the reference here.
  return np.asarray(decoding.logits(cfg, params, x, decoder_inputs), np.float64)


def _log_softmax(logits):
  logits = logits - logits.max(-1, keepdims=True)
  return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


def test_greedy_equals_an_uncached_argmax_loop():
  cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB)
  params = random_params(cfg)
  x = inputs()
  got = np.asarray(decoding.greedy_decode(cfg, params, x, MAX_DECODE))
  # Reference: the full forward pass over the prefix at every step, no cache.
  ref = np.zeros((BATCH, MAX_DECODE), np.int64)
  done = np.zeros(BATCH, bool)
  for i in range(MAX_DECODE):
    logits = _forward(cfg, params, x, np.asarray(decoding.shift_right(ref)))
    token = np.where(done, 0, logits[:, i].argmax(-1))
    ref[:, i] = token
    done |= token == decoding.EOS_ID
  np.testing.assert_array_equal(got, ref)
  assert got.dtype == np.int32
  ends = [list(r).index(1) for r in got if 1 in r]
  assert len(set(ends)) >= 2, "random model should end rows at different lengths"


def _targets(seed, batch, length):
  """Random targets ending in EOS at varied lengths, 0-padded."""
  rs = np.random.RandomState(seed)
  y = rs.randint(2, VOCAB, (batch, length))
  for b in range(batch):
    n = rs.randint(1, length + 1)
    y[b, n - 1], y[b, n:] = 1, 0
  return y


def test_score_is_the_sum_of_target_log_probs_without_padding():
  cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB)
  params = random_params(cfg)
  x = inputs()
  targets = _targets(2, BATCH, MAX_DECODE)
  total, per_token = map(np.asarray, decoding.score(cfg, params, x, targets))
  logp = _log_softmax(_forward(cfg, params, x, np.asarray(decoding.shift_right(targets))))
  ref = np.take_along_axis(logp, targets[..., None], -1)[..., 0] * (targets > 0)
  np.testing.assert_allclose(per_token, ref, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(total, ref.sum(-1), rtol=1e-5, atol=1e-5)
  assert np.all(per_token[targets == 0] == 0) and np.all(total < 0)


def test_beam_of_one_without_length_penalty_is_greedy():
  cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB)
  params = random_params(cfg)
  x = inputs()
  greedy = np.asarray(decoding.greedy_decode(cfg, params, x, MAX_DECODE))
  seqs, scores = map(np.asarray, decoding.beam_search(cfg, params, x, MAX_DECODE, 1, 0.0))
  np.testing.assert_array_equal(seqs[:, 0], greedy)
  finished = (greedy == 1).any(-1)
  assert finished.any() and not finished.all()
  # Finished or not, the score is the log-likelihood (alpha 0: no penalty).
  loglik = np.asarray(decoding.score(cfg, params, x, greedy)[0])
  np.testing.assert_allclose(scores[:, 0], loglik, rtol=1e-5, atol=1e-5)


def test_beam_search_equals_exhaustive_search_on_a_tiny_vocabulary():
  # 5 tokens (0 and EOS 1 included), length 3: with 80 beams every candidate of every step
  # is kept (at most 16 live prefixes x 5 tokens), so the search is exact: the 21 finished
  # sequences come first, ranked by log p / ((5 + length) / 6) ** 0.6 as brute force ranks
  # them, then the unfinished ones penalised at full length.
  cfg = t5.get_preset("tiny", vocab_size=5, num_encoder_layers=1, num_decoder_layers=1)
  params = random_params(cfg, seed=3, embedding_scale=1.0, out_scale=1.0, eos_scale=1.0)
  x = np.array([[2, 3, 4, 4, 2], [3, 3, 0, 0, 0]])
  seqs, scores = map(np.asarray, decoding.beam_search(cfg, params, x, 3, 80, 0.6))
  tokens = [0, 2, 3, 4]
  finished = [p + (1,) for n in range(3) for p in itertools.product(tokens, repeat=n)]
  unfinished = list(itertools.product(tokens, repeat=3))
  targets = np.array([c + (0,) * (3 - len(c)) for c in finished] + unfinished)
  lengths = np.array([len(c) for c in finished] + [3] * len(unfinished))
  for b in range(2):
    row = np.repeat(x[b : b + 1], len(targets), 0)
    logp = _log_softmax(_forward(cfg, params, row, np.asarray(decoding.shift_right(targets))))
    token_logp = np.take_along_axis(logp, targets[..., None], -1)[..., 0]
    # Generated 0s are real tokens here: mask by length, not by value.
    loglik = (token_logp * (np.arange(3)[None] < lengths[:, None])).sum(-1)
    brute = loglik / ((5.0 + lengths) / 6.0) ** 0.6
    done = np.arange(len(targets)) < len(finished)
    best_finished = np.argsort(-np.where(done, brute, -np.inf))[: done.sum()]
    best_unfinished = np.argsort(-np.where(done, -np.inf, brute))
    order = np.concatenate([best_finished, best_unfinished])[:80]
    np.testing.assert_allclose(scores[b], brute[order], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(seqs[b], targets[order])
  # The best beam's score is `score`'s log-likelihood of it under the length penalty.
  best = seqs[:, 0]
  assert np.all((best > 0) | (np.cumsum(best == 1, -1) > 0)), "no 0 token before EOS"
  n = (best > 0).sum(-1)
  np.testing.assert_allclose(
    scores[:, 0],
    np.asarray(decoding.score(cfg, params, x, best)[0]) / ((5.0 + n) / 6.0) ** 0.6,
    rtol=1e-5,
  )


def test_rank_candidates_equals_scoring_every_pair():
  cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB)
  params = random_params(cfg)
  x = inputs(seed=4)
  candidates = _targets(5, 7, MAX_DECODE)
  # 4 inputs per lax.map step, 4 steps; decoder rows share their input's encoder output.
  ranked = np.asarray(decoding.rank_candidates(cfg, params, x, candidates, inputs_per_step=4))
  assert ranked.shape == (BATCH, 7)
  ref = np.stack(
    [np.asarray(decoding.score(cfg, params, x, np.tile(c, (BATCH, 1)))[0]) for c in candidates], 1
  )
  np.testing.assert_allclose(ranked, ref, rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="inputs_per_step"):
    decoding.rank_candidates(cfg, params, x, candidates, inputs_per_step=3)


SHARDED = textwrap.dedent(
  """
  import sys
  import jax, numpy as np
  from flax import linen as nn
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
  from tlm.models import decoding, t5
  from tests.helpers import MAX_DECODE, VOCAB, inputs, random_params
  cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB)
  params, x = random_params(cfg), inputs()
  rules = (("batch", "data"), ("vocab", "model"), ("mlp", "model"), ("heads", "model"),
           ("joined_kv", "model"), ("kv", None), ("embed", None), ("length", None),
           ("relpos_buckets", None))
  mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("data", "model"))
  abstract = jax.eval_shape(lambda: t5.Transformer(cfg).init(jax.random.key(0), x, x))
  specs = nn.get_partition_spec(abstract)["params"]
  with mesh, nn.logical_axis_rules(rules):
    shardings = nn.logical_to_mesh_sharding(specs, mesh, rules)
    sharded = jax.device_put(params, shardings)
    assert len(sharded["decoder"]["logits_dense"]["kernel"].sharding.device_set) == 4
    run = jax.jit(lambda p, t: decoding.greedy_decode(cfg, p, t, MAX_DECODE))
    tokens = run(sharded, jax.device_put(x, NamedSharding(mesh, P("data"))))
  np.save(sys.argv[1], np.asarray(tokens))
  """
)


@pytest.mark.slow
def test_greedy_decoding_with_sharded_params_inside_jit(tmp_path):
  # 4 simulated devices (a 2 x 2 data/model mesh) need their own process.
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
  out = str(tmp_path / "tokens.npy")
  result = subprocess.run(
    [sys.executable, "-c", SHARDED, out], cwd=root, env=env, capture_output=True, text=True
  )
  assert result.returncode == 0, result.stderr[-3000:]
  cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB)
  expected = decoding.greedy_decode(cfg, random_params(cfg), inputs(), MAX_DECODE)
  np.testing.assert_array_equal(np.load(out), expected)


def test_shift_right_and_brevity_penalty():
  np.testing.assert_array_equal(decoding.shift_right(jnp.array([[5, 6, 1, 0]])), [[0, 5, 6, 1]])
  np.testing.assert_allclose(decoding.brevity_penalty(0.6, 7.0), 2.0**0.6, rtol=1e-6)
  with pytest.raises(ValueError, match="alpha"):
    decoding.beam_search(t5.get_preset("tiny"), {}, np.ones((1, 2)), 3, alpha=-1.0)
