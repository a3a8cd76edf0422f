"""Task metrics during training: TempLAMA F1/EM and news SSM F1 on a fixed validation subset.

Every `train.eval_every` steps with `train.eval_examples` > 0, the current parameters are
queried exactly as `--mode=eval` queries a trained model (`tlm.infer.trained_models`): the same
`Predictor` (greedy decoding, `eval.batch_size`, `eval.max_decode_length`, inputs truncated to
`data.input_length`), the same time conditioning of the variant and the same scoring
(`evaluate_templama`, `evaluate_news`). Only the data differ: the validation split of the
trained years (a Yearly expert: its year), at most `eval_examples` TempLAMA queries and about
as many news examples (an equal share per year), evenly spaced over each file so that the
subset covers the whole year and is the same at every evaluation and after a resume.

Logged fields: templama_f1, templama_em (over the subset's queries) and news_f1 (over its
news examples), as fractions like `results/eval.json`.

The trainer takes evaluators (`tlm.train.evaluators`): the callers that train a model
(`--mode=train`, the experiments, the reproduction) build them with `evaluators(config)` and
hand them to `tlm.train.loop`.
"""

import dataclasses

from tlm import configs
from tlm.configs import Config
from tlm.eval import heldout
from tlm.eval.results import news_f1_overall, templama_em, templama_f1
from tlm.infer.conditioned import TimeConditioned
from tlm.infer.predictor import Predictor
from tlm.infer.trained_models import conditioning

FIELDS = ("templama_f1", "templama_em", "news_f1")


def task_eval_data(config: Config):
  """The fixed subset (`tlm.eval.heldout.EvalData`) evaluated during training.

  Raises:
    ConfigError: no TempLAMA directory (data.templama_dir / data.synthetic).
    DataError: a missing or malformed validation file.
  """
  k = config.train.eval_examples
  years = configs.trained_years(config.data)
  sub = configs.replace_many(
    config,
    {"eval.split": "val", "eval.years": years, "eval.max_examples": max(1, k // len(years))},
  )
  data = heldout.eval_data(sub)
  return dataclasses.replace(data, templama=heldout.spread(data.templama, k))


def task_results(model, data) -> dict:
  """{"templama": evaluate_templama(...), "news": evaluate_news(...) (if the subset has news)}:
  what `--mode=eval` computes for `model` on `data` (`heldout.score`)."""
  return heldout.score(model, data)


def task_metrics(results: dict) -> dict:
  """{templama_f1, templama_em, news_f1 (if there is news)} of `task_results`."""
  out = {"templama_f1": templama_f1(results), "templama_em": templama_em(results)}
  news_f1 = news_f1_overall(results)
  if news_f1 is not None:
    out["news_f1"] = news_f1
  return out


class TaskEvaluator:
  """Decodes the subset with the parameters of the moment (a `tlm.train.evaluators.Evaluator`).

  Args:
    config: the run's config.
  """

  fields = FIELDS

  def __init__(self, config: Config):
    self.config = config
    self._data = None
    self.results: dict = {}  # the last evaluation's `task_results` (predictions and scores)

  @property
  def data(self):
    if self._data is None:  # loaded at the first evaluation: a run that never gets there
      self._data = task_eval_data(self.config)  # pays nothing
    return self._data

  def __call__(self, params, model_config, vocab) -> dict:
    ec = self.config.eval
    predictor = Predictor(
      model_config,
      params,
      vocab,
      batch_size=ec.batch_size,
      max_decode_length=ec.max_decode_length,
      beam_size=1,
      max_input_length=self.config.data.input_length,
    )
    model = TimeConditioned(predictor, conditioning(self.config))
    self.results = task_results(model, self.data)
    return task_metrics(self.results)


def evaluators(config: Config) -> tuple[TaskEvaluator, ...]:
  """The evaluators a training run of `config` hands the trainer: `(TaskEvaluator(config),)`
  when `train.eval_every` > 0 and `train.eval_examples` > 0, else none."""
  tc = config.train
  return (TaskEvaluator(config),) if tc.eval_every > 0 and tc.eval_examples > 0 else ()
