"""What tlm sets on the object-store clients a pod runs, that a user would not think to set: the
deadline of every remote request, and the settings under which gcsfs and TensorStore behave on
a pod (and against a GCS emulator) as tlm's protocols need.

The clients: gcsfs (fsspec's GCS backend) serves `gs://` to `etils.epath`, so to tlm's storage
helpers and orbax's file operations, and to tlm's ranged reads of an example store
(`tlm.store.ranged`); TensorStore's own `gcs` driver writes and reads orbax's arrays. Their
defaults, and why tlm changes them:

- gcsfs waits for an answer forever (`requests_timeout=None`): one black-holed request stalls
  the host, and with it the pod, without a line. Every gcsfs request gets a timeout here:
  connecting, and each read of its socket, within `request_timeout_s()` (no progress for that
  long; a slow transfer that keeps moving is not cut). TensorStore gets the same through curl
  (connect timeout; abort below 1 byte/s for that long).
- gcsfs 2026.10 first asks the Storage Control API over gRPC whether a bucket is zonal or
  hierarchical; where that endpoint cannot be reached (an emulator, a VPC without it) each
  process waits 60 s, or logs a warning at every request, before using the JSON API that tlm
  uses anyway. The probe is off (`GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`) unless the
  environment already sets that variable.
- gcsfs caches a prefix's listing for the lifetime of its filesystem object, one object per
  set of options (epath's and tlm's differ). tlm coordinates through the store between
  processes and clients (the workdir lock, commit markers, checkpoints that TensorStore
  writes behind gcsfs's back), so a stale listing hides an object that exists: the lock just
  created reads back as absent. The listings cache is off: a listing is read when it is needed.
- gcsfs logs each failure it raises, with its traceback, and the retries before it. tlm
  reports the failure itself, in one line; gcsfs's log is shown with `--verbose` only.
- Retries, one layer per request: tlm's (`tlm.remote_retries`) for every gcsfs request, in place
  of gcsfs's own fixed schedule; TensorStore's own for its requests, bounded by the same
  deadline (`tlm.models.formats.tensorstore_gcs`).

The deadline (`--storage_deadline_s`, default `DEFAULT_DEADLINE_S`): a request through gcsfs,
its retries included, ends within it, so a ranged read of the store that cannot be served
fails within it, in one line naming the object and the byte range; each request may go an
eighth of it without progress. TensorStore's requests fail within about the same. It travels
to child processes in the environment (`TLM_STORAGE_DEADLINE_S`).

Settings apply to the filesystem objects made after they were set: run.py calls `configure`
first, and `tlm.storage` calls `prepare` before it makes a filesystem object (orbax's come
later, through the paths `tlm.storage.parse` made).
"""

import logging
import os

from tlm.errors import UserError

# A request to the store may take this long, retries included, before it fails (the pod waits).
DEFAULT_DEADLINE_S = 120.0
# A request gets an eighth of the deadline: a black-holed one is retried several times within it.
REQUESTS_PER_DEADLINE = 8
DEADLINE_ENV = "TLM_STORAGE_DEADLINE_S"

_applied: dict = {}  # the deadline each part of the settings was last made for


def deadline_s() -> float:
  """The deadline of a request to the store, its retries included (`--storage_deadline_s`;
  `DEFAULT_DEADLINE_S` if unset)."""
  text = os.environ.get(DEADLINE_ENV)
  if not text:
    return DEFAULT_DEADLINE_S
  return _checked(text, DEADLINE_ENV)


def request_timeout_s() -> float:
  """How long one request may go without progress (connecting, or between reads)."""
  return deadline_s() / REQUESTS_PER_DEADLINE


def _checked(value, name: str) -> float:
  try:
    seconds = float(value)
  except (TypeError, ValueError):
    raise UserError(f"{name}={value!r}: not a number of seconds") from None
  if not 0 < seconds < 1e6:
    raise UserError(f"{name}={value!r}: must be a number of seconds > 0")
  return seconds


def configure(deadline: float | None = None, verbose: bool = False) -> None:
  """Sets the clients' options that live in the environment and the logs (cheap: run.py calls
  it first, before it knows whether a path is remote); `prepare` adds fsspec's.

  Args:
    deadline: seconds (`--storage_deadline_s`); None keeps the environment's or the default.
    verbose: leave gcsfs's own log as it is (run.py's `--verbose`).

  Raises:
    UserError: `deadline` (or the environment's `TLM_STORAGE_DEADLINE_S`) is not a positive
      number of seconds.
  """
  if deadline is not None:
    os.environ[DEADLINE_ENV] = repr(_checked(deadline, "--storage_deadline_s"))
  seconds = deadline_s()
  if _applied.get("env") == seconds:
    return
  _applied["env"] = seconds
  # Read by gcsfs when it is imported: set before any gs:// filesystem is made.
  os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
  # TensorStore's curl transport, created at its first HTTP request.
  whole = str(max(1, round(seconds / REQUESTS_PER_DEADLINE)))
  os.environ.setdefault("TENSORSTORE_CURL_CONNECT_TIMEOUT_SECONDS", whole)
  os.environ.setdefault("TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS", whole)
  os.environ.setdefault("TENSORSTORE_CURL_LOW_SPEED_LIMIT_BYTES", "1")
  if not verbose:
    logging.getLogger("gcsfs").setLevel(logging.CRITICAL)


def prepare() -> None:
  """`configure`, and fsspec's options for gs:// (a request timeout, no listings cache): called
  before a filesystem object of a remote path is made (`tlm.storage` does)."""
  configure()
  seconds = deadline_s()
  if _applied.get("fsspec") != seconds:
    _applied["fsspec"] = seconds
    _configure_fsspec(seconds / REQUESTS_PER_DEADLINE)


def _configure_fsspec(timeout: float) -> None:
  try:
    import aiohttp
    import fsspec
    from fsspec.config import conf
  except ImportError:  # no gcsfs (aiohttp comes with it): gs:// is refused by `storage.parse`
    return
  _probe_off(fsspec)
  options = {
    "requests_timeout": aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout),
    "use_listings_cache": False,
  }
  for protocol in ("gs", "gcs"):
    # What the user configured fsspec with (FSSPEC_GS='{...}', its config file) wins.
    user = _USER_CONF.setdefault(protocol, dict(conf.get(protocol, {})))
    conf[protocol] = {**options, **user}


def _probe_off(fsspec) -> None:
  """gcsfs without its bucket-type probe even where gcsfs was imported before `configure` ran
  (its choice of class is made at import): fsspec's gs:// is then gcsfs's plain class, unless
  the environment asks for the probe or gs:// is served by something else (a test double)."""
  if os.environ.get("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "").lower() in ("true", "1"):
    return
  try:
    served = fsspec.get_filesystem_class("gs")
  except (ImportError, ValueError):
    return
  if served.__module__.startswith("gcsfs.") and served.__name__ != "GCSFileSystem":
    from gcsfs.core import GCSFileSystem

    for protocol in ("gs", "gcs"):
      fsspec.register_implementation(protocol, GCSFileSystem, clobber=True)


# fsspec's configuration of gs:// before tlm added its options to it.
_USER_CONF: dict[str, dict] = {}
