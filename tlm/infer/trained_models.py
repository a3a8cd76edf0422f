"""Finding and loading trained models: the one place that knows where a model lives.

Three kinds of location, each turned into a `Predictor` on the config's mesh (`mesh.*`,
`eval.param_dtype`):
- a training workdir (`WORKDIR/checkpoints/STEP`, with `config.json` and `model_config.json`);
- a Yearly config's experts, one workdir per year (`WORKDIR/year=YYYY`, as
  `tlm.configs.expert_runs` trains them);
- an explicit checkpoint, anything `tlm.models.checkpoints.load_checkpoint` reads (HF
  directory, Mesh-TF prefix, tlm model directory), as `--mode=predict` / `score` take it.

`load_model` wraps them as the paper queries each variant (§2.3, §3.2): Temporal with the
"year: 2014" prefix; Uniform and T5-CBQA(-ft) with the query alone, and "In 2025, <query>" for
the future probes; Yearly routes each query to its year's expert, the 2018 expert for later
years (`YearlyEnsemble`).
"""

import fnmatch

from tlm import configs, safe_read, storage
from tlm.configs import Config
from tlm.errors import ConfigError
from tlm.infer.conditioned import TimeConditioned, YearlyEnsemble
from tlm.infer.predictor import Predictor

_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "flax_model.msgpack")
_EXPERT_DIR = "year={}"  # a Yearly expert's directory inside the Yearly workdir
# A saved config.json is a few kilobytes.
MAX_CONFIG_BYTES = 1 << 20


# ---- where --------------------------------------------------------------------------------------


def trained(path: str) -> bool:
  """Whether `path` holds a model: a training workdir with a saved step, a tlm model
  directory, or an HF directory with weights."""
  steps_dir = storage.join(path, "checkpoints")
  if storage.isdir(steps_dir):
    return any(name.isdigit() for name in storage.listdir(steps_dir))
  if storage.isdir(storage.join(path, "params")):
    return storage.isfile(storage.join(path, "model_config.json"))
  return any(storage.isfile(storage.join(path, w)) for w in _WEIGHTS)


def expert_dir(workdir: str, year: int) -> str:
  """Where the Yearly expert of `year` is trained (`tlm.configs.expert_runs`)."""
  return storage.join(workdir, _EXPERT_DIR.format(year))


def model_dirs(config: Config, workdir: str) -> list[str]:
  """The directories holding the model(s) of `config`: its experts for Yearly, else `workdir`."""
  if config.variant == "yearly":
    return [expert_dir(workdir, year) for year in config.data.train_years]
  return [workdir]


def require_trained(path: str, config: Config) -> None:
  """Raises ConfigError, with the command to run, unless `path` holds a model."""
  if not trained(path):
    raise ConfigError(
      f"no trained model in {path}: run `python run.py --mode=train --config={config.name} "
      f"--workdir={path}` first"
    )


def require_model(config: Config, workdir: str) -> None:
  """Raises ConfigError, with the command to run, unless `workdir` holds the trained model(s)."""
  for path in model_dirs(config, workdir):
    require_trained(path, config)


def saved_config(workdir: str) -> Config | None:
  """The config a workdir was trained with (a Yearly workdir: its first expert's), or None.

  Only tlm training workdirs count (they hold model_config.json beside config.json): an HF
  checkpoint directory evaluated as is (T5-CBQA) has a config.json of its own.

  Raises:
    ConfigError: a saved config that cannot be read.
  """
  path = saved_config_path(workdir)
  return None if path is None else read_saved_config(path)


def saved_config_path(workdir: str) -> str | None:
  """The config.json `saved_config` reads, or None where the workdir has none."""
  names = storage.listdir(workdir) if storage.isdir(workdir) else []
  experts = sorted(n for n in names if fnmatch.fnmatch(n, _EXPERT_DIR.format("*")))
  for directory in [workdir] + [storage.join(workdir, n) for n in experts]:
    path = storage.join(directory, "config.json")
    if storage.exists(path) and storage.isfile(storage.join(directory, "model_config.json")):
      return path
  return None


def read_saved_config(path: str) -> Config:
  """A workdir's `config.json`, read back as hostile input: a regular file of at most
  MAX_CONFIG_BYTES, JSON of a few levels, no NUL in any string (no path or name holds one),
  and the config's own keys, types and ranges (`configs.from_dict`).

  Raises:
    ConfigError: one line naming the file (and the key, where one is wrong).
  """
  saved = safe_read.read_json_object(
    path, MAX_CONFIG_BYTES, error=ConfigError, what="the saved config", max_depth=4
  )
  stack = [("", saved)]
  while stack:  # a NUL would reach the file system as a path, or a message as a name
    key, value = stack.pop()
    if isinstance(value, str) and "\0" in value:
      raise ConfigError(f"{path}: the saved config's {key} holds a NUL character")
    if isinstance(value, dict):
      stack.extend((f"{key}.{k}".lstrip("."), v) for k, v in value.items())
    elif isinstance(value, list):
      stack.extend((key, v) for v in value)
  try:
    return configs.from_dict(saved)
  except ConfigError as e:
    raise ConfigError(f"{path}: {str(e).removeprefix('config.json: ')}") from None


# ---- loading ------------------------------------------------------------------------------------


def checkpoint_predictor(
  path: str, settings: Config, *, vocab=None, mesh=None, **kwargs
) -> Predictor:
  """A `Predictor` of any checkpoint `load_checkpoint` reads, on the mesh of `settings`.

  Args:
    path: the checkpoint (HF directory, Mesh-TF prefix, tlm model directory, workdir).
    settings: a config whose `mesh.*` and `eval.param_dtype` say where and how it runs.
    vocab: a `Vocabulary` or its path; None: the `spiece.model` beside the checkpoint.
    mesh: the mesh, if already made (`partitioning.make_mesh` of `settings.mesh`).
    **kwargs: the `Predictor`'s batching and decoding arguments.
  """
  from tlm.sharding import partitioning

  if mesh is None:
    mesh = partitioning.make_mesh(settings.mesh.data, settings.mesh.model)
  return Predictor.from_checkpoint(
    path,
    vocab,
    mesh=mesh,
    fsdp=settings.mesh.fsdp,
    param_dtype=settings.eval.param_dtype,
    **kwargs,
  )


def predictor(path: str, config: Config) -> Predictor:
  """The model in `path` with the config's evaluation settings (`eval.*`, `mesh.*`)."""
  ec = config.eval
  return checkpoint_predictor(
    path,
    config,
    batch_size=ec.batch_size,
    max_decode_length=ec.max_decode_length,
    beam_size=ec.beam_size,
    max_input_length=config.data.input_length,
    progress=True,
  )


def conditioning(config: Config, *, future_probe: bool = False) -> str:
  """How the paper presents the year to a (non-Yearly) model of `config` (`TimeConditioned`):
  as it was trained, `data.conditioning` (which `tlm.data.conditioning.conditioning_of`
  derives from the variant), or in the text for a future probe of a model without a time input.

  Args:
    future_probe: models without a time input get the year in the text ("In 2025, ...").
  """
  if config.data.conditioning == "temporal":
    return "temporal"
  return "in_text" if future_probe else "none"


def load_expert(config: Config, workdir: str, year: int) -> TimeConditioned:
  """The Yearly expert of `year` alone, with the query as its only input."""
  path = expert_dir(workdir, year)
  require_trained(path, config)
  return TimeConditioned(predictor(path, config), "none")


def load_model(config: Config, workdir: str, *, future_probe: bool = False):
  """The model of `config` trained in `workdir`, queried as the paper does for its variant.

  Args:
    config: the experiment config (its variant picks the time conditioning).
    workdir: the training workdir (a Yearly config: the directory holding year=YYYY/).
    future_probe: models without a time input get the year in the text ("In 2025, ...").

  Returns:
    A `TimeConditioned` model, or for Yearly a `YearlyEnsemble` of its experts.
  """
  if config.variant == "yearly":
    return YearlyEnsemble({y: load_expert(config, workdir, y) for y in config.data.train_years})
  require_trained(workdir, config)
  return TimeConditioned(
    predictor(workdir, config), conditioning(config, future_probe=future_probe)
  )
