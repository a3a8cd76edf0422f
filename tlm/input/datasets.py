"""Glue from data directories to sampler sources, building the synthetic world on first use.

The paper trains on CustomNews salient-span-masking examples and TempLAMA-train queries (§2.1,
§2.3). Without those data at hand, `ensure_synthetic_data` builds the embedded stand-in once
per (directory, seed, scale): the world (`tlm.synthetic.build_world`), TempLAMA built
from the world's facts exactly as from Wikidata (`tlm.data.templama.build_templama`), and SSM
examples from the world's news (`tlm.store.build_ssm`, into the example store).
`load_sources` then opens either kind of directory as the per-source, per-year example
sequences `MixtureSampler` takes.

Concurrent first use (several processes of one run, or two runs sharing a cache) is safe:
each part is built under a temporary name and renamed into place once complete, while an
advisory lock keeps the other processes waiting instead of building it again.
"""

import contextlib
import dataclasses
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from tlm import safe_read, storage
from tlm.data.formatting import SPLITS, TextExample, templama_text
from tlm.errors import ConfigError, DataError
from tlm.files import write_json
from tlm.input.sampling import NEWS_SSM, TEMPLAMA
from tlm.store import store

_BUILD_INFO = "tlm_build.json"


@dataclasses.dataclass(frozen=True)
class SyntheticData:
  """Where `ensure_synthetic_data` put things.

  Attributes:
    world_dir: the world (news.jsonl, facts.tsv, entities.tsv, ...).
    news_ssm_dir: SSM examples, an example store (`tlm.store.store`) and stats.json.
    templama_dir: TempLAMA train.json, val.json, test.json.
    vocab_path: the world's SentencePiece model.
    future_relations_dir: the world's future-relations query sets.
  """

  world_dir: str
  news_ssm_dir: str
  templama_dir: str
  vocab_path: str
  future_relations_dir: str


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
  """An exclusive advisory lock on `path` (created if needed), held for the block."""
  with open(path, "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def _build_once(dest: str, build: Callable[[str], None]) -> None:
  """Runs `build(out)` into a fresh path and renames it to `dest`, unless `dest` exists.

  If another process renamed its own build into place first, ours is discarded; either way
  `dest` is complete whenever it exists.
  """
  if os.path.isdir(dest):
    return
  parent = os.path.dirname(dest)
  tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(dest)}.", suffix=".tmp", dir=parent)
  try:
    out = os.path.join(tmp, "out")
    build(out)
    try:
      os.rename(out, dest)
    except OSError:
      if not os.path.isdir(dest):
        raise
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def ensure_synthetic_data(
  directory: str,
  seed: int = 0,
  scale: float = 1.0,
  forward: tuple[str, float] | None = None,
  version: int | None = None,
) -> SyntheticData:
  """Builds the synthetic world, its TempLAMA and its SSM data under `directory` if missing.

  Args:
    directory: the cache directory (e.g. `~/.cache/tlm/world-s0-x1.0`); created if needed.
    seed: the world's seed (also the TempLAMA split seed).
    scale: the world's size.
    forward: (mode, share) of forward-looking news sentences (`tlm.synthetic.forward`),
      or None for the default world.
    version: the world's version (`tlm.synthetic.settings.VERSIONS`); None, the default one.

  Returns:
    The paths of the parts.

  Raises:
    ConfigError: if `directory` already holds a world built with another seed or scale.
  """
  directory = os.path.abspath(os.path.expanduser(directory))
  world = os.path.join(directory, "world")
  paths = SyntheticData(
    world_dir=world,
    news_ssm_dir=os.path.join(directory, "ssm"),
    templama_dir=os.path.join(directory, "templama"),
    vocab_path=os.path.join(world, "spiece.model"),
    future_relations_dir=os.path.join(world, "future_relations"),
  )
  wanted = {"seed": int(seed), "scale": float(scale)}
  if forward is not None:  # absent for the default world: its caches stay valid
    wanted["forward"] = {"mode": str(forward[0]), "share": float(forward[1])}
  from tlm.synthetic.settings import DEFAULT_VERSION, UNRECORDED_VERSION

  version = DEFAULT_VERSION if version is None else version
  if version != UNRECORDED_VERSION:  # absent for world v3: its caches stay valid
    wanted["version"] = int(version)
  parts = (paths.world_dir, paths.templama_dir, paths.news_ssm_dir)
  if not all(os.path.isdir(p) for p in parts):
    os.makedirs(directory, exist_ok=True)
    with _locked(os.path.join(directory, ".lock")):
      _build_once(world, lambda out: _build_world(out, wanted))
      _check_world(world, wanted)
      _build_once(paths.templama_dir, lambda out: _build_templama(world, out, seed))
      _build_once(paths.news_ssm_dir, lambda out: _build_ssm(world, out, seed))
  _check_world(world, wanted)
  return paths


def _build_world(out: str, params: dict) -> None:
  from tlm import synthetic

  forward = params.get("forward")
  if forward is not None:
    forward = synthetic.ForwardSettings(forward["mode"], forward["share"])
  version = params.get("version", synthetic.settings.UNRECORDED_VERSION)
  synthetic.build_world(
    out, seed=params["seed"], scale=params["scale"], forward=forward, version=version
  )
  write_json(os.path.join(out, _BUILD_INFO), params)


def _check_world(world: str, wanted: dict) -> None:
  info_path = os.path.join(world, _BUILD_INFO)
  try:  # read back as hostile: a regular file of a few bytes, bounded JSON
    have = safe_read.read_json(info_path, 1 << 16, error=ConfigError, what=_BUILD_INFO)
  except ConfigError:
    raise ConfigError(
      f"{world} was not built by ensure_synthetic_data (no readable {_BUILD_INFO})"
    ) from None
  if have != wanted:
    raise ConfigError(
      f"{world} holds a synthetic world with {have}, not {wanted}; use another cache directory"
    )


def _build_templama(world: str, out: str, seed: int) -> None:
  from tlm.data import templama

  templama.build_templama(
    os.path.join(world, "facts.tsv"), os.path.join(world, "entities.tsv"), out, seed=seed
  )


def _build_ssm(world: str, out: str, seed: int) -> None:
  from tlm.store.build_ssm import build_ssm

  # The world's entity names as gazetteer: every generated name is a salient span, as the
  # paper's named-entity tagger would find them in real news.
  build_ssm(
    os.path.join(world, "news.jsonl"),
    out,
    gazetteer=os.path.join(world, "entities.tsv"),
    seed=seed,
  )


def _ssm_store(ssm_dir: str) -> store.Store:
  """The example store of an SSM directory; a JSON-lines one is converted first, once (the
  converter, a builder, is imported only then: training reads a store)."""
  if store.is_store(ssm_dir):
    return store.Store(ssm_dir)
  from tlm.store.store_convert import open_ssm_store

  return open_ssm_store(ssm_dir)


def load_sources(
  ssm_dir: str | None = None,
  templama_dir: str | None = None,
  *,
  years: Sequence[int],
  split: str,
) -> dict[str, dict[int, list[TextExample]]]:
  """Reads SSM and TempLAMA directories into the sources `MixtureSampler` takes.

  Args:
    ssm_dir: SSM examples: an example store (`tlm.store.store`), or a JSON-lines directory
      (`<split>/<year>.jsonl`, converted to a store once, `tlm.store.store_convert`); None or
      "" leaves the news source out.
    templama_dir: TempLAMA (`train.json`, `val.json`, `test.json`); None or "" leaves it out.
    years: the year slices to load.
    split: "train", "val" or "test".

  Returns:
    {"news_ssm": {year: examples}, "templama": {year: examples}} for the sources given;
    every requested year has a (possibly empty) sequence of `TextExample`s: the news a
    `tlm.store.store.Table` read by index (nothing per example is loaded), TempLAMA a list.

  Raises:
    ConfigError: for an unknown split or no directory at all.
    DataError: for a missing or malformed file, naming the file and line.
  """
  if split not in SPLITS:
    raise ConfigError(f"unknown split {split!r}; expected one of {SPLITS}")
  if not ssm_dir and not templama_dir:
    raise ConfigError("load_sources needs an SSM directory, a TempLAMA directory or both")
  years = [int(y) for y in years]
  sources: dict[str, dict[int, list[TextExample]]] = {}
  if ssm_dir:
    news = _ssm_store(ssm_dir)
    if storage.is_remote(news.path):  # a table's opening is a few requests: all years at once
      with ThreadPoolExecutor(len(years) or 1) as pool:
        tables = list(pool.map(lambda y: news.table(split, y), years))
      sources[NEWS_SSM] = dict(zip(years, tables))
    else:
      sources[NEWS_SSM] = {y: news.table(split, y) for y in years}
  if templama_dir:
    from tlm.data.templama import load_templama

    path = os.path.join(templama_dir, f"{split}.json")
    by_year: dict[int, list[TextExample]] = {y: [] for y in years}
    for ex in load_templama(path):
      if ex.year in by_year:
        try:
          by_year[ex.year].append(templama_text(ex))
        except DataError as e:
          raise DataError(str(e), path) from None
    sources[TEMPLAMA] = by_year
  return sources
