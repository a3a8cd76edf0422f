"""Surface `store`: the example store (a manifest, token files and offset indexes) checked by
check_store, trained on and re-ordered by shuffle_store when damaged, and convert_ssm given
hostile JSONL stores.
"""

import dataclasses
import json
import os
import shutil

import numpy as np

from tests.hostile.probe import TINY

from .common import (
  DEV_ZERO,
  FIFO,
  MISSING,
  STORE_FIX,
  Append,
  case,
  either,
  error,
  files_exist,
  fresh,
  ok,
  put,
  sha_entry,
  sparse,
)

SURFACE = "store"


@dataclasses.dataclass
class _Store:
  """A case's copy S of a store: its manifest `m` (as read), the names of a token file and its
  offset index, and whether a damage changed the manifest (then it is written back)."""

  ctx: object
  m: dict
  bin: str
  idx: str
  rewrite: bool = False

  def path(self, name):
    return self.ctx.path("S/" + name)

  def edit_array(self, name, dtype, edit):
    """`edit(array)` on a binary file of the store; the manifest made to agree (a deliberate
    edit by a user who knows the format)."""
    arr = np.fromfile(self.path(name), dtype=dtype)
    edit(arr)
    arr.tofile(self.path(name))
    self.m["files"][name] = sha_entry(self.path(name))
    self.rewrite = True


def _in_manifest(edit):
  """A damage that edits the manifest (`edit(store.m)`), which is then written back."""

  def damage(s):
    edit(s.m)
    s.rewrite = True

  return damage


# No damage: the manifest written back as read (compact JSON).
_AS_READ = _in_manifest(lambda m: None)


def _first_table(m, field, given):
  m["tables"][next(iter(m["tables"]))][field] = given


def _listed(name):
  return _in_manifest(lambda m: m["files"].__setitem__(name, {"bytes": 10, "sha256": "0" * 64}))


def _bin_size_lies(s):
  s.m["files"][s.bin]["bytes"] += 10
  s.rewrite = True


def _ff_at_bin_start(s):
  with open(s.path(s.bin), "r+b") as f:
    f.write(b"\xff" * 4)


def _last_offset(beyond):
  def edit(offsets):
    offsets[-1] = beyond

  return lambda s: s.edit_array(s.idx, np.uint64, edit)


def _offsets_decreasing(s):
  def edit(offsets):
    offsets[1:] = offsets[1:][::-1].copy()

  s.edit_array(s.idx, np.uint64, edit)


def _token_ids_beyond_vocab(s):
  def edit(tokens):
    tokens[:] = 60000

  s.edit_array(s.bin, np.uint16, edit)


def _examples_lie(s):
  s.m["tables"][s.bin[: -len(".tokens.bin")]]["examples"] += 5


def _negative_ids(s):
  """Every token file as int32 (as a store of a vocabulary above 65,536 ids holds them), one
  table's ids -3: rehashed, so only the ids are wrong."""
  s.m["token_dtype"] = "int32"
  for name in [n for n in s.m["files"] if n.endswith(".tokens.bin")]:
    ids = np.fromfile(s.path(name), "<u2").astype("<i4")
    if name == s.bin:
      ids[:] = -3
    ids.tofile(s.path(name))
    s.m["files"][name] = sha_entry(s.path(name))
  s.rewrite = True


def _vocab(key, given):
  return _in_manifest(lambda m: m["vocab"].__setitem__(key, given))


def _linked_outside(s):
  """The token file moved out of the store and linked back (its manifest entry still
  matches: the same bytes)."""
  outside = s.ctx.path("elsewhere.bin")
  shutil.move(s.path(s.bin), outside)
  os.symlink(outside, s.path(s.bin))


def _empty_table(s):
  """The table of the token file emptied (0 examples): a year the sampler draws from."""
  for name in (s.bin, s.idx):
    np.zeros(1 if name == s.idx else 0, "<i8" if name == s.idx else "<u2").tofile(s.path(name))
    s.m["files"][name] = sha_entry(s.path(name))
  s.m["tables"][s.bin[: -len(".tokens.bin")]]["examples"] = 0
  s.rewrite = True


# The fixture's tokenized store under check_store: (name, damage(store)); each an error
# naming S.
TOKENS_CHECKED = [
  ("negative_token_ids_int32_rehashed", _negative_ids),
  ("token_ids_beyond_vocab_rehashed", lambda s: _token_ids_beyond_vocab(s)),
  ("token_dtype_cannot_hold_vocab", _vocab("vocab_size", 70_000)),
  ("vocab_size_lies", _vocab("vocab_size", 60_000)),
  ("vocab_size_zero", _vocab("vocab_size", 0)),
  ("bin_linked_outside", _linked_outside),
]


# (name, damage(store)) of the base's store under check_store; each is an error naming S.
CHECKED = [
  ("truncated_bin", lambda s: os.truncate(s.path(s.bin), 3)),
  ("random_bytes_bin", _ff_at_bin_start),
  ("manifest_lies_size", _bin_size_lies),
  ("manifest_dotdot", _listed("../../etc/passwd")),
  ("manifest_absolute", _listed("/dev/zero")),
  ("listed_file_fifo", lambda s: put(s.ctx, "S/" + s.bin, FIFO)),
  ("listed_file_dev_zero", lambda s: put(s.ctx, "S/" + s.bin, DEV_ZERO)),
  ("manifest_missing", lambda s: put(s.ctx, "S/manifest.json", MISSING)),
  ("manifest_sparse", lambda s: put(s.ctx, "S/manifest.json", sparse(2 << 30))),
  ("manifest_fifo", lambda s: put(s.ctx, "S/manifest.json", FIFO)),
  ("tables_is_a_list", _in_manifest(lambda m: m.__setitem__("tables", []))),
  ("examples_string", _in_manifest(lambda m: _first_table(m, "examples", "3"))),
  ("examples_huge", _in_manifest(lambda m: _first_table(m, "examples", 10**18))),
  ("examples_negative", _in_manifest(lambda m: _first_table(m, "examples", -1))),
  ("token_dtype_unknown", _in_manifest(lambda m: m.__setitem__("token_dtype", "float64"))),
  ("version_future", _in_manifest(lambda m: m.__setitem__("version", 99))),
  ("idx_offsets_beyond_rehashed", _last_offset(2**62)),
  ("idx_decreasing_rehashed", _offsets_decreasing),
]


def _check_store(damage, tokens=False):
  """check_store of a copy S of the base's store (the fixture's tokenized one with `tokens`:
  its first train token file), damaged."""

  def setup(ctx):
    if tokens:
      shutil.copytree(f"{TINY}/ssm", ctx.path("S"))
    else:
      ctx.copy("store", "S")
    with open(ctx.path("S/manifest.json")) as f:
      m = json.load(f)
    names = sorted(m["files"])
    first = (lambda n: n.startswith("train/") and n.endswith(".tokens.bin")) if tokens else None
    bin_name = next(n for n in names if (first or (lambda n: n.endswith(".bin")))(n))
    idx_name = bin_name[:-4] + ".idx" if tokens else next(n for n in names if n.endswith(".idx"))
    s = _Store(ctx, m, bin_name, idx_name)
    damage(s)
    if s.rewrite:
      with open(ctx.path("S/manifest.json"), "w") as f:
        json.dump(s.m, f)
    return ["--mode=check_store", f"--data={ctx.path('S')}"]

  return setup


# The fixture's tokenized store trained on, damaged: (name, damage(store)); its manifest is
# always written back; each is an error naming S.
TRAINED = [
  ("truncated_tokens", lambda s: os.truncate(s.path(s.bin), 2)),
  ("idx_beyond_rehashed", _last_offset(2**40)),
  ("token_ids_beyond_vocab_rehashed", _token_ids_beyond_vocab),
  ("vocab_sha_differs", lambda s: s.m["vocab"].__setitem__("sha256", "0" * 64)),
  ("manifest_lies_examples", _examples_lie),
  ("negative_token_ids_int32_rehashed", _negative_ids),
  ("token_dtype_cannot_hold_vocab", lambda s: s.m["vocab"].__setitem__("vocab_size", 70_000)),
  ("bin_linked_outside", _linked_outside),
  ("empty_year_table", _empty_table),
]


def _train_store(damage):
  def setup(ctx):
    shutil.copytree(f"{TINY}/ssm", ctx.path("S"))
    m_path = ctx.path("S/manifest.json")
    with open(m_path) as f:
      m = json.load(f)
    tok = next(n for n in sorted(m["files"]) if n.startswith("train/") and n.endswith("tokens.bin"))
    s = _Store(ctx, m, tok, tok.replace(".bin", ".idx"))
    damage(s)
    with open(m_path, "w") as f:
      json.dump(s.m, f)
    return fresh(ctx, f"data.ssm_dir={ctx.path('S')}")

  return setup


# shuffle_store of the fixture's tokenized store, damaged: (name, damage(store)); its manifest
# is always written back; each is an error naming S, with nothing written but into out.
SHUFFLED = [
  ("truncated_tokens", lambda s: os.truncate(s.path(s.bin), 2)),
  ("idx_beyond_rehashed", _last_offset(2**40)),
  ("idx_decreasing_rehashed", _offsets_decreasing),
  ("manifest_lies_examples", _examples_lie),
  ("bin_linked_outside", _linked_outside),
  ("bin_fifo", lambda s: put(s.ctx, "S/" + s.bin, FIFO)),
]


def _shuffle_store(damage):
  def setup(ctx):
    _train_store(damage)(ctx)
    return [
      "--mode=shuffle_store",
      f"--data={ctx.path('S')}",
      f"--output_dir={ctx.path('out')}",
      "--shuffle_seed=0",
    ]

  return setup


JSONL = "J/train/2010.jsonl"


def _year_file_99999(ctx):
  with open(ctx.path(JSONL), "rb") as f:
    ctx.write("J/train/99999.jsonl", f.read())


# convert_ssm of a copy J of the fixture's JSONL store: (name, file of J made hostile, its
# content (common.put)); an error naming J or a success.
JSONL_STORES = [
  ("garbage_line", JSONL, Append("garbage\n")),
  (
    "inputs_not_a_string",
    JSONL,
    Append('{"inputs": 3, "targets": "x", "date": "2010-01-01", "year": 2010}\n'),
  ),
  (
    "year_mismatch",
    JSONL,
    Append('{"inputs": "a", "targets": "x", "date": "2010-01-01", "year": 2077}\n'),
  ),
  (
    "nul",
    JSONL,
    Append('{"inputs": "a\\u0000", "targets": "x", "date": "2010-01-01", "year": 2010}\n'),
  ),
  (
    "not_utf8",
    JSONL,
    Append(b'{"inputs": "\xff", "targets": "x", "date": "2010-01-01", "year": 2010}\n'),
  ),
  ("file_fifo", JSONL, FIFO),
  ("file_sparse_1g", JSONL, sparse(1 << 30)),
  ("odd_file_name", "J/train/..2010.jsonl", "{}\n"),
  ("year_file_99999", None, _year_file_99999),
]


def _read_only_jsonl(ctx):
  """Training on a JSON-lines SSM directory J that cannot be written (immutable: not even root
  may write into it), so it cannot be converted in place."""
  shutil.copytree(f"{STORE_FIX}/tiny_ssm_jsonl", ctx.path("J"))
  ctx.make_immutable("J")
  return fresh(ctx, f"data.ssm_dir={ctx.path('J')}")


_STALE = (".out.k1ll3d00.tmp", ".out.k1ll3d00.tmp.old")


def _build_after_a_killed_build(ctx):
  """build_ssm into out, beside which a killed build left its staging directories."""
  for rel in _STALE:
    ctx.write(f"{rel}/train/2010.text.bin", b"\0" * 4096)
  return [
    "--mode=build_ssm",
    f"--news={STORE_FIX}/news_sample.jsonl",
    f"--entities={STORE_FIX}/entities_sample.tsv",
    f"--output_dir={ctx.path('out')}",
  ]


def _stale_removed(ctx, run):
  left = [rel for rel in _STALE if os.path.exists(ctx.path(rel))]
  if left:
    return f"staging left: {left}"
  if "removed 2 staging directories" not in run["stderr"]:
    return "no notice of the staging directories removed"
  return files_exist("out/manifest.json")(ctx, run)


def _output_under_a_file(ctx):
  ctx.write("F", "a regular file\n")
  return [
    "--mode=build_ssm",
    f"--news={STORE_FIX}/news_sample.jsonl",
    f"--output_dir={ctx.path('F/sub/out')}",
  ]


def _convert_ssm(rel, content):
  def setup(ctx):
    shutil.copytree(f"{STORE_FIX}/tiny_ssm_jsonl", ctx.path("J"))
    if rel is None:
      content(ctx)
    else:
      put(ctx, rel, content)
    return ["--mode=convert_ssm", f"--data={ctx.path('J')}", f"--output_dir={ctx.path('out')}"]

  return setup


CASES = [
  case("store_check_intact", SURFACE, _check_store(_AS_READ), expect="ok"),
  *(
    case(f"store_check_{name}", SURFACE, _check_store(damage), **error("S", timeout=120))
    for name, damage in CHECKED
  ),
  case("store_check_tokens_intact", SURFACE, _check_store(_AS_READ, tokens=True), expect="ok"),
  *(
    case(
      f"store_check_tokens_{name}",
      SURFACE,
      _check_store(damage, tokens=True),
      **error("S", timeout=120),
    )
    for name, damage in TOKENS_CHECKED
  ),
  case(
    "store_train_read_only_jsonl_dir",
    SURFACE,
    _read_only_jsonl,
    **error("J", "cannot convert", writes=("w",), timeout=180),
  ),
  case(
    "build_ssm_after_a_killed_build",
    SURFACE,
    _build_after_a_killed_build,
    **ok(_stale_removed, "out", *_STALE, timeout=180),
  ),
  case(
    "build_ssm_output_under_a_regular_file",
    SURFACE,
    _output_under_a_file,
    **error("F is not a directory", timeout=120),
  ),
  case(
    "store_check_unlisted_extra_file",
    SURFACE,
    _check_store(lambda s: s.ctx.write("S/train/extra.bin", "x")),
    expect="either",
    mentions=("S",),
  ),
  *(
    case(
      f"store_train_{name}",
      SURFACE,
      _train_store(damage),
      **error("S", writes=("w",), timeout=180),
    )
    for name, damage in TRAINED
  ),
  case(
    "shuffle_store_intact",
    SURFACE,
    _shuffle_store(lambda s: None),
    **ok(files_exist("out/manifest.json"), "out", timeout=120),
  ),
  *(
    case(
      f"shuffle_store_{name}",
      SURFACE,
      _shuffle_store(damage),
      **error("S", writes=("out",), timeout=120),
    )
    for name, damage in SHUFFLED
  ),
  case(
    "shuffle_store_output_is_the_store",
    SURFACE,
    lambda ctx: [
      "--mode=shuffle_store",
      f"--data={ctx.base['store']}",
      f"--output_dir={ctx.base['store']}",
      "--shuffle_seed=0",
    ],
    **error("must differ from --data"),
  ),
  case(
    "convert_ssm_intact",
    SURFACE,
    lambda ctx: [
      "--mode=convert_ssm",
      f"--data={STORE_FIX}/tiny_ssm_jsonl",
      f"--output_dir={ctx.path('out')}",
      f"--vocab={TINY}/spiece.model",
    ],
    **ok(files_exist("out/manifest.json"), "out"),
  ),
  *(
    case(
      f"convert_ssm_{name}",
      SURFACE,
      _convert_ssm(rel, content),
      **either(files_exist("out/manifest.json"), "out", mentions=("J",), timeout=180),
    )
    for name, rel, content in JSONL_STORES
  ),
  case(
    "convert_ssm_data_is_a_store",
    SURFACE,
    lambda ctx: [
      "--mode=convert_ssm",
      f"--data={ctx.base['store']}",
      f"--output_dir={ctx.path('out')}",
    ],
    **error("store"),
  ),
]
