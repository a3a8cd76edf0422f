"""Surface `state`, part 1: the checksum manifest a training writes into each checkpoint step
(`tlm_checksums.json`), read back hostile: names leaving the step (`..`, absolute, a FIFO, a
device), wrong types and sizes, a manifest that is huge, a FIFO, a device, truncated, deeply
nested or not UTF-8. Each manifest is loaded by the modes that read one (common.LOADS).
"""

import json
import os

from .common import (
  DEV_ZERO,
  FIFO,
  S1,
  S2,
  W,
  case,
  largest_param_file,
  load_case,
  manifest,
  put,
  random_bytes,
  score_args,
  sparse,
)

SURFACE = "state"
MANIFEST = os.path.join(S2, "tlm_checksums.json")


def _add_entry(name, size=10):
  def edit(ctx, m):
    m["files"][name] = {"size": size, "sha256": "0" * 64}
    return m

  return edit


def _first_entry(field, given):
  """The first entry's `field` set to `given` (the entry itself where `field` is None)."""

  def edit(ctx, m):
    first = sorted(m["files"])[0]
    if field is None:
      m["files"][first] = given
    else:
      m["files"][first][field] = given
    return m

  return edit


def _replaced(content):
  """The manifest file itself made hostile (common.put)."""
  return lambda ctx, m: put(ctx, MANIFEST, content)


def _outside_fifo(ctx, m):
  ctx.fifo("outside_fifo")
  m["files"]["../../../outside_fifo"] = {"size": 10, "sha256": "0" * 64}
  return m


def _device_link(ctx, m):
  path = largest_param_file(ctx.path(S2))
  os.remove(path)
  os.symlink("/dev/zero", path)


ALL_LOADS = (
  "resume",
  "score_workdir",
  "score_step",
  "eval",
  "convert_step",
  "init_checkpoint_workdir",
  "predict_workdir",
)
SCORES = ("score_workdir", "score_step")

# (name, edit(ctx, manifest) -> the manifest to write or None (left as the edit made it), the
# loads that read it).
MANIFESTS = [
  ("dotdot_fifo_outside", _outside_fifo, ALL_LOADS),
  (
    "absolute_dev_zero",
    _add_entry("/dev/zero"),
    ("resume", "score_step", "eval", "init_checkpoint_workdir"),
  ),
  ("dotdot_params", _add_entry("params/../../../../etc/passwd", 100), SCORES),
  (
    "device_in_place_of_a_param_file",
    _device_link,
    ("resume", "score_workdir", "score_step", "convert_step"),
  ),
  ("huge_sparse_manifest", _replaced(sparse(100 << 20)), ("resume", "score_step")),
  ("manifest_is_a_fifo", _replaced(FIFO), ("resume", "score_workdir", "score_step", "eval")),
  ("manifest_links_to_dev_zero", _replaced(DEV_ZERO), ("score_workdir", "convert_step")),
  ("files_is_a_list", lambda ctx, m: dict(m, files=[]), SCORES),
  ("size_is_a_string", _first_entry("size", "10"), SCORES),
  ("sha_is_an_int", _first_entry("sha256", 123), SCORES),
  ("entry_is_null", _first_entry(None, None), SCORES),
  ("nul_in_a_name", _add_entry("params/\0x"), SCORES),
  ("size_huge", _first_entry("size", 10**30), SCORES),
  ("size_negative", _first_entry("size", -1), SCORES),
  ("truncated", lambda ctx, m: os.truncate(manifest(ctx, S2), 100), SCORES),
  ("deeply_nested", _replaced("[" * 100_000), SCORES),
  ("wrong_format", lambda ctx, m: dict(m, format="something-else/9"), SCORES),
  ("not_utf8", _replaced(b"\xff\xfe{}"), SCORES),
  ("big_int", _replaced('{"format": 1' + "0" * 6000 + "}"), SCORES),
  ("entry_names_a_directory", _add_entry("params"), SCORES),
]


def _edited(edit):
  """Step 2's manifest edited by `edit` (step 2 counts as damaged on purpose)."""

  def damage(ctx):
    ctx.damaged.add(S2)
    path = manifest(ctx, S2)
    with open(path) as f:
      m = json.load(f)
    out = edit(ctx, m)
    if out is not None:
      with open(path, "w") as f:
        json.dump(out, f)

  return damage


def _every_step_corrupt(ctx):
  ctx.copy("W0", W)
  for step in (S1, S2):
    random_bytes(ctx, step)
  return score_args(ctx, ctx.path(W))


CASES = [
  *(
    load_case(f"manifest_{name}_{mode}", SURFACE, _edited(edit), mode)
    for name, edit, modes in MANIFESTS
    for mode in modes
  ),
  case(
    "manifest_every_step_corrupt_score_workdir",
    SURFACE,
    _every_step_corrupt,
    mentions=("W",),
    workdirs=(W,),
  ),
]
