"""Where the data lives: the synthetic world's cache directory, or the user's SSM and TempLAMA
directories, and the vocabulary (`resolve_sources`).

One home for the locations that training (`tlm.input.mixture`), the evaluations
(`tlm.eval.experiments`) and the reproduction read. Pure Python: builds the synthetic world on
first use (`tlm.input.datasets.ensure_synthetic_data`), never imports jax.
"""

import dataclasses
import os

from tlm import storage
from tlm.configs import DataConfig
from tlm.errors import ConfigError
from tlm.input import datasets

_DEFAULT_CACHE = os.path.join("~", ".cache", "tlm")


@dataclasses.dataclass(frozen=True)
class Sources:
  """Resolved data locations.

  Attributes:
    ssm_dir: SSM examples, or "" when the news source is not used.
    templama_dir: TempLAMA directory, or "" when not used.
    vocab_path: the SentencePiece model, or "" when none is known.
  """

  ssm_dir: str
  templama_dir: str
  vocab_path: str


def synthetic_cache_dir(data: DataConfig) -> str:
  """Where the synthetic world of (world_seed, world_scale[, forward-looking sentences]) is
  built."""
  root = os.path.expanduser(data.cache_dir or _DEFAULT_CACHE)
  # The generator's version is part of the name, so that a world of another version is never
  # reused (v2: 2% template-worded fact sentences, 20 subjects per relation, the pre-training
  # corpora; v3: every year of 2000-2035 one whole vocabulary piece; v4: `data.world_version`).
  name = f"world-v{data.world_version}-s{data.world_seed}-x{data.world_scale:g}"
  forward = forward_settings(data)
  if forward is not None:  # the default world's name is unchanged
    name += f"-fwd-{forward[0]}-{forward[1]:g}"
  return os.path.join(root, name)


def forward_settings(data: DataConfig) -> tuple[str, float] | None:
  """(mode, share) of the world's forward-looking sentences, or None when they are off."""
  if data.forward_looking == "off":
    return None
  return data.forward_looking, float(data.forward_share)


def synthetic_data(data: DataConfig) -> datasets.SyntheticData:
  """The synthetic world of a data config, its TempLAMA and SSM data (built on first use)."""
  return datasets.ensure_synthetic_data(
    synthetic_cache_dir(data),
    seed=data.world_seed,
    scale=data.world_scale,
    forward=forward_settings(data),
    version=data.world_version,
  )


def resolve_sources(data: DataConfig) -> Sources:
  """The SSM / TempLAMA directories and vocabulary of a data config.

  Builds the synthetic world (once, under `synthetic_cache_dir`) when `data.synthetic`.

  Raises:
    ConfigError: naming the `data.*` key of a missing directory.
  """
  use_news = data.news_to_templama > 0
  if data.synthetic:
    paths = synthetic_data(data)
    ssm, templama, vocab = paths.news_ssm_dir, paths.templama_dir, paths.vocab_path
  else:
    ssm, templama, vocab = data.ssm_dir, data.templama_dir, ""
    for key, path, needed in (("ssm_dir", ssm, use_news), ("templama_dir", templama, True)):
      if needed and not storage.isdir(path):
        raise ConfigError(
          f"data.{key}={path!r} is not a directory; build it with --mode=build_ssm / "
          "--mode=build_templama, or set data.synthetic=true for the embedded world"
        )
  return Sources(ssm if use_news else "", templama, data.vocab or vocab)
