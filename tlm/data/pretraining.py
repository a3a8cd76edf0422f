"""Pre-training examples: T5's span corruption and salient span masking on undated corpora.

The two objectives of the starting points the paper builds on:
- span corruption (Raffel et al., 2020, the public T5 checkpoints): about 15% of the words,
  in spans of mean length 3, are each replaced by a sentinel `<extra_id_i>`; the target lists
  the sentinels, each followed by the words it replaced. T5 corrupts SentencePiece tokens of
  512-token inputs; the miniature corrupts words of whole short documents (a tiny model's rows
  are 64 tokens), with T5's `random_spans_noise_mask` rule for the span lengths;
- salient span masking (Roberts et al., 2020, T5-CBQA): one named entity of a sentence
  replaced by `<extra_id_0>`, the target the entity (`tlm.data.ssm.mask_examples`).

`examples(corpus_path, objective, ...)` reads a `{"text": ...}` JSON-lines corpus (the
synthetic world's `pretrain/*.jsonl`) and returns `(inputs, targets)` pairs, a pure function of
its arguments: `copies` independent corruptions of each document, so that the stream does not
repeat one corruption.
"""

import numpy as np

from tlm.data.formatting import SENTINEL
from tlm.data.salient_spans import Gazetteer, find_spans, split_sentences
from tlm.data.ssm import mask_examples
from tlm.errors import DataError
from tlm.line_files import iter_jsonl

OBJECTIVES = ("span_corruption", "ssm")
NOISE_DENSITY = 0.15  # T5's defaults
MEAN_SPAN = 3.0


def _segment(total: int, parts: int, rng: np.random.Generator) -> np.ndarray:
  """`total` split into `parts` positive lengths, uniformly at random (T5's segmentation)."""
  if parts == 1:
    return np.array([total])
  cuts = np.sort(rng.choice(np.arange(1, total), size=parts - 1, replace=False))
  return np.diff(np.concatenate([[0], cuts, [total]]))


def span_corrupt(text: str, rng: np.random.Generator) -> tuple[str, str]:
  """One span-corruption example of `text` (words separated by spaces).

  Returns:
    (inputs, targets): e.g. ("Kelvar FC <extra_id_0> football club.",
    "<extra_id_0> is a <extra_id_1>").
  """
  words = text.split()
  n = len(words)
  if n < 2:
    return SENTINEL, f"{SENTINEL} {text}"
  noise = min(max(int(round(n * NOISE_DENSITY)), 1), n - 1)
  spans = max(1, min(int(round(noise / MEAN_SPAN)), noise, n - noise))
  noise_lengths = _segment(noise, spans, rng)
  # The kept words around and between the spans: spans + 1 runs, the first and the last
  # possibly empty (so a span may start the text), the inner ones not.
  keep_lengths = _segment(n - noise + 2, spans + 1, rng)
  keep_lengths[0] -= 1
  keep_lengths[-1] -= 1
  inputs, targets, pos = [], [], 0
  for i in range(spans):
    inputs.extend(words[pos : pos + keep_lengths[i]])
    pos += keep_lengths[i]
    sentinel = f"<extra_id_{i}>"
    inputs.append(sentinel)
    targets.append(sentinel)
    targets.extend(words[pos : pos + noise_lengths[i]])
    pos += noise_lengths[i]
  inputs.extend(words[pos:])
  return " ".join(inputs), " ".join(targets)


def read_corpus(path: str) -> list[str]:
  """The texts of a `{"text": ...}` JSON-lines corpus (DataError naming the line if malformed)."""
  texts = []
  for line_no, obj in iter_jsonl(path):
    if not isinstance(obj.get("text"), str):
      raise DataError("field 'text' missing or not a string", path, line_no)
    texts.append(obj["text"])
  return texts


def examples(
  corpus_path: str, objective: str, *, seed: int, copies: int = 1, gazetteer: str = ""
) -> list[tuple[str, str]]:
  """(inputs, targets) pairs of `objective` over the corpus.

  Args:
    corpus_path: `{"text": ...}` JSON lines.
    objective: "span_corruption" (every document, `copies` corruptions each) or "ssm" (every
      salient span of every sentence, once; `copies` is ignored).
    seed: the corruption seed.
    copies: corruptions per document.
    gazetteer: the SSM gazetteer, one name per line or an entities TSV (the world's
      `entities.tsv`); "" finds entities by the heuristic alone.
  """
  if objective not in OBJECTIVES:
    raise ValueError(f"unknown pre-training objective {objective!r}; expected {OBJECTIVES}")
  texts = read_corpus(corpus_path)
  if objective == "ssm":
    names = Gazetteer.from_file(gazetteer) if gazetteer else None
    out = []
    for text in texts:
      for sentence in split_sentences(text):
        spans = find_spans(sentence, names)
        out.extend((e["inputs"], e["targets"]) for e in mask_examples(sentence, spans, "", 0))
    return out
  rng = np.random.default_rng([int(seed), 0x5C])
  return [span_corrupt(text, rng) for _ in range(copies) for text in texts]
