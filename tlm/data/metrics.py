"""Evaluation metrics: SQuAD exact match and token F1, their aggregation, perplexity, entropy.

The paper (Sec. 2.4) scores TempLAMA, CustomNews SSM and CronQuestions with "a token-level F1
score ... computed in the same way as for the SQuAD benchmark", taking the max over all gold
answers. `normalize_answer`, `exact_match` and `token_f1` follow the official SQuAD v1.1
evaluation script (`evaluate-v1.1.py`): lowercase, drop ASCII punctuation, drop the articles
a/an/the, collapse whitespace; F1 over the multiset of normalised tokens. As in that script an
empty prediction against an empty gold answer has EM 1 and F1 0 (no common tokens).

Perplexity (Table 7) is exp of the mean negative log-likelihood per target token; entropy
(Figure 4) is that of the model's distribution renormalised over a fixed candidate set.
"""

import collections
import math
import re
import string
from collections.abc import Hashable, Iterable, Sequence

import numpy as np

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")

# Fact-duration buckets for Figure 2 (right): years for which the first answer is valid.
DURATION_EDGES = (1, 2, 3, 5, 10)


def normalize_answer(text: str) -> str:
  """Lowercases, removes punctuation, articles and extra whitespace (SQuAD v1.1)."""
  text = text.lower()
  text = "".join(ch for ch in text if ch not in _PUNCTUATION)
  text = _ARTICLES.sub(" ", text)
  return " ".join(text.split())


def _flatten(answers: Sequence[str] | Sequence[Sequence[str]] | str) -> list[str]:
  """Gold answers as a flat list: accepts one string, strings, or alias lists."""
  if isinstance(answers, str):
    return [answers]
  flat = []
  for answer in answers:
    if isinstance(answer, str):
      flat.append(answer)
    else:
      flat.extend(answer)
  if not flat:
    raise ValueError("no gold answers to score against")
  return flat


def _f1(prediction_tokens: list[str], gold_tokens: list[str]) -> float:
  common = collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)
  num_same = sum(common.values())
  if num_same == 0:
    return 0.0
  precision = num_same / len(prediction_tokens)
  recall = num_same / len(gold_tokens)
  return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, answers) -> float:
  """1.0 if the normalised prediction equals any normalised gold answer, else 0.0.

  Args:
    prediction: the model's answer.
    answers: a gold string, a list of strings, or a list of alias lists (TempLAMA answers).

  Returns:
    The max over all answers and aliases, 0.0 or 1.0.
  """
  pred = normalize_answer(prediction)
  return float(any(pred == normalize_answer(a) for a in _flatten(answers)))


def token_f1(prediction: str, answers) -> float:
  """SQuAD token F1 of the prediction against the best-matching gold answer.

  Args:
    prediction: the model's answer.
    answers: a gold string, a list of strings, or a list of alias lists (TempLAMA answers).

  Returns:
    The max F1 over all answers and aliases, in [0, 1].
  """
  pred_tokens = normalize_answer(prediction).split()
  return max(_f1(pred_tokens, normalize_answer(a).split()) for a in _flatten(answers))


def duration_bucket(years: int, edges: Sequence[int] = DURATION_EDGES) -> str:
  """Label of the fact-duration bucket for Figure 2: "1", "2", "3-4", "5-9", "10+".

  Args:
    years: how many years the answer is valid (>= 1).
    edges: increasing lower bounds of the buckets.

  Returns:
    The bucket label; the last bucket is open-ended.
  """
  if years < edges[0]:
    raise ValueError(f"duration {years} is below the first bucket edge {edges[0]}")
  for lo, hi in zip(edges, edges[1:]):
    if lo <= years < hi:
      return str(lo) if hi - lo == 1 else f"{lo}-{hi - 1}"
  return f"{edges[-1]}+"


def group_mean(values: Sequence[float], keys: Sequence[Hashable]) -> dict:
  """Mean and count of `values` for each key, in sorted key order.

  Args:
    values: one score per example.
    keys: one group key per example (year, relation, duration bucket, ...).

  Returns:
    `{key: {"mean": float, "count": int}}`.
  """
  if len(values) != len(keys):
    raise ValueError(f"{len(values)} values but {len(keys)} keys")
  sums: dict = collections.defaultdict(float)
  counts: dict = collections.defaultdict(int)
  for v, k in zip(values, keys):
    sums[k] += float(v)
    counts[k] += 1
  return {k: {"mean": sums[k] / counts[k], "count": counts[k]} for k in sorted(counts, key=str)}


def summarize(records: Iterable[dict], metrics: Sequence[str] = ("f1", "em")) -> dict:
  """Aggregates per-example scores overall and by year, relation and duration bucket.

  Args:
    records: dicts with the metric fields and any of `year`, `relation`, `duration` (years the
      first answer is valid); a grouping is reported only when every record has its key.
    metrics: the score fields to aggregate.

  Returns:
    `{"count": n, "overall": {metric: mean}, "by_year" | "by_relation" | "by_duration":
    {metric: {key: {"mean", "count"}}}}`.
  """
  records = list(records)
  out: dict = {"count": len(records)}
  out["overall"] = {
    m: (float(np.mean([r[m] for r in records])) if records else 0.0) for m in metrics
  }
  groupings = {
    "by_year": lambda r: r["year"],
    "by_relation": lambda r: r["relation"],
    "by_duration": lambda r: duration_bucket(r["duration"]),
  }
  fields = {"by_year": "year", "by_relation": "relation", "by_duration": "duration"}
  for name, key_fn in groupings.items():
    if records and all(fields[name] in r for r in records):
      keys = [key_fn(r) for r in records]
      out[name] = {m: group_mean([r[m] for r in records], keys) for m in metrics}
  return out


def perplexity(log_likelihoods: Sequence[float], token_counts: Sequence[int]) -> float:
  """exp(-sum of log-likelihoods / total number of tokens) (MLM perplexity, Table 7).

  Args:
    log_likelihoods: per-example summed natural-log likelihoods of the targets.
    token_counts: per-example number of target tokens scored (EOS included if scored).

  Returns:
    The token-level perplexity.
  """
  total_tokens = int(np.sum(token_counts))
  if total_tokens <= 0:
    raise ValueError("perplexity needs at least one token")
  return math.exp(-float(np.sum(np.asarray(log_likelihoods, np.float64))) / total_tokens)


def entropy(log_probs: Sequence[float], base: float = math.e) -> float:
  """Entropy of the distribution renormalised over a candidate set (Figure 4).

  Args:
    log_probs: log-probabilities (or any log-scores) the model gives each candidate; they are
      renormalised with a softmax, so they need not sum to one.
    base: logarithm base of the result (e: nats, 2: bits).

  Returns:
    -sum p log p over the candidates, in the given base.
  """
  x = np.asarray(log_probs, np.float64)
  if x.ndim != 1 or x.size == 0:
    raise ValueError("entropy needs a non-empty 1-D array of log-probabilities")
  x = x - np.max(x)
  log_z = math.log(float(np.sum(np.exp(x))))
  log_p = x - log_z
  p = np.exp(log_p)
  with np.errstate(invalid="ignore"):  # 0 * -inf for candidates with zero probability
    h = -float(np.sum(np.where(p > 0, p * log_p, 0.0)))
  return h / math.log(base)
