"""What a training checkpoint records of its data stream, and the check that a resumed run
would draw the same one.

The data stream of a run is a pure function of its data config, batch size, (synthetic
data) the world's generator version, the example store it reads and the sampler's parameters
derived from it: a checkpoint stores them beside the step (`data_state`; the store by its
manifest's SHA-256, which holds every file's, and the block sampler's `block_draws`, block
steps, allotments and table sizes: `stream`), and resuming with any of them changed is refused
(`check_data_state`) rather than silently training on another stream. A checkpoint written
before the stream record existed is resumed unchecked on it, except with the block sampler,
whose draws were defined otherwise then (per-step windows, NumPy's permutations). A data state
that is not what tlm writes (read back as hostile input) is a one-line `CheckpointError`;
`tlm.train.checkpointing` passes over a checkpoint whose data state is not a JSON object of its
own step.
"""

import dataclasses
import os

from tlm import configs
from tlm.configs import Config
from tlm.configs.schema import ABSENT_MEANS, DataConfig
from tlm.errors import CheckpointError, ConfigError

# Keys of the data config that do not change the stream: where the synthetic world is cached
# (world_seed / world_scale do change it) and whether a store in corpus order is allowed (the
# store itself is in the stream record).
_STREAM_NEUTRAL = ("cache_dir", "allow_corpus_order")


def data_state(config: Config, step: int, stream: dict | None = None) -> dict:
  """What the checkpoint of `step` records of the data stream; `stream` is the batch source's
  record of its store and sampler (`tlm.input.mixture.TrainingData.stream_record`)."""
  from tlm.input.locations import synthetic_cache_dir

  # The synthetic world's generator version (in its cache directory's name): a checkpoint of
  # another world's version is not resumed on this one.
  world = os.path.basename(synthetic_cache_dir(config.data)) if config.data.synthetic else ""
  state = {
    "step": step,
    "batch_size": config.train.batch_size,
    "data": configs.to_dict(config)["data"],
    "world": world,
  }
  if stream is not None:
    state["stream"] = stream
  return state


def _malformed(saved) -> str | None:
  """Why `saved` is not a data state tlm wrote, or None (keys added later may be absent)."""
  if not isinstance(saved, dict):
    return "not a JSON object"
  types = {"step": int, "batch_size": int, "data": dict, "world": str, "stream": dict}
  for key, kind in types.items():
    value = saved.get(key, kind())
    if not isinstance(value, kind) or isinstance(value, bool):
      return f"{key!r} is not a{'n' if kind is int else ''} {kind.__name__}"
  stream = saved.get("stream", {})
  for key, kind in (("store", str), ("sampler", dict)):
    if not isinstance(stream.get(key, kind()), kind):
      return f"'stream' {key!r} is not a {kind.__name__}"
  return None


def check_data_state(saved: dict, config: Config, path: str, stream: dict | None = None) -> None:
  """Refuses to resume the checkpoint at `path` (its `saved` data state) on another stream
  (`stream`: the batch source's record now, None to leave the store and sampler unchecked).

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
  # A key added to DataConfig after the checkpoint was written had its default then (or the
  # value `ABSENT_MEANS` gives it).
  defaults = configs.to_dict(dataclasses.replace(config, data=DataConfig()))["data"]
  defaults.update({k[5:]: v for k, v in ABSENT_MEANS.items() if k.startswith("data.")})
  # Where the synthetic world is cached does not change it (world_seed / world_scale do), nor
  # does allowing a store in corpus order (the store itself is checked below).
  diff += [
    f"data.{k}"
    for k, v in current["data"].items()
    if k not in _STREAM_NEUTRAL and saved_data.get(k, defaults[k]) != v
  ]
  if stream is not None:
    diff += _stream_diff(saved.get("stream"), stream, config.data.sampler)
  if diff:
    raise ConfigError(
      f"{path} was trained with other {', '.join(diff)}; resuming would change the data "
      "stream. Use the original settings or a new workdir"
    )


def _stream_diff(saved: dict | None, current: dict, sampler: str) -> list[str]:
  """What differs between the saved stream record and the current one, as phrases."""
  if saved is None:  # a checkpoint from before the record
    return ["block sampler (an earlier version's draws)"] if sampler == "block" else []
  out = []
  have, want = saved.get("store", ""), current.get("store", "")
  if have != want:
    shown = lambda sha: f"{sha[:12]}..." if sha else "none"  # noqa: E731
    out.append(f"example store (manifest SHA-256 {shown(have)}, now {shown(want)})")
  have, want = saved.get("sampler", {}), current.get("sampler", {})
  if have != want:
    keys = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
    out.append(f"sampler parameters ({', '.join(keys)})")
  return out
