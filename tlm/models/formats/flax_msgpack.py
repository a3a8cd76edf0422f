"""HF Flax checkpoints (`flax_model.msgpack`) read into a flat {name: array} dict.

transformers' `FlaxPreTrainedModel.save_pretrained` wrote the parameter tree with
`flax.serialization.to_bytes` (msgpack; arrays as ext records with dtype and shape, very large
ones chunked), e.g. `{"shared": {"embedding": ...}, "encoder": {"block": {"0": {"layer": {"0":
{"SelfAttention": {"q": {"kernel": ...}}}}}}}}` for T5. This module restores that tree with
`flax.serialization.msgpack_restore` (which understands both) and joins the path with ".",
giving `encoder.block.0.layer.0.SelfAttention.q.kernel`: HF's PyTorch names with Flax leaf
names (`kernel` [in, out], `embedding`, `weight` for norms). Renaming and transposing is the
job of the checkpoint maps.
"""

import numpy as np
from flax import serialization

from tlm.errors import CheckpointError
from tlm.models.formats import guards
from tlm.safe_read import shown

# How deeply parameter trees may nest (HF's T5: 7 levels); deeper is a corrupt file, refused
# before the recursion below could reach the interpreter's limit.
_MAX_NESTING = 32


def _flatten(tree, path: str, prefix: str, out: dict, depth: int = 0):
  if isinstance(tree, dict):
    if depth > _MAX_NESTING:
      raise CheckpointError(f"{path}: parameter tree nested more than {_MAX_NESTING} deep")
    for key, value in tree.items():
      _flatten(value, path, f"{prefix}.{key}" if prefix else str(key), out, depth + 1)
  elif isinstance(tree, (np.ndarray, np.generic, int, float, bool)):
    out[prefix] = np.asarray(tree)
  else:
    raise CheckpointError(f"{path}: {shown(prefix)} is a {type(tree).__name__}, not an array")


# The largest public Flax T5 (11B parameters, float32) is 44.5 GB; a caller that knows the
# config passes a tighter bound.
MAX_FILE_BYTES = 64 << 30


def read(path: str, max_bytes: int = MAX_FILE_BYTES) -> dict[str, np.ndarray]:
  """Reads a Flax msgpack checkpoint (the whole file: it has no index to seek by).

  Args:
    path: e.g. `flax_model.msgpack`.
    max_bytes: the most the file may hold: from the parameters its config declares
      (`checkpoints.py`), else the largest public checkpoint's size; a larger file is refused
      by its size, unread.

  Returns:
    {dotted name: array}, e.g. `shared.embedding`, `lm_head.kernel`.

  Raises:
    CheckpointError: naming the file if it is missing, truncated or not a Flax checkpoint.
  """
  data = guards.read_bounded(path, max_bytes, "a Flax msgpack checkpoint")
  try:
    tree = serialization.msgpack_restore(data)
  except Exception as e:  # msgpack raises its own exception types, ValueError, ...
    raise CheckpointError(
      f"{path}: corrupt or truncated msgpack checkpoint ({type(e).__name__})"
    ) from None
  if not isinstance(tree, dict):
    raise CheckpointError(f"{path}: expected a tree of parameters, found {type(tree).__name__}")
  out: dict[str, np.ndarray] = {}
  _flatten(tree, path, "", out)
  return out
