"""Predictor batching keeps order and equals unbatched calls; time conditioning and Yearly
routing send each query, formatted for its year, to the right model."""

import numpy as np
import pytest

from tests.helpers import random_params
from tlm.data.vocab import Vocabulary, train_sentencepiece
from tlm.errors import ConfigError
from tlm.infer.conditioned import TimeConditioned, YearlyEnsemble
from tlm.infer.predictor import Predictor
from tlm.models import decoding, t5

WORDS = "the coach of Lumora Vexton FC plays for year 2014 University in is a member".split()


@pytest.fixture(scope="module")
def vocab():
  rng = np.random.default_rng(0)
  texts = [" ".join(rng.choice(WORDS, size=10)) for _ in range(500)]
  return Vocabulary(train_sentencepiece(texts, 40))


def _predictor(vocab, model_seed, **kwargs):
  # numpy parameters: compiling flax's initialisers would cost more than the test itself.
  cfg = t5.get_preset("tiny", vocab_size=256)
  return Predictor(cfg, random_params(cfg, model_seed), vocab, **kwargs)


QUERIES = [
  "Lumora plays for <extra_id_0> .",
  "coach",
  "the member of Vexton FC is a coach of it",
  "a",
]


def test_predict_and_score_match_unbatched_calls(vocab):
  p = _predictor(vocab, 0, batch_size=3, max_decode_length=6)
  preds = p.predict(QUERIES)
  for q, pred in zip(QUERIES, preds):
    tokens = np.asarray([p.tokenize(q)], np.int32)
    direct = decoding.greedy_decode(p.config, p.params, tokens, 6)
    assert pred == vocab.decode(np.asarray(direct)[0])
  targets = ["FC", "Vexton FC", "the", "Lumora University"]
  ll, n = p.log_likelihood(QUERIES, targets)
  for i, (q, t) in enumerate(zip(QUERIES, targets)):
    enc = np.asarray([p.tokenize(q)], np.int32)
    dec = np.asarray([vocab.encode(t) + [1]], np.int32)
    ref, _ = decoding.score(p.config, p.params, enc, dec)
    np.testing.assert_allclose(ll[i], float(ref[0]), rtol=1e-5, atol=1e-5)
    assert n[i] == dec.shape[1]


def test_rank_equals_log_likelihood_of_each_pair(vocab):
  p = _predictor(vocab, 1, batch_size=2)
  candidates = ["FC", "Vexton FC", "the", "Lumora", "University"]
  ranked = p.rank(QUERIES, candidates)
  assert ranked.shape == (len(QUERIES), len(candidates))
  for i, q in enumerate(QUERIES):
    ll, _ = p.log_likelihood([q] * len(candidates), candidates)
    np.testing.assert_allclose(ranked[i], ll, rtol=1e-5, atol=1e-4)


def test_time_conditioning_and_yearly_routing(vocab):
  a, b = _predictor(vocab, 2, batch_size=4), _predictor(vocab, 3, batch_size=4)
  temporal = TimeConditioned(a, "temporal")
  ll, _ = temporal.log_likelihood(["coach"], [2014], ["FC"])
  ref, _ = a.log_likelihood(["year: 2014 coach"], ["FC"])
  np.testing.assert_allclose(ll, ref)
  in_text, _ = TimeConditioned(a, "in_text").log_likelihood(["coach"], [2022], ["FC"])
  np.testing.assert_allclose(in_text, a.log_likelihood(["In 2022, coach"], ["FC"])[0])

  ensemble = YearlyEnsemble({2010: TimeConditioned(a, "none"), 2018: TimeConditioned(b, "none")})
  years = [2009, 2019, 2011, 2017, 2030]
  queries = ["coach", "a", "the member", "Lumora", "FC"]
  got, _ = ensemble.log_likelihood(queries, years, ["FC"] * 5)
  for q, y, g in zip(queries, years, got):
    expert = a if y <= 2014 else b  # closest of {2010, 2018}
    np.testing.assert_allclose(g, expert.log_likelihood([q], ["FC"])[0][0], rtol=1e-6)
  ranked = ensemble.rank(queries, years, ["FC", "the"])
  np.testing.assert_allclose(ranked[1], b.rank(["a"], ["FC", "the"])[0], rtol=1e-6)


def test_bfloat16_parameters(vocab):
  f32 = _predictor(vocab, 4, batch_size=4)
  bf16 = _predictor(vocab, 4, batch_size=4, param_dtype="bfloat16")
  kernel = bf16.params["encoder"]["layers_0"]["mlp"]["wi"]["kernel"]
  assert kernel.dtype == np.dtype("bfloat16")
  # The same model with its weights rounded to 8 bits of mantissa: close, not equal.
  ll32, _ = f32.log_likelihood(QUERIES, ["FC"] * 4)
  ll16, _ = bf16.log_likelihood(QUERIES, ["FC"] * 4)
  assert not np.array_equal(ll16, ll32)
  np.testing.assert_allclose(ll16, ll32, rtol=2e-2)
  with pytest.raises(ConfigError, match="param_dtype"):
    _predictor(vocab, 4, param_dtype="float16")


def test_sampled_predictions_do_not_depend_on_the_batching(vocab):
  kwargs = dict(max_decode_length=6, temperature=1.5, top_k=50, seed=9)
  queries = QUERIES * 3  # repeated inputs draw their own samples
  p = _predictor(vocab, 5, batch_size=3, **kwargs)
  by_3 = p.predict(queries)  # 4 batches sorted by length, two length buckets
  # Directly, in one batch padded to the longest input: row i keyed by its index i.
  encoded = [p.tokenize(q) for q in queries]
  tokens = np.zeros((len(encoded), max(map(len, encoded))), np.int32)
  for i, ids in enumerate(encoded):
    tokens[i, : len(ids)] = ids
  direct = decoding.temperature_sample(
    p.config, p.params, tokens, 6, temperature=1.5, top_k=50, seed=9
  )
  assert by_3 == [vocab.decode(row) for row in np.asarray(direct)]
  assert len(set(by_3)) > len(QUERIES)  # the copies of an input differ
  other_seed = _predictor(vocab, 5, batch_size=3, **dict(kwargs, seed=10)).predict(queries)
  assert other_seed != by_3


@pytest.mark.parametrize(
  "kwargs,fragment",
  [
    (dict(temperature=-1.0), "temperature"),
    (dict(top_k=-2), "top_k"),
    (dict(top_p=0.0), "top_p"),
    (dict(seed=-1), "seed"),
    (dict(beam_size=2, temperature=0.5), "beam"),
    (dict(beam_size=2, top_k=4), "beam"),
  ],
)
def test_bad_sampling_settings(vocab, kwargs, fragment):
  with pytest.raises(ConfigError, match=fragment):
    _predictor(vocab, 0, **kwargs)
