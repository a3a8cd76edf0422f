"""The example store: (inputs, targets) examples on disk as flat arrays with offsets.

Mirrors Megatron's indexed dataset (`megatron/core/datasets/indexed_dataset.py`: one `.bin`
of tokens and one `.idx` of offsets) and MaxText's input pipeline: a process reads an example
by its index with two small ranged reads, so that nothing per example lives in host memory and
opening a store costs the same whatever its size. The SSM builder (`tlm.store.store_build`,
`--mode=build_ssm`) writes it; training (`tlm.input.datasets.load_sources`) reads it.

A store directory:

  manifest.json             format, layout version (1), token dtype, vocabulary fingerprint,
                            tables, file sizes and SHA-256, the tables' order (no entry:
                            corpus order; {"kind": "shuffled", "seed": N, "version": 2}:
                            `--shuffle_seed` or `--mode=shuffle_store`, `tlm.store.store_shuffle`;
                            without "version", 1: the article keys of the builds before);
                            written last (the store exists once it does); its SHA-256 names
                            the store in a training checkpoint (`Store.manifest_sha256`)
  spiece.model              tokenized stores: the vocabulary the tokens are ids of
  <split>/<year>.<field>.bin  example data laid end to end: example i's inputs, then its targets
  <split>/<year>.<field>.idx  little-endian int64 offsets into .bin (in elements), 2n+1 of
                            them: inputs of i are [o[2i], o[2i+1]), targets [o[2i+1], o[2i+2])

A field is "text" (UTF-8 bytes) or "tokens" (SentencePiece ids without EOS, uint16 when every
id fits, else int32, as the manifest says). A store built with a vocabulary holds tokens for
every split and, for the held-out splits (val, test: evaluation compares strings, and they are
small), the text too; one built without holds text, tokenized as examples are drawn. The year
is the file's; the article date is not kept (nothing reads it).

What is checked when (every file is treated as hostile):
- at open, per table a process reads: the manifest's structure; each file's size against the
  manifest; and the .idx (`tlm.store.store_field`): a small one (up to 1 MB, 65K examples: the
  miniature's) whole, every offset checked (starts at 0, never decreases, ends at the .bin's
  length), read in 2 MB chunks and checked with vectorised numpy; a large one only by its
  first and last offsets (two 8-byte reads), so that what a host reads before step 0 does not
  grow with the corpus (docs/paper_scale.md has the cost).
- at every read: the offsets read (an example's, or a run's: never decreasing, within the
  data, 0 and the data's length at the table's ends) and, for text, its UTF-8; the caller
  checks token ids against its vocabulary (`tlm.store.store_check` has the checks of ids,
  dtype and links made at open and by `verify`). A hostile offset in a large index thus fails with
  one line naming the file when its block is first read, before the step that would use it.
- the SHA-256 of each file and every offset: written at build time, verified by `verify`
  (`--mode=check_store`), e.g. once after copying a store to a host. Not at open: hashing the
  paper's ~40 GB of tokens on every host at every (re)start would take minutes; sizes and
  offsets catch truncation and a bad index, which is what stops a run; a flipped bit inside a
  token is not.

On an object store (gs://) examples are read with concurrent ranged requests (fsspec
`cat_ranges`, retried with backoff: `tlm.store.ranged`); a small index is held in memory once
checked (at most 1 MB), a large one is read where needed. `Table.token_run` and
`Table.token_block` read a run of consecutive examples with two requests (its offsets, then
its data), whatever its length: the block sampler's reads (`tlm.input.block_sampling`).
"""

import hashlib
from collections.abc import Sequence

import numpy as np

from tlm import safe_read, storage
from tlm.data.formatting import SPLITS, TextExample
from tlm.errors import DataError
from tlm.store import store_check

# OFFSET_DTYPE is part of the layout (what .idx files hold): store_write takes it from here.
from tlm.store.store_field import OFFSET_DTYPE, Field  # noqa: F401

FORMAT = "tlm.example_store"
VERSION = 1
MANIFEST = "manifest.json"
VOCAB_FILE = "spiece.model"
# A manifest lists two entries of ~150 bytes per field per table: a store of every split and
# a thousand years stays under 2 MB.
MAX_MANIFEST_BYTES = 16 << 20
MAX_VOCAB_BYTES = 256 << 20  # as `tlm.data.vocab` bounds a SentencePiece model
TEXT, TOKENS = "text", "tokens"
FIELDS = (TEXT, TOKENS)
TOKEN_DTYPES = ("uint16", "int32")
# The order of each table's examples: the corpus's (no "order" in the manifest: every store
# built before the entry existed), or sorted by a seeded hash (`tlm.store.store_shuffle`).
CORPUS, SHUFFLED = "corpus", "shuffled"
ORDERS = (CORPUS, SHUFFLED)
# The shuffled order's key function: 1 (no "version": the stores shuffled before 2 existed)
# hashed each example's article and place in it; 2 hashes its position in the corpus-order
# table, which a store in corpus order also knows (`tlm.store.store_shuffle.keys`).
ORDER_VERSION = 2
ORDER_VERSIONS = (1, ORDER_VERSION)
_HASH_BLOCK = 1 << 24
_ITER_BLOCK = 4096  # examples read at once when a table is iterated


def table_key(split: str, year: int) -> str:
  return f"{split}/{int(year)}"


def file_name(split: str, year: int, field: str, ext: str) -> str:
  """The "/"-separated name of a store file, relative to the store."""
  return f"{split}/{int(year)}.{field}.{ext}"


def token_dtype_for(vocab_size: int) -> str:
  """uint16 when every id fits (T5's 32,100), else int32."""
  return "uint16" if vocab_size <= 1 << 16 else "int32"


def vocab_fingerprint(serialized_model: bytes) -> str:
  """The SHA-256 of a SentencePiece model's bytes: what a tokenized store was built with."""
  return hashlib.sha256(serialized_model).hexdigest()


def is_store(path: str) -> bool:
  """Whether `path` is a store directory (its manifest exists)."""
  return storage.isfile(storage.join(path, MANIFEST))


def sha256_file(path: str) -> str:
  """The SHA-256 of a regular file (`safe_read.NotARegularFile` for a FIFO or device: a FIFO
  would block the reader, a device never end)."""
  h = hashlib.sha256()
  with safe_read.open_regular(path) as f:
    while block := f.read(_HASH_BLOCK):
      h.update(block)
  return h.hexdigest()


# ---- the manifest ----------------------------------------------------------------------------


def _field_of(obj, key: str, kind, path: str, where: str = ""):
  value = obj.get(key) if isinstance(obj, dict) else None
  ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
  if not ok:
    name = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
    raise DataError(f"manifest: {where}{key!r} missing or not a {name}", path)
  return value


def _manifest_bytes(directory: str) -> tuple[str, bytes]:
  path = storage.join(directory, MANIFEST)
  try:
    # A FIFO is refused unopened; the size is bounded before anything is parsed.
    return path, safe_read.read_bounded(path, MAX_MANIFEST_BYTES)
  except FileNotFoundError:
    raise DataError("no such file (not an example store)", path) from None
  except OSError as e:
    raise DataError(f"cannot read ({e.strerror or e})", path) from None


def read_manifest(directory: str) -> dict:
  """The manifest of a store, its structure validated (not yet against the files).

  Raises:
    DataError: naming manifest.json: unreadable, not this format or version, or a field
      missing, of the wrong type or out of range.
  """
  return parse_manifest(*_manifest_bytes(directory))


def parse_manifest(path: str, raw: bytes) -> dict:
  """`read_manifest` of the bytes `raw` read from `path`."""
  manifest = safe_read.parse_json(raw, path, what="a JSON manifest")
  if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
    raise DataError(f"not an example store manifest (format is not {FORMAT!r})", path)
  if manifest.get("version") != VERSION:
    raise DataError(f"store format version {manifest.get('version')!r}; expected {VERSION}", path)
  dtype = manifest.get("token_dtype")
  if dtype is not None and dtype not in TOKEN_DTYPES:
    raise DataError(f"manifest: token_dtype {dtype!r} is not one of {TOKEN_DTYPES}", path)
  vocab = manifest.get("vocab")
  if (vocab is None) != (dtype is None):
    raise DataError("manifest: 'vocab' and 'token_dtype' must be both set or both null", path)
  if vocab is not None:
    _field_of(vocab, "sha256", str, path, "vocab ")
    size = _field_of(vocab, "vocab_size", int, path, "vocab ")
    store_check.check_token_dtype(dtype, size, path)
  tables = _field_of(manifest, "tables", dict, path)
  files = _field_of(manifest, "files", dict, path)
  for key, table in tables.items():
    _check_table(key, table, files, dtype, path)
  order = manifest.get("order", {"kind": CORPUS})
  if not isinstance(order, dict) or order.get("kind") not in ORDERS:
    raise DataError(f"manifest: 'order' is not one of the kinds {ORDERS}", path)
  if order["kind"] == SHUFFLED:
    _field_of(order, "seed", int, path, "order ")
    if order.get("version", 1) not in ORDER_VERSIONS or isinstance(order.get("version"), bool):
      raise DataError(f"manifest: order 'version' is not one of {ORDER_VERSIONS}", path)
  return manifest


def _check_table(key: str, table, files: dict, dtype, path: str) -> None:
  """One entry of the manifest's tables, and its files' entries."""
  split, _, year = key.partition("/")
  if split not in SPLITS or not year.isdigit() or str(int(year)) != year:
    raise DataError(f"manifest: table {key!r} is not <split>/<year>", path)
  n = _field_of(table, "examples", int, path, f"table {key!r} ")
  fields = _field_of(table, "fields", list, path, f"table {key!r} ")
  if n < 0 or not fields or any(f not in FIELDS for f in fields) or len(set(fields)) < len(fields):
    raise DataError(f"manifest: table {key!r} has a bad count or fields {fields!r}", path)
  if TOKENS in fields and dtype is None:
    raise DataError(f"manifest: table {key!r} holds tokens but token_dtype is null", path)
  for field in fields:
    for ext in ("bin", "idx"):
      name = file_name(split, int(year), field, ext)
      entry = files.get(name)
      if not isinstance(entry, dict):
        raise DataError(f"manifest: no entry for {name}", path)
      size = _field_of(entry, "bytes", int, path, f"{name} ")
      _field_of(entry, "sha256", str, path, f"{name} ")
      if size < 0:
        raise DataError(f"manifest: {name} has a negative size", path)


# ---- reading ---------------------------------------------------------------------------------


class Table(Sequence):
  """One split and year of a store: a read-only sequence of `TextExample`s, and vectorised
  access to its token ids.

  Attributes:
    split, year: which table.
    path: the store directory.
    has_text, has_tokens: the fields it holds.
    vocab_sha256: the fingerprint of the vocabulary its tokens are of ("" without tokens).
  """

  def __init__(self, store: "Store", split: str, year: int):
    entry = store.manifest["tables"].get(table_key(split, year))
    if entry is None:
      years = ", ".join(str(y) for y in store.years(split)) or "none"
      raise DataError(
        f"no {split} examples for {year} in this store ({split} years: {years})",
        store.manifest_path,
      )
    self.split, self.year, self.path = split, int(year), store.path
    self.order = store.order  # the block sampler refuses corpus order
    self.store_sha256 = store.manifest_sha256  # names the store in a checkpoint
    self.remote = store.path.is_remote  # reads are requests: issue them concurrently
    self._count = int(entry["examples"])
    files = store.manifest["files"]
    dtype = store.manifest.get("token_dtype")
    self._fields = {}
    try:
      for field in entry["fields"]:
        field_dtype = np.uint8 if field == TEXT else dtype
        self._fields[field] = Field(
          store.path / file_name(split, self.year, field, "bin"),
          store.path / file_name(split, self.year, field, "idx"),
          files[file_name(split, self.year, field, "bin")]["bytes"],
          files[file_name(split, self.year, field, "idx")]["bytes"],
          field_dtype,
          self._count,
          store.manifest_path,
        )
    except BaseException:
      self.close()
      raise
    self.has_text, self.has_tokens = TEXT in self._fields, TOKENS in self._fields
    self.vocab_sha256 = store.vocab_sha256 if self.has_tokens else ""

  def __len__(self) -> int:
    return self._count

  def __getitem__(self, i):
    if isinstance(i, slice):
      return [self[j] for j in range(*i.indices(self._count))]
    i = int(i)
    if i < 0:
      i += self._count
    if not 0 <= i < self._count:
      raise IndexError(f"example {i} of {self._count}")
    inputs, targets = self.texts(np.array([i]))[0]
    return TextExample(inputs, targets, self.year)

  def __iter__(self):
    """The examples in order, read in blocks (evaluation walks whole held-out tables)."""
    for start in range(0, self._count, _ITER_BLOCK):
      ids = np.arange(start, min(start + _ITER_BLOCK, self._count))
      for inputs, targets in self.texts(ids):
        yield TextExample(inputs, targets, self.year)

  def texts(self, ids) -> list[tuple[str, str]]:
    """(inputs, targets) strings of examples `ids`.

    Raises:
      DataError: the table holds tokens only (a tokenized store's train split), or a
        corrupt file.
    """
    field = self._fields.get(TEXT)
    if field is None:
      raise DataError(
        f"{self.split} examples of {self.year} are stored as tokens only; evaluation reads the "
        "val and test splits (which keep their text)",
        self.path,
      )
    raw, off = field.read(ids)
    out = []
    for data, (a, b, _) in zip(raw, off):
      try:
        out.append((data[: b - a].decode("utf-8"), data[b - a :].decode("utf-8")))
      except UnicodeDecodeError:
        raise DataError("corrupt text: invalid UTF-8", field.bin_path) from None
    return out

  def tokens(self, ids) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per example of `ids`, its input ids and its target ids (int32, without EOS)."""
    field = self._fields.get(TOKENS)
    if field is None:
      raise DataError(f"{self.split} examples of {self.year} hold no tokens", self.path)
    raw, off = field.read(ids)
    inputs, targets = [], []
    for data, (a, b, _) in zip(raw, off):
      ids_ = np.frombuffer(data, field.dtype)
      inputs.append(ids_[: b - a].astype(np.int32))
      targets.append(ids_[b - a :].astype(np.int32))
    return inputs, targets

  def token_run(self, lo: int, hi: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """`tokens` of examples lo..hi-1, read as one run (two requests, whatever its length)."""
    data, off = self.token_block(lo, hi)
    inputs = [data[a:b] for a, b, _ in off.tolist()]
    targets = [data[b:c] for _, b, c in off.tolist()]
    return inputs, targets

  def token_block(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Examples lo..hi-1 read as one run (two requests), undivided: their ids laid end to end
    (int32) and [hi - lo, 3] offsets into them (inputs start, targets start, end)."""
    field = self._fields.get(TOKENS)
    if field is None:
      raise DataError(f"{self.split} examples of {self.year} hold no tokens", self.path)
    data, off = field.read_run(lo, hi)
    return data.astype(np.int32), off

  def mean_lengths(self, sample: int = 4096) -> tuple[float, float, int]:
    """Mean input and target ids of the first `sample` examples (one read of their offsets,
    checked), and how many that was."""
    field = self._fields[TOKENS]
    n = min(sample, field.count)
    if not n:
      return 0.0, 0.0, 0
    o = field.offsets_between(0, 2 * n + 1)
    if np.any(np.diff(o) < 0) or o[0] != 0 or o[-1] > field.total:
      raise DataError("corrupt index: the first offsets decrease or leave the data", field.idx_path)
    return float((o[1::2] - o[0:-1:2]).mean()), float((o[2::2] - o[1::2]).mean()), n

  def check_all(self) -> None:
    """Checks every offset of every field (a large index is otherwise checked as read)."""
    for field in self._fields.values():
      field.check_all()

  @property
  def token_file(self) -> str:
    """The .bin of the tokens (named in errors about the ids)."""
    return self._fields[TOKENS].bin_path

  def close(self) -> None:
    for field in self._fields.values():
      field.close()


class Store:
  """An example store directory (`read_manifest`); `table(split, year)` opens one table.

  Attributes:
    path: the directory.
    manifest: its parsed manifest.
    vocab_sha256: the fingerprint of the vocabulary of its tokens, "" for a text store.
    vocab_path: the copy of that vocabulary in the store, "" for a text store.
    order: "corpus" or "shuffled": the order of every table's examples.
    manifest_sha256: the SHA-256 of manifest.json's bytes, which holds every file's: the
      store's identity (a copy elsewhere, local or gs://, has the same).
  """

  def __init__(self, path: storage.PathArg):
    self.path = storage.abspath(path)  # a Location: the files below are joined to it
    self.manifest_path, raw = _manifest_bytes(self.path)
    self.manifest = parse_manifest(self.manifest_path, raw)
    self.manifest_sha256 = hashlib.sha256(raw).hexdigest()
    vocab = self.manifest.get("vocab")
    self.vocab_sha256 = vocab["sha256"] if vocab else ""
    self.vocab_path = self.path / VOCAB_FILE if vocab else ""
    self.order = self.manifest.get("order", {"kind": CORPUS})["kind"]

  def years(self, split: str) -> list[int]:
    return sorted(int(k.split("/")[1]) for k in self.manifest["tables"] if k.split("/")[0] == split)

  def table(self, split: str, year: int) -> Table:
    return Table(self, split, year)


def verify(path: str) -> dict:
  """Checks a whole store: the manifest, every file's size and SHA-256, every table's offsets,
  and every token id against the vocabulary's size.

  Returns:
    {"tables": count, "examples": total, "bytes": total file bytes}.

  Raises:
    DataError: naming the first file that does not match.
  """
  store = Store(path)
  total_bytes = 0
  for name, entry in sorted(store.manifest["files"].items()):
    file_path = store.path / name
    if name.startswith("/") or ".." in name.split("/"):
      raise DataError(f"manifest: file name {name!r} leaves the store", store.manifest_path)
    _field_of(entry, "bytes", int, store.manifest_path, f"{name} ")
    _field_of(entry, "sha256", str, store.manifest_path, f"{name} ")
    try:
      # The size first: a FIFO or device is refused unopened, a file of another size unhashed.
      size = safe_read.regular_size(file_path)
      if size != entry["bytes"]:
        raise DataError(f"{size} bytes, manifest.json says {entry['bytes']}", file_path)
      store_check.check_inside(store.path, file_path, store.manifest_path)
      digest = sha256_file(file_path)
    except safe_read.NotARegularFile as e:
      raise DataError(f"{e.strerror} (listed in manifest.json)", file_path) from None
    except (FileNotFoundError, OSError):
      raise DataError("missing store file (listed in manifest.json)", file_path) from None
    if digest != entry["sha256"]:
      raise DataError(
        "SHA-256 differs from manifest.json (the file changed or is damaged)", file_path
      )
    total_bytes += entry["bytes"]
  if store.vocab_path:
    try:
      model = safe_read.read_bounded(store.vocab_path, MAX_VOCAB_BYTES)
    except OSError as e:
      raise DataError(f"cannot read ({e.strerror or e})", store.vocab_path) from None
    if vocab_fingerprint(model) != store.vocab_sha256:
      raise DataError("differs from the vocabulary fingerprint in manifest.json", store.vocab_path)
    vocab_size = store_check.vocab_size(
      model, store.manifest["vocab"]["vocab_size"], store.vocab_path, store.manifest_path
    )
  examples = 0
  for key in store.manifest["tables"]:
    split, year = key.split("/")
    table = store.table(split, int(year))  # sizes
    try:
      table.check_all()  # every offset
    finally:
      table.close()
    if table.has_tokens:
      dtype = store.manifest["token_dtype"]
      store_check.scan_token_ids(table.token_file, dtype, vocab_size)
    examples += store.manifest["tables"][key]["examples"]
  return {"tables": len(store.manifest["tables"]), "examples": examples, "bytes": total_bytes}
