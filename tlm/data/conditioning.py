"""Time conditioning: the paper's simplest idea, `year: 2014` before the input, defined once.

Mirrors §2.3 of the paper (Dhingra et al., TACL 2022): the Temporal model learns
P(y | t (+) x) by reading the time as a text prefix ("year: 2018"); the Uniform and Yearly
models read the text alone (Yearly differs only in which year's slice it trains on); for models
without a time input the future probes of §3.2 put the year in the text ("In 2019, ...").

`prefix_text` is the one definition. Everything else derives from it:
- `format_input`, the text a model reads: the prefix, a space, the input;
- `prefix_ids`, the prefix as token ids: `prefix_text` tokenized, once per year by its caller
  (`tlm.input.packing.Batcher`), and put in front of the stored ids of a tokenized example
  store. That equals tokenizing the formatted text because the SentencePiece model splits at
  whitespace (no piece spans the space after the prefix); `tlm.store.store_write.prefix_problem`
  checks it of a vocabulary, on this module's prefixes, before its ids are stored.
The conditioning is applied when an example is read for a model and never stored in a file.
"""

from collections.abc import Sequence

import numpy as np

from tlm.errors import ConfigError

# The conditioning modes: Temporal, Uniform / Yearly, and year-in-text for future probes.
CONDITIONINGS = ("temporal", "none", "in_text")


def check_conditioning(conditioning: str) -> str:
  """Returns `conditioning` if it is one of CONDITIONINGS, else raises ConfigError."""
  if conditioning not in CONDITIONINGS:
    raise ConfigError(
      f"unknown time conditioning {conditioning!r}; expected one of {CONDITIONINGS}"
    )
  return conditioning


def prefix_text(year: int | str, conditioning: str) -> str:
  """The text put before a model input for its year, without the space that follows it.

  Args:
    year: the time of the example (an int year, or a date key such as "2014-Q2").
    conditioning: "temporal" (`"year: 2014"`, the Temporal model), "none" (`""`, the Uniform
      and Yearly models) or "in_text" (`"In 2014,"`, future probes for models without a time
      input).

  Raises:
    ConfigError: for an unknown conditioning.
  """
  if check_conditioning(conditioning) == "temporal":
    return f"year: {year}"
  if conditioning == "in_text":
    return f"In {year},"
  return ""


def format_input(inputs: str, year: int | str, conditioning: str) -> str:
  """The text a model reads: `prefix_text(year, conditioning) + " " + inputs`, or `inputs`
  alone when there is no prefix ("none").

  Raises:
    ConfigError: for an unknown conditioning.
  """
  prefix = prefix_text(year, conditioning)
  return f"{prefix} {inputs}" if prefix else inputs


def prefix_ids(vocab, year: int | str, conditioning: str) -> np.ndarray:
  """`prefix_text` as int32 token ids (empty for "none"), for ids stored without it.

  Args:
    vocab: anything with `encode(text) -> list[int]` (`tlm.data.vocab.Vocabulary`).
  """
  text = prefix_text(year, conditioning)
  return np.asarray(vocab.encode(text), np.int32) if text else np.zeros(0, np.int32)


def conditioning_of(variant: str) -> str:
  """The time input a variant trains with (`data.conditioning`): the method's one decision.

  Temporal reads "year: 2014" before every input; Uniform reads the same data without it; a
  Yearly expert reads its own year's data without it (the year picks the model, not the input:
  `route_to_expert`); T5-CBQA and its finetuning have no time input.
  """
  return "temporal" if variant == "temporal" else "none"


def route_to_expert(year: int, expert_years: Sequence[int]) -> int:
  """Returns the expert year for a query of `year`: its own, else the closest one.

  Ties (a year exactly between two experts, possible only when the experts have gaps) go to the
  earlier expert, which has not seen the future.
  """
  if not expert_years:
    raise ValueError("no yearly experts to route to")
  return min(sorted(expert_years), key=lambda e: (abs(e - year), e))
