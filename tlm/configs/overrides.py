"""Dotted keys ("train.steps"): `--set` overrides, typed replacement, validation and JSON.

Config flow: `get(name)` -> `override(config, ["train.steps=10", ...])` -> the train
CLI writes `WORKDIR/config.json` (`to_dict`) -> each function receives only its section; a
workdir's config is read back with `from_dict`. Unknown keys and wrong types raise ConfigError
listing the valid keys, values out of range one naming the key (`validate`); nothing falls
back silently.
"""

import dataclasses
import difflib
import math
import typing
from collections.abc import Sequence
from typing import Any

from tlm import storage
from tlm.configs.schema import (
  ABSENT_MEANS,
  LOCAL_PATH_KEYS,
  MAX_BATCH_TOKENS,
  MAX_INT,
  PATH_KEYS,
  RANGES,
  SEED_KEYS,
  Config,
  remat_policy,
)
from tlm.errors import ConfigError, UserError


def _fields(cls) -> dict[str, Any]:
  hints = typing.get_type_hints(cls)
  return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def valid_keys(config: Config | None = None) -> list[str]:
  """Every dotted key that `--set` accepts, e.g. "train.steps"."""
  keys = []
  for name, hint in _fields(Config).items():
    if dataclasses.is_dataclass(hint):
      keys.extend(f"{name}.{sub}" for sub in _fields(hint))
    else:
      keys.append(name)
  return sorted(keys)


def _unknown_key(key: str) -> ConfigError:
  keys = valid_keys()
  close = difflib.get_close_matches(key, keys, n=3)
  hint = f" (did you mean {', '.join(close)}?)" if close else ""
  return ConfigError(f"unknown config key {key!r}{hint}; valid keys: {', '.join(keys)}")


def _field_hint(key: str):
  """The type of the field a dotted key names; ConfigError for an unknown key."""
  section, _, field = key.partition(".")
  top = _fields(Config)
  if section not in top:
    raise _unknown_key(key)
  hint = top[section]
  if dataclasses.is_dataclass(hint):
    sub = _fields(hint)
    if field not in sub:
      raise _unknown_key(key)
    return sub[field]
  if field:
    raise _unknown_key(key)
  return hint


def lookup(config: Config, key: str) -> Any:
  """The value of a dotted key."""
  _field_hint(key)
  section, _, field = key.partition(".")
  value = getattr(config, section)
  return getattr(value, field) if field else value


def replace(config: Config, key: str, value: Any) -> Config:
  """Returns `config` with the dotted `key` set to an already typed `value`."""
  _field_hint(key)
  section, _, field = key.partition(".")
  if not field:
    return dataclasses.replace(config, **{section: value})
  sub = dataclasses.replace(getattr(config, section), **{field: value})
  return dataclasses.replace(config, **{section: sub})


def replace_many(config: Config, values: dict[str, Any]) -> Config:
  """Returns `config` with each dotted key of `values` set to its already typed value."""
  for key, value in values.items():
    config = replace(config, key, value)
  return config


# --- Parsing `--set` text ---------------------------------------------------------------------


def _type_name(hint) -> str:
  if typing.get_origin(hint) is tuple:
    return f"comma-separated {typing.get_args(hint)[0].__name__}s"
  return hint.__name__


def _parse_scalar(text: str, kind: type):
  """Raises ValueError unless `text` parses as `kind`."""
  text = text.strip()
  if kind is bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
      return True
    if lowered in ("false", "0", "no"):
      return False
    raise ValueError(text)
  if kind is int:
    return int(text)
  if kind is float:
    return float(text)
  return text


def parse_value(key: str, text: str, hint, flag: str | None = None) -> Any:
  """Parses the text of `--set=key=text` as the field's type (tuples are comma-separated).

  Args:
    key: the dotted key.
    text: its value as written.
    hint: the field's type.
    flag: the flag the text came from ("--set"): the error then names `--set key=text`, the
      words the user typed, not only the key.

  Raises:
    ConfigError: a text that does not parse.
  """
  try:
    if typing.get_origin(hint) is tuple:
      kind = typing.get_args(hint)[0]
      return tuple(_parse_scalar(p, kind) for p in text.split(",") if p.strip())
    return _parse_scalar(text, hint)
  except ValueError:
    if flag:  # what was typed, as typed, unless a control character would break the line
      typed = text if text.isprintable() else repr(text)
      raise ConfigError(f"{flag} {key}={typed}: expects {_type_name(hint)}") from None
    raise ConfigError(f"config key {key!r} expects {_type_name(hint)}, got {text!r}") from None


def check_value(key: str, value: Any, name: str | None = None) -> None:
  """Raises ConfigError unless `value` is a valid value of the numeric key `key`.

  Args:
    key: a dotted key; its range is `schema.RANGES[key]` (if any), and every integer but a
      seed must fit in int64 (`schema.MAX_INT`), every float be finite.
    value: one value (one item of a tuple-valued key).
    name: what the message names instead of the key (a flag such as "--beam_size").
  """
  what = name or f"config key {key!r}"
  if isinstance(value, float) and not math.isfinite(value):
    raise ConfigError(f"{what} must be a finite number, got {value!r}")
  if key in RANGES and not RANGES[key][1](value):
    raise ConfigError(f"{what} must be {RANGES[key][0]}, got {value!r}")
  is_int = isinstance(value, int) and not isinstance(value, bool)
  if is_int and key not in SEED_KEYS and not -MAX_INT - 1 <= value <= MAX_INT:
    raise ConfigError(f"{what} must fit in 64 bits, got {value!r}")


def _check_together(config: Config) -> None:
  """The limits that tie several keys together (`schema`'s reasons)."""
  tc, dc = config.train, config.data
  tokens = tc.batch_size * (dc.input_length + dc.target_length)
  if tokens > MAX_BATCH_TOKENS:
    raise ConfigError(
      f"train.batch_size={tc.batch_size} x (data.input_length={dc.input_length} + "
      f"data.target_length={dc.target_length}) = {tokens} tokens per step; the step counts them "
      f"in int32, so at most {MAX_BATCH_TOKENS}"
    )
  if tc.microbatches > tc.batch_size:
    raise ConfigError(
      f"train.microbatches={tc.microbatches} splits train.batch_size={tc.batch_size} rows; "
      "it must be <= the batch size (and divide it)"
    )
  if config.adapt.eval_points > config.adapt.steps:
    raise ConfigError(
      f"adapt.eval_points={config.adapt.eval_points} evaluations along adapt.steps="
      f"{config.adapt.steps} steps: at most one per step"
    )


def validate(config: Config) -> Config:
  """Checks every numeric key against its range and the limits that tie keys together, and
  parses every path key (`schema.PATH_KEYS`) once.

  Returns:
    The config, its path keys in canonical form (`tlm.storage.parse`: `file://` dropped, a
    URI as `scheme://bucket/key`), each a `tlm.storage.Location` carrying its scheme.

  Raises:
    ConfigError: naming the first key out of range (or a float that is NaN or infinite, an
      integer beyond 64 bits), the keys of a combination the code cannot honour, or a path
      key `tlm.storage.parse` rejects.
  """
  for key in valid_keys():
    value = lookup(config, key)
    for v in value if isinstance(value, tuple) else (value,):
      check_value(key, v)
  _check_together(config)
  parsed = {}
  for key in PATH_KEYS:
    value = lookup(config, key)
    if value:
      try:
        canonical = storage.parse(value, key)
      except UserError as e:  # the same line, as a config key's error
        raise ConfigError(str(e)) from None
      if key in LOCAL_PATH_KEYS and canonical.is_remote:
        raise ConfigError(f"{key}={value}: must be a local directory (not an object store)")
      # Always the Location, even when its text is the value's: the layers below take its
      # scheme instead of deciding it again (it compares, hashes and dumps as the str).
      parsed[key] = canonical
  return replace_many(config, parsed)


def override(config: Config, assignments: Sequence[str]) -> Config:
  """Applies `--set=dotted.key=value` assignments in order.

  Args:
    config: the base config.
    assignments: strings "section.field=value"; tuples are written "a,b,c".

  Returns:
    The new config.

  Raises:
    ConfigError: for a malformed assignment, an unknown key (listing the valid keys), a
      value that does not parse as the field's type, or one out of its range (`validate`).
  """
  for assignment in assignments:
    key, sep, text = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
      raise ConfigError(f"--set expects dotted.key=value, got {assignment!r}")
    config = replace(config, key, parse_value(key, text, _field_hint(key), flag="--set"))
  return validate(config)


# --- JSON (a workdir's config.json) -----------------------------------------------------------


def to_dict(config: Config) -> dict[str, Any]:
  """The config as JSON-ready nested dicts (tuples become lists)."""

  def convert(value):
    if isinstance(value, tuple):
      return [convert(v) for v in value]
    return value

  out = {}
  for name in _fields(Config):
    value = getattr(config, name)
    if dataclasses.is_dataclass(value):
      out[name] = {k: convert(getattr(value, k)) for k in _fields(type(value))}
    else:
      out[name] = convert(value)
  return out


def _typed(key: str, value: Any, hint) -> Any:
  """Checks a JSON value against a field type (ints are accepted as floats)."""
  if typing.get_origin(hint) is tuple:
    if not isinstance(value, list | tuple):
      raise ConfigError(f"config key {key!r} expects {_type_name(hint)}, got {value!r}")
    kind = typing.get_args(hint)[0]
    return tuple(_typed(key, v, kind) for v in value)
  if hint is float and isinstance(value, int) and not isinstance(value, bool):
    return float(value)
  if key == "model.remat" and isinstance(value, bool):  # `--set=model.remat=true`: name the
    return remat_policy(value, key)  # policies in the one-line error, not the type
  if type(value) is not hint:
    raise ConfigError(f"config key {key!r} expects {_type_name(hint)}, got {value!r}")
  return value


# Sections added after workdirs were written: a config.json without them takes the defaults.
_LATER_SECTIONS = ("reproduce",)


def from_dict(data: dict[str, Any]) -> Config:
  """Rebuilds a Config from `to_dict` output (e.g. a workdir's config.json), strictly.

  Raises:
    ConfigError: for an unknown or missing key or a value of the wrong type or range.
  """
  top = _fields(Config)
  data = {**{k: to_dict(Config())[k] for k in _LATER_SECTIONS if k not in data}, **data}
  unknown = sorted(set(data) - set(top))
  missing = sorted(set(top) - set(data))
  if unknown or missing:
    raise ConfigError(f"config.json: unknown keys {unknown}, missing keys {missing}")
  kwargs = {}
  for name, hint in top.items():
    value = data[name]
    if dataclasses.is_dataclass(hint):
      sub = _fields(hint)
      if not isinstance(value, dict) or set(value) - set(sub):
        have = set(value) if isinstance(value, dict) else set()
        raise ConfigError(
          f"config.json: section {name!r} has unknown keys {sorted(have - set(sub))}, "
          f"missing keys {sorted(set(sub) - have)}"
        )
      # A key added since the workdir was trained (absent from its config.json) takes its
      # default, so that older workdirs stay readable.
      typed = {k: _typed(f"{name}.{k}", value[k], h) for k, h in sub.items() if k in value}
      for key, then in ABSENT_MEANS.items():  # ... unless it meant something else before
        section, field = key.split(".")
        if section == name and field not in value:
          typed[field] = then
      kwargs[name] = hint(**typed)
    else:
      kwargs[name] = _typed(name, value, hint)
  return validate(Config(**kwargs))
