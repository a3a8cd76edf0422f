"""Where tlm reads and writes: local POSIX paths, or object-store URIs through `etils.epath`.

Every workdir, checkpoint, data and output path may be local (`runs/x`) or remote
(`gs://bucket/runs/x`, and the other schemes epath routes to fsspec: `s3://`, `az://`, `hf://`;
the matching fsspec backend, e.g. gcsfs for `gs://`, must be installed). This module owns the
difference: the helpers below (exists, listdir, open, remove, ...) call `os` for a local path,
so that local behaviour and error types stay exactly POSIX, and `epath.Path` for a remote one.

Every path enters tlm through `parse`, once, where the user gives it (run.py's path flags, the
config's path keys): `file://` becomes the local path, a URI becomes `scheme://bucket/key`, and
anything tlm cannot honour (an empty bucket, an unknown scheme, a NUL or newline, a scheme whose
fsspec package is missing) is a one-line error naming the flag or key before any work starts.
It returns a `Location`, a str that carries the scheme decided there: the helpers dispatch on
that field, and paths joined to it (`workdir / "checkpoints"`) carry it on, so local or remote
is decided once per path the user gave, not at every call (`decide` is the one place a text is
examined; a plain str is still accepted, converted by `location` at the helper's entry).

An object store has no atomic rename (a "directory" is a key prefix; moving one copies every
object), no hard links and no `fcntl` locks, but a single object appears whole or not at all
and can be created only-if-absent. The protocols built on that (`tlm.files`,
`tlm.workdir_lock`, `tlm.train.checkpointing`) are:

- a file: produced locally, then uploaded as one object (`write_object`): readers see the old
  object or the new one, never a part;
- a directory: produced in a local staging directory, uploaded, and only then marked
  complete by a commit marker object written last (`COMMIT_MARKER`, the protocol orbax
  uses for checkpoints on GCS with `commit_success.txt`); `is_committed` is the reader's test;
- a lock: an exclusive create (`create_exclusive`: fsspec's `mode="xb"`, which gcsfs maps to
  GCS `ifGenerationMatch=0`) or, where the backend cannot, a lease: the content (with the
  owner's token) is written and read back after a settling delay, and the writer owns it only
  if its token is still there.
"""

import contextlib
import errno
import functools
import importlib.util
import io
import os
import posixpath
import re
import shutil
import time
from collections.abc import Iterator
from typing import IO, Any

from tlm import remote_clients, remote_retries
from tlm.errors import UserError

# Written last into a directory committed by `tlm.files.atomic_output_dir` on an object store
# (hidden: builders that replace their output directory ignore hidden names).
COMMIT_MARKER = ".tlm_committed"
# The schemes etils.epath routes to fsspec (etils/epath/gpath.py `_URI_SCHEMES`).
SCHEMES = ("gs", "s3", "az", "hf")
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# "gs:/bucket", "gs:bucket", "file:/x": a URI with a slash missing, which a filesystem would take
# for a local directory named "gs:" in the current directory.
_MISSING_SLASH = re.compile(r"^(gs|s3|az|hf|file):(?!//)", re.IGNORECASE)
# Control characters (NUL, newline, ...) and the lone surrogates that stand for undecodable
# bytes of a command line: a path holding one cannot be written to a log line or a JSON file.
_NOT_TEXT = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")
# POSIX NAME_MAX and PATH_MAX of the usual filesystems: longer fails with ENAMETOOLONG.
_NAME_MAX, _PATH_MAX = 255, 4095
# A lease (no exclusive create): how long a writer waits before reading its lock back. Two
# writers that both wrote within this window both read the later one's token.
LEASE_SETTLE_S = 2.0


# The fsspec backends and the HTTP and cloud client libraries under them. Their failures (no
# network, a name that does not resolve, missing credentials, an HTTP status: gcsfs's HttpError)
# are not OSError, or are OSErrors that name no path (aiohttp's connection errors):
# `_store_errors` makes them an OSError naming the path, the class every caller of these
# helpers handles; an OSError of the backend without a path (gcsfs's 403, "Forbidden: URL")
# gets the path. Anything else (tlm's own bugs included) passes unchanged.
_TRANSPORT_PACKAGES = frozenset(
  (
    "httpx",
    "httpx2",
    "httpcore",
    "requests",
    "urllib3",
    "aiohttp",
    "botocore",
    "google",
    "azure",
    "gcsfs",
  )
)


def _store_errors(fn):
  """Raises an fsspec backend's transport failure in `fn(path, ...)` as an OSError naming the
  path and what failed, in one line."""

  @functools.wraps(fn)
  def wrapper(path, *args, **kwargs):
    try:
      return fn(path, *args, **kwargs)
    except Exception as e:
      package = type(e).__module__.split(".")[0]
      if package not in _TRANSPORT_PACKAGES:
        if type(e) is OSError and e.filename is None:  # gcsfs's 403: "Forbidden: URL\nwhy"
          text = " ".join(str(e).split())[:300]
          if text.startswith("Forbidden"):
            raise PermissionError(errno.EACCES, text, os.fspath(path)) from None
          raise OSError(e.errno or errno.EIO, text, os.fspath(path)) from None
        raise
      detail = " ".join(str(e).split())[:200]
      raise OSError(
        errno.EIO,
        f"the object store failed or cannot be reached ({type(e).__name__}: {detail})",
        os.fspath(path),
      ) from None

  return wrapper


def decide(text: str) -> str | None:
  """The URI scheme written at the front of `text` ("gs" for gs://bucket/x, "file" for
  file://x), None for a plain local path.

  The one place a path's text is examined for its scheme: `parse` at the edge, and `location`
  for a plain string that reaches a helper below it. A `Location` carries the answer, so a
  path parsed at the edge is never examined again (tests count the calls).
  """
  match = _URI.match(text)
  return match.group(1).lower() if match else None


class Location(str):
  """A path parsed once: its text with the storage scheme it names, decided when it was made.

  The text is the canonical path (a local path without `file://`, or `scheme://bucket/key`),
  and since a Location is a `str` it goes wherever a path string went: `open`, `os.path`,
  f-strings, `json.dumps` (a config holding one serializes, compares and hashes as before).
  What it adds is `scheme` (None for a local path) and `is_remote`, so that the helpers of
  this module dispatch on a carried field instead of re-reading the text; `/`, `joinpath`,
  `parent`, `join`, `dirname` and `abspath` derive new Locations with the same scheme,
  unexamined, and so does appending text (`loc + "x"`), which makes `os.path.join(loc, name)`
  a Location too (posixpath.join appends to its first argument): a path built from a parsed one
  is never examined again. Other str operations (slicing, `"x" + loc`, `.rstrip()`) give a
  plain str, which the helpers accept and convert (`location`): correct, only not free.

  Made by `parse` (a flag or config value) or `location` (anything else); the constructor
  trusts the scheme it is given. Immutable, like the str it is.
  """

  scheme: str | None
  is_remote: bool

  def __new__(cls, text: str, scheme: str | None) -> "Location":
    self = super().__new__(cls, text)
    self.__dict__.update(scheme=scheme, is_remote=scheme is not None)
    return self

  def __setattr__(self, name: str, value: Any) -> None:
    raise AttributeError(f"Location is immutable (cannot set {name})")

  def __add__(self, other: str) -> "Location":
    # Text appended to a path stays on its storage: `os.path.join(loc, "x")` (which appends to
    # its first argument) and `loc + ".tmp"` keep the scheme decided when `loc` was parsed.
    if not isinstance(other, str):
      return NotImplemented
    return Location(str.__add__(self, other), self.scheme)

  def __reduce__(self):
    # Unpickled (a worker process, a deep copy) with its scheme, not parsed again.
    return Location, (str(self), self.scheme)

  @property
  def path(self) -> str:
    """The text after the scheme ("bucket/key" of gs://bucket/key); a local path itself."""
    return self[len(self.scheme) + 3 :] if self.is_remote else str(self)

  def joinpath(self, *names: str) -> "Location":
    """The path below this one: "/"-joined for a URI, `os.path.join`ed for a local path."""
    joined = posixpath.join(self, *names) if self.is_remote else os.path.join(self, *names)
    return Location(joined, self.scheme)

  def __truediv__(self, name: str) -> "Location":
    return self.joinpath(name)

  def suffixed(self, text: str) -> "Location":
    """This path with `text` appended to its last name (`x` -> `x.tmp`), the scheme kept."""
    return Location(str(self) + text, self.scheme)

  @property
  def parent(self) -> "Location":
    """The directory holding this path; for a URI never above its bucket."""
    if not self.is_remote:
      return Location(os.path.dirname(self), None)
    text = self.rstrip("/")
    head, _, tail = text.rpartition("/")
    return Location(text if head.endswith(":/") or not tail else head, self.scheme)


def location(path: "Location | str | os.PathLike") -> Location:
  """`path` as a Location: itself if it is one (nothing examined), else its text decided once.

  The entry of every helper below, so that a plain str (a path built with `os.path.join`, a
  test's literal) keeps working; `file://x` becomes the local x.

  Raises:
    UserError: another scheme (`http://`, a typo): tlm cannot read or write it.
  """
  if isinstance(path, Location):
    return path
  text = os.fspath(path)
  found = decide(text)
  if found is None:
    return Location(text, None)
  if found == "file":
    return Location(text[len("file://") :], None)
  if found not in SCHEMES:
    raise UserError(f"{text}: {_unsupported(found)}")
  return Location(text, found)


def scheme(path: str) -> str | None:
  """The URI scheme of `path` ("gs" for gs://bucket/x), None for a local path."""
  if isinstance(path, Location):
    return path.scheme
  return decide(os.fspath(path))


def _shown(text: str) -> str:
  """`text` as a message shows it on one line (escaped if it holds a control character)."""
  return text if text.isprintable() else repr(text)


def parse(text: str, name: str) -> Location:
  """A path argument or setting parsed once, where it enters tlm (run.py's flags, the config).

  Local paths stay as given; `file://PATH` is the local PATH. A URI is split into scheme,
  bucket and key and rejoined as `scheme://bucket/key` (scheme in lower case, no trailing
  slash), the form the rest of tlm relies on: the helpers below then never see anything else.

  Args:
    text: the path as the user wrote it (non-empty).
    name: what it came from, named in the error: a flag ("--workdir") or a key
      ("data.ssm_dir").

  Returns:
    The canonical path, as a `Location` carrying its scheme: the layers below take it and
    never decide local or remote again.

  Raises:
    UserError: one line naming `name` for a control character (NUL, newline, ...), bytes that
      are not UTF-8, a name longer than the filesystem takes, an unsupported scheme, a URI
      missing a slash ("gs:/b"), an empty bucket ("gs://"), an empty, "." or ".." component
      in an object key, or a scheme whose filesystem package is not installed (naming it),
      or a backslash in a local path's absolute form (tensorstore's separator).
  """
  where = f"{name}={_shown(text)}"
  if not text:
    raise UserError(f"{name}: empty path")
  bad = _NOT_TEXT.search(text)
  if bad is not None:
    char = bad.group(0)
    what = "bytes that are not UTF-8" if char >= "\ud800" else f"the control character {char!r}"
    raise UserError(f"{where}: a path cannot hold {what}")
  # A Location (a config validated again after an override) carries its scheme: checked, not
  # examined again.
  found = text.scheme if isinstance(text, Location) else decide(text)
  if found is None:
    typo = _MISSING_SLASH.match(text)
    if typo is not None:
      raise UserError(
        f"{where}: a {typo.group(1).lower()}:// URI needs two slashes (for a local directory "
        f"of that name write ./{text})"
      )
    return Location(_parse_local(text, where), None)
  rest = text[len(found) + len("://") :]
  if found == "file":
    if not rest:
      raise UserError(f"{where}: file:// names no path")
    return Location(_parse_local(rest, where), None)
  if found not in SCHEMES:
    raise UserError(f"{where}: {_unsupported(found)}")
  bucket, _, key = rest.partition("/")
  if not bucket:
    raise UserError(f"{where}: no bucket (write {found}://BUCKET/PATH)")
  parts = key.rstrip("/").split("/") if key.rstrip("/") else []
  if any(part in ("", ".", "..") for part in parts):
    raise UserError(f"{where}: an object key cannot hold an empty, . or .. component")
  _require_filesystem(found, where)
  # Before any client of the store is made, orbax's own included.
  _prepare_clients()
  return Location("/".join([f"{found}://{bucket}", *parts]), found)


def _parse_local(path: str, where: str) -> str:
  # tensorstore (orbax's checkpoint writer and reader) takes a backslash for a directory
  # separator: a checkpoint saved under "a\b" landed partly in "a/b" (outside the given
  # location) and could not be restored. The absolute form counts: a relative path inherits
  # the working directory's name.
  if "\\" in os.path.abspath(path):
    shown = "" if "\\" in path else f" (its absolute form {_shown(os.path.abspath(path))})"
    raise UserError(
      f"{where}{shown}: a path cannot hold a backslash (tensorstore, which writes and reads "
      "checkpoints, takes it for a directory separator)"
    )
  if len(os.fsencode(path)) > _PATH_MAX or any(
    len(os.fsencode(part)) > _NAME_MAX for part in path.split("/")
  ):
    raise UserError(
      f"{where[:80]}...: longer than a filesystem takes ({_NAME_MAX} bytes a name, "
      f"{_PATH_MAX} a path)"
    )
  return path


def _unsupported(found: str) -> str:
  return (
    f"unsupported storage scheme {found}:// (local paths, file:// and "
    + ", ".join(f"{s}://" for s in SCHEMES)
    + " are)"
  )


def _require_filesystem(found: str, where: str) -> None:
  """Raises UserError naming the package to install unless fsspec can serve `found`://."""
  try:
    from fsspec.registry import known_implementations, registry
  except ImportError:
    raise UserError(f"{where}: {found}:// needs fsspec (pip install fsspec)") from None
  if found in registry:  # registered by the running program (or already imported)
    return
  known = known_implementations.get(found, {})
  package = known.get("class", "").split(".")[0]
  # Found without being imported: gcsfs and its kin take seconds to import.
  if package and importlib.util.find_spec(package) is not None:
    return
  # gcsfs with what it talks HTTP with, pinned to the versions tested.
  how = "pip install -r requirements-gcs.txt" if package == "gcsfs" else f"pip install {package}"
  raise UserError(f"{where}: {found}:// needs the {package} package ({how})")


# A path argument of the helpers below: a Location (dispatched on as it is) or, for
# compatibility, a str or os.PathLike (converted once, by `location`, at the helper's entry).
PathArg = Location | str | os.PathLike


def is_remote(path: PathArg) -> bool:
  """True for an object-store URI (gs://, s3://, az://, hf://); False for a local path.

  Raises:
    UserError: another scheme (`http://`, a typo): tlm cannot read or write it.
  """
  return location(path).is_remote


def local(path: PathArg) -> str:
  """A local path as given (a `file://` URI without its scheme)."""
  if isinstance(path, Location):
    return path
  path = os.fspath(path)
  return path[len("file://") :] if path.startswith("file://") else path


def epath_of(path: PathArg):
  """`etils.epath.Path` of a remote path (imported lazily: numpy-only modes stay light)."""
  from etils import epath

  _prepare_clients()
  return epath.Path(str(path))


def abspath(path: PathArg) -> Location:
  """The absolute form of a local path; a remote URI unchanged (without a trailing slash)."""
  path = location(path)
  if path.is_remote:
    return Location(path.rstrip("/"), path.scheme)
  return Location(os.path.abspath(path), None)


def within(path: PathArg, directory: PathArg) -> bool:
  """Whether `path` is `directory` or below it, compared by whole components of their absolute
  forms (`abspath`). Links are not resolved: a caller that must see through them passes real
  paths (`os.path.realpath`)."""
  path, directory = abspath(path), abspath(directory)
  if path.is_remote != directory.is_remote:
    return False
  sep = "/" if path.is_remote else os.sep
  return path == directory or path.startswith(directory.rstrip(sep) + sep)


def join(path: PathArg, *names: str) -> Location:
  """`os.path.join` for a local path; "/"-joined for a URI (the scheme kept, not re-read)."""
  return location(path).joinpath(*names)


def dirname(path: PathArg) -> Location:
  """The parent; for a URI never above its bucket (`gs://b/x` -> `gs://b`)."""
  return location(path).parent


@_store_errors
def exists(path: PathArg) -> bool:
  path = location(path)
  return epath_of(path).exists() if path.is_remote else os.path.exists(path)


@_store_errors
def isdir(path: PathArg) -> bool:
  path = location(path)
  return epath_of(path).is_dir() if path.is_remote else os.path.isdir(path)


@_store_errors
def isfile(path: PathArg) -> bool:
  path = location(path)
  return epath_of(path).is_file() if path.is_remote else os.path.isfile(path)


@_store_errors
def listdir(path: PathArg) -> list[str]:
  """Names in a directory (for a URI: the next level of keys under the prefix)."""
  path = location(path)
  if path.is_remote:
    return sorted(p.name for p in epath_of(path).iterdir())
  return os.listdir(path)


def makedirs(path: PathArg) -> None:
  """Creates a directory and its parents; nothing on an object store, which has no
  directories (a prefix exists once an object is written under it)."""
  path = location(path)
  if not path.is_remote:
    os.makedirs(path, exist_ok=True)


@_store_errors
def getsize(path: PathArg) -> int:
  path = location(path)
  if path.is_remote:
    return int(epath_of(path).stat().length)
  return os.path.getsize(path)


@_store_errors
def mtime(path: PathArg) -> float:
  path = location(path)
  if path.is_remote:
    return float(epath_of(path).stat().mtime)
  return os.path.getmtime(path)


@_store_errors
def remove(path: PathArg) -> None:
  """Removes a file; FileNotFoundError if absent."""
  path = location(path)
  if path.is_remote:
    epath_of(path).unlink()
  else:
    os.remove(path)


def rmtree(path: PathArg) -> None:
  """Removes a directory tree, ignoring errors (an absent one included)."""
  path = location(path)
  if path.is_remote:
    with contextlib.suppress(OSError):
      epath_of(path).rmtree(missing_ok=True)
  else:
    shutil.rmtree(path, ignore_errors=True)


@_store_errors
def open_file(path: PathArg, mode: str = "r", encoding: str | None = None) -> IO[Any]:
  """`open` for a local path; epath's for a URI (text modes UTF-8).

  A remote file opened for writing becomes visible when it is closed, whole (one object);
  writers that must not publish a part on an exception use `write_object` instead.
  """
  path = location(path)
  if not path.is_remote:
    return open(path, mode, encoding=encoding)  # noqa: SIM115 (the caller closes it)
  binary = epath_of(path).open(mode.replace("t", "").replace("b", "") + "b")
  if "b" in mode:
    return binary
  return io.TextIOWrapper(binary, encoding=encoding or "utf-8")


def read_bytes(path: PathArg) -> bytes:
  with open_file(path, "rb") as f:
    return f.read()


def read_text(path: PathArg) -> str:
  return read_bytes(path).decode("utf-8")


@_store_errors
def write_object(path: PathArg, data: bytes) -> None:
  """Writes `data` to a URI as one object, in one write (never seen half-written)."""
  epath_of(path).write_bytes(data)


def walk_files(root: PathArg) -> Iterator[str]:
  """Paths of every file under `root`, relative to it ("/"-separated), in sorted order."""
  root = location(root)
  if not root.is_remote:
    for top, dirs, names in os.walk(root):
      dirs.sort()
      for name in sorted(names):
        yield os.path.relpath(os.path.join(top, name), root).replace(os.sep, "/")
    return
  # By listing, level by level (epath's walk yields fsspec's keys, without the scheme).
  pending, out = ([""] if isdir(root) else []), []
  while pending:
    prefix = pending.pop()
    for child in epath_of(root / prefix if prefix else root).iterdir():
      rel = f"{prefix}/{child.name}" if prefix else child.name
      (pending if child.is_dir() else out).append(rel)
  yield from sorted(out)


@_store_errors
def upload_tree(local_dir: str, dst: PathArg) -> None:
  """Uploads every file of a local directory to the remote directory `dst`, streamed."""
  dst = location(dst)
  for rel in walk_files(local_dir):
    with open(os.path.join(local_dir, rel), "rb") as src, epath_of(dst / rel).open("wb") as f:
      shutil.copyfileobj(src, f, 1 << 24)


@_store_errors
def copy_tree(src: PathArg, dst: PathArg) -> None:
  """Copies every file of a remote directory `src` to `dst` (object by object)."""
  src, dst = location(src), location(dst)
  for rel in walk_files(src):
    epath_of(src / rel).copy(str(dst / rel), overwrite=True)


def move_tree(src: PathArg, dst: PathArg) -> None:
  """Moves a directory: one rename locally; on an object store a copy, then the deletion of
  `src` (not atomic: a crash between leaves both, and `src` is then moved again)."""
  src, dst = location(src), location(dst)
  if not src.is_remote:
    os.rename(src, dst)
    return
  copy_tree(src, dst)
  rmtree(src)


def is_committed(directory: PathArg) -> bool:
  """Whether a directory written by `atomic_output_dir` is complete: always locally (renamed
  into place whole); on an object store, when its commit marker exists."""
  directory = location(directory)
  return not directory.is_remote or isfile(directory / COMMIT_MARKER)


@_store_errors
def create_exclusive(path: PathArg, content: str) -> bool:
  """Creates the remote object `path` holding `content` unless it exists; False if it does.

  Uses the backend's exclusive create (fsspec `open(path, "xb")`; gcsfs sends GCS
  `ifGenerationMatch=0`, so of several concurrent creators exactly one succeeds), then reads
  the object back (a backend that took "xb" for "wb" is caught when another writer won).
  A backend without one (it rejects mode "xb") gets a lease instead: an absent object is
  written, left `LEASE_SETTLE_S` for a concurrent writer's object to land, and read back:
  ours only if it still holds our content (which carries a unique token).
  """
  path = location(path)
  fs, key = filesystem(path)
  try:
    with fs.open(key, "xb") as f:
      f.write(content.encode("utf-8"))
    # A backend that accepts "xb" but overwrites is caught here when the other writer won.
    return _holds(path, content)
  except FileExistsError:
    return False
  except (ValueError, NotImplementedError, TypeError):
    pass  # no exclusive create in this backend: a lease
  if exists(path):
    return False
  write_object(path, content.encode("utf-8"))
  time.sleep(LEASE_SETTLE_S)
  return _holds(path, content)


def filesystem(path: PathArg):
  """(the fsspec filesystem of a remote path, the path's key in it), its client prepared."""
  import fsspec

  _prepare_clients()
  return fsspec.core.url_to_fs(str(location(path)))


def _prepare_clients() -> None:
  """The clients' settings (`tlm.remote_clients`) and tlm's retries in gcsfs
  (`tlm.remote_retries`), before a filesystem object of a remote path is made."""
  remote_clients.prepare()
  remote_retries.install_gcsfs()


def _holds(path: Location, content: str) -> bool:
  try:
    return read_text(path) == content
  except FileNotFoundError:
    return False
