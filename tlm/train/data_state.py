"""What a training checkpoint records of its data stream, and the check that a resumed run
would draw the same one.

The data stream of a run is a pure function of its data config, batch size and (synthetic
data) the world's generator version: a checkpoint stores them beside the step
(`data_state`), and resuming with any of them changed is refused (`check_data_state`) rather
than silently training on another stream. A data state that is not what tlm writes (read back
as hostile input) is a one-line `CheckpointError`; `tlm.train.checkpointing` passes over a
checkpoint whose data state is not a JSON object of its own step.
"""

import dataclasses
import os

from tlm import configs
from tlm.configs import Config
from tlm.configs.schema import DataConfig
from tlm.errors import CheckpointError, ConfigError


def data_state(config: Config, step: int) -> dict:
  """What the checkpoint of `step` records of the data stream."""
  from tlm.input.locations import synthetic_cache_dir

  # The synthetic world's generator version (in its cache directory's name): a checkpoint of
  # another world's version is not resumed on this one.
  world = os.path.basename(synthetic_cache_dir(config.data)) if config.data.synthetic else ""
  return {
    "step": step,
    "batch_size": config.train.batch_size,
    "data": configs.to_dict(config)["data"],
    "world": world,
  }


def _malformed(saved) -> str | None:
  """Why `saved` is not a data state tlm wrote, or None (keys added later may be absent)."""
  if not isinstance(saved, dict):
    return "not a JSON object"
  types = {"step": int, "batch_size": int, "data": dict, "world": str}
  for key, kind in types.items():
    value = saved.get(key, kind())
    if not isinstance(value, kind) or isinstance(value, bool):
      return f"{key!r} is not a{'n' if kind is int else ''} {kind.__name__}"
  return None


def check_data_state(saved: dict, config: Config, path: str) -> None:
  """Refuses to resume the checkpoint at `path` (its `saved` data state) on another stream.

  Raises:
    ConfigError: naming what differs.
    CheckpointError: the saved data state is not one tlm writes (a field of another type).
  """
  why = _malformed(saved)
  if why is not None:
    raise CheckpointError(f"{path}/data_state: not a data state written by tlm ({why})")
  current = data_state(config, saved.get("step", -1))
  diff = [k for k in ("batch_size",) if saved.get(k) != current[k]]
  if saved.get("world", "") != current["world"]:
    diff.append(f"synthetic world ({saved.get('world') or 'an older version'})")
  saved_data = saved.get("data", {})
  # A key added to DataConfig after the checkpoint was written had its default then.
  defaults = configs.to_dict(dataclasses.replace(config, data=DataConfig()))["data"]
  # Where the synthetic world is cached does not change it (world_seed / world_scale do).
  diff += [
    f"data.{k}"
    for k, v in current["data"].items()
    if k != "cache_dir" and saved_data.get(k, defaults[k]) != v
  ]
  if diff:
    raise ConfigError(
      f"{path} was trained with other {', '.join(diff)}; resuming would change the data "
      "stream. Use the original settings or a new workdir"
    )
