"""What every pre-registered lever of research/ shares: the criterion (H and E over seeds), the
commit its run started from, and its result files.

H (the lever moves the claim as predicted): the change D > 0 on every planned seed and the
95% t-interval of its mean above zero. E (with the lever the claim holds): the new margin > 0
on every planned seed. With seeds missing the verdict is final only where a measured seed
already fails the per-seed part of H or E; a failed check of the setup gives no verdict.
"""

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def h_and_e(
  changes: Sequence[float],
  margins: Sequence[float],
  *,
  seeds: Sequence[int],
  planned: Sequence[int],
  checks_ok: bool,
  outcomes: Mapping[str, str],
) -> dict:
  """The verdict on the measured seeds.

  Args:
    changes, margins: D and the new margin, one per measured seed (in `seeds` order).
    outcomes: the pre-registered wording: "both" (H and E), "h_only" (H without E), and
      "checks" (what failed when `checks_ok` is False).
  """
  from tlm.miniature import stats

  complete = sorted(seeds) == sorted(planned)
  out = {
    "seeds": list(seeds),
    "planned": list(planned),
    "complete": complete,
    "checks_ok": bool(checks_ok),
    "change_mean": float(np.mean(changes)) if len(changes) else None,
    "change_t95": stats.t_interval(changes),
    "new_margin_mean": float(np.mean(margins)) if len(margins) else None,
    "new_margin_t95": stats.t_interval(margins),
  }
  every_change, every_margin = all(d > 0 for d in changes), all(m > 0 for m in margins)
  h = every_change and out["change_t95"] is not None and out["change_t95"][0] > 0
  out["H"] = h if complete else (False if not every_change else None)
  out["E"] = every_margin if complete else (False if not every_margin else None)
  if not checks_ok:
    out["H"] = out["E"] = None
    out["outcome"] = f"no verdict: a check of the setup failed ({outcomes['checks']})"
  elif out["H"] is True and out["E"] is True:
    out["outcome"] = outcomes["both"]
  elif out["H"] is True:
    out["outcome"] = f"not explained (H holds, E does not: {outcomes['h_only']})"
  elif out["H"] is False or out["E"] is False:
    out["outcome"] = "not explained" + (
      " (H fails: the candidate is not supported by this lever)"
      if out["H"] is False
      else " (H holds on the seeds measured; E fails)"
    )
  else:
    out["outcome"] = "no verdict: seeds missing"
  out["prediction_held"] = bool(out["H"] and out["E"])
  return out


def head_commit() -> str:
  """The checkout's commit, marked when tracked files differ from it (call it at a run's start:
  the code the run imports)."""
  try:
    head = subprocess.run(
      ["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
      capture_output=True,
      text=True,
      check=True,
    ).stdout.strip()
    dirty = subprocess.run(
      ["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
      capture_output=True,
      text=True,
      check=True,
    ).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "unknown"
  return head + (" (uncommitted changes)" if dirty else "")


def write_result(
  out: str, result: Mapping, markdown: str, log: Callable[[str], None], name: str = "result"
) -> None:
  """OUT/<name>.json and OUT/<name>.md (each written whole or not at all), the table logged."""
  from tlm.files import atomic_output_file, write_json

  os.makedirs(out, exist_ok=True)
  write_json(os.path.join(out, f"{name}.json"), result)
  with atomic_output_file(os.path.join(out, f"{name}.md")) as f:
    f.write(markdown)
  log(markdown)
