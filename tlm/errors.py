"""User-facing errors.

Anything a user can cause (a malformed input line, a missing file, an unknown config key, a
checkpoint of the wrong shape) raises `UserError`. `run.py` prints its message as one line on
stderr and exits non-zero; nothing else in the package prints tracebacks for such errors.
This module imports nothing heavy so that the numpy-only data layer can use it.
"""


class UserError(Exception):
  """An error caused by the user's input; its message is shown as a single line."""


class DataError(UserError):
  """Bad input data. The message names the file and, where it applies, the line."""

  def __init__(self, message: str, path: str | None = None, line: int | None = None):
    where = ""
    if path is not None:
      where = f"{path}:{line}: " if line is not None else f"{path}: "
    super().__init__(f"{where}{message}")
    self.path = path
    self.line = line


class ConfigError(UserError):
  """An unknown config key, a wrong value type, or a missing required setting."""


class CheckpointError(UserError):
  """A checkpoint that cannot be read or does not match the model (keys or shapes)."""


class OutputError(UserError):
  """An output that cannot be written (disk full, permissions); nothing half-written is left."""
