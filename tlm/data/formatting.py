"""Time conditioning and example text: the one place where a model's input strings are made.

Mirrors §2.3 of the paper (Dhingra et al., TACL 2022): the Temporal model sees the time as a
text prefix ("year: 2018"), the Uniform and Yearly models see the text alone (Yearly differs
only in which year's slice it trains on), and for models without a time input the future
probes of §3.2 put the year in the text ("In 2019, ..."). The conditioning is applied when an
example is formatted for a model and never stored in a data file.

TempLAMA queries become span-prediction inputs by replacing `_X_` with the first T5 sentinel;
the target is the name of the first answer (the metric later takes the max over every answer
and alias). Salient-span-masking examples already hold their `inputs` / `targets` strings.
"""

from collections.abc import Mapping
from typing import Any, NamedTuple

from tlm.errors import ConfigError, DataError

# The conditioning modes: Temporal, Uniform / Yearly, and year-in-text for future probes.
CONDITIONINGS = ("temporal", "none", "in_text")

_TEMPLAMA_BLANK = "_X_"
_SENTINEL_0 = "<extra_id_0>"


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


def format_input(inputs: str, year: int | str, conditioning: str) -> str:
  """Applies the time conditioning to a model input.

  Args:
    inputs: the input text without any time information added.
    year: the time of the example (an int year, or a date key such as "2014-Q2").
    conditioning: "temporal" (`"year: 2014 " + inputs`, the Temporal model), "none"
      (`inputs`, the Uniform and Yearly models) or "in_text" (`"In 2014, " + inputs`, future
      probes for models without a time input).

  Returns:
    The text the model reads.

  Raises:
    ConfigError: for an unknown conditioning.
  """
  if conditioning == "temporal":
    return f"year: {year} {inputs}"
  if conditioning == "none":
    return inputs
  if conditioning == "in_text":
    return f"In {year}, {inputs}"
  raise ConfigError(f"unknown time conditioning {conditioning!r}; expected one of {CONDITIONINGS}")


def conditioning_prefix(year: int | str, conditioning: str) -> str:
  """The text `format_input` puts before the inputs ("" for "none"), without its space:
  `format_input(x, year, c) == conditioning_prefix(year, c) + " " + x` when it is not empty.

  The example store prepends this prefix's tokens to stored tokens (`tlm.data.packing`).
  """
  return format_input("", year, conditioning)[:-1] if conditioning != "none" else ""


def check_conditioning(conditioning: str) -> str:
  """Returns `conditioning` if it is one of CONDITIONINGS, else raises ConfigError."""
  if conditioning not in CONDITIONINGS:
    raise ConfigError(
      f"unknown time conditioning {conditioning!r}; expected one of {CONDITIONINGS}"
    )
  return conditioning


def templama_query_input(query: str) -> str:
  """A TempLAMA cloze query as a span-prediction input: `_X_` becomes `<extra_id_0>`.

  Raises:
    DataError: if the query has no `_X_` blank.
  """
  if _TEMPLAMA_BLANK not in query:
    raise DataError(f"TempLAMA query has no {_TEMPLAMA_BLANK} blank: {query!r}")
  return query.replace(_TEMPLAMA_BLANK, _SENTINEL_0)


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
