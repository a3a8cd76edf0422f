"""Checks of an example store that are not about its layout: what its token ids can be, and
where its files may lead. `tlm.store.store` calls them at open and in `verify`
(`--mode=check_store`); `tlm.input.packing` checks every batch's ids itself.

- `check_token_dtype`: at open, from the manifest alone: the token dtype must hold every id of
  the vocabulary the manifest names (uint16 ids stop at 65,535), and the vocabulary must have
  ids at all.
- `check_inside`: at open and in `verify`: a file the manifest lists is read only if it lies
  inside the store. A store file that is a link to a file elsewhere (with a manifest made to
  match it) would have training read whatever it points to; it is refused, as the T5X reader
  refuses a chunk linked out of its array. A link within the store is followed.
- `vocab_size`: in `verify`: the manifest's `vocab_size` is the store's `spiece.model`'s.
- `scan_token_ids`: in `verify`: every stored id is in [0, vocabulary size). Not at open: a
  scan reads every token (the paper's ~40 GB), which `verify` does anyway to hash them; a
  batch checks the ids it draws (`tlm.input.packing`).
"""

import os

import numpy as np

from tlm import storage
from tlm.errors import DataError

# Elements scanned at once (64 MiB of int32).
_SCAN_ELEMENTS = 1 << 24
# The largest id each token dtype can hold.
_DTYPE_MAX = {"uint16": (1 << 16) - 1, "int32": (1 << 31) - 1}


def check_token_dtype(token_dtype: str, vocab_size: int, manifest_path: str) -> None:
  """Raises DataError (naming the manifest) unless `token_dtype` holds ids 0..vocab_size-1."""
  if vocab_size < 1:
    raise DataError(f"manifest: vocab_size {vocab_size} is not a vocabulary's size", manifest_path)
  top = _DTYPE_MAX.get(token_dtype)
  if top is not None and vocab_size - 1 > top:
    raise DataError(
      f"manifest: token_dtype {token_dtype} cannot hold the ids of a vocabulary of "
      f"{vocab_size} (at most {top + 1})",
      manifest_path,
    )


def check_inside(store_dir: str, path: str, manifest_path: str) -> None:
  """Raises DataError naming `path` if it resolves (through links) to outside `store_dir`.

  Local stores only: an object store has no links, and a listed name with `..` or an absolute
  name is refused when the manifest is read.
  """
  path = storage.location(path)
  if path.is_remote:
    return
  root = os.path.realpath(storage.local(store_dir))
  real = os.path.realpath(path)
  if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
    raise DataError(
      f"a link to {real}, outside the store (listed in {os.path.basename(manifest_path)}); "
      "store files must lie inside the store directory: copy the file in instead",
      path,
    )


def vocab_size(model: bytes, declared: int, vocab_path: str, manifest_path: str) -> int:
  """The size of the vocabulary `model` (the store's copy), which must be the manifest's
  `declared` one: a manifest that overstates it would let ids beyond the vocabulary through."""
  from tlm.data.vocab import Vocabulary

  try:
    size = Vocabulary(model).vocab_size
  except DataError as e:  # read from bytes, it names no file: the store's copy is the one
    raise DataError(str(e), vocab_path) from None
  if size != declared:
    raise DataError(
      f"manifest: vocab_size {declared}, but {os.path.basename(vocab_path)} has {size} ids",
      manifest_path,
    )
  return size


def scan_token_ids(path: str, dtype, vocab_size: int) -> None:
  """Raises DataError naming the token file `path` at its first id outside [0, vocab_size)."""
  dtype = np.dtype(dtype).newbyteorder("<")
  seen = 0
  with storage.open_file(path, "rb") as f:
    while block := f.read(_SCAN_ELEMENTS * dtype.itemsize):
      ids = np.frombuffer(block[: len(block) - len(block) % dtype.itemsize], dtype)
      bad = np.flatnonzero((ids < 0) | (ids >= vocab_size))
      if bad.size:
        value, at = int(ids[bad[0]]), seen + int(bad[0])
        raise DataError(
          f"token id {value} at element {at} is outside the vocabulary's ids [0, {vocab_size}) "
          "(a damaged file)",
          path,
        )
      seen += ids.size
