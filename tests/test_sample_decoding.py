"""Sampling decode (`decoding.temperature_sample`) against T5X's semantics, written here in
numpy from T5X's description (`t5x/decoding.py` temperature_sample, `t5x/binary_search.py`
topk_mask / topp_mask): logits / temperature, then the top-k mask (ties at the k-th kept), then
the top-p mask over the renormalised top-k probabilities (the smallest most-likely set whose
mass reaches p, ties kept), then a categorical draw; temperature 0 is greedy.

The model's distributions are the teacher-forced logits of the plain forward pass
(`decoding.logits`), not the cached decoder the sampler runs.
"""

import jax
import numpy as np
import pytest
from scipy import stats

from tests.helpers import MAX_DECODE, VOCAB, inputs, random_params
from tlm.models import decoding, t5


def reference_filter(logits, temperature, top_k=0, top_p=1.0):
  """T5X's sampling distribution of one `[vocab]` logits row, float64: (probabilities, the
  smallest margin between a cumulative top-p mass and p, for the caller to check)."""
  z = np.asarray(logits, np.float64) / temperature
  keep = np.ones(z.shape, bool)
  if top_k:
    keep &= z >= np.sort(z)[::-1][min(top_k, z.size) - 1]
  probs = np.where(keep, np.exp(z - z.max()), 0.0)
  probs /= probs.sum()
  margin = np.inf
  if top_p < 1:
    ordered = np.sort(probs)[::-1]
    mass = np.cumsum(ordered)
    n = int(np.argmax(mass >= top_p)) + 1  # the first prefix that reaches p
    keep &= probs >= ordered[n - 1]
    margin = np.abs(mass - top_p).min()
  probs = np.where(keep, probs, 0.0)
  return probs / probs.sum(), margin


_filter = jax.jit(decoding.filter_logits)


def _kept(logits, top_k, top_p):
  return np.isfinite(np.asarray(_filter(np.asarray(logits), top_k, top_p)))


def test_filter_logits_keeps_ties_and_the_argmax():
  logits = np.array([[3.0, 1.0, 3.0, 3.0, 0.0, -2.0], [0.5, 4.0, 0.1, 0.2, 0.3, 0.0]], np.float32)
  # k = 2 with three tied maxima keeps all three (T5X's topk_mask); k = 0 or >= vocab: all.
  np.testing.assert_array_equal(_kept(logits, 2, 1.0)[0], [1, 0, 1, 1, 0, 0])
  for k in (0, 6, 60):
    assert _kept(logits, k, 1.0).all()
  # A tiny p keeps the most likely token (and its ties) alone.
  np.testing.assert_array_equal(_kept(logits, 0, 1e-6), [[1, 0, 1, 1, 0, 0], [0, 1, 0, 0, 0, 0]])
  # Top-p over the top-k: row 1's top 2 {4.0, 0.5} renormalised put 0.971 on 4.0.
  np.testing.assert_array_equal(_kept(logits, 2, 0.96)[1], [0, 1, 0, 0, 0, 0])
  np.testing.assert_array_equal(_kept(logits, 2, 0.98)[1], [1, 1, 0, 0, 0, 0])
  rs = np.random.RandomState(0)
  checked = 0
  for _ in range(60):
    row = (rs.randn(40) * 2).astype(np.float32)
    k, p = int(rs.randint(0, 45)), float(rs.uniform(0.05, 1.0))
    want, margin = reference_filter(row, 1.0, k, p)
    if margin > 1e-4:  # float32 and float64 sums agree away from the boundary
      np.testing.assert_array_equal(_kept(row, k, p), want > 0, f"k={k} p={p}")
      checked += 1
  assert checked > 50


@pytest.fixture(scope="module")
def model():
  cfg = t5.get_preset("tiny-v1_1", vocab_size=VOCAB)
  return cfg, random_params(cfg)


def test_temperature_zero_and_top_k_one_are_greedy(model):
  cfg, params = model
  x = inputs()
  greedy = np.asarray(decoding.greedy_decode(cfg, params, x, MAX_DECODE))
  for seed in (0, 1, 2**32 - 1):
    for k, p in ((0, 1.0), (5, 0.5)):  # temperature 0 ignores the filters, as in T5X
      zero = decoding.temperature_sample(
        cfg, params, x, MAX_DECODE, seed=seed, temperature=0.0, top_k=k, top_p=p
      )
      np.testing.assert_array_equal(zero, greedy)
    for temperature in (1.0, 5.0):
      one = decoding.temperature_sample(
        cfg, params, x, MAX_DECODE, seed=seed, temperature=temperature, top_k=1
      )
      np.testing.assert_array_equal(one, greedy)
      nucleus = decoding.temperature_sample(
        cfg, params, x, MAX_DECODE, seed=seed, temperature=temperature, top_p=1e-6
      )
      np.testing.assert_array_equal(nucleus, greedy)
  # Not vacuous: unfiltered samples differ from greedy, and from each other across seeds.
  a, b = (
    np.asarray(decoding.temperature_sample(cfg, params, x, MAX_DECODE, seed=s)) for s in (3, 4)
  )
  assert (a != greedy).any(-1).mean() > 0.5 and (a != b).any(-1).mean() > 0.5


def test_an_example_draws_the_same_tokens_in_any_batch(model):
  cfg, params = model
  x = inputs()
  ids = np.arange(100, 100 + len(x))
  kwargs = dict(seed=11, temperature=1.5, top_p=0.9)
  whole = np.asarray(
    decoding.temperature_sample(cfg, params, x, MAX_DECODE, example_ids=ids, **kwargs)
  )
  # Reversed, split, and padded with longer inputs and other rows: each row keeps its tokens.
  rev = decoding.temperature_sample(
    cfg, params, x[::-1], MAX_DECODE, example_ids=ids[::-1], **kwargs
  )
  np.testing.assert_array_equal(np.asarray(rev)[::-1], whole)
  padded = np.pad(x[3:6], ((0, 5), (0, 4)))
  part = decoding.temperature_sample(
    cfg, params, padded, MAX_DECODE, example_ids=np.r_[ids[3:6], 0, 1, 2, 3, 4], **kwargs
  )
  np.testing.assert_array_equal(np.asarray(part)[:3], whole[3:6])


def _membership_margins(cfg, params, x, samples, temperature, top_k, top_p):
  """For every sampled token up to its row's EOS: how far inside the filtered set it lies
  (>= 0 inside), from the teacher-forced logits of the sampled prefix."""
  logits = np.asarray(decoding.logits(cfg, params, x, np.asarray(decoding.shift_right(samples))))
  margins = []
  for b in range(len(x)):
    for t in range(samples.shape[1]):
      z = logits[b, t].astype(np.float64) / temperature
      token = samples[b, t]
      ordered = np.sort(z)[::-1]
      if top_k:
        margins.append(z[token] - ordered[top_k - 1])
      if top_p < 1:
        probs = np.exp(ordered - ordered[0])
        if top_k:
          probs[top_k:] = 0.0
        probs /= probs.sum()
        before = np.cumsum(probs) - probs  # mass of the tokens more likely than each
        rank = int(np.sum(ordered > z[token]))
        margins.append(top_p - before[rank])
      if token == decoding.EOS_ID:
        break
  return np.array(margins)


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 5, 1.0), (2.0, 0, 0.5), (3.0, 12, 0.9)])
def test_top_k_and_top_p_never_emit_a_token_outside_their_set(model, temperature, top_k, top_p):
  cfg, params = model
  x = inputs()
  filtered, free = [], []
  for seed in range(6):
    kwargs = dict(seed=seed, temperature=temperature)
    filtered.append(
      np.asarray(
        decoding.temperature_sample(cfg, params, x, MAX_DECODE, top_k=top_k, top_p=top_p, **kwargs)
      )
    )
    free.append(np.asarray(decoding.temperature_sample(cfg, params, x, MAX_DECODE, **kwargs)))
  filtered, free, xs = np.concatenate(filtered), np.concatenate(free), np.tile(x, (6, 1))
  inside = _membership_margins(cfg, params, xs, filtered, temperature, top_k, top_p)
  # float32 cached decoding vs the float32 teacher-forced pass: equal up to rounding.
  assert inside.min() > -1e-4, inside.min()
  # The check can fail: the same seeds without the filters leave the set many times.
  outside = _membership_margins(cfg, params, xs, free, temperature, top_k, top_p)
  assert (outside < -1e-4).sum() > 20
  assert len(np.unique(filtered[:, 0])) > 3  # the filtered sampler does sample


# ---- frequencies against the softmax: a chi-square test ----------------------------------------

# V = 8 ids (0 and EOS included), two steps: 57 outcomes (a, b), b = 0 after a = EOS.
SMALL_V, ROWS, SEEDS = 8, 2000, 8
# Per configuration, a false alarm (a correct sampler rejected) has chance ALPHA; six
# configurations make 6e-4 for the test, whose seeds are fixed: it passes or fails every time.
ALPHA = 1e-4
CONFIGS = [(1.0, 0, 1.0), (0.5, 0, 1.0), (2.0, 0, 1.0), (1.0, 3, 1.0), (1.0, 0, 0.6), (0.7, 5, 0.8)]


@pytest.fixture(scope="module")
def small():
  cfg = t5.get_preset("tiny", vocab_size=SMALL_V, num_encoder_layers=1, num_decoder_layers=1)
  params = random_params(cfg, seed=0, embedding_scale=0.3, eos_scale=1.0)
  x = np.array([[2, 3, 4, 5, 1]])
  # Teacher-forced logits of step 0 (after the start token) and step 1 after each first token.
  prefixes = np.array([[0, a] for a in range(SMALL_V)])
  logits = np.asarray(decoding.logits(cfg, params, np.repeat(x, SMALL_V, 0), prefixes))
  return cfg, params, x, logits[0, 0], logits[:, 1]


def joint_probabilities(first, second, temperature, top_k, top_p):
  """`[V, V]` p(a, b) of the first two sampled tokens, and the smallest top-p margin."""
  p0, margin = reference_filter(first, temperature, top_k, top_p)
  joint = np.zeros((SMALL_V, SMALL_V))
  for a in range(SMALL_V):
    if a == decoding.EOS_ID:
      joint[a, 0] = p0[a]  # an ended row emits 0
    else:
      p1, m = reference_filter(second[a], temperature, top_k, top_p)
      joint[a] = p0[a] * p1
      margin = min(margin, m)
  return joint, margin


def chi_square(counts, probs):
  """Pearson's statistic and its critical value at ALPHA, cells of expected count < 5 pooled
  (the usual validity rule), cells of probability 0 left to the caller."""
  n = counts.sum()
  expected = probs * n
  big = expected >= 5
  observed = np.append(counts[big], counts[~big & (probs > 0)].sum())
  expected = np.append(expected[big], expected[~big & (probs > 0)].sum())
  if expected[-1] == 0:
    observed, expected = observed[:-1], expected[:-1]
  statistic = ((observed - expected) ** 2 / expected).sum()
  return statistic, stats.chi2.ppf(1 - ALPHA, len(expected) - 1)


@pytest.mark.parametrize("temperature,top_k,top_p", CONFIGS)
def test_frequencies_match_the_softmax(small, temperature, top_k, top_p):
  cfg, params, x, first, second = small
  rows = np.repeat(x, ROWS, 0)
  draws = np.concatenate(
    [
      np.asarray(
        decoding.temperature_sample(
          cfg, params, rows, 2, seed=seed, temperature=temperature, top_k=top_k, top_p=top_p
        )
      )
      for seed in range(SEEDS)
    ]
  )
  counts = np.zeros((SMALL_V, SMALL_V))
  np.add.at(counts, (draws[:, 0], draws[:, 1]), 1)
  probs, margin = joint_probabilities(first, second, temperature, top_k, top_p)
  assert margin > 1e-3, "top_p too close to a cumulative mass: float32 may cut elsewhere"
  assert counts[probs == 0].sum() == 0, "a token outside the top-k / top-p set"
  statistic, critical = chi_square(counts.ravel(), probs.ravel())
  assert statistic < critical, (statistic, critical)
  # The bound can fail: the same draws are rejected against the distribution without the
  # temperature (or with another one) and, when filtering, without the filters.
  wrong = [joint_probabilities(first, second, 1.0 if temperature != 1 else 1.3, top_k, top_p)[0]]
  if top_k or top_p < 1:
    wrong.append(joint_probabilities(first, second, temperature, 0, 1.0)[0])
  for other in wrong:
    assert chi_square(counts.ravel(), other.ravel())[0] > critical


@pytest.mark.parametrize(
  "kwargs,fragment",
  [
    (dict(temperature=-0.5), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=float("inf")), "temperature"),
    (dict(temperature=1e39), "float32"),  # finite here, inf once cast to float32
    (dict(top_k=-1), "top_k"),
    (dict(top_k=2.0), "top_k"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(top_p=float("nan")), "top_p"),
    (dict(seed=-1), "seed"),
    (dict(seed=2**32), "seed"),
    (dict(example_ids=np.arange(3)), "example_ids"),
  ],
)
def test_bad_sampling_values(kwargs, fragment):
  cfg = t5.get_preset("tiny", vocab_size=SMALL_V)
  with pytest.raises(ValueError, match=fragment):
    decoding.temperature_sample(cfg, {}, np.ones((2, 3)), 4, **kwargs)
