"""The named configs by name: the CPU miniature's (`tiny`) and the paper's (`paper`)."""

import difflib
import functools
import inspect
from collections.abc import Callable

from tlm.configs import paper, tiny
from tlm.configs.overrides import lookup
from tlm.configs.schema import Config
from tlm.errors import ConfigError

_CONFIGS: dict[str, Callable[[], Config]] = {
  **tiny.CONFIGS,
  **{f"{r.size}_{r.variant}": functools.partial(paper.config, r) for r in paper.RUNS},
}
_DESCRIPTIONS: dict[str, Callable[[], str]] = {
  **{name: functools.partial(inspect.getdoc, fn) for name, fn in tiny.CONFIGS.items()},
  **{f"{r.size}_{r.variant}": functools.partial(paper.describe, r) for r in paper.RUNS},
}


def names() -> list[str]:
  """All named configs, sorted."""
  return sorted(_CONFIGS)


def get(name: str) -> Config:
  """Returns the named config.

  Raises:
    ConfigError: for an unknown name, listing the known ones.
  """
  if name not in _CONFIGS:
    close = difflib.get_close_matches(name or "", names(), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise ConfigError(f"unknown config {name!r}{hint}; known configs: {', '.join(names())}")
  return _CONFIGS[name]()


def describe(name: str) -> str:
  """What a named config trains, its command, its run time and its expected result."""
  get(name)
  return _DESCRIPTIONS[name]()


def check_required(config: Config) -> None:
  """Fails at once if a key the config requires (its checkpoint, its data) is unset.

  Raises:
    ConfigError: naming every unset key, how to set it, and the CPU configs that need none.
  """
  # The embedded world replaces the data directories.
  waived = ("data.ssm_dir", "data.templama_dir") if config.data.synthetic else ()
  missing = [
    k for k in config.required if k not in waived and lookup(config, k) in ("", 0, None, ())
  ]
  if missing:
    sets = " ".join(f"--set={k}=..." for k in missing)
    raise ConfigError(
      f"config {config.name!r} needs {', '.join(missing)} (the public checkpoint and data it "
      f"trains on; see `python -c \"import tlm.configs as c; print(c.describe('{config.name}'))\"`"
      f"); pass {sets}, or use a CPU config that needs nothing: "
      + ", ".join(n for n in names() if n.startswith("tiny_") and not get(n).required)
    )
