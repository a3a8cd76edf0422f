"""The deterministic year-uniform mixture sampler (paper §2.2, §2.3 and §3.3).

The paper trains on CustomNews salient-span-masking examples and TempLAMA-train queries
mixed 1000:1, with documents sampled uniformly over the yearly slices 2010-2018 (§2.2, §2.3);
the Yearly experts see one year's slice only; the adaptation experiment of §3.3 samples the new
slice (2019) with probability alpha and the old slices (2010-2018) with probability 1 - alpha.
Every draw here is: choose the source at the configured ratio, choose the year (uniformly, or
the adaptation mixture), then an example uniformly within that source's year slice.

The sampler says which example each draw is, and answers for its (source, year) slices: their
years, sizes, whether they hold token ids, and their examples as stored (`read`, `read_run`).
Its readers (`tlm.input.packing.Batcher`, `tlm.input.block_sampling.BlockSampler`) ask through
these methods and never hold a slice. The time conditioning is not the sampler's: the batcher
puts the prefix before an example's input, in one function (`Batcher._input_ids`).

Determinism: draw k of row r at step s is a pure function of (seed, s, r, k). Its random
numbers come from a counter-based generator (`tlm.counter_hash`: SplitMix64's finaliser chained
over the seed key, step, row, k and a lane number, as in Steele et al., "Fast splittable
pseudorandom number generators", OOPSLA 2014), never from a stateful stream, so the order of
calls, the steps drawn before, and which process asks make no difference, and resuming at step
s needs only s.
The hash is vectorised over numpy uint64 arrays, so thousands of draws cost well under 1 ms.
"""

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from tlm.counter_hash import below, chain, unit
from tlm.errors import ConfigError, DataError
from tlm.store.store import MANIFEST, Table, vocab_fingerprint

# Source names used by the glue (tlm.input.datasets) and the configs.
NEWS_SSM = "news_ssm"
TEMPLAMA = "templama"

# Independent random numbers per draw: which source, new-vs-old year, which year, which example.
_LANE_SOURCE, _LANE_NEW, _LANE_YEAR, _LANE_EXAMPLE = 1, 2, 3, 4


def _counter(values, name: str) -> np.ndarray:
  """Checks that step/row/k values are non-negative integers; returns them as uint64."""
  a = np.asarray(values)
  if a.dtype.kind not in "iu":
    raise TypeError(f"{name} must be integers, got dtype {a.dtype}")
  if a.size and a.min() < 0:
    raise ValueError(f"{name} must be non-negative")
  return a.astype(np.uint64)


class Draw(NamedTuple):
  """One sampled example, as stored.

  Attributes:
    inputs: input text, without the time prefix (`tlm.data.conditioning.format_input` adds it).
    targets: target text.
    year: the example's year bucket.
    source: the source name (e.g. "news_ssm", "templama").
  """

  inputs: str
  targets: str
  year: int
  source: str


class ExampleList(Sequence):
  """Examples held in memory (a list of `TextExample` or (inputs, targets) pairs), behind the
  interface of a store's `Table` that the input pipeline reads: text only, local, no order.

  The sampler wraps every source slice that is not a store table in one, once, so that its
  methods (`MixtureSampler.read` and the others) call one interface and never probe a slice
  for what it is.
  """

  has_tokens = False  # a tokenized store table holds token ids; these are texts
  remote = False  # reads are memory accesses, never requests
  order = None  # not a store's table: no corpus order to warn about
  path = None  # no store directory to name in an error
  store_sha256 = None  # no store manifest to name in a checkpoint

  def __init__(self, examples: Sequence):
    self.examples = examples

  def __len__(self) -> int:
    return len(self.examples)

  def __getitem__(self, i):
    return self.examples[i]

  def texts(self, ids: np.ndarray) -> list[tuple[str, str]]:
    """(inputs, targets) of examples `ids`, as `Table.texts`."""
    return [tuple(self.examples[i][:2]) for i in np.asarray(ids).tolist()]


def as_table(examples: Sequence) -> "Table | ExampleList":
  """A source slice as the pipeline reads it: a store table as it is, anything else wrapped."""
  return examples if isinstance(examples, Table) else ExampleList(examples)


class MixtureSampler:
  """Year-uniform mixture of example sources, a pure function of (seed, step, row, k).

  Args:
    sources: source name -> year -> examples: a sequence of `TextExample`s or
      `(inputs, targets)` pairs, e.g. a `tlm.store.store.Table`, read by index only. Sources
      and years that the mixture never draws from may be absent.
    seed: the sampling seed; any Python int.
    years: the year slices drawn uniformly (Yearly experts: a single year).
    source_weights: source name -> relative weight (1000:1 news to TempLAMA in the paper).
      Sources with weight 0 are never drawn and need not be present.
    new_years: the adaptation slices (the paper's 2019), drawn with probability
      `new_year_prob`, uniformly among themselves; `years` get the rest, uniformly.
    new_year_prob: the paper's alpha, in [0, 1].

  Raises:
    ConfigError: for an empty year list, a negative or all-zero weight, overlapping year
      lists, alpha outside [0, 1] or without new years, or a drawn (source, year) slice
      with no examples.
  """

  def __init__(
    self,
    sources: Mapping[str, Mapping[int, Sequence]],
    *,
    seed: int,
    years: Sequence[int],
    source_weights: Mapping[str, float],
    new_years: Sequence[int] = (),
    new_year_prob: float = 0.0,
  ):
    self.years = tuple(int(y) for y in years)
    self.new_years = tuple(int(y) for y in new_years)
    self.new_year_prob = float(new_year_prob)
    if not 0.0 <= self.new_year_prob <= 1.0:
      raise ConfigError(f"new_year_prob must be in [0, 1], got {new_year_prob}")
    if self.new_year_prob > 0 and not self.new_years:
      raise ConfigError("new_year_prob > 0 needs at least one new year")
    if not self.years and self.new_year_prob < 1.0:
      raise ConfigError("the sampler needs at least one year")
    if len(set(self.years + self.new_years)) != len(self.years) + len(self.new_years):
      raise ConfigError(f"repeated year in years={self.years} / new_years={self.new_years}")
    bad = {k: w for k, w in source_weights.items() if not w >= 0}
    if bad:
      raise ConfigError(f"source weights must be >= 0, got {bad}")
    # Sorted so that the draws do not depend on the order a mapping was built in.
    self.source_names = tuple(sorted(k for k, w in source_weights.items() if w > 0))
    if not self.source_names:
      raise ConfigError(f"all source weights are zero: {dict(source_weights)}")
    weights = np.array([float(source_weights[s]) for s in self.source_names])
    self._source_cdf = np.cumsum(weights) / weights.sum()
    self.source_probs = dict(zip(self.source_names, (weights / weights.sum()).tolist()))

    drawn_years = (self.years if self.new_year_prob < 1.0 else ()) + (
      self.new_years if self.new_year_prob > 0.0 else ()
    )
    self._all_years = self.years + self.new_years
    # The (source, year) slices in the order of the flat table, held as given: a list, or a
    # table of the example store read by index (nothing is copied per example).
    self._slices: list[Table | ExampleList] = []
    offsets, counts, total = [], [], 0
    for name in self.source_names:
      if name not in sources:
        raise ConfigError(f"source {name!r} has weight > 0 but no data was given")
      by_year = sources[name]
      row_off, row_cnt = [], []
      for year in self._all_years:
        examples = as_table(by_year.get(year, ()))
        if year in drawn_years and not len(examples):
          # A table of the example store knows its store: the directory to look at.
          where = examples.path
          raise ConfigError(
            f"source {name!r} has no examples for year {year}"
            + (f" (example store {where})" if where else "")
          )
        row_off.append(total)
        row_cnt.append(len(examples))
        total += len(examples)
        self._slices.append(examples)
      offsets.append(row_off)
      counts.append(row_cnt)
    self._size = total
    self._offsets = np.array(offsets, dtype=np.int64)  # [sources, years]
    self._counts = np.array(counts, dtype=np.int64)
    self._slice_starts = self._offsets.ravel()
    self._key = np.random.SeedSequence(int(seed) % 2**128).generate_state(1, np.uint64)[0]

  def __len__(self) -> int:
    """Number of examples in the flat table that `flat_ids` indexes."""
    return self._size

  def _hash(self, step, rows, ks) -> np.ndarray:
    """Per-draw 64-bit hash of (seed, step, row, k), broadcast over rows and ks."""
    return chain(self._key, _counter(step, "step"), _counter(rows, "rows"), _counter(ks, "ks"))

  def _draw_slices(self, step: int, rows, ks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per draw (step, row, k): its source, its year (indices) and its example's uniform."""
    h = self._hash(step, rows, ks)
    u_source, u_new, u_year, u_example = (
      unit(h, lane) for lane in (_LANE_SOURCE, _LANE_NEW, _LANE_YEAR, _LANE_EXAMPLE)
    )
    source = np.searchsorted(self._source_cdf, u_source, side="right")
    source = np.minimum(source, len(self.source_names) - 1)
    n_old, n_new = len(self.years), len(self.new_years)
    if self.new_year_prob > 0.0:
      is_new = u_new < self.new_year_prob
      year = np.where(is_new, n_old + below(u_year, n_new), below(u_year, n_old))
    else:
      year = below(u_year, n_old)
    return source, year, u_example

  def flat_ids(self, step: int, rows, ks) -> np.ndarray:
    """Indices into the flat example table of the draws (step, row, k).

    Args:
      step: the training step.
      rows: global row indices (any shape; broadcast against `ks`).
      ks: positions in each row's example stream.

    Returns:
      int64 array of the broadcast shape; `example(i)` gives the draw's text.
    """
    source, year, u_example = self._draw_slices(step, rows, ks)
    index = below(u_example, self._counts[source, year])
    return self._offsets[source, year] + index

  def slots(self, step: int, rows, ks) -> np.ndarray:
    """The slice of each draw (step, row, k): its source and year as
    `flat_ids` draws them (`tlm.input.block_sampling` then chooses the example)."""
    source, year, _ = self._draw_slices(step, rows, ks)
    return source * len(self._all_years) + year

  def slot_probs(self) -> np.ndarray:
    """The probability that a draw falls in each slice (in slice order)."""
    n_old, n_new = len(self.years), len(self.new_years)
    year = np.zeros(n_old + n_new)
    if n_old:
      year[:n_old] = (1.0 - self.new_year_prob) / n_old
    if n_new:
      year[n_old:] = self.new_year_prob / n_new
    source = np.array([self.source_probs[s] for s in self.source_names])
    return (source[:, None] * year[None, :]).ravel()

  @property
  def key(self) -> int:
    """The 64-bit key the seed was expanded to (seeds other generators of the sampler)."""
    return int(self._key)

  def locate(self, flat_ids) -> tuple[np.ndarray, np.ndarray]:
    """The slice and the index within it of flat ids, vectorised (the inverse of `flat_of`)."""
    flat_ids = np.asarray(flat_ids, dtype=np.int64)
    # The last slice starting at or before the id: empty slices share their start with the
    # next one, and side="right" skips them.
    slot = np.searchsorted(self._slice_starts, flat_ids, side="right") - 1
    return slot, flat_ids - self._slice_starts[slot]

  def flat_of(self, slots, index) -> np.ndarray:
    """Flat ids of examples `index` of slices `slots` (the inverse of `locate`)."""
    return self._slice_starts[np.asarray(slots, np.int64)] + np.asarray(index, np.int64)

  def slice_year(self, slot: int) -> int:
    """The year of slice `slot`."""
    return self._all_years[int(slot) % len(self._all_years)]

  def example(self, flat_id: int) -> Draw:
    """The draw with flat index `flat_id`, as stored (no time prefix)."""
    slot, index = (int(x) for x in self.locate(int(flat_id)))
    source, year = divmod(slot, len(self._all_years))
    inputs, targets = self._slices[slot][index][:2]
    return Draw(inputs, targets, self._all_years[year], self.source_names[source])

  def draw(self, step: int, row: int, k: int) -> Draw:
    """Draw k of row `row` at step `step`."""
    return self.example(self.flat_ids(step, row, k))

  def source_and_year(self, flat_ids) -> tuple[np.ndarray, np.ndarray]:
    """Source indices (into `source_names`) and years of flat ids, vectorised."""
    slot = np.searchsorted(self._slice_starts, np.asarray(flat_ids), side="right") - 1
    source, year = np.divmod(slot, len(self._all_years))
    return source, np.asarray(self._all_years, dtype=np.int64)[year]

  # ---- the slices, as their readers ask for them ---------------------------------------------

  @property
  def slice_count(self) -> int:
    """Number of (source, year) slices: the slice numbers are 0 .. slice_count - 1."""
    return len(self._slices)

  def slice_sizes(self) -> np.ndarray:
    """Examples per slice, int64, in slice order."""
    return np.array([len(s) for s in self._slices], np.int64)

  def is_tokenized(self, slot: int) -> bool:
    """Whether slice `slot` holds token ids (a tokenized table of the example store)."""
    return bool(self._slices[slot].has_tokens)

  def is_remote(self, slot: int) -> bool:
    """Whether reading slice `slot` makes requests (an object store): read them concurrently."""
    return bool(self._slices[slot].remote)

  def reads_remotely(self) -> bool:
    """Whether any slice is read from an object store."""
    return any(s.remote for s in self._slices)

  def read(self, slot: int, index: np.ndarray, vocab) -> tuple[list, list]:
    """Examples `index` of slice `slot` as stored: (input ids, target ids) of a tokenized
    slice, each id checked to be below `vocab.vocab_size`, else (input texts, target texts).

    Raises:
      DataError: a stored id outside the vocabulary (a damaged file), naming the file.
    """
    table = self._slices[slot]
    if table.has_tokens:
      inputs, targets = table.tokens(index)
      _check_ids(inputs + targets, vocab.vocab_size, table)
      return inputs, targets
    pairs = table.texts(index)
    return [i for i, _ in pairs], [t for _, t in pairs]

  def read_run(self, slot: int, lo: int, hi: int, vocab):
    """Examples lo..hi-1 of tokenized slice `slot`, read as one run (`Table.token_block`: two
    requests): their ids end to end and, per example, (start, end of inputs, end), the ids
    checked against `vocab.vocab_size`."""
    table = self._slices[slot]
    data, offsets = table.token_block(lo, hi)
    _check_ids([data], vocab.vocab_size, table)
    return data, offsets

  def check_vocabulary(self, vocab) -> None:
    """Every tokenized slice must hold ids of `vocab` (the same SentencePiece model's bytes).

    Raises:
      DataError: a table tokenized with another vocabulary, naming its store's manifest.
    """
    tokenized = [t for t in self._slices if t.has_tokens]
    have = vocab_fingerprint(vocab.serialized_model) if tokenized else ""
    for table in tokenized:
      if have != table.vocab_sha256:
        raise DataError(
          f"tokenized with the vocabulary of SHA-256 {table.vocab_sha256[:16]}..., but the "
          f"model's vocabulary (data.vocab) is {have[:16]}...; rebuild the store with --vocab "
          "set to the model's spiece.model, or build it without --vocab (text)",
          f"{table.path}/{MANIFEST}",
        )

  def mean_lengths(self) -> list[tuple[float, float, int]]:
    """(mean input ids, mean target ids, examples sampled) of each non-empty tokenized slice
    (`Table.mean_lengths`: its first examples), in slice order."""
    return [t.mean_lengths() for t in self._slices if t.has_tokens and len(t)]

  def corpus_order_stores(self) -> list[str]:
    """The example stores in corpus order among the slices, sorted: a block of one would be a
    run of consecutive articles (`--mode=shuffle_store` re-orders one)."""
    return sorted({str(t.path) for t in self._slices if t.order == "corpus"})

  def store_digests(self) -> list[str]:
    """The SHA-256 of the manifest of every example store read, sorted (none for lists)."""
    return sorted({t.store_sha256 for t in self._slices if t.store_sha256})


def _check_ids(seqs: list[np.ndarray], vocab_size: int, table) -> None:
  """Stored ids must be ids of the vocabulary, 0 <= id < size (a hostile file could hold
  anything; a negative id would index the embedding from its end)."""
  low = min((int(s.min()) for s in seqs if s.size), default=0)
  if low < 0:
    raise DataError(f"token id {low} is negative (a damaged file)", table.token_file)
  top = max((int(s.max()) for s in seqs if s.size), default=-1)
  if top >= vocab_size:
    raise DataError(
      f"token id {top} is not below the vocabulary's size {vocab_size} (a damaged file)",
      table.token_file,
    )
