"""`build_ssm` as an Apache Beam pipeline: the paper's corpus beyond one machine.

The same units of work as the local builder (`tlm.store.store_build`): chunks of the input are
scanned, the held-out plan is computed from the counts, chunks are turned into parts, tables
are merged and the manifest written last, so the store is byte-identical to the one
`--num_workers` processes write (with `--shuffle_seed`, the same shuffled store: its order is
a sort by a hash of each example's position in the corpus order, `tlm.store.store_shuffle`).
Beam only schedules and retries them (DirectRunner in the tests, also in its multi-process
mode with every bundle run twice; Dataflow, Flink or Spark in production: docs/paper_scale.md
has the commands). Every stage may be run twice or again after a failure: its files appear
whole or not at all (`tlm.store.store_files.StagedFile`) and the merges only read the parts.
Parts and the store are written straight under the output directory, local or on an object
store (gs://), through `tlm.storage`; the manifest is written last, so a pipeline that fails
leaves no store (a stale manifest is deleted first), and the parts are deleted after it, when
the pipeline has ended.
A stage that fails with tlm's error (a bad input line, an output that cannot be written) leaves
it beside the parts, and the launching process raises it again (`_reporting`, `_error`): Beam
hands the launcher no more than a worker's traceback as text.

apache-beam is optional and lives in an environment of its own (requirements-beam.txt: it needs
protobuf < 7); without it `--beam_options` says so in one line. Tested with apache-beam 2.77.0
(numpy 2.4.6, Python 3.11.7), DirectRunner.
"""

import contextlib
import functools
import hashlib
import json
import shlex
from collections.abc import Callable, Sequence

from tlm import storage
from tlm.data.ssm import BuildSettings
from tlm.errors import ConfigError, DataError, OutputError, UserError
from tlm.store import store, store_build, store_files

# Beam runners parallelise over chunks: cut the input as for this many local workers.
CHUNK_HINT_WORKERS = 64


def _beam():
  try:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
  except ImportError:
    raise UserError(
      "--beam_options needs apache-beam: pip install -r requirements-beam.txt "
      "(or build with local processes: --num_workers=N)"
    ) from None
  return beam, PipelineOptions


def _clear(output_dir: str) -> None:
  """Removes a previous store in `output_dir` (its manifest first: no longer a store)."""
  manifest = storage.join(output_dir, store.MANIFEST)
  if storage.exists(manifest):
    storage.remove(manifest)
  for name in sorted(store_build.OUTPUT_NAMES - {store.MANIFEST}) + [store_build.PARTS_DIR]:
    path = storage.join(output_dir, name)
    if storage.isdir(path):
      storage.rmtree(path)
    elif storage.exists(path):
      storage.remove(path)


# Where a worker leaves the tlm error that failed its stage (below the parts: cleared with them).
FAILURES_DIR = "failures"
# The tlm errors a failure record names; any other UserError is read back as a UserError.
_ERRORS = {cls.__name__: cls for cls in (UserError, DataError, ConfigError, OutputError)}
_ERROR_FIELDS = ("path", "line", "reason")


def _reporting(fn: Callable, failures: str) -> Callable:
  """`fn` as a stage of the pipeline: a UserError it raises (a bad input line, an output that
  cannot be written) is recorded under `failures` before it fails the stage.

  Beam carries a worker's exception to the launching process only as text: a traceback inside
  a RuntimeError (FnApiRunner's worker processes, Dataflow), or, in-process, the same type made
  again from the message with " [while running 'Stage']" appended. The record is tlm's own
  error, read back by `_error` whichever runner ran the stage.
  """

  @functools.wraps(fn)
  def stage(*args, **kwargs):
    try:
      return fn(*args, **kwargs)
    except UserError as e:
      record = {"type": type(e).__name__, "message": str(e)}
      record.update({k: getattr(e, k) for k in _ERROR_FIELDS if getattr(e, k, None) is not None})
      data = json.dumps(record, sort_keys=True, default=str).encode("utf-8")
      name = hashlib.sha256(data).hexdigest()[:16] + ".json"  # a stage run again: one record
      with contextlib.suppress(OSError, UserError):  # the error raised below says enough
        with store_files.StagedFile(storage.join(failures, name)) as f:
          f.write(data)
      raise

  return stage


def _error(e: Exception, failures: str) -> UserError:
  """A failed pipeline as one line: the UserError a worker recorded (`_reporting`; the first by
  name if several stages failed), else the runner's exception, by its type and last line (a
  worker's traceback ends with its exception; the runner's log above has the rest)."""
  try:
    names = sorted(storage.listdir(failures)) if storage.isdir(failures) else []
  except OSError:  # an object store that cannot be reached: the runner's exception, below
    names = []
  for name in names:
    try:
      record = json.loads(storage.read_text(storage.join(failures, name)))
      error = _ERRORS.get(record["type"], UserError)(record["message"])
    except (OSError, ValueError, KeyError, TypeError):
      continue
    for field in _ERROR_FIELDS:
      if field in record:
        setattr(error, field, record[field])
    return error
  lines = [line.strip() for line in str(e).splitlines() if line.strip()]
  return UserError(f"the Beam pipeline failed: {type(e).__name__}: {lines[-1] if lines else ''}")


def build(
  news: str | Sequence[str],
  output_dir: str,
  beam_options: str | Sequence[str],
  settings: BuildSettings,
  progress: Callable[[str], None] | None = None,
) -> dict:
  """`tlm.store.build_ssm` as a Beam pipeline run with `beam_options`.

  Args:
    beam_options: the pipeline's options, e.g. "--runner=DirectRunner" (a string split like a
      shell command line, or a list).
    news, output_dir, settings, progress: as `tlm.store.build_ssm` (which calls this when
      given `beam_options`).

  Returns:
    The statistics written to `stats.json`.
  """
  beam, pipeline_options = _beam()
  paths, options = store_build.prepare(news, output_dir, settings, progress)
  chunks = store_build.plan_chunks(paths, CHUNK_HINT_WORKERS)
  out = storage.abspath(output_dir)
  part_dir = storage.join(out, store_build.PARTS_DIR)
  args = shlex.split(beam_options) if isinstance(beam_options, str) else list(beam_options)
  _clear(out)
  storage.makedirs(out)

  failures = storage.join(part_dir, FAILURES_DIR)
  reporting = functools.partial(_reporting, failures=failures)
  scan = reporting(store_build.scan_chunk)

  @reporting
  def plan_of(scans):
    return store_build.make_plan(chunks, scans, settings)

  @reporting
  def examples(chunk, plan):
    return store_build.process_chunk(chunk, plan.chunk_plan(chunk.index), options, part_dir)

  @reporting
  def jobs_of(results, plan):
    seed = options.shuffle_seed
    return store_build.merge_jobs(out, part_dir, plan, results, options.token_dtype, seed)

  @reporting
  def merge(job):
    return (job[1], job[2], job[3]), store_build.merge_job(job)

  @reporting
  def finish(merged, plan, results):  # on a worker: the statistics are read back from stats.json
    store_build.finish(out, plan, results, merged, options)

  try:
    with beam.Pipeline(options=pipeline_options(args)) as p:
      chunk_pc = p | "Chunks" >> beam.Create(chunks) | "Spread" >> beam.Reshuffle()
      plan = (
        chunk_pc
        | "Scan" >> beam.Map(scan)
        | "Scans" >> beam.combiners.ToList()
        | "Plan" >> beam.Map(plan_of)
      )
      results = chunk_pc | "Examples" >> beam.Map(examples, plan=beam.pvalue.AsSingleton(plan))
      all_results = results | "Results" >> beam.combiners.ToList()
      merged = (
        all_results
        | "MergeJobs" >> beam.FlatMap(jobs_of, plan=beam.pvalue.AsSingleton(plan))
        | "SpreadJobs" >> beam.Reshuffle()
        | "Merge" >> beam.Map(merge)
      )
      _ = (
        merged
        | "Merged" >> beam.combiners.ToList()
        | "Finish"
        >> beam.Map(
          finish,
          plan=beam.pvalue.AsSingleton(plan),
          results=beam.pvalue.AsSingleton(all_results),
        )
      )
  except Exception as e:
    raise _error(e, failures) from None
  storage.rmtree(part_dir)
  if not store.is_store(out):
    raise UserError(f"{out}: the Beam pipeline ended without writing the manifest")
  return json.loads(storage.read_text(storage.join(out, "stats.json")))
