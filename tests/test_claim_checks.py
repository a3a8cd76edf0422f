"""Implementation checks behind the claims the miniature fails: before a failing claim is read
as a property of the miniature, the code that measures it must be shown to do what the paper
does. Each test names the claims it clears."""

import numpy as np
import pytest

from tests.helpers import random_params
from tlm import configs
from tlm.configs.years import TRAIN_YEARS
from tlm.data.formatting import TextExample
from tlm.data.vocab import Vocabulary, train_sentencepiece
from tlm.eval.templama_eval import evaluate_news
from tlm.infer.conditioned import TimeConditioned, YearlyEnsemble
from tlm.infer.predictor import Predictor
from tlm.miniature import reproduce, starts
from tlm.models import t5

WORDS = "the coach of Lumora Vexton FC plays for year 2014 2018 2019 University in is a".split()


def _flat(d, prefix=""):
  out = {}
  for k, v in d.items():
    out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
  return out


def test_each_yearly_expert_trains_like_temporal_on_its_own_year(tmp_path):
  # C2, C3, C4, C9, C10: the experts are the jobs --mode=reproduce runs. Each trains from the same
  # start, for the same steps, batch and optimizer as Temporal (the paper's equal budget), and
  # differs from Temporal only in reading its own year's news without a prefix.
  cfgs = {
    v: starts.from_start(c, str(tmp_path / "t5"))
    for v, c in reproduce.reproduction_configs(reproduce.seed_overrides(3)).items()
  }
  jobs = reproduce.training_jobs(
    cfgs, starts.starting_configs([], str(tmp_path)), str(tmp_path), ""
  )
  experts = [j.steps[0][0] for j in jobs if j.steps[0][0].variant == "yearly"]
  assert sorted(c.data.year for c in experts) == list(TRAIN_YEARS)
  temporal = _flat(configs.to_dict(cfgs["temporal"]))
  for c in experts:
    differs = {k: v for k, v in _flat(configs.to_dict(c)).items() if temporal.get(k, object()) != v}
    assert differs == {
      "data.conditioning": "none",
      "data.year": c.data.year,
      "name": "tiny_yearly",
      "variant": "yearly",
    }
  assert cfgs["temporal"].model.init_checkpoint == cfgs["uniform"].model.init_checkpoint


@pytest.fixture(scope="module")
def vocab():
  rng = np.random.default_rng(0)
  texts = [" ".join(rng.choice(WORDS, size=10)) for _ in range(500)]
  return Vocabulary(train_sentencepiece(texts, 40))


def _predictor(vocab, seed):
  cfg = t5.get_preset("tiny", vocab_size=256)
  return Predictor(cfg, random_params(cfg, seed), vocab, batch_size=3, max_decode_length=4)


def test_news_perplexity_scores_each_model_on_the_same_tokens_with_its_own_conditioning(vocab):
  # C4, C6, C8 (news F1 and perplexity): every model is scored on the same held-out targets,
  # counted per real target token (EOS included, padding not), each with its own input: Temporal
  # with "year: Y", Uniform and the experts without, the 2019-20 news by the 2018 expert.
  a, b, c = (_predictor(vocab, s) for s in range(3))
  models = {
    "temporal": TimeConditioned(a, "temporal"),
    "uniform": TimeConditioned(b, "none"),
    "yearly": YearlyEnsemble(
      {y: TimeConditioned(a if y < 2018 else c, "none") for y in TRAIN_YEARS}
    ),
  }
  targets = ["FC", "Vexton FC", "the coach of Lumora", "University"]
  rows = {
    y: [TextExample(f"Lumora plays for <extra_id_0> in {y}", t, y) for t in targets]
    for y in (2014, 2019)
  }
  out = {m: evaluate_news(model, rows)["records"] for m, model in models.items()}
  want_tokens = [len(vocab.encode(t)) + 1 for t in targets] * 2
  for m, rec in out.items():
    assert rec["tokens"] == want_tokens, m  # the same tokens, whatever the input's prefix
  for y, i in ((2014, 0), (2019, 4)):
    inputs = [r.inputs for r in rows[y]]
    direct = {
      "temporal": a.log_likelihood([f"year: {y} {x}" for x in inputs], targets)[0],
      "uniform": b.log_likelihood(inputs, targets)[0],
      "yearly": (a if y < 2018 else c).log_likelihood(inputs, targets)[0],
    }
    for m, want in direct.items():
      np.testing.assert_allclose(out[m]["loglik"][i : i + 4], want, rtol=1e-5, atol=1e-5)
  # The prefix changes the score: Temporal's conditioning reaches the model.
  plain = a.log_likelihood([r.inputs for r in rows[2014]], targets)[0]
  assert not np.allclose(out["temporal"]["loglik"][:4], plain)


def test_a_table_claim_reads_the_per_query_numbers_the_evaluation_wrote():
  # C3, C5: the F1 margins compare the models on the same queries, aligned by id; a mismatch is
  # an error, not a silent comparison of different queries.
  from tlm.miniature import claim_parts

  meas = {
    "seed": 0,
    "models": {
      m: {
        "templama": {
          "id": ids,
          "year": [2014, 2015],
          "subject": ["S", "S"],
          "relation": ["P54", "P54"],
          "duration": [3, 3],
          "f1": [1.0, 0.0],
          "first_answer": ["A", "B"],
          "most_frequent_is_correct": [True, False],
          "prediction": ["A", "A"],
        },
        "news": {"year": [], "f1": [], "loglik": [], "tokens": []},
      }
      for m, ids in (("temporal", ["S_P54_2014", "S_P54_2015"]), ("yearly", ["x", "y"]))
    },
  }
  with pytest.raises(ValueError, match="different TempLAMA queries"):
    claim_parts.templama_f1(meas, ("temporal", "yearly"), [2014, 2015], "TempLAMA")


class _Echo:
  """A predictor that answers with the text it reads."""

  def predict(self, inputs):
    return list(inputs)
