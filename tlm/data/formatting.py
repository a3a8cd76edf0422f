"""Example text: TempLAMA queries and salient-span-masking records as (inputs, targets, year).

TempLAMA queries become span-prediction inputs by replacing `_X_` with the first T5 sentinel;
the target is the name of the first answer (the metric later takes the max over every answer
and alias). Salient-span-masking examples already hold their `inputs` / `targets` strings.
The time conditioning (`year: 2014 ...`) is applied later, when an example is read for a model:
`tlm.data.conditioning`.
"""

from collections.abc import Mapping
from typing import Any, NamedTuple

from tlm.errors import DataError

_TEMPLAMA_BLANK = "_X_"
# The first T5 sentinel: where a masked span was (salient span masking) or the blank of a
# TempLAMA query is; its target starts with it too (the T5 span-corruption format).
SENTINEL = "<extra_id_0>"
# The splits of every dataset here (TempLAMA, salient-span-masked news, the example store).
SPLITS = ("train", "val", "test")


class TextExample(NamedTuple):
  """One model example as text, before time conditioning.

  Attributes:
    inputs: the input text (a sentence or query with `<extra_id_0>` where the span was).
    targets: the target text (the masked span, or a TempLAMA answer name).
    year: the example's time bucket (the article's year, or the query's year).
  """

  inputs: str
  targets: str
  year: int


def templama_query_input(query: str) -> str:
  """A TempLAMA cloze query as a span-prediction input: `_X_` becomes `<extra_id_0>`.

  Raises:
    DataError: if the query has no `_X_` blank.
  """
  if _TEMPLAMA_BLANK not in query:
    raise DataError(f"TempLAMA query has no {_TEMPLAMA_BLANK} blank: {query!r}")
  return query.replace(_TEMPLAMA_BLANK, SENTINEL)


def templama_text(example: Any) -> TextExample:
  """A TempLAMA example (`tlm.data.templama.TempLamaExample`) as (inputs, targets, year).

  Args:
    example: any object with `query` (containing `_X_`), `answers` (a list of answers, each
      a list of alias strings whose first entry is the name) and `year` (int).

  Returns:
    The query with the sentinel as inputs and the first answer's name as targets.

  Raises:
    DataError: if the query has no blank or the example has no answer.
  """
  answers = example.answers
  if not answers or not answers[0]:
    raise DataError(f"TempLAMA example {getattr(example, 'id', '?')!r} has no answer")
  return TextExample(templama_query_input(example.query), answers[0][0], int(example.year))


def ssm_text(record: Mapping[str, Any], year: int) -> TextExample:
  """A salient-span-masking record (`{"inputs", "targets", ...}`) as a TextExample.

  Args:
    record: one parsed line of an SSM `<split>/<year>.jsonl` file.
    year: the year bucket the record belongs to.
  """
  return TextExample(record["inputs"], record["targets"], int(year))
