"""Writing the example store (`tlm.store.store`): parts, their merge into tables, the manifest.

A builder writes in two steps, so that any number of workers (local processes, Beam workers)
produce the same bytes: each unit of work (a chunk of the input, in input order) appends its
examples to *parts*, one per (split, year, field): `<prefix>.bin` (the data) and `<prefix>.len`
(int64 [n, 2] lengths of inputs and targets); `merge_table` then concatenates a table's parts
in chunk order into its `.bin` and computes its `.idx` offsets, hashing both as they are
written. The output depends only on the examples and their order, never on how the input was
cut into chunks or how many workers ran. `write_manifest` comes last: a store exists once its
manifest does. Every file appears whole or not at all (`tlm.store.store_files`) and a merge
only reads its parts, so an engine may run any unit twice, or again after a failure, with the
same result.
`prefix_problem` vets a vocabulary before its ids are stored.
"""

import json

import numpy as np

from tlm import storage
from tlm.data.conditioning import prefix_text
from tlm.files import atomic_output_file
from tlm.store import store_files
from tlm.store.store import FORMAT, MANIFEST, OFFSET_DTYPE, TEXT, TOKENS, VERSION, file_name

_FLUSH_BYTES = 1 << 22

# Texts on which `prefix_problem` checks that a prefix's tokens can be prepended to stored ones.
_PROBES = (
  "The club",
  "<extra_id_0> won the cup.",
  "won by <extra_id_0>.",
  "2014",
  "x",
  "Caf\u00e9 \u00dcber-na\u00efve",
  "  spaced   out ",
  "",
  '(quoted) "text"',
)


def prefix_problem(vocab) -> str:
  """Why the time prefix's tokens could not be prepended to stored tokens; "" if they can.

  A stored example holds `encode(inputs)`; training with the time prefix needs
  `encode(prefix + " " + inputs)`, which equals `encode(prefix) + encode(inputs)` when the
  SentencePiece model splits at whitespace and adds a dummy prefix (T5's and the synthetic
  world's do), since no piece then spans the space. Checked on the model's settings where
  protobuf can read them, and always on probe texts.
  """
  try:
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(vocab.serialized_model)
  except Exception:  # no protobuf, or one older than sentencepiece's generated code (Beam's)
    proto = None
  if proto is not None:
    if not proto.trainer_spec.split_by_whitespace:
      return "the SentencePiece model does not split at whitespace"
    if proto.trainer_spec.treat_whitespace_as_suffix:
      return "the SentencePiece model treats whitespace as a suffix"
    if not proto.normalizer_spec.add_dummy_prefix:
      return "the SentencePiece model adds no dummy prefix"
  for prefix in (prefix_text(2014, "temporal"), prefix_text(2014, "in_text")):
    for text in _PROBES:
      if vocab.encode(f"{prefix} {text}") != vocab.encode(prefix) + vocab.encode(text):
        return f"encode({prefix + ' ' + text!r}) is not encode({prefix!r}) + encode({text!r})"
  return ""


class _Part:
  """One part: buffered data and lengths, appended to `<prefix>.bin` / `.len`."""

  def __init__(self, prefix: str):
    self.prefix = prefix
    self._data: list[bytes] = []
    self._lens: list[int] = []
    self._size = 0
    self._files = None

  def add(self, inputs: bytes, targets: bytes, n_in: int, n_tg: int) -> None:
    self._data.append(inputs)
    self._data.append(targets)
    self._lens += (n_in, n_tg)
    self._size += len(inputs) + len(targets)
    if self._size >= _FLUSH_BYTES:
      self.flush()

  def flush(self) -> None:
    if self._files is None:
      self._files = (
        store_files.StagedFile(self.prefix + ".bin"),
        store_files.StagedFile(self.prefix + ".len"),
      )
    self._files[0].write(b"".join(self._data))
    self._files[1].write(np.asarray(self._lens, OFFSET_DTYPE).tobytes())
    self._data, self._lens, self._size = [], [], 0

  def close(self) -> None:
    self.flush()
    for f in self._files:
      f.close()

  def abort(self) -> None:
    for f in self._files or ():
      f.abort()


class PartWriter:
  """The parts one unit of work writes, under `directory`, named by `unit` (its order).

  Args:
    directory: where the parts go (local or remote).
    unit: the unit's position in the input order (parts are merged in this order).
    token_dtype: "uint16" / "int32" for token fields; None without tokens.

  Parts are in corpus order; a shuffled build sorts them afterwards
  (`tlm.store.store_shuffle`), by the examples' positions in the corpus-order table.
  """

  def __init__(self, directory: str, unit: int, token_dtype: str | None = None):
    self.directory, self.unit = directory, unit
    self.dtype = np.dtype(token_dtype).newbyteorder("<") if token_dtype else None
    self._parts: dict = {}

  def prefix(self, split: str, year: int, field: str) -> str:
    return part_prefix(self.directory, self.unit, split, year, field)

  def _part(self, split: str, year: int, field: str) -> _Part:
    key = (split, year, field)
    if key not in self._parts:
      self._parts[key] = _Part(self.prefix(split, year, field))
    return self._parts[key]

  def add_text(self, split: str, year: int, inputs: str, targets: str) -> None:
    a, b = inputs.encode("utf-8"), targets.encode("utf-8")
    self._part(split, year, TEXT).add(a, b, len(a), len(b))

  def add_tokens(self, split: str, year: int, inputs, targets) -> None:
    a = np.asarray(inputs, self.dtype)
    b = np.asarray(targets, self.dtype)
    self._part(split, year, TOKENS).add(a.tobytes(), b.tobytes(), a.size, b.size)

  def close(self) -> list[tuple[str, int, str]]:
    """Writes out what is buffered; returns the (split, year, field) of every part written."""
    for part in self._parts.values():
      part.close()
    return sorted(self._parts)

  def abort(self) -> None:
    """Drops the parts not yet closed (a unit of work that failed: its retry writes them)."""
    for part in self._parts.values():
      part.abort()


def part_prefix(directory: str, unit: int, split: str, year: int, field: str) -> str:
  return storage.join(directory, f"{unit:08d}", f"{split}-{int(year)}.{field}")


def merge_table(
  out_dir: str,
  split: str,
  year: int,
  field: str,
  itemsize: int,
  prefixes: list[str],
) -> dict:
  """Concatenates a table's parts, in order, into `out_dir`'s `.bin` and `.idx` of the field.

  Idempotent: the parts are only read (the builder deletes them after the manifest), and the
  two files appear whole or not at all, so a merge that fails half-way, or runs twice, can be
  run again with the same result.

  Args:
    out_dir: the store directory.
    split, year, field: the table and field.
    itemsize: bytes per element (1 for text, 2 or 4 for tokens).
    prefixes: the parts in input order (those that wrote something).

  Returns:
    {"examples": n, "files": {name: {"bytes", "sha256"}}}.
  """
  bin_name = file_name(split, year, field, "bin")
  idx_name = file_name(split, year, field, "idx")
  data = store_files.HashedFile(storage.join(out_dir, bin_name))
  index = store_files.HashedFile(storage.join(out_dir, idx_name))
  try:
    index.write(np.zeros(1, OFFSET_DTYPE).tobytes())
    base, examples = 0, 0
    for prefix in prefixes:
      lens = np.frombuffer(storage.read_bytes(prefix + ".len"), OFFSET_DTYPE)
      offsets = base + np.cumsum(lens)
      with storage.open_file(prefix + ".bin", "rb") as f:
        copied = 0
        while block := f.read(1 << 24):
          data.write(block)
          copied += len(block)
      if copied != int(lens.sum()) * itemsize:
        raise OSError(f"{prefix}.bin holds {copied} bytes, its lengths say {lens.sum()} items")
      index.write(offsets.astype(OFFSET_DTYPE).tobytes())
      base = int(offsets[-1]) if offsets.size else base
      examples += lens.size // 2
  except BaseException:
    data.abort()
    index.abort()
    raise
  return {"examples": examples, "files": {bin_name: data.close(), idx_name: index.close()}}


def manifest_bytes(
  tables: dict, files: dict, token_dtype: str | None, vocab: dict | None, order: dict | None = None
) -> bytes:
  """The manifest: deterministic (sorted keys, no dates), so equal stores have equal bytes.

  Args:
    tables: "<split>/<year>" -> {"examples": n, "fields": [...]}.
    files: file name -> {"bytes", "sha256"}.
    token_dtype: "uint16" / "int32", or None for a text store.
    vocab: {"sha256", "vocab_size"} or None.
    order: the tables' order (`tlm.store.store_shuffle.order_entry`); None for corpus order,
      which writes no entry (a store's bytes are those of builds before the entry existed).
  """
  manifest = {
    "format": FORMAT,
    "version": VERSION,
    "token_dtype": token_dtype,
    "vocab": vocab,
    "tables": tables,
    "files": files,
  }
  if order is not None:
    manifest["order"] = order
  return (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode("utf-8")


def write_manifest(out_dir: str, data: bytes) -> None:
  """Writes manifest.json last, atomically (one object on an object store)."""
  path = storage.join(out_dir, MANIFEST)
  if path.is_remote:
    storage.write_object(path, data)
  else:
    with atomic_output_file(path, "wb") as f:
      f.write(data)
