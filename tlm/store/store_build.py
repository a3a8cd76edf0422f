"""`build_ssm` at scale: many input shards, N local processes, the output in the example store.

Mirrors the two passes of `tlm.data.ssm` (validate and count, then write), cut into units of
work that run anywhere: here in a `multiprocessing` pool, and the same functions as the stages
of an Apache Beam pipeline in `tlm.store.ssm_beam`.

1. `expand_inputs`: the news shards, a list and/or globs (sorted), plain or `.gz`. Their
   concatenation, in that order, is the corpus: its articles are numbered in that order.
2. `plan_chunks`: plain files are cut into byte ranges at line starts (a line belongs to the
   chunk its first byte is in), a `.gz` file is one chunk.
3. `scan_chunk` (parallel): validates every line and counts the articles per year.
4. `make_plan`: the held-out articles, as `tlm.data.ssm` always chose them: per year, a
   permutation seeded with (seed, year) of that year's articles in corpus order; the first k
   are val, the next k test. It needs only the counts: an article's rank within its year is
   its chunk's offset plus its rank in the chunk.
5. `process_chunk` (parallel): sentences, salient spans, examples, tokens (with a
   vocabulary), appended to the chunk's parts (`tlm.store.store_write`), in corpus order.
   With a shuffle seed (`--shuffle_seed`) a table's merge is a bucketed sort by a hash of each
   example's position in the corpus-order table (`tlm.store.store_shuffle`): the order
   `--mode=shuffle_store` gives a store built without one.
6. `merge_table` (parallel over tables), then the manifest and stats.json; the parts are
   deleted only after that, so that every step can be run again (an engine retries a unit of
   work that failed, and may run one twice).

The output depends only on the corpus, the seed and the options: byte-identical for any
number of workers, for any sharding of the same articles, and for the Beam pipeline. Nothing
is written before every line has been validated (a bad line is a one-line error naming its
file and line), and the output directory appears whole or not at all.
"""

import collections
import contextlib
import dataclasses
import gzip
import json
import multiprocessing
import os
import time
import zlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from tlm import storage
from tlm.data.formatting import SENTINEL, SPLITS
from tlm.data.salient_spans import Gazetteer, find_spans, split_sentences
from tlm.data.ssm import (
  MAX_CONTEXT_WORDS,
  BuildSettings,
  Stats,
  heldout_count,
  mask_examples,
  parse_news_date,
)
from tlm.errors import DataError, UserError
from tlm.files import atomic_output_dir, check_replaceable
from tlm.line_files import check_utf8_line, parse_jsonl_line
from tlm.store import store, store_files, store_shuffle, store_write

# Plain input is cut into chunks of about this many bytes (more chunks than workers balance
# the load; fewer, larger ones keep the number of part files down).
MIN_CHUNK_BYTES = 1 << 20
MAX_CHUNK_BYTES = 64 << 20
CHUNKS_PER_WORKER = 8
HELDOUT_SPLITS = ("val", "test")  # keep their text in a tokenized store (evaluation reads it)
OUTPUT_NAMES = set(SPLITS) | {"stats.json", store.MANIFEST, store.VOCAB_FILE}
PARTS_DIR = ".parts"
KEYED_DIR = "keyed"  # under PARTS_DIR: a shuffled build's keyed parts (`tlm.store.store_shuffle`)


@dataclasses.dataclass(frozen=True)
class Chunk:
  """A unit of input: the lines of `path` that start in bytes [start, end) (end None: to the
  end of the file); `index` is its place in corpus order."""

  index: int
  path: str
  start: int = 0
  end: int | None = None

  @property
  def gz(self) -> bool:
    return self.path.endswith(".gz")


@dataclasses.dataclass(frozen=True)
class Options:
  """What `process_chunk` needs besides its chunk (picklable; workers load the files once)."""

  gazetteer: str | None = None
  vocab: str | None = None
  token_dtype: str | None = None
  max_context_words: int = MAX_CONTEXT_WORDS
  shuffle_seed: int | None = None  # None: corpus order


# ---- inputs and chunks ---------------------------------------------------------------------


def _glob(pattern: storage.Location) -> list[storage.Location]:
  if pattern.is_remote:
    import fsspec

    fs, key = fsspec.core.url_to_fs(str(pattern))
    prefix = f"{pattern.scheme}://"
    found = (prefix + p for p in fs.glob(key) if fs.isfile(p))
  else:
    import glob

    found = (p for p in glob.glob(pattern) if os.path.isfile(p))
  # Each match is of the pattern's scheme: carried, not decided again for every file.
  return [storage.Location(p, pattern.scheme) for p in sorted(found)]


def expand_inputs(news: str | Sequence[str]) -> list[str]:
  """The input files: a comma-separated list (or a sequence) of paths and globs, in order.

  Raises:
    DataError: a path that does not exist, a glob that matches nothing, a file named twice.
  """
  items = news.split(",") if isinstance(news, str) else list(news)
  paths: list[str] = []
  for item in (i.strip() for i in items):
    if not item:
      continue
    item = storage.location(item)  # once: the sizes, reads and chunks below take it
    if any(c in item for c in "*?["):
      matches = _glob(item)
      if not matches:
        raise DataError("no file matches this pattern", item)
      paths += matches
    elif storage.isfile(item):
      paths.append(item)
    else:
      raise DataError("no such file", item)
  if not paths:
    raise UserError("no news file given")
  seen = set()
  for p in paths:
    if p in seen:
      raise DataError("named twice in the news inputs (its articles would count twice)", p)
    seen.add(p)
  return paths


def plan_chunks(paths: Sequence[str], num_workers: int = 1) -> list[Chunk]:
  """Chunks of the inputs in corpus order: `.gz` files whole, plain files in byte ranges of
  MIN..MAX_CHUNK_BYTES (about CHUNKS_PER_WORKER per worker)."""
  sizes = [storage.getsize(p) for p in paths]
  target = sum(sizes) // max(1, num_workers * CHUNKS_PER_WORKER)
  target = min(MAX_CHUNK_BYTES, max(MIN_CHUNK_BYTES, target))
  chunks = []
  for path, size in zip(paths, sizes):
    if path.endswith(".gz") or size <= target:
      chunks.append(Chunk(len(chunks), path))
      continue
    for start in range(0, size, target):
      end = start + target if start + target < size else None
      chunks.append(Chunk(len(chunks), path, start, end))
  return chunks


@contextlib.contextmanager
def _open_binary(path: str):
  """The bytes of a file, decompressed if it is `.gz` (GzipFile does not close its source)."""
  with storage.open_file(path, "rb") as f:
    if path.endswith(".gz"):
      with gzip.GzipFile(fileobj=f, mode="rb") as g:
        yield g
    else:
      yield f


def chunk_lines(chunk: Chunk) -> Iterator[bytes]:
  """The raw lines (without their end of line) that `chunk` owns, in order.

  Lines end at "\\n" ("\\r\\n" too); a chunk that starts inside a line leaves that line to the
  chunk before it, and reads past its end to finish its last line.
  """
  try:
    with _open_binary(chunk.path) as f:
      pos = chunk.start
      if chunk.start:
        f.seek(chunk.start - 1)
        pos = chunk.start - 1 + len(f.readline())  # the line that started before us
      while chunk.end is None or pos < chunk.end:
        line = f.readline()
        if not line:
          return
        pos += len(line)
        yield line.rstrip(b"\n").removesuffix(b"\r")
  except (OSError, EOFError, zlib.error) as e:
    kind = "corrupt gzip" if chunk.gz else "cannot read"
    raise DataError(f"{kind} ({getattr(e, 'strerror', None) or e})", chunk.path) from None


def parse_article(raw: bytes, path: str, line_no: int) -> tuple[str, int, str] | None:
  """(date, year, text) of a news line; None if blank. DataError naming the file and line."""
  line = raw.decode("utf-8", "surrogateescape")
  check_utf8_line(line, path, line_no)
  obj = parse_jsonl_line(line, path, line_no, required=("date", "text"))
  if obj is None:
    return None
  if not isinstance(obj["text"], str):
    raise DataError("'text' must be a string", path, line_no)
  return obj["date"], parse_news_date(obj["date"], path, line_no), obj["text"]


# ---- pass 1: scan, plan ----------------------------------------------------------------------


@dataclasses.dataclass
class Scan:
  """What `scan_chunk` found: lines owned, articles per year, the first bad line (its index
  in the chunk and the message)."""

  index: int
  lines: int
  years: dict
  error: tuple[int, str] | None = None


def scan_chunk(chunk: Chunk) -> Scan:
  years: collections.Counter = collections.Counter()
  lines = 0
  try:
    for lines, raw in enumerate(chunk_lines(chunk), start=1):
      # Line numbers within the chunk; `make_plan` makes them line numbers of the file.
      article = parse_article(raw, chunk.path, lines)
      if article is not None:
        years[article[1]] += 1
  except DataError as e:
    # Reported by `make_plan` in corpus order (the first bad line of the corpus wins).
    where = f"{e.path}:{e.line}: " if e.line is not None else f"{e.path}: "
    return Scan(chunk.index, lines, dict(years), (e.line, str(e).removeprefix(where)))
  return Scan(chunk.index, lines, dict(years))


@dataclasses.dataclass(frozen=True)
class Plan:
  """The held-out choice and line numbering, from the scans of every chunk.

  Attributes:
    years: every year with an article, sorted.
    first_line: per chunk, the line number (1-based, in its file) of its first line.
    year_offsets: per chunk, {year: articles of that year in the chunks before it}.
    heldout: {year: (val ranks, test ranks)}: ranks of articles within their year.
    counts: {year: articles}.
  """

  years: tuple
  first_line: tuple
  year_offsets: tuple
  heldout: dict
  counts: dict

  def chunk_plan(self, index: int) -> dict:
    """What `process_chunk` needs of the plan for chunk `index`."""
    return {
      "first_line": self.first_line[index],
      "year_offsets": self.year_offsets[index],
      "heldout": self.heldout,
    }


def make_plan(
  chunks: Sequence[Chunk],
  scans: Sequence[Scan],
  settings: BuildSettings,
) -> Plan:
  """The plan of a scanned corpus: the held-out articles by `settings`' seed and shares.

  Raises:
    DataError: the first bad line in corpus order, naming its file and line.
  """
  scans = sorted(scans, key=lambda s: s.index)
  first_line, offsets = [], []
  line_in_file: dict = collections.defaultdict(int)
  counts: collections.Counter = collections.Counter()
  for chunk, scan in zip(chunks, scans):
    first = line_in_file[chunk.path] + 1
    if scan.error is not None:
      line, message = scan.error
      raise DataError(message, chunk.path, None if line is None else first + line - 1)
    first_line.append(first)
    offsets.append({y: counts[y] for y in scan.years})
    line_in_file[chunk.path] += scan.lines
    counts.update(scan.years)
  heldout = {}
  for year in sorted(counts):
    n = counts[year]
    k = heldout_count(n, settings.heldout_articles, settings.heldout_fraction)
    order = np.random.default_rng([settings.seed, year]).permutation(n)
    heldout[year] = (frozenset(order[:k].tolist()), frozenset(order[k : 2 * k].tolist()))
  return Plan(tuple(sorted(counts)), tuple(first_line), tuple(offsets), heldout, dict(counts))


# ---- pass 2: examples --------------------------------------------------------------------------

_WORKER: dict = {}  # per process: the loaded gazetteer and vocabulary, by path


def _loaded(kind: str, path: str | None):
  if not path:
    return None
  key = (kind, path)
  if key not in _WORKER:
    if kind == "gazetteer":
      _WORKER[key] = Gazetteer.from_file(path)
    else:
      from tlm.data.vocab import Vocabulary

      _WORKER[key] = Vocabulary(path)
  return _WORKER[key]


@dataclasses.dataclass
class ChunkResult:
  """What `process_chunk` wrote: its parts (split, year, field) and its statistics."""

  index: int
  parts: list
  stats: Stats


def process_chunk(chunk: Chunk, chunk_plan: dict, options: Options, part_dir: str) -> ChunkResult:
  """Writes the SSM examples of a chunk's articles to its parts under `part_dir`.

  Idempotent: the parts are named by the chunk and appear whole or not at all, so a chunk run
  twice, or again after a failure, leaves the same parts.
  """
  writer = store_write.PartWriter(part_dir, chunk.index, options.token_dtype)
  try:
    stats = _write_chunk(chunk, chunk_plan, options, writer)
    return ChunkResult(chunk.index, writer.close(), stats)
  except BaseException:
    writer.abort()
    raise


def _write_chunk(chunk: Chunk, chunk_plan: dict, options: Options, writer) -> Stats:
  names = _loaded("gazetteer", options.gazetteer)
  vocab = _loaded("vocab", options.vocab)
  stats = Stats(options.max_context_words)
  seen: collections.Counter = collections.Counter()
  offsets, heldout = chunk_plan["year_offsets"], chunk_plan["heldout"]
  for i, raw in enumerate(chunk_lines(chunk)):
    line_no = chunk_plan["first_line"] + i
    article = parse_article(raw, chunk.path, line_no)
    if article is None:
      continue
    date, year, text = article
    if year not in heldout:
      raise DataError(
        "a year the first pass did not see: the file changed while being read", chunk.path, line_no
      )
    rank = offsets.get(year, 0) + seen[year]
    seen[year] += 1
    val, test = heldout[year]
    split = "val" if rank in val else "test" if rank in test else "train"
    stats.articles[split, year] += 1
    for sentence in split_sentences(text):
      spans = find_spans(sentence, names)
      stats.add_sentence(split, year, spans)
      examples = mask_examples(sentence, spans, date, year, options.max_context_words)
      for span, ex in zip(spans, examples, strict=True):
        whole = len(sentence) - (span.end - span.start) + len(SENTINEL)
        stats.cut += len(ex["inputs"]) < whole
        if vocab is None or split in HELDOUT_SPLITS:
          writer.add_text(split, year, ex["inputs"], ex["targets"])
        if vocab is not None:
          try:
            ids = vocab.encode(ex["inputs"]), vocab.encode(ex["targets"])
          except DataError as e:
            raise DataError(str(e), chunk.path, line_no) from None
          writer.add_tokens(split, year, *ids)
  return stats


def table_fields(split: str, tokenized: bool) -> list[str]:
  """The fields a table of `split` holds (sorted, as in the manifest)."""
  if not tokenized:
    return [store.TEXT]
  return sorted({store.TOKENS} | ({store.TEXT} if split in HELDOUT_SPLITS else set()))


@dataclasses.dataclass(frozen=True)
class Shuffle:
  """A shuffled merge's settings (picklable): the seed, the bucket size, where the keyed parts
  go."""

  seed: int
  scratch: str
  bucket_bytes: int = store_shuffle.BUCKET_BYTES


def merge_job(job: tuple) -> dict:
  """`store_write.merge_table` of one (split, year, field), or with a `Shuffle` (a shuffled
  build) `store_shuffle.shuffle_table` of its parts: a picklable unit for a pool."""
  out_dir, split, year, field, itemsize, prefixes, *rest = job
  if rest and rest[0] is not None:
    shuffle = rest[0]
    runs = [store_shuffle.PartRun(p) for p in prefixes]
    scratch = storage.join(shuffle.scratch, f"{split}-{int(year)}.{field}")
    return store_shuffle.shuffle_table(
      out_dir, split, year, field, itemsize, runs, shuffle.seed, scratch, shuffle.bucket_bytes
    )
  return store_write.merge_table(out_dir, split, year, field, itemsize, prefixes)


def merge_jobs(out_dir, part_dir, plan, results, token_dtype, shuffle_seed=None) -> list[tuple]:
  """One merge per (split, year, field), with the parts written for it in chunk order; with a
  shuffle seed, each merge is a shuffled one (its keyed parts under `part_dir`)."""
  written = collections.defaultdict(list)
  for result in sorted(results, key=lambda r: r.index):
    for split, year, field in result.parts:
      written[split, year, field].append(
        store_write.part_prefix(part_dir, result.index, split, year, field)
      )
  shuffle = None
  if shuffle_seed is not None:
    shuffle = Shuffle(shuffle_seed, storage.join(part_dir, KEYED_DIR), store_shuffle.BUCKET_BYTES)
  jobs = []
  for split in SPLITS:
    for year in plan.years:
      for field in table_fields(split, token_dtype is not None):
        itemsize = 1 if field == store.TEXT else np.dtype(token_dtype).itemsize
        job = (out_dir, split, year, field, itemsize, written.get((split, year, field), []))
        jobs.append(job + ((shuffle,) if shuffle is not None else ()))
  return jobs


def finish(out_dir, plan, results, merged, options: Options) -> dict:
  """Writes stats.json, the vocabulary and, last, the manifest; returns the statistics."""
  stats = Stats(options.max_context_words)
  for result in sorted(results, key=lambda r: r.index):
    stats.merge(result.stats)
  summary = stats.summary(list(plan.years), _loaded("gazetteer", options.gazetteer))
  tables, files = {}, {}
  for (split, year, field), entry in merged:
    key = store.table_key(split, year)
    tables.setdefault(key, {"examples": entry["examples"], "fields": []})["fields"].append(field)
    if tables[key]["examples"] != entry["examples"]:
      raise AssertionError(f"{key}: fields disagree on the number of examples")
    files.update(entry["files"])
  for table in tables.values():
    table["fields"].sort()
  vocab, token_dtype = None, options.token_dtype
  if options.vocab:
    model = storage.read_bytes(options.vocab)
    with store_files.StagedFile(storage.join(out_dir, store.VOCAB_FILE)) as f:
      f.write(model)
    from tlm.data.vocab import Vocabulary

    vocab = {"sha256": store.vocab_fingerprint(model), "vocab_size": Vocabulary(model).vocab_size}
  data = (json.dumps(summary, indent=2) + "\n").encode("utf-8")
  with store_files.StagedFile(storage.join(out_dir, "stats.json")) as f:
    f.write(data)
  order = store_shuffle.order_entry(options.shuffle_seed)
  manifest = store_write.manifest_bytes(tables, files, token_dtype, vocab, order)
  store_write.write_manifest(out_dir, manifest)
  return summary


def _map(pool, fn, items):
  return list(pool.imap(fn, items)) if pool is not None else [fn(x) for x in items]


def _process_star(args):
  return process_chunk(*args)


def check_vocab_for_store(vocab_path: str) -> str:
  """The token dtype of a vocabulary whose ids can be stored; UserError if the time prefix
  could not be added to stored tokens (`tlm.store.store_write.prefix_problem`)."""
  from tlm.data.vocab import Vocabulary

  vocab = Vocabulary(vocab_path)
  problem = store_write.prefix_problem(vocab)
  if problem:
    raise UserError(
      f"{vocab_path}: {problem}, so the time prefix cannot be added to stored tokens; "
      "build without --vocab (a text store, tokenized as examples are drawn)"
    )
  return store.token_dtype_for(vocab.vocab_size)


def prepare(
  news: str | Sequence[str],
  output_dir: str,
  settings: BuildSettings,
  progress: Callable[[str], None] | None = None,
):
  """What both builders check before any work, nothing written yet: the output directory can be
  replaced, the inputs exist, the gazetteer and the vocabulary load (`progress`, if given, is
  told the names loaded and their memory). Returns the input files and the `Options` of their
  chunks."""
  check_replaceable(output_dir, OUTPUT_NAMES)
  paths = expand_inputs(news)
  if settings.gazetteer:  # a bad gazetteer fails here, once, not in every worker
    t0 = time.perf_counter()
    names = _loaded("gazetteer", settings.gazetteer)  # kept for this process's chunks
    if progress is not None:
      progress(
        f"gazetteer {settings.gazetteer}: {len(names):,} names loaded in "
        f"{time.perf_counter() - t0:.1f}s, {names.nbytes() / 2**20:.1f} MB in memory "
        "(per process)"
      )
  token_dtype = check_vocab_for_store(settings.vocab) if settings.vocab else None
  options = Options(
    settings.gazetteer,
    settings.vocab,
    token_dtype,
    settings.max_context_words,
    settings.shuffle_seed,
  )
  return paths, options


def build(
  news: str | Sequence[str],
  output_dir: str,
  settings: BuildSettings,
  num_workers: int = 1,
  progress: Callable[[str], None] | None = None,
) -> dict:
  """`tlm.store.build_ssm` over many shards with `num_workers` processes (its docstring)."""
  if num_workers < 1:
    raise UserError(f"--num_workers must be >= 1, got {num_workers}")
  paths, options = prepare(news, output_dir, settings, progress)
  chunks = plan_chunks(paths, num_workers)
  pool = None
  if num_workers > 1 and len(chunks) > 1:
    pool = multiprocessing.get_context("spawn").Pool(min(num_workers, len(chunks)))
  try:
    plan = make_plan(chunks, _map(pool, scan_chunk, chunks), settings)
    with atomic_output_dir(output_dir) as tmp:
      part_dir = os.path.join(tmp, PARTS_DIR)
      work = [(c, plan.chunk_plan(c.index), options, part_dir) for c in chunks]
      results = _map(pool, _process_star, work)
      jobs = merge_jobs(tmp, part_dir, plan, results, options.token_dtype, options.shuffle_seed)
      merged = zip([(j[1], j[2], j[3]) for j in jobs], _map(pool, merge_job, jobs))
      summary = finish(tmp, plan, results, merged, options)
      storage.rmtree(part_dir)
  except BaseException:
    if pool is not None:
      pool.terminate()  # the other chunks' work is of no use now
    raise
  finally:
    if pool is not None:
      pool.close()
      pool.join()
  return summary
