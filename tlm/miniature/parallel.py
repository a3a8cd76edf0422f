"""Independent jobs of the miniature reproduction (trainings, adaptations) in worker processes.

One seed of `--mode=reproduce` trains about fifteen models that depend only on their start:
Uniform, Temporal, the nine Yearly experts, the two models retrained on 2010-19, T5-CBQA and
T5-CBQA-ft (in that order, one job). On a tiny model most of XLA's operations are too small to
be split over threads, so one training leaves much of a second core idle; `run_jobs` trains
`reproduce.workers` of them at once, each in its own process (`benchmarks/tiny_parallel.py`
measures two at once against one after the other; docs/reproduction.md, "Run time", has the
run's timings).

Deterministic: a job's numbers do not depend on how the jobs are scheduled. Each job is a pure
function of its config (the batches are a function of (seed, step), the start is a file), and
a worker is a fresh process (spawned, not forked) with this process's environment and CPU
affinity, so XLA partitions every operation over the same number of threads as this process
would: the same floating-point results, whatever worker runs the job and in whatever order
(checked by `tests/test_parallel.py`). Pinning workers to one core each changes that
partitioning, and with it the last bits of every number, so workers are pinned only when asked
(`pin=True`, `reproduce.pin_workers`): each worker then runs on a core of its own with XLA's
intra-op threading off, and a job's numbers are again independent of the schedule and of the
number of workers (every worker computes single-threaded), but not equal to an unpinned run's.

A job's progress lines go to `<its workdir>/log.txt`; this process prints one line as each job
starts and ends. A failed job stops the pool (jobs not started are cancelled) and raises its
error here with the path of its log. A worker ends itself when this process is gone (killed by
a signal that leaves no time to shut the pool down): its job's last checkpoint stays, and a
rerun resumes from it.
"""

import concurrent.futures as cf
import dataclasses
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence

from tlm.errors import UserError

Log = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Job:
  """One independent piece of work: `kind` ("train" or "adapt") of `steps` (config, workdir)
  pairs, run in order (a chain, e.g. T5-CBQA then T5-CBQA-ft from it)."""

  name: str
  kind: str
  steps: tuple  # ((Config, workdir), ...)
  cache_dir: str = ""  # the JAX compilation cache (shared by all the jobs of a machine)

  def __post_init__(self):
    if self.kind not in _KINDS:
      raise ValueError(f"unknown job kind {self.kind!r}")


def job_log(workdir: str) -> Callable[[str], None]:
  """Appends a job's progress lines to `<workdir>/log.txt` (made if missing)."""
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, "log.txt")

  def log(line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
      f.write(line + "\n")

  return log


def _train(config, workdir: str, log: Log):
  from tlm.eval import during_training
  from tlm.train.loop import train

  train(config, workdir, evaluators=during_training.evaluators(config), log=log)
  return None


def _adapt(config, workdir: str, log: Log):
  from tlm.eval.adaptation import adapt

  return adapt(config, workdir, log)


_KINDS = {"train": _train, "adapt": _adapt}


def enable_compilation_cache(path: str) -> None:
  """Programs of the same shapes (every expert, every chunk) compile once per machine. A cache
  chosen in the environment (`JAX_COMPILATION_CACHE_DIR`, read by jax at import, with its own
  thresholds) is kept: a run's processes, and the test suite's, share that one."""
  import jax

  if path and not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def exit_with_parent(poll_seconds: float = 1.0) -> None:
  """In a worker: a daemon thread that ends this process once its parent has gone.

  A SIGTERM or SIGKILL to the reproduction leaves the pool no time to stop its workers, which
  would otherwise train on as orphans (adopted by init). Polling the parent's pid is portable
  and costs nothing next to a training step."""
  parent = os.getppid()

  def watch() -> None:
    while os.getppid() == parent:
      time.sleep(poll_seconds)
    os._exit(1)  # no cleanup to run: checkpoints are committed atomically

  threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


SINGLE_THREADED_XLA = "--xla_cpu_multi_thread_eigen=false"
_pinned_core: int | None = None  # in a pinned worker: its core


def _start_worker(counter, cores: tuple[int, ...] | None) -> None:
  """A worker's initializer: ends with its parent; pinned (`cores` given), takes the next core
  of `cores` and turns XLA's intra-op threading off, before anything in it initialises JAX's
  backend (a spawned worker has imported no JAX yet; XLA reads XLA_FLAGS at that point)."""
  global _pinned_core
  exit_with_parent()
  if cores:
    with counter.get_lock():
      index, counter.value = counter.value, counter.value + 1
    _pinned_core = cores[index % len(cores)]
    os.sched_setaffinity(0, {_pinned_core})
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {SINGLE_THREADED_XLA}".strip()


def run_job(job: Job, log: Log | None = None) -> list:
  """Runs one job here; its lines go to `log` or, if None, to each workdir's log.txt."""
  enable_compilation_cache(job.cache_dir)
  out = []
  for config, workdir in job.steps:
    job_lines = log or job_log(workdir)
    if _pinned_core is not None:
      cores, flags = sorted(os.sched_getaffinity(0)), os.environ.get("XLA_FLAGS", "")
      job_lines(f"pinned worker: cores {cores}, XLA_FLAGS {flags!r}")
    out.append(_KINDS[job.kind](config, workdir, job_lines))
  return out


def _log_path(job: Job) -> str:
  return os.path.join(job.steps[-1][1], "log.txt")


def run_jobs(jobs: Sequence[Job], workers: int, log: Log = print, pin: bool = False) -> list[list]:
  """Runs every job, `workers` at a time; returns each job's results, in `jobs` order.

  With `workers` 1 (and `pin` False) the jobs run here, one after the other, their lines going
  to `log`. With `pin` they always run in workers, each pinned to one of this process's cores.
  """
  if not pin and (workers <= 1 or len(jobs) <= 1):
    out = []
    for job in jobs:
      log(f"{job.name}: {job.kind}")
      out.append(run_job(job, log))
    return out
  results: dict[int, list] = {}
  start = time.time()
  context = multiprocessing.get_context("spawn")
  cores = tuple(sorted(os.sched_getaffinity(0))) if pin else None
  pool = cf.ProcessPoolExecutor(
    max_workers=workers,
    mp_context=context,
    initializer=_start_worker,
    initargs=(context.Value("i", 0), cores),
  )
  with pool:
    futures = {pool.submit(run_job, job): i for i, job in enumerate(jobs)}
    for job in jobs:
      log(f"queued {job.name}: {job.kind}, log in {_log_path(job)}")
    try:
      for future in cf.as_completed(futures):
        i = futures[future]
        try:
          results[i] = future.result()
        except Exception as e:
          raise UserError(
            f"{jobs[i].name} failed ({type(e).__name__}: {e}); its log: {_log_path(jobs[i])}"
          ) from e
        log(
          f"done {jobs[i].name} ({len(results)} of {len(jobs)}; "
          f"{(time.time() - start) / 60:.1f} min)"
        )
    except BaseException:
      for future in futures:
        future.cancel()
      raise
  return [results[i] for i in range(len(jobs))]
