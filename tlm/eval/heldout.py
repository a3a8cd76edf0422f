"""The held-out data of the paper's evaluations, and one model's results on it.

`eval_data(config)` loads what every evaluation reads (`EvalData`: the TempLAMA split under
evaluation, the held-out news per year, the fact durations of Figure 2); `score(model, data)`
decodes and scores one model on it (`tlm.eval.templama_eval`), in the layout `tlm.eval.results`
reads. `--mode=eval` and the other experiments (`tlm.eval.experiments`) and the task metrics
during training (`tlm.eval.during_training`) share them; this module draws no table or figure,
so training with evaluators loads none.
"""

import dataclasses
import os

from tlm import storage
from tlm.configs import Config
from tlm.data import fact_durations
from tlm.data.future_relations import RESOURCES
from tlm.data.templama import load_templama
from tlm.errors import ConfigError
from tlm.eval.templama_eval import evaluate_news, evaluate_templama
from tlm.input import datasets
from tlm.input.sampling import NEWS_SSM


@dataclasses.dataclass(frozen=True)
class EvalData:
  """Held-out data of an experiment.

  Attributes:
    templama: the TempLAMA split under evaluation, every year.
    news: {year: held-out SSM examples}, at most `eval.max_examples` per year (evenly spaced).
    future_relations_dir: the future-relations query sets (world's, or the shipped real ones).
    durations: {TempLAMA id: years} from the facts' own dates (the synthetic world's facts.tsv;
      `tlm.data.fact_durations`); empty: durations from the TempLAMA buckets.
  """

  templama: list
  news: dict
  future_relations_dir: str
  durations: dict = dataclasses.field(default_factory=dict)


def eval_data(config: Config) -> EvalData:
  """Loads the config's held-out TempLAMA and news data (building the world if needed)."""
  from tlm.input.locations import resolve_sources, synthetic_data

  data, ec = config.data, config.eval
  sources = resolve_sources(data)
  future_dir = ec.future_relations or RESOURCES
  facts = ""
  if data.synthetic:
    world = synthetic_data(data)
    future_dir = ec.future_relations or world.future_relations_dir
    facts = os.path.join(world.world_dir, "facts.tsv")
  templama_dir = sources.templama_dir
  if not templama_dir:
    raise ConfigError("evaluation needs TempLAMA: set data.templama_dir (or data.synthetic)")
  templama = load_templama(os.path.join(templama_dir, f"{ec.split}.json"))
  templama = [ex for ex in templama if ex.year in ec.years]
  news = {}
  ssm_dir = sources.ssm_dir or (data.ssm_dir if storage.isdir(data.ssm_dir) else "")
  if ssm_dir:
    loaded = datasets.load_sources(ssm_dir, None, years=ec.years, split=ec.split)[NEWS_SSM]
    news = {y: spread(rows, ec.max_examples) for y, rows in loaded.items()}
  # Without a facts file (a released TempLAMA), durations come from the TempLAMA buckets.
  durations = (
    fact_durations.durations_from_facts(fact_durations.read_fact_spans(facts), templama)
    if facts
    else {}
  )
  return EvalData(templama, news, future_dir, durations)


def spread(rows: list, k: int) -> list:
  """At most k rows, evenly spaced (the files are in date order: a prefix would be January);
  all of them if k is 0 or enough."""
  if not k or len(rows) <= k:
    return list(rows)
  return [rows[i * len(rows) // k] for i in range(k)]


def score(model, data: EvalData) -> dict:
  """{"templama": ..., "news": ... (with news data)} of one model on `data`: the layout that
  `tlm.eval.results` reads."""
  result = {"templama": evaluate_templama(model, data.templama, durations=data.durations)}
  if data.news:
    result["news"] = evaluate_news(model, data.news)
  return result
