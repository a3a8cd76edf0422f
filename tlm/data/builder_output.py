"""The output-directory guard shared by the data builders (TempLAMA, SSM).

Builders publish their whole output directory atomically with `tlm.files.atomic_output_dir`,
which replaces an existing directory as a whole. So that a mistyped `--output_dir` (say, the
world directory holding news.jsonl) is never wiped, a builder only replaces a directory that is
absent, empty, or holds nothing but that builder's own outputs.
"""

import os

from tlm.errors import UserError


def check_replaceable(output_dir: str, ours: set[str]) -> None:
  """Raises UserError if `output_dir` exists and holds entries other than `ours`.

  Args:
    output_dir: the directory a builder is about to replace.
    ours: the names the builder writes there; hidden names (leftover temporaries) are ignored.
  """
  if os.path.isdir(output_dir):
    foreign = sorted(n for n in os.listdir(output_dir) if n not in ours and not n.startswith("."))
    if foreign:
      shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
      raise UserError(
        f"{output_dir}: output directory holds other files ({shown}); "
        "choose a new or empty directory"
      )
  elif os.path.exists(output_dir):
    raise UserError(f"{output_dir}: exists and is not a directory")
