"""Closed-book CronQuestions (paper §3.1, Table 4).

"We finetune the Uniform and Temporal models on CronQuestions ... the model is trained to
predict the first answer in the list of correct answers for an input question. During
evaluation, it is compared to each answer in the set of correct answers, and we take the
maximum score among them." The questions carry their own time expressions, so no time prefix
is added. Finetuning starts from the model trained in WORKDIR and runs `eval.finetune_steps`
steps with the config's optimizer and batch shapes, in WORKDIR/cronquestions/.
"""

import numpy as np

from tlm import configs, storage
from tlm.configs import Config
from tlm.data import metrics
from tlm.data.cronquestions import load_cronquestions, to_inputs_targets
from tlm.data.vocab import Vocabulary
from tlm.errors import ConfigError
from tlm.eval import tables
from tlm.eval.experiments import writes_results
from tlm.files import atomic_output_file, write_json
from tlm.infer.trained_models import predictor, require_model
from tlm.input.packing import Batcher
from tlm.input.sampling import MixtureSampler

_SOURCE = "cronquestions"


class QuestionAnsweringData:
  """Packed training batches of (question, first answer) pairs for `tlm.train.loop.Trainer`.

  Draws are uniform over the pairs and a pure function of (seed, step, row), like every
  training stream here, so finetuning resumes exactly.
  """

  def __init__(self, pairs, vocab: Vocabulary, config: Config):
    if not pairs:
      raise ConfigError("no CronQuestions training questions")
    sampler = MixtureSampler(
      {_SOURCE: {0: list(pairs)}},
      seed=config.data.seed,
      years=(0,),
      source_weights={_SOURCE: 1.0},
    )
    self.vocab = vocab
    self.eval_note = "no held-out loss during CronQuestions finetuning"
    self._batcher = Batcher(
      sampler,
      vocab,
      conditioning="none",
      rows=config.train.batch_size,
      input_length=config.data.input_length,
      target_length=config.data.target_length,
    )

  def train_batch(self, step: int, start: int, stop: int):
    from tlm.input.mixture import local_batch

    return local_batch(self._batcher, step, start, stop)

  def eval_batches(self, start: int, stop: int) -> list:
    return []


def evaluate_questions(predictor, questions) -> dict:
  """EM / F1 (max over every answer) of greedy answers to `questions`."""
  preds = predictor.predict([q.question for q in questions])
  em = [metrics.exact_match(p, q.answers) for p, q in zip(preds, questions)]
  f1 = [metrics.token_f1(p, q.answers) for p, q in zip(preds, questions)]
  by_type: dict = {}
  for q, e, f in zip(questions, em, f1):
    by_type.setdefault(q.type, []).append((e, f))
  return {
    "em": float(np.mean(em)),
    "f1": float(np.mean(f1)),
    "count": len(questions),
    "by_type": {
      t: {"em": float(np.mean([e for e, _ in v])), "f1": float(np.mean([f for _, f in v]))}
      for t, v in sorted(by_type.items())
    },
    "examples": [
      {"question": q.question, "prediction": p, "answers": q.answers}
      for q, p in list(zip(questions, preds))[:50]
    ],
  }


def cronquestions(config: Config, workdir: str, log=print, data: str | None = None) -> dict:
  """`--mode=cronquestions`: finetune the model in `workdir`, evaluate on the test split.

  Args:
    data: the CronQuestions release directory (`--data`: questions/ and kg/); unlike the
      TempLAMA experiments' data, no config names it, so it is required.
  """
  from tlm.eval import during_training
  from tlm.train.loop import train

  if not data:
    raise ConfigError("--data=DIR (the CronQuestions release: questions/ and kg/) is required")
  require_model(config, workdir)
  train_questions = load_cronquestions(data, "train")
  test_questions = load_cronquestions(data, "test")
  vocab = Vocabulary(storage.join(workdir, "spiece.model"))
  ft_dir = storage.join(workdir, "cronquestions")
  ft_config = configs.replace_many(
    config,
    {
      "train.steps": config.eval.finetune_steps,
      "train.eval_every": 0,
      "model.init_checkpoint": storage.abspath(workdir),
    },
  )
  pairs = [to_inputs_targets(q) for q in train_questions]
  log(f"finetuning {config.name} on {len(pairs)} CronQuestions for {ft_config.train.steps} steps")
  data = QuestionAnsweringData(pairs, vocab, ft_config)
  train(ft_config, ft_dir, data=data, evaluators=during_training.evaluators(ft_config), log=log)
  log(f"answering {len(test_questions)} test questions")
  result = evaluate_questions(predictor(ft_dir, config), test_questions)
  result["model"] = config.name
  if not writes_results():
    return result
  out = storage.join(workdir, "results")
  write_json(storage.join(out, "table4.json"), result)
  with atomic_output_file(storage.join(out, "table4.md")) as f:
    f.write(
      tables.markdown_table(
        ["Model", "EM", "F1"], [[config.name, 100 * result["em"], 100 * result["f1"]]]
      )
    )
  log(f"CronQuestions test: EM {100 * result['em']:.1f}, F1 {100 * result['f1']:.1f}")
  return result
