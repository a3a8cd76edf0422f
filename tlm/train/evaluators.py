"""What the trainer calls at each evaluation step besides its held-out loss: evaluators.

As T5X's trainer is handed its `inference_evaluator` and big_vision's `train.py` builds its
evaluators from the config (`evaluators.common.from_config`), the caller builds them and hands
them to `tlm.train.loop.Trainer`; the trainer knows only the fields they log and calls them.
So tlm/train imports nothing above it: the paper's task metrics during training
(`tlm.eval.during_training.evaluators`) live with the evaluations they reuse.
"""

from collections.abc import Sequence
from typing import Protocol

from tlm.errors import ConfigError


class Evaluator(Protocol):
  """Called at each evaluation step (`train.eval_every`) after the held-out loss.

  Attributes:
    fields: the metrics.jsonl fields it may log, as fractions: `train.keep_best` may name
      them, the progress line shows them as percentages, TensorBoard tags them `eval/<field>`.
  """

  fields: tuple[str, ...]

  def __call__(self, params, model_config, vocab) -> dict[str, float]:
    """{field: value} for the parameters of the moment, of the model `model_config` (a
    `tlm.models.t5.T5Config`) with the vocabulary `vocab` (`tlm.data.vocab.Vocabulary`)."""
    ...


def fields_of(evaluators: Sequence[Evaluator]) -> tuple[str, ...]:
  """The fields the evaluators log, in order.

  Raises:
    ConfigError: two evaluators log the same field (one would overwrite the other).
  """
  out: list[str] = []
  for evaluator in evaluators:
    for field in evaluator.fields:
      if field in out:
        raise ConfigError(f"two evaluators log the metric {field!r}")
      out.append(field)
  return tuple(out)
