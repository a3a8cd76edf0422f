"""`--mode=shuffle_store`: a store in corpus order re-ordered as `build_ssm --shuffle_seed`
would have written it, without running span masking or tokenization again.

Every store built without `--shuffle_seed` (all stores built before the option) holds each
table in corpus order, which the block sampler refuses (`tlm.input.mixture`). The shuffled
order's key is a hash of each example's position in the corpus-order table
(`tlm.store.store_shuffle.keys`), which such a store knows, so its tables are re-ordered
through the same two stages as a shuffled build (slices into keyed parts, then the bucketed
merge), each table field a unit of work; the manifest, `spiece.model` and `stats.json` follow.
The output equals a build of the same corpus with `--shuffle_seed=N`, byte for byte.

Into a new directory (local or gs://; the source is only read), resumable and idempotent:
- the work lives under `OUTPUT/.shuffle/<tag>/` (`tag` from the source manifest's SHA-256 and
  the seed): keyed parts as written (whole files: a part whose `.key` exists is kept) and one
  record per table field finished, written after its two files; a killed run, run again,
  keeps what it finished and does the rest; work of another source or seed is deleted;
- the manifest is written last (a directory without it is no store), then `.shuffle/` goes;
- run again on its finished output it reads two manifests and does nothing; a shuffled source
  is left as it is (nothing to do) unless another seed is asked for (refused in one line).
"""

import dataclasses
import hashlib
import json
import multiprocessing
from collections.abc import Callable

import numpy as np

from tlm import storage
from tlm.data.formatting import SPLITS
from tlm.errors import DataError, UserError
from tlm.files import check_replaceable
from tlm.store import store, store_shuffle, store_write
from tlm.store.store_files import StagedFile

WORK_DIR = ".shuffle"  # hidden: builders that replace a directory ignore hidden names
OUTPUT_NAMES = set(SPLITS) | {"stats.json", store.MANIFEST, store.VOCAB_FILE}
_COPIED = (store.VOCAB_FILE, "stats.json")  # beside the tables, the same bytes as the source's


@dataclasses.dataclass(frozen=True)
class _Job:
  """One table field to re-order (picklable for a process pool)."""

  source: str
  out: str
  work: str
  split: str
  year: int
  field: str
  itemsize: int
  seed: int
  bucket_bytes: int

  @property
  def name(self) -> str:
    return f"{self.split}-{self.year}.{self.field}"


def _run_job(job: _Job) -> tuple[dict, bool]:
  """The merge result of one table field, and whether an earlier run had finished it."""
  done = storage.join(job.work, "done", job.name + ".json")
  kept = _read_done(done, job.out)
  if kept is not None:
    return kept, True
  src = store.Store(job.source)
  src.table(job.split, job.year).close()  # its files' sizes against the manifest
  names = [store.file_name(job.split, job.year, job.field, ext) for ext in ("bin", "idx")]
  count = src.manifest["tables"][store.table_key(job.split, job.year)]["examples"]
  run = store_shuffle.TableRun(
    src.path / names[0], src.path / names[1], count, src.manifest["files"][names[0]]["bytes"]
  )
  keyed = storage.join(job.work, "keyed", job.name)
  result = store_shuffle.shuffle_table(
    job.out, job.split, job.year, job.field, job.itemsize, [run], job.seed, keyed,
    job.bucket_bytes,
  )  # fmt: skip
  if result["examples"] != count:
    raise DataError(f"{names[0]}: {result['examples']} examples, manifest says {count}", src.path)
  with StagedFile(done) as f:  # after the table's files: a record means they are whole
    f.write(json.dumps(result, sort_keys=True).encode("utf-8"))
  storage.rmtree(keyed)
  return result, False


def _read_done(path: storage.Location, out: str) -> dict | None:
  """The record of a table field an earlier run finished, if it is one (read as hostile: a
  record that is not, or whose files are not there at its sizes, means the field is redone)."""
  if not storage.isfile(path):
    return None
  try:
    result = json.loads(storage.read_text(path))
    files = result["files"]
    ok = isinstance(result["examples"], int) and isinstance(result["buckets"], int)
    ok = ok and isinstance(files, dict) and len(files) == 2
    for name, entry in files.items():
      ok = ok and isinstance(entry["bytes"], int) and isinstance(entry["sha256"], str)
      ok = ok and storage.getsize(storage.join(out, name)) == entry["bytes"]
  except (ValueError, KeyError, TypeError, OSError):
    return None
  return result if ok else None


def _finished(out: storage.Location, src: store.Store, seed: int) -> bool:
  """Whether `out` holds this source shuffled with `seed` already (the same tables, counts and
  file sizes, the order entry of `seed`)."""
  if not store.is_store(out):
    return False
  have = store.read_manifest(out)
  sizes = lambda m: {name: entry["bytes"] for name, entry in m["files"].items()}  # noqa: E731
  return (
    have.get("order") == store_shuffle.order_entry(seed)
    and have["tables"] == src.manifest["tables"]
    and sizes(have) == sizes(src.manifest)
    and have.get("vocab") == src.manifest.get("vocab")
  )


def shuffle_store(
  source: str,
  output_dir: str,
  seed: int,
  num_workers: int = 1,
  progress: Callable[[str], None] | None = None,
  bucket_bytes: int | None = None,
) -> dict:
  """Writes the corpus-order store `source` into `output_dir` in the order of `seed`.

  Args:
    source: an example store (local or gs://), in corpus order.
    output_dir: a new or replaceable directory (local or gs://), not `source`.
    seed: the shuffle seed (>= 0), as `build_ssm --shuffle_seed`.
    num_workers: local processes, table fields handed out among them (the same output).
    progress: told one line per table field.
    bucket_bytes: the merge's bucket size (default `store_shuffle.BUCKET_BYTES`; the bytes
      written are the same for any).

  Returns:
    {"tables", "examples", "fields_done", "fields_resumed", "unchanged"}: `unchanged` when
    there was nothing to do (`source` already shuffled with `seed`, or `output_dir` finished).

  Raises:
    UserError: a negative seed, `output_dir` equal to `source` or holding other files, a
      source shuffled with another seed; DataError: a damaged source, naming its file.
  """
  if seed < 0:
    raise UserError(f"--shuffle_seed must be >= 0 for --mode=shuffle_store, got {seed}")
  src = store.Store(source)
  out = storage.abspath(output_dir)
  summary = {
    "tables": len(src.manifest["tables"]),
    "examples": sum(t["examples"] for t in src.manifest["tables"].values()),
    "fields_done": 0,
    "fields_resumed": 0,
    "unchanged": True,
  }
  if src.order == store.SHUFFLED:
    have = src.manifest["order"]["seed"]
    if have != seed:
      raise UserError(
        f"{src.path}: already shuffled with seed {have}; re-order the store it came from "
        f"(in corpus order) with --shuffle_seed={seed} instead"
      )
    return summary
  if out.rstrip("/") == src.path.rstrip("/"):
    raise UserError(f"{out}: --output_dir must differ from --data (the store being read)")
  if _finished(out, src, seed):
    return summary
  work = _prepare(out, src, seed)
  dtype = src.manifest.get("token_dtype")
  jobs = [
    _Job(
      str(src.path),
      str(out),
      str(work),
      split,
      int(year),
      field,
      1 if field == store.TEXT else np.dtype(dtype).itemsize,
      int(seed),
      bucket_bytes or store_shuffle.BUCKET_BYTES,
    )  # fmt: skip
    for key, table in sorted(src.manifest["tables"].items())
    for split, year in [key.split("/")]
    for field in table["fields"]
  ]
  files = {}
  for i, (result, resumed) in enumerate(_map(_run_job, jobs, num_workers)):
    files.update(result["files"])
    summary["fields_resumed" if resumed else "fields_done"] += 1
    if progress is not None:
      what = "kept from the interrupted run" if resumed else f"{result['buckets']} bucket(s)"
      progress(f"[{i + 1}/{len(jobs)}] {jobs[i].name}: {result['examples']} examples, {what}")
  for name in _COPIED:
    path = storage.join(src.path, name)
    if storage.isfile(path):
      with StagedFile(storage.join(out, name)) as f:
        f.write(storage.read_bytes(path))
  manifest = store_write.manifest_bytes(
    src.manifest["tables"],
    files,
    dtype,
    src.manifest.get("vocab"),
    store_shuffle.order_entry(seed),
  )
  store_write.write_manifest(out, manifest)
  storage.rmtree(storage.join(out, WORK_DIR))
  summary["unchanged"] = False
  return summary


def _prepare(out: storage.Location, src: store.Store, seed: int) -> storage.Location:
  """The work directory of (source, seed) under `out`, any other work deleted; `out` is no
  store until the new manifest is written."""
  check_replaceable(out, OUTPUT_NAMES)
  if store.is_store(out):  # another store there: it stops being one before its files change
    storage.remove(storage.join(out, store.MANIFEST))
  tag = hashlib.sha256(f"{src.manifest_sha256} {seed}".encode()).hexdigest()[:16]
  root = storage.join(out, WORK_DIR)
  if storage.isdir(root):
    for stale in storage.listdir(root):  # another source's or seed's work
      if stale != tag:
        storage.rmtree(storage.join(root, stale))
  work = storage.join(root, tag)
  storage.makedirs(work)
  return work


def _map(fn, jobs: list, num_workers: int):
  """`fn` over `jobs` in order: here, or in `num_workers` spawned processes."""
  if num_workers <= 1 or len(jobs) <= 1:
    yield from map(fn, jobs)
    return
  with multiprocessing.get_context("spawn").Pool(min(num_workers, len(jobs))) as pool:
    yield from pool.imap(fn, jobs)
