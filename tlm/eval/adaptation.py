"""Cheaper adaptation to new data (paper §3.3, Figure 5).

From a model trained on 2010-18, finetune on a mixture that draws the new year (2019) with
probability alpha and the old years (uniformly) with probability 1 - alpha, for `adapt.steps`
steps, for each alpha in `adapt.alphas`; compare with a model retrained on 2010-19 sampled
uniformly for `train.steps` steps from the same start as the 2010-18 model (its
`model.init_checkpoint`: the public T5 checkpoint in the paper, the miniature's WORKDIR/t5;
"retraining from scratch" in the paper's words means from that start, not from random
weights). Each model is evaluated on TempLAMA and the news SSM data for the old slice
(2010-18), the new year (2019) and the future slice (2019-20).

The adapted run for alpha = `adapt.match_alpha` (the paper's 0.5) is trained in
`adapt.eval_points` chunks with an evaluation after each, so the report can say after how many
adaptation steps it matches the retrained model ("for alpha = 0.5 ... its performance with 10K
additional steps matches that of the Temporal model trained from scratch for 300K steps"): on
the future slice 2019-20 *and* the old slice 2010-18 (adapting without forgetting), on
TempLAMA and, when evaluated, on the news (`MATCH_SLICES`). Training in chunks gives exactly
the parameters of one uninterrupted run: the sampler is a pure function of the step and the
trainer resumes from the checkpoint.

Layout: `WORKDIR/adapt/alpha=A/` (adapted models), `WORKDIR/retrained/` (2010-19 model),
results in `WORKDIR/results/adapt.json` and `figure5.png`.
"""

import math
from collections.abc import Mapping, Sequence

from tlm import configs, storage
from tlm.configs import Config
from tlm.configs.years import FUTURE_SLICE, TRAIN_SLICE
from tlm.errors import ConfigError, DataError
from tlm.eval import experiments, figures, heldout
from tlm.eval.results import has_news, news_f1, news_f1_by_year, templama_f1, templama_f1_by_year
from tlm.files import write_json
from tlm.infer.trained_models import load_model, require_model
from tlm.safe_read import read_json

# A kept point of the curve: one evaluation's F1 by slice, a few hundred bytes.
MAX_CURVE_BYTES = 1 << 20
# (source, slice) pairs on which an adapted model must reach the retrained one to match it.
MATCH_SLICES = (
  ("templama", FUTURE_SLICE),
  ("templama", TRAIN_SLICE),
  ("news", FUTURE_SLICE),
  ("news", TRAIN_SLICE),
)


def slices(result: dict, new_year: int) -> dict:
  """TempLAMA (and news) F1 of an evaluation on the old years, the new year and 2019-20."""
  out = {
    TRAIN_SLICE: templama_f1(result, TRAIN_SLICE),
    str(new_year): templama_f1_by_year(result).get(int(new_year)),
    FUTURE_SLICE: templama_f1(result, FUTURE_SLICE),
  }
  if has_news(result):
    out["news"] = {
      TRAIN_SLICE: news_f1(result, TRAIN_SLICE),
      str(new_year): news_f1_by_year(result).get(int(new_year)),
      FUTURE_SLICE: news_f1(result, FUTURE_SLICE),
    }
  return out


def adapted_config(config: Config, alpha: float, base_workdir: str, steps: int) -> Config:
  """The config of adapting `config`'s trained model with mixture weight `alpha`."""
  a = config.adapt
  return configs.replace_many(
    config,
    {
      "data.new_years": (a.new_year,),
      "data.new_year_prob": float(alpha),
      "train.steps": int(steps),
      "model.init_checkpoint": storage.abspath(base_workdir),
    },
  )


def retrained_config(config: Config) -> Config:
  """Retraining on the old years plus the new one, for `train.steps` steps, from the same start
  as `config` (its `model.init_checkpoint`, so a paper config still names its public
  checkpoint and passes `configs.check_required`)."""
  years = tuple(sorted(set(config.data.train_years) | {config.adapt.new_year}))
  return configs.replace(config, "data.train_years", years)


def retrained_dir(workdir: str) -> str:
  """Where the model retrained on the old years plus the new one is trained."""
  return storage.join(workdir, "retrained")


def _value(result: dict, source: str, part: str):
  return result.get("news", {}).get(part) if source == "news" else result.get(part)


def match_steps(curve: dict, retrained: dict) -> dict:
  """The first step of `curve` ({step: slices}) at which the adapted model reaches the retrained
  model on each of `MATCH_SLICES` (None: never; slices without a number are left out), and
  "all": the first step at which it reaches it on all of them at once."""
  pairs = [p for p in MATCH_SLICES if _value(retrained, *p) is not None]
  out: dict = {}
  for source, part in pairs:
    target = _value(retrained, source, part)
    out[f"{source} {part}"] = next(
      (st for st, r in sorted(curve.items()) if (_value(r, source, part) or 0.0) >= target), None
    )
  out["all"] = next(
    (
      st
      for st, r in sorted(curve.items())
      if all((_value(r, *p) or 0.0) >= _value(retrained, *p) for p in pairs)
    ),
    None,
  )
  return out


def _alpha_dir(workdir: str, alpha: float) -> str:
  return storage.join(workdir, "adapt", f"alpha={alpha:g}")


def adapt(config: Config, workdir: str, log=print, data=None) -> dict:
  """`--mode=adapt`: adapts the model in `workdir` for every alpha, retrains, compares.

  Returns:
    {"before": slices, "alphas": {alpha: slices}, "retrained": slices (2010-18, 2019,
     2019-20, news), "retrained_steps": train.steps, "retrained_from": its start,
     "match_alpha": a, "curve": {step: slices}, "matched_at_step": the first step of the
     curve at which the adapted model reaches the retrained one on every one of
     `MATCH_SLICES`, or None, "matched_by_slice": that step per slice (`match_steps`)}.
  """
  from tlm.eval import during_training
  from tlm.train.loop import train

  if config.variant not in ("temporal", "uniform"):
    raise ConfigError(f"adaptation applies to Temporal and Uniform models, not {config.variant}")
  a = config.adapt
  if not a.alphas:
    raise ConfigError("adapt.alphas is empty: give at least one alpha, e.g. --set=adapt.alphas=0.5")
  if any(not 0.0 <= x <= 1.0 for x in a.alphas):
    raise ConfigError(f"adapt.alphas must lie in [0, 1], got {a.alphas}")
  if a.new_year in config.data.train_years:
    raise ConfigError(f"adapt.new_year {a.new_year} is already in data.train_years")
  require_model(config, workdir)
  data = data or heldout.eval_data(config)
  new = a.new_year

  def evaluate(path: str, label: str) -> dict:
    model = load_model(config, path)
    return slices(experiments.evaluate_model(model, data, log, label), new)

  out: dict = {"new_year": new, "steps": a.steps, "match_alpha": a.match_alpha}
  out["before"] = evaluate(workdir, f"{config.name} before adaptation")
  out["alphas"], out["curve"] = {}, {}
  for alpha in a.alphas:
    path = _alpha_dir(workdir, alpha)
    points = max(1, a.eval_points) if math.isclose(alpha, a.match_alpha) else 1
    for k in range(1, points + 1):
      steps = round(a.steps * k / points)
      # A point of the curve is evaluated when the run stands at its step, and kept: a rerun
      # (the run already adapted further) reads it instead of evaluating the later model.
      kept = storage.join(path, "results", f"curve_step={steps}.json")
      if points > 1 and k < points and storage.isfile(kept):
        out["curve"][steps] = read_json(
          kept, MAX_CURVE_BYTES, error=DataError, what="a curve point"
        )
        continue
      log(f"adapting {config.name} with alpha={alpha:g}: to step {steps} of {a.steps}")
      adapted = adapted_config(config, alpha, workdir, steps)
      trained = train(adapted, path, evaluators=during_training.evaluators(adapted), log=log)
      if trained.get("from_step", 0) > steps:
        raise DataError(
          f"trained to step {trained['from_step']}, past the curve's step {steps}, whose "
          f"evaluation is not kept ({kept}): remove the directory to adapt it again",
          path,
        )
      result = evaluate(path, f"{config.name} alpha={alpha:g} step {steps}")
      if points > 1:
        out["curve"][steps] = result
        if experiments.writes_results():
          write_json(kept, result)
    out["alphas"][f"{alpha:g}"] = result
  retrain = retrained_config(config)
  start = retrain.model.init_checkpoint or "random initialisation"
  log(f"retraining {config.name} on {min(config.data.train_years)}-{new} from {start}")
  retrained = retrained_dir(workdir)
  train(retrain, retrained, evaluators=during_training.evaluators(retrain), log=log)
  out["retrained"] = evaluate(retrained, f"{config.name} retrained")
  out["retrained_steps"] = retrain.train.steps
  out["retrained_from"] = start
  out["matched_by_slice"] = match_steps(out["curve"], out["retrained"])
  out["matched_at_step"] = out["matched_by_slice"]["all"]
  if not experiments.writes_results():
    return out
  results = storage.join(workdir, "results")
  write_json(storage.join(results, "adapt.json"), out)
  draw_figure5({config.name: out}, storage.join(results, "figure5.png"), log)
  return out


def draw_figure5(results: dict, path: str, log=print) -> None:
  """Figure 5 from {model name: adapt() result}: F1 against alpha on TempLAMA and, where it was
  evaluated, the news, on 2010-18 and on the new year (`figure5_inputs`)."""
  try:
    figures.figure5(*figure5_inputs([results]), path)
  except figures.FiguresUnavailable as e:
    log(f"note: {e}")


def _figure5_panels(slices: Mapping, new_year) -> dict:
  """One adapted or retrained model's Figure 5 numbers: F1 on TempLAMA and, where evaluated,
  the news (the paper's CustomNews panel), on 2010-18 and on the new year."""
  out = {}
  for source, part in (("TempLAMA", slices), ("news", slices.get("news") or {})):
    for name in (TRAIN_SLICE, str(new_year)):
      if part.get(name) is not None:
        out[f"{source} {name}"] = part[name]
  return out


def figure5_inputs(per_seed: Sequence[Mapping[str, Mapping]]) -> tuple[dict, dict]:
  """`figures.figure5`'s inputs from `adaptation.adapt` results, one {model name: result} per
  seed: ({model: {alpha: {panel: [F1 per seed]}}}, {model: {panel: [F1 per seed]}}), a panel
  per source (TempLAMA, news) and slice (2010-18, the new year)."""
  adapted, retrained = [], []
  for results in per_seed:
    a, r = {}, {}
    for name, res in results.items():
      new = res["new_year"]
      a[name] = {float(x): _figure5_panels(s, new) for x, s in res["alphas"].items()}
      if res.get("retrained"):
        r[name] = _figure5_panels(res["retrained"], new)
    adapted.append(a)
    retrained.append(r)
  return figures.stack(adapted), figures.stack(retrained)
