"""SQuAD EM / F1, aggregation, perplexity and entropy on hand-computed cases."""

import math

import numpy as np
import pytest

from tlm.data import metrics


@pytest.mark.parametrize(
  "text, expected",
  [
    ("The  Quick, brown fox!", "quick brown fox"),
    ("An apple a day", "apple day"),
    ("theater of the absurd", "theater of absurd"),  # "the" only as a whole word
    ("Liverpool F.C.", "liverpool fc"),
    ("  New\tYork \n City ", "new york city"),
    ("U.S.-based", "usbased"),
    ("the", ""),
    ("", ""),
    ("Dhingra’s", "dhingra’s"),  # SQuAD v1.1 drops ASCII punctuation only
  ],
)
def test_normalize_answer(text, expected):
  assert metrics.normalize_answer(text) == expected


def test_exact_match():
  assert metrics.exact_match("the Beatles", ["Beatles"]) == 1.0
  assert metrics.exact_match("BEATLES!", "the beatles") == 1.0
  assert metrics.exact_match("Beatles", ["Rolling Stones", "The Beatles"]) == 1.0
  assert metrics.exact_match("Liverpool", ["Liverpool F.C."]) == 0.0
  assert metrics.exact_match("Man Utd", [["Manchester United F.C.", "Man Utd"], ["Chelsea"]]) == 1.0
  assert metrics.exact_match("", [""]) == 1.0
  assert metrics.exact_match("the", ["a"]) == 1.0  # both normalise to ""
  assert metrics.exact_match("", ["x"]) == 0.0


def test_token_f1_hand_computed():
  # pred {liverpool}, gold {liverpool, fc}: P = 1, R = 1/2, F1 = 2/3.
  np.testing.assert_allclose(metrics.token_f1("Liverpool", ["Liverpool F.C."]), 2 / 3, rtol=1e-12)
  # pred {new, york, city}, gold {new, york}: P = 2/3, R = 1, F1 = 0.8.
  np.testing.assert_allclose(metrics.token_f1("New York City", "New York"), 0.8, rtol=1e-12)
  # Articles and case do not count: "The New York Times" vs "new york times".
  assert metrics.token_f1("The New York Times", ["new york times"]) == 1.0
  # Multiset overlap: "b b c" vs "b c c" share one b and one c: P = R = 2/3.
  np.testing.assert_allclose(metrics.token_f1("b b c", ["b c c"]), 2 / 3, rtol=1e-12)
  # Max over answers: 0 vs "Liverpool", 1/2 vs "Manchester City".
  np.testing.assert_allclose(
    metrics.token_f1("Manchester United", ["Liverpool", "Manchester City"]), 0.5, rtol=1e-12
  )
  # Max over aliases of several answers.
  assert metrics.token_f1("Man Utd", [["Manchester United F.C.", "Man Utd"], ["Chelsea"]]) == 1.0
  np.testing.assert_allclose(
    metrics.token_f1("United", [["Manchester United F.C.", "Man Utd"], ["Chelsea"]]),
    0.5,  # vs "manchester united fc": P = 1, R = 1/3, F1 = 1/2; no overlap with the others
    rtol=1e-12,
  )


def test_token_f1_empty_strings_follow_squad_v1():
  assert metrics.token_f1("", [""]) == 0.0  # no common tokens, as in evaluate-v1.1.py
  assert metrics.token_f1("", ["Paris"]) == 0.0
  assert metrics.token_f1("Paris", [""]) == 0.0
  assert metrics.token_f1("a an the", ["the"]) == 0.0


def test_no_answers_is_an_error():
  with pytest.raises(ValueError):
    metrics.token_f1("x", [])
  with pytest.raises(ValueError):
    metrics.exact_match("x", [[]])


@pytest.mark.parametrize(
  "years, label", [(1, "1"), (2, "2"), (3, "3-4"), (4, "3-4"), (5, "5-9"), (9, "5-9"), (10, "10+")]
)
def test_duration_bucket(years, label):
  assert metrics.duration_bucket(years) == label


def test_duration_bucket_rejects_zero():
  with pytest.raises(ValueError):
    metrics.duration_bucket(0)


def test_group_mean_and_summarize():
  records = [
    {"f1": 1.0, "em": 1.0, "year": 2018, "relation": "P54", "duration": 1},
    {"f1": 0.5, "em": 0.0, "year": 2018, "relation": "P39", "duration": 4},
    {"f1": 0.0, "em": 0.0, "year": 2019, "relation": "P54", "duration": 12},
  ]
  out = metrics.summarize(records)
  assert out["count"] == 3
  np.testing.assert_allclose(out["overall"]["f1"], 0.5, rtol=1e-12)
  np.testing.assert_allclose(out["overall"]["em"], 1 / 3, rtol=1e-12)
  assert out["by_year"]["f1"] == {2018: {"mean": 0.75, "count": 2}, 2019: {"mean": 0.0, "count": 1}}
  assert out["by_relation"]["em"] == {
    "P39": {"mean": 0.0, "count": 1},
    "P54": {"mean": 0.5, "count": 2},
  }
  assert out["by_duration"]["f1"] == {
    "1": {"mean": 1.0, "count": 1},
    "10+": {"mean": 0.0, "count": 1},
    "3-4": {"mean": 0.5, "count": 1},
  }
  # A grouping whose key some records lack is left out.
  assert "by_duration" not in metrics.summarize([{"f1": 1.0, "em": 1.0, "year": 2010}])
  with pytest.raises(ValueError):
    metrics.group_mean([1.0], ["a", "b"])


def test_perplexity():
  # Summed log-likelihoods -2 and -4 over 2 + 4 tokens: exp(6 / 6) = e.
  np.testing.assert_allclose(metrics.perplexity([-2.0, -4.0], [2, 4]), math.e, rtol=1e-12)
  np.testing.assert_allclose(metrics.perplexity([math.log(0.25) * 3], [3]), 4.0, rtol=1e-12)
  with pytest.raises(ValueError):
    metrics.perplexity([], [])


def test_entropy():
  np.testing.assert_allclose(metrics.entropy([0.0] * 4), math.log(4), rtol=1e-12)
  # Unnormalised scores are renormalised over the candidates.
  np.testing.assert_allclose(metrics.entropy([5.0] * 4, base=2), 2.0, rtol=1e-12)
  probs = [0.5, 0.25, 0.25]
  np.testing.assert_allclose(metrics.entropy(np.log(probs), base=2), 1.5, rtol=1e-12)
  np.testing.assert_allclose(metrics.entropy(np.log(probs) - 7.0, base=2), 1.5, rtol=1e-12)
  # A candidate with probability zero contributes nothing.
  assert metrics.entropy([0.0, -np.inf]) == 0.0
  np.testing.assert_allclose(
    metrics.entropy(np.log([0.7, 0.2, 0.1])),
    -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1)),
    rtol=1e-12,
  )
