"""`--mode=eval | eval_future | adapt | cronquestions | reproduce`: the paper's experiments.

  python run.py --mode=reproduce [--workdir=runs/reproduce] [--set=train.steps=...]
  python run.py --mode=eval --config=tiny_temporal --workdir=W
  python run.py --mode=eval_future --config=large_temporal --workdir=W
  python run.py --mode=adapt --config=tiny_uniform --workdir=W --set=adapt.alphas=0.3,0.5
  python run.py --mode=cronquestions --config=large_temporal --workdir=W --data=CRONQ_DIR

Without --config and --workdir, eval / eval_future / adapt / cronquestions use the Temporal
model of the miniature reproduction (tiny_temporal in runs/reproduce/temporal) and say what to
run first if it is not there yet. A workdir that holds a trained model also holds its resolved
config (`config.json`): that is the base, so a model trained with `--set=data...` is evaluated
on its own data, and `--set` applies on top.
"""

import glob
import json
import os

from tlm import configs
from tlm.errors import ConfigError
from tlm.eval.reproduce import DEFAULT_WORKDIR


def _saved_config(workdir: str):
  """The config a workdir was trained with (a Yearly workdir: its first expert's), or None."""
  paths = [os.path.join(workdir, "config.json")]
  paths += sorted(glob.glob(os.path.join(workdir, "year=*", "config.json")))
  for path in paths:
    if os.path.isfile(path):
      try:
        with open(path, encoding="utf-8") as f:
          return configs.from_dict(json.load(f))
      except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read the saved config ({e})") from None
  return None


def _config_and_workdir(flags):
  config = configs.get(flags.config or "tiny_temporal")
  workdir = flags.workdir or os.path.join(DEFAULT_WORKDIR, config.variant)
  saved = _saved_config(workdir)
  if saved is not None:
    if flags.config and saved.name != flags.config:
      raise ConfigError(f"{workdir} holds a {saved.name} model, not {flags.config}")
    # A Yearly expert's config names its year; the experiment covers them all.
    config = configs.replace(saved, "data.year", 0) if saved.variant == "yearly" else saved
  return configs.override(config, flags.set), workdir


def _progress(message: str) -> None:
  print(message, flush=True)


def evaluate(flags) -> None:
  from tlm.eval import experiments

  config, workdir = _config_and_workdir(flags)
  result = experiments.evaluate(config, workdir, _progress)
  from tlm.eval import tables

  _progress("\n" + tables.table2({config.name: result}, result["answer_baselines"]))
  _progress(f"results in {os.path.join(workdir, 'results')}")


def eval_future(flags) -> None:
  from tlm.eval import experiments

  config, workdir = _config_and_workdir(flags)
  experiments.eval_future(config, workdir, _progress)
  _progress(f"results in {os.path.join(workdir, 'results')}")


def adapt(flags) -> None:
  from tlm.eval import adaptation

  config, workdir = _config_and_workdir(flags)
  out = adaptation.adapt(config, workdir, _progress)
  _progress(f"adapted model matches the retrained one at step: {out['matched_at_step']}")
  _progress(f"results in {os.path.join(workdir, 'results')}")


def cronquestions(flags) -> None:
  from tlm.eval.cronquestions_eval import cronquestions as run

  config, workdir = _config_and_workdir(flags)
  run(config, workdir, flags.data, _progress)


def reproduce(flags) -> None:
  from tlm.eval.reproduce import reproduce as run

  if flags.config:
    _progress("note: --mode=reproduce uses the tiny configs; --config is ignored (use --set)")
  run(flags.set, flags.workdir, _progress)
