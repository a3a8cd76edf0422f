"""PyTorch checkpoints (`pytorch_model.bin`) read without torch, through a restricted unpickler.

Mirrors `torch/serialization.py` (`torch.save` / `torch.load`), in both of its formats:

- zip (torch >= 1.6, the default): `<root>/data.pkl` pickles the object with persistent ids
  `("storage", storage_type, key, location, numel)`; storage `key` is the raw little-endian file
  `<root>/data/<key>` (`<root>/byteorder` says "little" or "big").
- legacy (`_use_new_zipfile_serialization=False`, and every file written before torch 1.6): a
  plain stream of pickles: magic number 0x1950a86a20f9469cfc6c, protocol version 1001, a
  sys-info dict (byte order, type sizes), the object (persistent ids `("storage", type,
  root_key, location, numel, view_metadata)`), the sorted list of storage keys, then for each
  key an int64 element count followed by the raw storage bytes.

Public checkpoints such as t5-large-ssm-nq exist in both. Tensors are rebuilt with numpy from
(storage, offset, size, stride) exactly like `torch._utils._rebuild_tensor_v2` / `_v3`, so views,
non-contiguous tensors and storages shared by several tensors (T5's tied embeddings) come out
right. Only the handful of globals a state dict needs are resolved, each to a local stand-in;
any other global is refused, so a malicious pickle cannot run code.
"""

import pickle
import struct
import zipfile
from collections import OrderedDict

import ml_dtypes
import numpy as np

from tlm.errors import CheckpointError

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001

_STORAGE_DTYPES = {
  "DoubleStorage": np.dtype("<f8"),
  "FloatStorage": np.dtype("<f4"),
  "HalfStorage": np.dtype("<f2"),
  "BFloat16Storage": np.dtype(ml_dtypes.bfloat16),
  "LongStorage": np.dtype("<i8"),
  "IntStorage": np.dtype("<i4"),
  "ShortStorage": np.dtype("<i2"),
  "CharStorage": np.dtype("i1"),
  "ByteStorage": np.dtype("u1"),
  "BoolStorage": np.dtype("?"),
  "ComplexFloatStorage": np.dtype("<c8"),
  "ComplexDoubleStorage": np.dtype("<c16"),
}
# Dtypes that torch pickles by name (as the extra argument of _rebuild_tensor_v3).
_TORCH_DTYPES = {
  "float64": np.dtype("<f8"),
  "float32": np.dtype("<f4"),
  "float16": np.dtype("<f2"),
  "bfloat16": np.dtype(ml_dtypes.bfloat16),
  "int64": np.dtype("<i8"),
  "int32": np.dtype("<i4"),
  "int16": np.dtype("<i2"),
  "int8": np.dtype("i1"),
  "uint8": np.dtype("u1"),
  "uint16": np.dtype("<u2"),
  "uint32": np.dtype("<u4"),
  "uint64": np.dtype("<u8"),
  "bool": np.dtype("?"),
  "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
  "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
}


class _StorageType:
  """Stand-in for `torch.FloatStorage` & co. (`dtype` None: `torch.UntypedStorage`, bytes)."""

  def __init__(self, name: str, dtype: np.dtype | None):
    self.name, self.dtype = name, dtype


class _Storage:
  """One storage: its dtype and element count now, its bytes once they have been read."""

  def __init__(self, key: str, dtype: np.dtype | None, numel: int):
    self.key, self.dtype, self.numel = key, dtype, numel
    self.data: np.ndarray | None = None  # flat, of self.dtype (uint8 when untyped)
    self.handed_out = False
    self.root: _Storage | None = None  # legacy views: the storage this one is a slice of
    self.offset = 0


class _TensorRef:
  """What the rebuild functions return; becomes a numpy array once the storages are read."""

  def __init__(self, storage, offset, size, stride, dtype=None):
    if not isinstance(storage, _Storage):
      raise pickle.UnpicklingError("tensor without a storage")
    self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), stride
    self.dtype = dtype if dtype is not None else storage.dtype
    if self.dtype is None:
      raise pickle.UnpicklingError("untyped storage without a dtype")


def _rebuild_tensor(storage, offset, size, stride, *unused):
  del unused  # requires_grad, backward_hooks, metadata: nothing to keep in numpy
  return _TensorRef(storage, offset, size, stride)


def _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype, *unused):
  del requires_grad, hooks, unused
  if not isinstance(dtype, np.dtype):
    raise pickle.UnpicklingError("bad dtype in _rebuild_tensor_v3")
  return _TensorRef(storage, offset, size, stride, dtype)


def _rebuild_parameter(data, *unused):
  del unused  # requires_grad, backward_hooks[, state]
  return data


def _rebuild_from_type_v2(func, new_type, args, state):
  del new_type, state  # a Parameter or plain Tensor: the data is all we keep
  return func(*args)


class _TensorClass:
  """Stand-in for `torch.Tensor` / `torch.nn.Parameter` when named as a type."""


_GLOBALS = {
  ("collections", "OrderedDict"): OrderedDict,
  ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
  ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
  ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
  ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
  ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
  ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
  ("torch", "Tensor"): _TensorClass,
  ("torch.nn.parameter", "Parameter"): _TensorClass,
  ("torch", "UntypedStorage"): _StorageType("UntypedStorage", None),
  ("torch.storage", "UntypedStorage"): _StorageType("UntypedStorage", None),
}
_GLOBALS.update({("torch", n): _StorageType(n, d) for n, d in _STORAGE_DTYPES.items()})
_GLOBALS.update({("torch", n): d for n, d in _TORCH_DTYPES.items()})


class _Unpickler(pickle.Unpickler):
  """Resolves only the globals above; storages come from `load_storage(pid)`."""

  def __init__(self, file, path: str, load_storage):
    super().__init__(file)
    self._path, self._load_storage = path, load_storage

  def find_class(self, module, name):
    try:
      return _GLOBALS[(module, name)]
    except KeyError:
      raise CheckpointError(
        f"{self._path}: refusing to unpickle '{module}.{name}' (not a tensor state dict)"
      ) from None

  def persistent_load(self, pid):
    if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"):
      raise pickle.UnpicklingError(f"unsupported persistent id {pid!r}")
    if not isinstance(pid[1], _StorageType) or not isinstance(pid[4], int):
      raise pickle.UnpicklingError(f"bad storage reference {pid!r}")
    return self._load_storage(pid)


def _materialize(ref: _TensorRef, path: str, name: str) -> np.ndarray:
  storage = ref.storage
  if storage.data is None:
    raise CheckpointError(f"{path}: tensor '{name}': storage {storage.key} has no data")
  elements = storage.data.view(ref.dtype) if storage.dtype is None else storage.data
  if storage.dtype is None and storage.data.size % ref.dtype.itemsize:
    raise CheckpointError(f"{path}: tensor '{name}': storage size is not a multiple of dtype")
  size, stride, offset = ref.size, tuple(ref.stride), ref.offset
  if len(size) != len(stride) or any(s < 0 for s in size + stride) or offset < 0:
    raise CheckpointError(f"{path}: tensor '{name}': bad size {size} / stride {stride}")
  if 0 not in size:
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= elements.size:
      raise CheckpointError(
        f"{path}: tensor '{name}' reads element {last} of a storage of {elements.size}"
      )
  contiguous = tuple(int(np.prod(size[i + 1 :], dtype=np.int64)) for i in range(len(size)))
  whole = offset == 0 and int(np.prod(size, dtype=np.int64)) == elements.size
  if whole and stride == contiguous and storage.dtype is not None and not storage.handed_out:
    # The common case (one tensor per storage, C order): hand out the storage itself.
    storage.handed_out = True
    return elements.reshape(size)
  view = np.lib.stride_tricks.as_strided(
    elements[offset:] if 0 not in size else elements[:0],
    shape=size,
    strides=[s * ref.dtype.itemsize for s in stride],
    writeable=False,
  )
  return np.array(view)  # a copy: storages shared by several tensors stay independent


def _flatten(obj, path: str, prefix: str, out: dict):
  if isinstance(obj, dict):
    for key, value in obj.items():
      if not isinstance(key, str):
        raise CheckpointError(f"{path}: non-string key {key!r} under '{prefix}'")
      _flatten(value, path, f"{prefix}.{key}" if prefix else key, out)
  elif isinstance(obj, _TensorRef):
    out[prefix] = _materialize(obj, path, prefix)
  else:
    raise CheckpointError(
      f"{path}: '{prefix or '<root>'}' is a {type(obj).__name__}, not a tensor or a dict"
    )


def _read_exact(f, storage: _Storage, nbytes: int, path: str, swap: bool):
  dtype = storage.dtype if storage.dtype is not None else np.dtype("u1")
  data = np.empty(nbytes // dtype.itemsize, dtype)
  if f.readinto(data.view(np.uint8)) != nbytes:
    raise CheckpointError(f"{path}: truncated file (storage {storage.key})")
  if swap and dtype.itemsize > 1:
    data = data.byteswap()
  storage.data = data


def _read_zip(path: str) -> dict:
  try:
    archive = zipfile.ZipFile(path)
  except zipfile.BadZipFile:
    raise CheckpointError(f"{path}: corrupt or truncated zip checkpoint") from None
  with archive:
    pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pickles) != 1:
      raise CheckpointError(f"{path}: not a torch.save zip archive (no <root>/data.pkl)")
    root = pickles[0][: -len("data.pkl")]
    names = set(archive.namelist())
    byteorder = b"little"
    if root + "byteorder" in names:
      byteorder = archive.read(root + "byteorder").strip()
    storages: dict[str, _Storage] = {}

    def load_storage(pid):
      _, storage_type, key, _, numel = pid[:5]
      if key not in storages:
        storage = _Storage(str(key), storage_type.dtype, numel)
        member = f"{root}data/{key}"
        if member not in names:
          raise CheckpointError(f"{path}: missing storage '{member}'")
        nbytes = numel * (storage_type.dtype.itemsize if storage_type.dtype else 1)
        if archive.getinfo(member).file_size != nbytes:
          raise CheckpointError(f"{path}: storage '{member}' is not {nbytes} bytes")
        with archive.open(member) as f:
          _read_exact(f, storage, nbytes, path, byteorder == b"big")
        storages[key] = storage
      return storages[key]

    with archive.open(pickles[0]) as f:
      return _Unpickler(f, path, load_storage).load()


def _read_legacy(f, path: str) -> dict:
  plain = lambda: _Unpickler(f, path, lambda pid: None).load()  # no storages allowed here
  if plain() != _LEGACY_MAGIC:
    raise CheckpointError(f"{path}: not a PyTorch checkpoint (bad magic number)")
  if plain() != _LEGACY_PROTOCOL:
    raise CheckpointError(f"{path}: unsupported legacy PyTorch protocol version")
  sys_info = plain()
  swap = isinstance(sys_info, dict) and sys_info.get("little_endian") is False
  storages: dict[str, _Storage] = {}
  views: dict[str, _Storage] = {}

  def load_storage(pid):
    _, storage_type, key, _, numel = pid[:5]
    view_metadata = pid[5] if len(pid) > 5 else None
    if storage_type.dtype is None:
      raise pickle.UnpicklingError("untyped storage in a legacy checkpoint")
    if key not in storages:
      storages[key] = _Storage(str(key), storage_type.dtype, numel)
    if view_metadata is None:
      return storages[key]
    # A view (offset, size) of a root storage, as pre-1.0 torch wrote them.
    view_key, offset, size = view_metadata
    if view_key not in views:
      views[view_key] = _Storage(f"{key}[{offset}:{offset + size}]", storage_type.dtype, size)
      views[view_key].root, views[view_key].offset = storages[key], offset
    return views[view_key]

  obj = _Unpickler(f, path, load_storage).load()
  keys = plain()
  if not isinstance(keys, list) or set(keys) != set(storages):
    raise CheckpointError(f"{path}: corrupt legacy checkpoint (storage key list)")
  for key in keys:
    storage = storages[key]
    header = f.read(8)
    if len(header) != 8:
      raise CheckpointError(f"{path}: truncated file (storage {key})")
    (numel,) = struct.unpack("<q" if not swap else ">q", header)
    if numel != storage.numel:
      raise CheckpointError(f"{path}: storage {key} has {numel} elements, expected {storage.numel}")
    _read_exact(f, storage, numel * storage.dtype.itemsize, path, swap)
  for view in views.values():
    if view.offset + view.numel > view.root.numel:
      raise CheckpointError(f"{path}: storage view {view.key} out of bounds")
    view.data = view.root.data[view.offset : view.offset + view.numel]
    view.handed_out = True  # always copy out of a view: it shares memory with its root
  return obj


def read(path: str) -> dict[str, np.ndarray]:
  """Reads the tensors of a `torch.save`d state dict, without torch.

  Args:
    path: e.g. `pytorch_model.bin`, in the zip or the legacy format.

  Returns:
    {name: array}; nested dicts are flattened with "." (bfloat16 as ml_dtypes.bfloat16).

  Raises:
    CheckpointError: naming the file (and tensor) for a missing, truncated or corrupt file, or
      a pickle that needs anything besides tensors and dicts.
  """
  try:
    with open(path, "rb") as f:
      head = f.read(4)
      if head.startswith(b"PK"):
        obj = _read_zip(path)
      else:
        f.seek(0)
        obj = _read_legacy(f, path)
  except OSError as e:
    raise CheckpointError(f"{path}: cannot read ({e.strerror or e})") from None
  except (
    pickle.UnpicklingError,
    zipfile.BadZipFile,
    EOFError,
    ValueError,
    TypeError,
    AttributeError,
    IndexError,
    KeyError,
    struct.error,
  ) as e:
    raise CheckpointError(f"{path}: corrupt or truncated PyTorch checkpoint ({e})") from None
  if not isinstance(obj, dict):
    raise CheckpointError(f"{path}: expected a state dict, found a {type(obj).__name__}")
  out: dict[str, np.ndarray] = {}
  _flatten(obj, path, "", out)
  return out
