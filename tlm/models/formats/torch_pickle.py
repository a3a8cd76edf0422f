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

Nor can a hostile file make the reader allocate more than it holds. Every pickle is first
walked with `pickletools.genops`, which checks that each length it declares (a byte string,
a frame) fits in the bytes that follow and that memo indices stay small, before the C
unpickler (which allocates a declared length before reading it) sees it. Storages are read
only when their declared size matches the bytes present (zip members must be stored
uncompressed, as torch writes them). A tensor may view at most the elements of its storage
(Python integers, so no shape wraps around), and a tensor that does not own its whole
storage comes back as a read-only view of it, never a copy, so viewing one storage many
times costs nothing.
"""

import io
import math
import pickle
import pickletools
import struct
import zipfile
from collections import OrderedDict

import ml_dtypes
import numpy as np

from tlm import storage as tlm_storage  # `storage` names torch storages here
from tlm.errors import CheckpointError
from tlm.safe_read import shown

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001
# numpy's limit on the number of dimensions.
_MAX_RANK = 64
# How deeply state dicts may nest (HF's are flat; optimizer states nest a few levels).
_MAX_NESTING = 32

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
  """What the rebuild functions return; becomes a numpy array once the storages are read.

  offset, size and stride are kept as the pickle gave them and checked by `_materialize`.
  """

  def __init__(self, storage, offset, size, stride, dtype=None):
    if not isinstance(storage, _Storage):
      raise pickle.UnpicklingError("tensor without a storage")
    self.storage, self.offset, self.size, self.stride = storage, offset, size, stride
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
  # Only the rebuild functions (not itself: a pickle could nest it without end).
  if func not in (_rebuild_tensor, _rebuild_tensor_v3, _rebuild_parameter):
    raise pickle.UnpicklingError("_rebuild_from_type_v2 of something other than a tensor")
  if not isinstance(args, tuple):
    raise pickle.UnpicklingError("bad arguments to _rebuild_from_type_v2")
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
      raise pickle.UnpicklingError(f"unsupported persistent id {shown(pid)}")
    if not isinstance(pid[1], _StorageType) or not _is_count(pid[4]):
      raise pickle.UnpicklingError(f"bad storage reference {shown(pid)}")
    if not isinstance(pid[2], (str, int)):
      raise pickle.UnpicklingError(f"bad storage key {shown(pid[2])}")
    return self._load_storage(pid)


def _is_count(x) -> bool:
  """A non-negative Python int (not a bool)."""
  return isinstance(x, int) and not isinstance(x, bool) and x >= 0


class _Bounded:
  """A read-only file that ends at `end`: no read can ask for more than is left.

  BufferedReader.read(n) allocates n bytes before reading, so a length taken from the file
  must never reach it unbounded.
  """

  def __init__(self, f, end: int):
    self._f, self._end = f, end

  def remaining(self, n=None) -> int:
    """The bytes left before `end` (at most `n` of them, when n >= 0)."""
    left = max(0, self._end - self._f.tell())
    return left if n is None or n < 0 else min(n, left)

  def read(self, n=-1) -> bytes:
    return self._f.read(self.remaining(n))

  def readline(self, n=-1) -> bytes:
    return self._f.readline(self.remaining(n))

  def tell(self) -> int:
    return self._f.tell()

  def seek(self, pos: int) -> int:
    return self._f.seek(pos)


def _check_pickle(f: _Bounded, path: str) -> None:
  """Walks one pickle without running it; leaves `f` where it started.

  pickletools reads every argument (lengths included) and raises ValueError when one runs
  past the end of the file; frames are checked here too. Memo indices may not exceed the
  number of opcodes so far (torch numbers them 0, 1, 2, ...): the C unpickler grows its memo
  table to the largest index it is given.
  """
  start = f.tell()
  count = 0
  for count, (op, arg, pos) in enumerate(pickletools.genops(f), start=1):
    if op.name == "FRAME" and arg > f.remaining():
      raise CheckpointError(f"{path}: corrupt pickle (frame at byte {pos} past the end)")
    if op.name in ("PUT", "BINPUT", "LONG_BINPUT") and not 0 <= int(arg) <= count:
      raise CheckpointError(f"{path}: corrupt pickle (memo index {arg} at byte {pos})")
  f.seek(start)


def _materialize(ref: _TensorRef, path: str, name: str, shared: bool) -> np.ndarray:
  """The array of one tensor: its storage itself when it owns all of it, else a view.

  `shared`: other tensors use the same storage, so this one may not take it over.
  """
  storage, where = ref.storage, f"{path}: tensor {shown(name)}"
  if storage.data is None:
    raise CheckpointError(f"{where}: storage {shown(storage.key)} has no data")
  if storage.dtype is None and storage.data.size % ref.dtype.itemsize:
    raise CheckpointError(f"{where}: storage size is not a multiple of dtype")
  elements = storage.data.view(ref.dtype) if storage.dtype is None else storage.data
  size, stride, offset = ref.size, ref.stride, ref.offset
  if not (
    isinstance(size, (tuple, list))
    and isinstance(stride, (tuple, list))
    and len(size) == len(stride) <= _MAX_RANK
    and all(_is_count(x) for x in (*size, *stride, offset))
  ):
    raise CheckpointError(f"{where}: bad size {shown(size)} / stride {shown(stride)}")
  size, stride = tuple(size), tuple(stride)
  numel = math.prod(size)  # a Python int: no wrap-around
  if numel:
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= elements.size:
      raise CheckpointError(f"{where} reads element {last} of a storage of {elements.size}")
    # More elements than the storage holds from `offset` on means the tensor overlaps itself
    # (an expanded, stride-0 tensor): copying it out could take any amount of memory.
    if numel > elements.size - offset:
      raise CheckpointError(
        f"{where}: {numel} elements from a storage of {elements.size} (overlapping strides "
        f"{list(stride)}; expanded tensors are not supported)"
      )
  contiguous = tuple(math.prod(size[i + 1 :]) for i in range(len(size)))
  whole = offset == 0 and numel == elements.size and (numel == 0 or stride == contiguous)
  if whole and storage.dtype is not None and not shared and not storage.handed_out:
    # The common case (one tensor per storage, C order): hand out the storage itself.
    storage.handed_out = True
    return elements.reshape(size)
  # Any other tensor is a read-only view of its storage. A dimension of length 1 may carry
  # any stride: it never moves, so it gets 0 (a huge stride would overflow numpy's strides).
  return np.lib.stride_tricks.as_strided(
    elements[offset:] if numel else elements[:0],
    shape=size,
    strides=[s * ref.dtype.itemsize if n > 1 else 0 for n, s in zip(size, stride)],
    writeable=False,
  )


def _flatten(obj, path: str) -> dict[str, np.ndarray]:
  """{dotted name: array} of nested dicts of tensors (without recursion: pickles nest freely)."""
  refs: list[tuple[str, _TensorRef]] = []
  stack = [(obj, "", 0)]
  while stack:
    node, prefix, depth = stack.pop()
    if isinstance(node, dict):
      if depth > _MAX_NESTING:
        raise CheckpointError(f"{path}: dicts nested more than {_MAX_NESTING} deep")
      for key, value in reversed(node.items()):
        if not isinstance(key, str):
          raise CheckpointError(f"{path}: non-string key {shown(key)} under {shown(prefix)}")
        stack.append((value, f"{prefix}.{key}" if prefix else key, depth + 1))
    elif isinstance(node, _TensorRef):
      refs.append((prefix, node))
    else:
      raise CheckpointError(
        f"{path}: {shown(prefix or '<root>')} is a {type(node).__name__}, not a tensor or a dict"
      )
  uses: dict[int, int] = {}
  for _, ref in refs:
    uses[id(ref.storage)] = uses.get(id(ref.storage), 0) + 1
  out = {}
  for name, ref in refs:
    out[name] = _materialize(ref, path, name, shared=uses[id(ref.storage)] > 1)
  return out


def _read_exact(f, storage: _Storage, nbytes: int, path: str, swap: bool):
  """Reads a storage's `nbytes`, which the caller has checked are present in the file."""
  dtype = storage.dtype if storage.dtype is not None else np.dtype("u1")
  data = np.empty(nbytes // dtype.itemsize, dtype)
  if f.readinto(data.view(np.uint8)) != nbytes:
    raise CheckpointError(f"{path}: truncated file (storage {shown(storage.key)})")
  if swap and dtype.itemsize > 1:
    data = data.byteswap()
  storage.data = data


def _stored_member(archive: zipfile.ZipFile, name: str, path: str, file_size: int):
  """The ZipInfo of a member whose bytes are all in the file, uncompressed (as torch writes)."""
  info = archive.getinfo(name)
  if info.compress_type != zipfile.ZIP_STORED:
    raise CheckpointError(
      f"{path}: member {shown(name)} is compressed (torch.save stores members uncompressed)"
    )
  if info.header_offset + info.file_size > file_size:
    raise CheckpointError(f"{path}: member {shown(name)} runs past the end of the file")
  return info


def _read_zip(f, path: str, file_size: int) -> dict:
  try:
    archive = zipfile.ZipFile(f)  # random access: only the members' bytes are read
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
      if _stored_member(archive, root + "byteorder", path, file_size).file_size > 16:
        raise CheckpointError(f"{path}: corrupt byteorder record")
      byteorder = archive.read(root + "byteorder").strip()
    storages: dict[str, _Storage] = {}

    def load_storage(pid):
      _, storage_type, key, _, numel = pid[:5]
      if key not in storages:
        storage = _Storage(str(key), storage_type.dtype, numel)
        member = f"{root}data/{key}"
        if member not in names:
          raise CheckpointError(f"{path}: missing storage {shown(member)}")
        nbytes = numel * (storage_type.dtype.itemsize if storage_type.dtype else 1)
        if _stored_member(archive, member, path, file_size).file_size != nbytes:
          raise CheckpointError(f"{path}: storage {shown(member)} is not {nbytes} bytes")
        with archive.open(member) as f:
          _read_exact(f, storage, nbytes, path, byteorder == b"big")
        storages[key] = storage
      return storages[key]

    info = _stored_member(archive, pickles[0], path, file_size)
    data = archive.read(info)
    f = _Bounded(io.BytesIO(data), len(data))
    _check_pickle(f, path)
    return _Unpickler(f, path, load_storage).load()


def _read_legacy(f, path: str, file_size: int) -> dict:
  f = _Bounded(f, file_size)

  def plain():  # one pickle, no storages allowed
    _check_pickle(f, path)
    return _Unpickler(f, path, lambda pid: None).load()

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
    if not (_is_count(offset) and _is_count(size) and isinstance(view_key, (str, int))):
      raise pickle.UnpicklingError(f"bad storage view {shown(view_metadata)}")
    if view_key not in views:
      views[view_key] = _Storage(f"{key}[{offset}:{offset + size}]", storage_type.dtype, size)
      views[view_key].root, views[view_key].offset = storages[key], offset
    return views[view_key]

  _check_pickle(f, path)
  obj = _Unpickler(f, path, load_storage).load()
  keys = plain()
  if not isinstance(keys, list) or set(keys) != set(storages):
    raise CheckpointError(f"{path}: corrupt legacy checkpoint (storage key list)")
  _read_legacy_storages(f, path, [storages[key] for key in keys], views, swap, file_size)
  return obj


def _read_legacy_storages(f, path: str, storages: list, views: dict, swap: bool, file_size: int):
  """The legacy format's storages, in the order of its key list, each after its element
  count; then the views of them (checked to lie inside their root storage)."""
  for storage in storages:
    key = storage.key
    header = f.read(8)
    if len(header) != 8:
      raise CheckpointError(f"{path}: truncated file (storage {shown(key)})")
    (numel,) = struct.unpack("<q" if not swap else ">q", header)
    if numel != storage.numel:
      raise CheckpointError(
        f"{path}: storage {shown(key)} has {numel} elements, expected {storage.numel}"
      )
    nbytes = numel * storage.dtype.itemsize
    if f.tell() + nbytes > file_size:
      raise CheckpointError(f"{path}: truncated file (storage {shown(key)})")
    _read_exact(f._f, storage, nbytes, path, swap)
  for view in views.values():
    if view.offset + view.numel > view.root.numel:
      raise CheckpointError(f"{path}: storage view {shown(view.key)} out of bounds")
    view.data = view.root.data[view.offset : view.offset + view.numel]
    view.handed_out = True  # always a view of a view: it shares memory with its root


def read(path: str) -> dict[str, np.ndarray]:
  """Reads the tensors of a `torch.save`d state dict, without torch.

  Args:
    path: e.g. `pytorch_model.bin`, in the zip or the legacy format.

  Returns:
    {name: array}; nested dicts are flattened with "." (bfloat16 as ml_dtypes.bfloat16). A
    tensor that is all of its storage, in C order, and its only user is that (writable)
    storage; every other tensor is a read-only view of its storage.

  Raises:
    CheckpointError: naming the file (and tensor) for a missing, truncated or corrupt file, or
      a pickle that needs anything besides tensors and dicts.
  """
  try:
    with tlm_storage.open_file(path, "rb") as f:
      file_size = tlm_storage.getsize(path)
      head = f.read(4)
      f.seek(0)
      obj = (_read_zip if head.startswith(b"PK") else _read_legacy)(f, path, file_size)
  except OSError as e:
    raise CheckpointError(f"{path}: cannot read ({e.strerror or e})") from None
  except (
    RecursionError,
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
    message = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
    raise CheckpointError(f"{path}: corrupt or truncated PyTorch checkpoint ({message})") from None
  if not isinstance(obj, dict):
    raise CheckpointError(f"{path}: expected a state dict, found a {type(obj).__name__}")
  return _flatten(obj, path)
