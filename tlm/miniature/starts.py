"""The miniature's starting points and its T5-CBQA rows, for `--mode=reproduce`.

The paper (§2.3, §3.1): "All models are initialized from a public T5 checkpoint, and then
further adapted for 300K steps on our data"; the T5-CBQA baseline is Roberts et al.'s (2020)
T5 plus 100K steps of salient span masking on Wikipedia, evaluated as it is, and T5-CBQA-ft
is that model finetuned 5K steps on TempLAMA alone. The miniature has no public checkpoint, so
it makes both, once per reproduction workdir (a rerun reuses them):

  WORKDIR/t5/       tiny_t5: span corruption on the world's undated generic text;
  WORKDIR/cbqa/     tiny_cbqa: WORKDIR/t5 + salient span masking on the world's encyclopedia;
  WORKDIR/cbqa_ft/  tiny_cbqa_ft: WORKDIR/cbqa + TempLAMA-train alone.

Uniform, Temporal, every Yearly expert, and the Figure 5 retraining all start from WORKDIR/t5
(`from_start`) and train the same `train.steps`.
"""

from tlm import configs, storage
from tlm.configs import Config

STARTS = ("t5", "cbqa")  # the pre-trained starting points, in training order
CBQA_ROWS = ("cbqa", "cbqa_ft")  # the baselines evaluated beside the news-trained models


def start_dirs(workdir: str) -> dict[str, str]:
  """Where each starting point and T5-CBQA-ft are trained."""
  return {name: storage.join(workdir, name) for name in STARTS + ("cbqa_ft",)}


def starting_configs(overrides: list[str], workdir: str) -> dict[str, Config]:
  """tiny_t5, tiny_cbqa (from WORKDIR/t5) and tiny_cbqa_ft (from WORKDIR/cbqa), with the
  reproduction's overrides applied (`--set` applies to every model of the run)."""
  dirs = start_dirs(workdir)
  out = {}
  for name, init in (("t5", ""), ("cbqa", dirs["t5"]), ("cbqa_ft", dirs["cbqa"])):
    config = configs.override(configs.get(f"tiny_{name}"), overrides)
    out[name] = configs.replace(config, "model.init_checkpoint", init)
  return out


def from_start(config: Config, start_dir: str) -> Config:
  """`config` initialised from the pre-trained start in `start_dir` (the public T5's role)."""
  return configs.replace(config, "model.init_checkpoint", storage.abspath(start_dir))


def train_start(cfgs: dict[str, Config], workdir: str, name: str, log) -> None:
  """Trains (or finds trained) one starting point, WORKDIR/<name> ("t5" or "cbqa")."""
  from tlm.eval import during_training
  from tlm.train.loop import run

  run(cfgs[name], start_dirs(workdir)[name], make_evaluators=during_training.evaluators, log=log)
