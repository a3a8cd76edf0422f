"""A filesystem that behaves like an object store, behind `gs://`, for tests without network.

`install(root)` registers `ObjectStoreFS` with fsspec for the `gs`/`gcs` protocols, so that
`etils.epath` (whose fsspec backend serves `gs://`) and hence tlm and orbax reach it exactly as
they would reach gcsfs and a real bucket: `gs://BUCKET/KEY` is the local file `root/BUCKET/KEY`.
It keeps to what an object store offers, and no more:

- an object appears whole when its writer is closed (GCS: the upload is finalized), never in
  part; `open(path, "xb")` creates only if absent (GCS `ifGenerationMatch=0`);
- a "directory" is a key prefix: `mkdir` creates nothing, a prefix without objects does not
  exist, and moving a prefix (rename / mv of a directory) raises: an object store can only
  copy it object by object;
- no hard links, renames or locks on its files: `os.link`, `os.rename`, `os.replace` and
  `fcntl.flock` on a path under `root` raise, so code that treats a `gs://` path as local
  (or takes a POSIX shortcut on its files) fails loudly.

Tensorstore, which writes orbax's arrays, cannot reach an fsspec filesystem: `install` points
orbax's GCS key-value store spec at the same local directory with tensorstore's `file`
driver (object writes, as its `gcs` driver does; no directory renames) and says the bucket has
no hierarchical namespace (orbax would ask GCS). Everything else of orbax (its commit file,
listing, deletion of old steps) goes through epath to this filesystem.

Run a tlm command on it in a subprocess: `python tests/objstore.py ROOT run.py --mode=...`.
"""

import datetime
import errno
import fcntl
import io
import os
import shutil
import sys
import uuid

import fsspec
from fsspec.spec import AbstractFileSystem

_REAL = {"link": os.link, "rename": os.rename, "replace": os.replace, "flock": fcntl.flock}
_TMP = ".objstore-tmp-"


class _ObjectWriter(io.RawIOBase):
  """A file being uploaded: buffered in a hidden local file, published whole on close."""

  def __init__(self, target: str, exclusive: bool):
    super().__init__()
    self.target, self.exclusive = target, exclusive
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    self._tmp = os.path.join(parent, f"{_TMP}{uuid.uuid4().hex}")
    self._f = open(self._tmp, "wb")  # noqa: SIM115 (closed in close())
    self.mode = "xb" if exclusive else "wb"

  def write(self, data) -> int:
    return self._f.write(data)

  def writable(self) -> bool:
    return True

  def close(self) -> None:
    if self.closed:
      return
    super().close()
    self._f.close()
    try:
      if self.exclusive:  # the generation-match precondition: fails if the object exists
        try:
          _REAL["link"](self._tmp, self.target)
        except FileExistsError:
          raise FileExistsError(
            errno.EEXIST, "object exists (precondition failed)", self.target
          ) from None
      else:
        _REAL["replace"](self._tmp, self.target)
    finally:
      if os.path.exists(self._tmp):
        os.remove(self._tmp)

  # As fsspec's files: a writer closed by an exception (`with` block) still publishes.


class ObjectStoreFS(AbstractFileSystem):
  """An fsspec filesystem with object-store semantics over a local directory (`ROOT`)."""

  protocol = ("gs", "gcs")
  root_marker = ""
  ROOT = ""

  def __init__(self, *args, **kwargs):
    kwargs.pop("finalize_on_close", None)  # epath's gcsfs option
    super().__init__(*args, **kwargs)

  def _local(self, path: str) -> str:
    if not self.ROOT:
      raise RuntimeError("tests.objstore.install(root) first")
    return os.path.join(self.ROOT, self._strip_protocol(path))

  @staticmethod
  def _has_objects(local: str) -> bool:
    for _, _, names in os.walk(local):
      if any(not n.startswith(_TMP) for n in names):
        return True
    return False

  def _entry(self, key: str, local: str) -> dict | None:
    if os.path.isfile(local):
      st = os.stat(local)
      return {"name": key, "size": st.st_size, "type": "file", "mtime": st.st_mtime}
    if os.path.isdir(local) and self._has_objects(local):
      return {"name": key, "size": 0, "type": "directory"}
    return None

  def ls(self, path, detail=True, **kwargs):
    key = self._strip_protocol(path)
    local = self._local(key)
    entry = self._entry(key, local)
    if entry is None:
      raise FileNotFoundError(path)
    if entry["type"] == "file":
      out = [entry]
    else:
      out = []
      for name in sorted(os.listdir(local)):
        if name.startswith(_TMP):
          continue
        child = self._entry(f"{key}/{name}", os.path.join(local, name))
        if child is not None:
          out.append(child)
    return out if detail else [e["name"] for e in out]

  def info(self, path, **kwargs):
    key = self._strip_protocol(path)
    entry = self._entry(key, self._local(key))
    if entry is None:
      raise FileNotFoundError(path)
    return entry

  def modified(self, path):
    return datetime.datetime.fromtimestamp(os.path.getmtime(self._local(path)))

  def mkdir(self, path, create_parents=True, **kwargs):
    pass  # a prefix exists once an object is under it

  def makedirs(self, path, exist_ok=False):
    pass

  def rmdir(self, path):
    pass

  def _open(self, path, mode="rb", **kwargs):
    local = self._local(path)
    if mode == "rb":
      if not os.path.isfile(local):
        raise FileNotFoundError(path)
      return open(local, "rb")  # noqa: SIM115 (the caller closes it)
    if mode in ("wb", "xb"):
      if mode == "xb" and os.path.exists(local):
        raise FileExistsError(errno.EEXIST, "object exists", path)
      return _ObjectWriter(local, exclusive=mode == "xb")
    raise ValueError(f"object store: unsupported mode {mode!r} (no append, no update)")

  def rm_file(self, path):
    local = self._local(path)
    if os.path.isdir(local):
      return  # a prefix (listed by rm(recursive=True)): nothing to delete itself
    if not os.path.isfile(local):
      raise FileNotFoundError(path)
    os.remove(local)
    # Empty prefixes vanish with their last object.
    parent = os.path.dirname(local)
    while parent.startswith(self.ROOT + os.sep) and not os.listdir(parent):
      os.rmdir(parent)
      parent = os.path.dirname(parent)

  def _rm(self, path):
    self.rm_file(path)

  def rm(self, path, recursive=False, maxdepth=None):
    # Deletes the objects; prefixes among the listed paths vanish with them (GCS alike).
    for p in reversed(self.expand_path(path, recursive=recursive, maxdepth=maxdepth)):
      if os.path.isfile(self._local(p)):
        self.rm_file(p)

  def cp_file(self, path1, path2, **kwargs):
    src, dst = self._local(path1), self._local(path2)
    if not os.path.isfile(src):
      raise FileNotFoundError(path1)
    with open(src, "rb") as f, _ObjectWriter(dst, exclusive=False) as out:
      shutil.copyfileobj(f, out)

  def mv(self, path1, path2, recursive=False, maxdepth=None, **kwargs):
    if self.isdir(path1):
      raise OSError(errno.ENOTSUP, "object store: a prefix cannot be renamed", path1)
    self.cp_file(path1, path2)
    self.rm_file(path1)


def _under_root(*paths) -> bool:
  root = ObjectStoreFS.ROOT
  for p in paths:
    if isinstance(p, (str, bytes, os.PathLike)):
      p = os.path.abspath(os.fsdecode(p))
      if p == root or p.startswith(root + os.sep):
        return True
  return False


def _refuse(name: str):
  real = _REAL[name]

  def guarded(*args, **kwargs):
    if _under_root(*args[:2]):
      raise OSError(errno.ENOTSUP, f"object store: no {name}", os.fsdecode(args[0]))
    return real(*args, **kwargs)

  return guarded


def _flock(fd, op):
  path = os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")
  if _under_root(path):
    raise OSError(errno.ENOLCK, "object store: no locks", path)
  return _REAL["flock"](fd, op)


def local_path(uri: str) -> str:
  """The local file behind `gs://BUCKET/KEY`."""
  return os.path.join(ObjectStoreFS.ROOT, uri[len("gs://") :])


def install(root: str) -> None:
  """Serves `gs://` from `root` in this process (see the module docstring)."""
  from etils.epath import backend
  from orbax.checkpoint._src.path import gcs_utils

  ObjectStoreFS.ROOT = os.path.abspath(root)
  os.makedirs(ObjectStoreFS.ROOT, exist_ok=True)
  for protocol in ObjectStoreFS.protocol:
    fsspec.register_implementation(protocol, ObjectStoreFS, clobber=True)
  ObjectStoreFS.clear_instance_cache()
  backend.fsspec_backend._get_filesystem.cache_clear()  # epath caches the gcs filesystem
  _REAL.setdefault("kvstore", gcs_utils.get_kvstore_for_gcs)
  _REAL.setdefault("hns", gcs_utils.is_hierarchical_namespace_enabled)
  gcs_utils.get_kvstore_for_gcs = lambda path: {"driver": "file", "path": local_path(path)}
  gcs_utils.is_hierarchical_namespace_enabled = lambda path: False
  os.link, os.rename, os.replace = _refuse("link"), _refuse("rename"), _refuse("replace")
  fcntl.flock = _flock


def uninstall() -> None:
  """Undoes `install` but for the fsspec registration (gs:// then fails without a ROOT)."""
  from orbax.checkpoint._src.path import gcs_utils

  os.link, os.rename, os.replace = _REAL["link"], _REAL["rename"], _REAL["replace"]
  fcntl.flock = _REAL["flock"]
  gcs_utils.get_kvstore_for_gcs = _REAL["kvstore"]
  gcs_utils.is_hierarchical_namespace_enabled = _REAL["hns"]
  ObjectStoreFS.ROOT = ""


if __name__ == "__main__":
  # python tests/objstore.py ROOT run.py ARGS...: a tlm command with gs:// served from ROOT.
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  sys.path.insert(0, repo)
  install(sys.argv[1])
  import runpy

  script = sys.argv[2]
  sys.argv = [script] + sys.argv[3:]
  runpy.run_path(script, run_name="__main__")
