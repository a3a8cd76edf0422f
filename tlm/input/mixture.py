"""The paper's training mixture, assembled: a config's `data` section -> packed batches.

The paper's training stream (§2.2, §2.3): CustomNews salient-span-masking examples and
TempLAMA-train queries mixed 1000:1, years sampled uniformly (one year for a Yearly expert;
the adaptation mixture of §3.3 with `new_years` / `new_year_prob`), time-conditioned
(`tlm.data.conditioning`), packed T5X-style into `[rows, length]` batches. The draws are
`tlm.input.sampling.MixtureSampler`'s, the packing `tlm.input.packing.Batcher`'s; this
module chooses the directories (the synthetic world, built on first use, or the user's
SSM / TempLAMA directories: `tlm.input.locations`), the vocabulary, and which rows of each
global batch this process materialises; the training batches of the next steps are built on a
background thread (`tlm.input.prefetch`), the same batches as without it.
"""

import os

import numpy as np

from tlm import configs, storage
from tlm.configs import Config, DataConfig
from tlm.console import warn
from tlm.data.conditioning import prefix_ids
from tlm.data.vocab import Vocabulary
from tlm.errors import ConfigError, UserError
from tlm.input import datasets
from tlm.input.block_sampling import draws_per_row
from tlm.input.locations import Sources, resolve_sources, synthetic_data
from tlm.input.packing import Batcher, BatchStats
from tlm.input.prefetch import Prefetcher
from tlm.input.sampling import NEWS_SSM, TEMPLAMA, MixtureSampler

# The corpus-order warnings printed in this process (a run builds its batcher more than once).
_WARNED: set[str] = set()


def train_years(data: DataConfig, variant: str = "") -> tuple[int, ...]:
  """The year slices drawn (`configs.trained_years`); a Yearly expert must have `data.year`."""
  if variant == "yearly" and not data.year:
    raise ConfigError("a Yearly expert needs data.year (tlm.train.loop.run sets it per year)")
  return configs.trained_years(data)


def make_batcher(
  data: DataConfig,
  sources: Sources,
  vocab: Vocabulary,
  *,
  rows: int,
  split: str = "train",
  variant: str = "",
) -> Batcher:
  """A packed batcher over the config's mixture for one split.

  Args:
    data: the data section.
    sources: from `resolve_sources`.
    vocab: the vocabulary.
    rows: rows of each global batch.
    split: "train", "val" or "test".
    variant: the config's variant (for the Yearly check).

  Raises:
    ConfigError / DataError: for missing or empty data.
  """
  years = train_years(data, variant)
  new_years = tuple(y for y in data.new_years if y not in years)
  # Checked here, before any data is loaded, so that the error names the keys (the sampler,
  # which knows no config, can only say "no year").
  if not years and data.new_year_prob < 1.0:
    raise ConfigError(
      "data.train_years is empty (and data.year is 0): the mixture has no year to draw from"
      + (f" with probability {1 - data.new_year_prob:g}" if data.new_year_prob else "")
    )
  if data.new_year_prob > 0 and not new_years:
    raise ConfigError(
      f"data.new_year_prob={data.new_year_prob} draws from data.new_years, which holds no "
      f"year outside the trained years {list(years)} (data.new_years={list(data.new_years)})"
    )
  loaded = datasets.load_sources(
    sources.ssm_dir or None,
    sources.templama_dir or None,
    years=years + new_years,
    split=split,
  )
  weights = {TEMPLAMA: 1.0}
  if sources.ssm_dir:
    weights[NEWS_SSM] = float(data.news_to_templama)
  sampler = MixtureSampler(
    loaded,
    seed=data.seed,
    years=years,
    source_weights=weights,
    new_years=new_years,
    new_year_prob=data.new_year_prob,
  )
  block_draws = 0
  if data.sampler == "block":
    _check_order(sampler.corpus_order_stores(), data.allow_corpus_order)
    prefix = prefix_ids(vocab, years[0] if years else 0, data.conditioning)
    block_draws = data.block_draws or draws_per_row(
      sampler.mean_lengths(), data.input_length, data.target_length, len(prefix)
    )
  return Batcher(
    sampler,
    vocab,
    conditioning=data.conditioning,
    rows=rows,
    input_length=data.input_length,
    target_length=data.target_length,
    packed=True,
    block_draws=block_draws,
  )


def _check_order(stores: list[str], allowed: bool) -> None:
  """The block sampler on `stores` in corpus order: refused in one line naming the fix, or
  (data.allow_corpus_order) one warning per process."""
  if not stores:
    return
  where = ", ".join(stores)
  if not allowed:
    raise ConfigError(
      f"{where}: example store in corpus order, whose runs the block sampler (data.sampler="
      "block) would read as a few hundred consecutive articles of a year; re-order it once "
      f"with python run.py --mode=shuffle_store --data={stores[0]} --output_dir=NEW_DIR "
      "--shuffle_seed=0 and train on NEW_DIR, or set data.allow_corpus_order=true"
    )
  warning = (
    f"{where}: example store in corpus order (data.allow_corpus_order=true), so the block "
    "sampler reads each step's examples of a year from a few hundred consecutive articles; "
    "--mode=shuffle_store re-orders it"
  )
  if warning not in _WARNED:  # once per process, however many batchers
    _WARNED.add(warning)
    warn(warning)


def local_batch(
  batcher: Batcher, step: int, start: int, stop: int
) -> tuple[dict[str, np.ndarray], BatchStats]:
  """Rows [start, stop) of the global batch at `step`, materialising nothing else.

  Raises:
    ConfigError: if [start, stop) is not one of the equal blocks the batcher splits into.
  """
  per = stop - start
  if per <= 0 or batcher.rows % per or start % per:
    raise ConfigError(f"rows [{start}, {stop}) are not an equal block of {batcher.rows} rows")
  return batcher.batch_with_stats(step, start // per, batcher.rows // per)


# Batches built ahead on a background thread (`tlm.input.prefetch`): two hide a batch's cost
# behind the step before it; more only hold memory. From an object store, whose requests are
# mostly waiting, several steps are built at once: 8 steps in flight hide 8x a batch's latency.
PREFETCH_DEPTH = 2
REMOTE_PREFETCH_DEPTH = REMOTE_PREFETCH_WORKERS = 8


class _Prefetched:
  """`train_batch` served by a `Prefetcher` over `local_batch` (this process's rows)."""

  _train: Batcher
  _end: int | None = None
  _prefetch: Prefetcher | None = None
  _rows: tuple[int, int] | None = None

  def train_batch(self, step: int, start: int, stop: int):
    """Rows [start, stop) of the training batch at `step`, and their BatchStats."""
    if self._prefetch is None or self._rows != (start, stop):
      self.close()
      batcher, self._rows = self._train, (start, stop)
      remote = batcher.sampler.reads_remotely()
      self._prefetch = Prefetcher(
        lambda s: local_batch(batcher, s, start, stop),
        depth=REMOTE_PREFETCH_DEPTH if remote else PREFETCH_DEPTH,
        end=self._end,
        workers=REMOTE_PREFETCH_WORKERS if remote else 1,
      )
    return self._prefetch.get(step)

  def stream_record(self) -> dict:
    """What a checkpoint records of the stream beyond the config (`tlm.train.data_state`): the
    example store read (its manifest's SHA-256; "" for none) and the sampler's parameters."""
    stores = self._train.sampler.store_digests()
    return {"store": ",".join(stores), "sampler": self._train.record()}

  def close(self) -> None:
    """Stops the prefetching thread."""
    if self._prefetch is not None:
      self._prefetch.close()
      self._prefetch = None


def _checkpoint_vocab(path: str) -> str:
  """The spiece.model beside an init checkpoint (HF, tlm model or workdir), or ""."""
  if path and storage.isdir(path) and storage.isfile(storage.join(path, "spiece.model")):
    return storage.join(path, "spiece.model")
  return ""


# Pre-training variants -> (the world's corpus, the objective): the "public T5" analogue
# (span corruption on the generic corpus) and the T5-CBQA analogue (salient span masking on
# the encyclopedia snapshot). See tlm/synthetic/pretrain.py and tlm/data/pretraining.py.
PRETRAINING = {"t5": ("generic", "span_corruption"), "cbqa": ("encyclopedia", "ssm")}
SPAN_CORRUPTION_COPIES = 16  # corruptions per document: the stream rarely repeats one


def training_data(config: Config):
  """The batch source of a config: `PretrainingData` for the pre-training variants, else
  `TrainingData`."""
  if config.variant in PRETRAINING:
    return PretrainingData(config)
  return TrainingData(config)


class PretrainingData(_Prefetched):
  """The batches of a pre-training variant ("t5", "cbqa") on the synthetic world's corpora.

  Same interface as `TrainingData`; the examples are drawn uniformly (one "year" slice, no
  time conditioning) and packed like the news. No held-out set: the run logs no eval loss.

  Raises:
    ConfigError: for a config that does not use the synthetic world.
  """

  def __init__(self, config: Config):
    from tlm.data import pretraining

    data = config.data
    if not data.synthetic:
      raise ConfigError(
        f"config {config.name!r} (variant {config.variant!r}) pre-trains on the synthetic "
        "world's corpora: set data.synthetic=true"
      )
    paths = synthetic_data(data)
    self.vocab = Vocabulary(data.vocab or paths.vocab_path)
    corpus, objective = PRETRAINING[config.variant]
    pairs = pretraining.examples(
      data.pretrain_corpus or os.path.join(paths.world_dir, "pretrain", f"{corpus}.jsonl"),
      objective,
      seed=data.seed,
      copies=SPAN_CORRUPTION_COPIES,
      gazetteer=os.path.join(paths.world_dir, "entities.tsv"),
    )
    sampler = MixtureSampler(
      {"pretrain": {0: pairs}}, seed=data.seed, years=(0,), source_weights={"pretrain": 1.0}
    )
    self._train = Batcher(
      sampler,
      self.vocab,
      conditioning="none",
      rows=config.train.batch_size,
      input_length=data.input_length,
      target_length=data.target_length,
      packed=True,
    )
    self._end = config.train.steps
    self.eval_note = ""

  def eval_batches(self, start: int, stop: int) -> list[dict[str, np.ndarray]]:
    return []


class TrainingData(_Prefetched):
  """The batches a training run reads: the train stream and a fixed held-out set.

  Args:
    config: the experiment config.

  Attributes:
    vocab: the vocabulary (written to WORKDIR/spiece.model).
    eval_note: why there is no held-out loss, or "".
  """

  def __init__(self, config: Config):
    if config.data.pretrain_corpus:
      raise ConfigError(
        f"data.pretrain_corpus is for the pre-training variants {sorted(PRETRAINING)}; config "
        f"{config.name!r} has variant {config.variant!r}"
      )
    self.sources = resolve_sources(config.data)
    vocab_path = self.sources.vocab_path or _checkpoint_vocab(config.model.init_checkpoint)
    if not vocab_path:
      raise ConfigError(
        "no vocabulary: set data.vocab=PATH/spiece.model (the init checkpoint has none beside it)"
      )
    self.vocab = Vocabulary(vocab_path)
    rows = config.train.batch_size
    self._train = make_batcher(
      config.data, self.sources, self.vocab, rows=rows, variant=config.variant
    )
    self._end = config.train.steps
    self._eval_count = config.train.eval_batches if config.train.eval_every > 0 else 0
    self._val = None
    self.eval_note = ""
    if self._eval_count:
      try:
        self._val = make_batcher(
          config.data, self.sources, self.vocab, rows=rows, split="val", variant=config.variant
        )
      except UserError as e:
        self.eval_note = f"no held-out loss: the validation split cannot be sampled ({e})"

  def eval_batches(self, start: int, stop: int) -> list[dict[str, np.ndarray]]:
    """Rows [start, stop) of each fixed validation batch (empty without a validation set)."""
    if self._val is None:
      return []
    return [local_batch(self._val, i, start, stop)[0] for i in range(self._eval_count)]
