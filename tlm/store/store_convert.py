"""JSON-lines SSM directories (the format before the example store) into the example store.

A directory of `<split>/<year>.jsonl` files (`{"inputs", "targets", ...}` per line, as
`build_ssm` wrote them before, or written by hand) keeps working: on a local or shared file
system `open_ssm_store` converts it once, on first use, in place (the store's files are added
beside the JSON lines, which are then no longer read; deleting manifest.json converts again),
under a lock, with a one-line notice; or `--mode=convert_ssm` writes the store elsewhere,
tokenized with `--vocab` if given. On an object store, where there is no lock and every host of
a pod would convert it at once at start-up, training refuses it in one line naming
`--mode=convert_ssm`, run once. Every line is validated first (a bad one is an error naming the
file and line, and nothing is written).
"""

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
from collections.abc import Iterator

from tlm import storage
from tlm.console import notice
from tlm.data.formatting import SPLITS
from tlm.errors import DataError, UserError
from tlm.files import atomic_output_dir, check_replaceable
from tlm.line_files import iter_jsonl
from tlm.store import store, store_build, store_files, store_write

_YEAR_FILE = re.compile(r"^(\d{1,9})\.jsonl$")
_LOCK = ".tlm_convert.lock"


def jsonl_tables(directory: str) -> list[tuple[str, int, str]]:
  """(split, year, path) of every `<split>/<year>.jsonl` of a JSON-lines SSM directory."""
  found = []
  for split in SPLITS:
    split_dir = storage.join(directory, split)
    if not storage.isdir(split_dir):
      continue
    for name in sorted(storage.listdir(split_dir)):
      m = _YEAR_FILE.match(name)
      if m:
        found.append((split, int(m.group(1)), storage.join(split_dir, name)))
  return sorted(found)


def _examples(path: str, year: int) -> Iterator[tuple[int, str, str]]:
  for line_no, obj in iter_jsonl(path):
    for key in ("inputs", "targets"):
      if not isinstance(obj.get(key), str):
        raise DataError(f"field {key!r} missing or not a string", path, line_no)
    if "year" in obj and obj["year"] != year:
      raise DataError(f"year {obj['year']!r} in a file for {year}", path, line_no)
    yield line_no, obj["inputs"], obj["targets"]


def _write(src: str, out_dir: str, vocab_path: str | None) -> dict:
  """Writes the store files of `src`'s JSON lines into `out_dir` (manifest last)."""
  tables = jsonl_tables(src)
  if not tables:
    raise DataError("no <split>/<year>.jsonl files: not an SSM directory", src)
  for _, year, path in tables:  # validate everything before writing anything
    for _ in _examples(path, year):
      pass
  vocab = token_dtype = None
  if vocab_path:
    from tlm.data.vocab import Vocabulary

    token_dtype = store_build.check_vocab_for_store(vocab_path)
    vocab = Vocabulary(vocab_path)
  manifest_tables, files = {}, {}
  with tempfile.TemporaryDirectory(prefix="tlm-convert-parts-") as parts:
    for unit, (split, year, path) in enumerate(tables):
      writer = store_write.PartWriter(parts, unit, token_dtype)
      fields = store_build.table_fields(split, vocab is not None)
      for line_no, inputs, targets in _examples(path, year):
        if store.TEXT in fields:
          writer.add_text(split, year, inputs, targets)
        if vocab is not None:
          try:
            writer.add_tokens(split, year, vocab.encode(inputs), vocab.encode(targets))
          except DataError as e:
            raise DataError(str(e), path, line_no) from None
      written = set(writer.close())
      for field in fields:
        itemsize = 1 if field == store.TEXT else 2 if token_dtype == "uint16" else 4
        prefixes = [writer.prefix(split, year, field)] if (split, year, field) in written else []
        merged = store_write.merge_table(out_dir, split, year, field, itemsize, prefixes)
        manifest_tables[store.table_key(split, year)] = {
          "examples": merged["examples"],
          "fields": fields,
        }
        files.update(merged["files"])
  vocab_entry = None
  if vocab is not None:
    with store_files.StagedFile(storage.join(out_dir, store.VOCAB_FILE)) as f:
      f.write(vocab.serialized_model)
    vocab_entry = {
      "sha256": store.vocab_fingerprint(vocab.serialized_model),
      "vocab_size": vocab.vocab_size,
    }
  store_write.write_manifest(
    out_dir, store_write.manifest_bytes(manifest_tables, files, token_dtype, vocab_entry)
  )
  return {
    "tables": len(manifest_tables),
    "examples": sum(t["examples"] for t in manifest_tables.values()),
  }


def convert(src: str, output_dir: str, vocab: str | None = None) -> dict:
  """`--mode=convert_ssm`: the store of a JSON-lines SSM directory, in a new directory.

  Returns:
    {"tables": count, "examples": total}.
  """
  if storage.abspath(src) == storage.abspath(output_dir):
    raise UserError(f"{output_dir}: the output must be another directory than the input")
  check_replaceable(output_dir, store_build.OUTPUT_NAMES)
  stats = storage.join(src, "stats.json")
  with atomic_output_dir(output_dir) as tmp:
    summary = _write(src, tmp, vocab)
    if storage.isfile(stats):
      with open(os.path.join(tmp, "stats.json"), "wb") as f:
        f.write(storage.read_bytes(stats))
  return summary


@contextlib.contextmanager
def _lock(directory: str) -> Iterator[None]:
  """An exclusive lock on converting `directory` (processes of one host, or of several on a
  shared file system); nothing on an object store, where a second conversion writes the same
  bytes (the output is deterministic) and each object appears whole."""
  directory = storage.location(directory)
  if directory.is_remote:
    yield
    return
  try:
    f = open(directory / _LOCK, "a")
  except OSError as e:  # a read-only directory (or file system): no conversion in place
    raise _cannot_convert(directory, e) from None
  with f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def _cannot_convert(directory: str, e: OSError) -> UserError:
  return UserError(
    f"{directory}: cannot convert this JSON-lines SSM directory in place ({e.strerror}); "
    f"run --mode=convert_ssm --data={directory} --output_dir=NEW and set data.ssm_dir=NEW"
  )


_STAGE_PREFIX = ".tlm-convert-"


def _remove_interrupted_stages(directory: str) -> None:
  """Removes the staging directories of conversions of `directory` that were killed. Called
  under the conversion's lock: no other conversion of it is running, so none is in use."""
  for name in os.listdir(directory):
    path = os.path.join(directory, name)
    if name.startswith(_STAGE_PREFIX) and os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, ignore_errors=True)


def _convert_in_place(directory: str) -> None:
  """Adds the store's files to a JSON-lines SSM directory: staged, moved in, manifest last."""
  directory = storage.location(directory)
  remote = directory.is_remote
  parent = None if remote else directory
  try:
    if parent is not None:
      _remove_interrupted_stages(parent)
    stage = tempfile.mkdtemp(prefix=_STAGE_PREFIX, dir=parent)
  except OSError as e:
    raise _cannot_convert(directory, e) from None
  try:
    summary = _write(directory, stage, None)
    names = sorted(storage.walk_files(stage))
    for name in [n for n in names if n != store.MANIFEST] + [store.MANIFEST]:
      src, dst = os.path.join(stage, name), directory / name
      if remote:
        with open(src, "rb") as f:
          storage.write_object(dst, f.read())
      else:
        os.replace(src, dst)
  finally:
    shutil.rmtree(stage, ignore_errors=True)
  notice(
    f"converted the JSON-lines SSM directory {directory} to the example store, once "
    f"({summary['examples']} examples in {summary['tables']} tables, written beside the .jsonl "
    "files, which are no longer read)"
  )


def open_ssm_store(directory: str) -> store.Store:
  """The example store of an SSM directory, converting a local JSON-lines one first (once).

  Raises:
    DataError: neither a store nor a JSON-lines SSM directory, or a bad line or file.
    UserError: a JSON-lines SSM directory on an object store (convert it once instead).
  """
  directory = storage.location(directory)
  if store.is_store(directory):
    return store.Store(directory)
  if not storage.isdir(directory):
    raise DataError("no such directory (SSM examples)", directory)
  if not jsonl_tables(directory):
    raise DataError(
      "not an SSM directory: no manifest.json (example store) and no <split>/<year>.jsonl",
      directory,
    )
  if directory.is_remote:
    raise UserError(
      f"{directory}: a JSON-lines SSM directory on an object store, which every host would "
      f"convert at start-up; convert it once: python run.py --mode=convert_ssm --data={directory} "
      "--output_dir=NEW [--vocab=spiece.model], and set data.ssm_dir=NEW"
    )
  with _lock(directory):
    if not store.is_store(directory):  # another process may have converted it meanwhile
      _convert_in_place(directory)
  return store.Store(directory)
