"""The records of a training run: the fields of a metrics.jsonl record, the window of
host-side sums each record is computed from, the progress line process 0 prints, and the
records a resumed run keeps.

A record is written at every log boundary (`train.log_every`, every eval, the last step) by
`tlm.train.loop.Trainer`; its loss, z-loss and accuracy are per real target token over the
steps since the previous record, the other fields as named (`input_wait_share`: the share of
the window's time the loop spent waiting for its input batches; `store_retries`,
`store_timeouts`, `store_slow_requests`: this process's requests to an object store in the
window that were retried, got no answer in time, or were answered after more than
`tlm.remote_retries.SLOW_S`; all 0 on local disk).
"""

import dataclasses
import json
import time
from collections.abc import Sequence

from tlm import configs, remote_retries, storage
from tlm.console import notice, warn
from tlm.files import write_jsonl
from tlm.train.evaluators import Evaluator, fields_of
from tlm.train.step import SUMS

# The fields of a metrics.jsonl record (`Window.record`; "mfu" only on a device of known peak).
TRAIN_FIELDS = (
  "loss",
  "z_loss",
  "accuracy",
  "learning_rate",
  "tokens_per_second",
  "seconds_per_step",
  "grad_norm",
  "input_wait_share",
  "store_retries",
  "store_timeouts",
  "store_slow_requests",
  "mfu",
)
# metrics.jsonl field <- `tlm.remote_retries.COUNTS` field: the window's difference.
_STORE_FIELDS = {
  "store_retries": "retries",
  "store_timeouts": "timeouts",
  "store_slow_requests": "slow",
}


def logged_fields(tc: configs.TrainConfig, evaluators: Sequence[Evaluator] = ()) -> tuple[str, ...]:
  """The numeric fields of this run's metrics.jsonl records (what `train.keep_best` may name):
  the training fields, and with `train.eval_every` the held-out loss and the evaluators'."""
  fields = TRAIN_FIELDS
  if tc.eval_every > 0:
    fields += ("eval_loss",) + fields_of(evaluators)
  return fields


def format_seconds(seconds: float) -> str:
  """`1h02m03s`, or `2m03s` under an hour (negative counts as 0)."""
  seconds = int(max(seconds, 0))
  h, rest = divmod(seconds, 3600)
  m, s = divmod(rest, 60)
  return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


@dataclasses.dataclass
class Window:
  """Host-side sums of the metrics since the last log line."""

  sums: dict = dataclasses.field(default_factory=lambda: dict.fromkeys(SUMS, 0.0))
  tokens: float = 0.0
  steps: int = 0
  grad_norm: float = 0.0
  learning_rate: float = 0.0
  input_wait: float = 0.0  # seconds the loop waited for its batches
  start: float = dataclasses.field(default_factory=time.perf_counter)
  store: dict = dataclasses.field(default_factory=remote_retries.COUNTS.snapshot)  # at start

  def add(self, m: dict) -> None:
    """Adds one step's fetched metrics."""
    for k in SUMS:
      self.sums[k] += float(m[k])
    self.tokens += float(m["tokens"])
    self.grad_norm += float(m["grad_norm"])
    self.learning_rate = float(m["learning_rate"])
    self.steps += 1

  def record(self, done: int) -> dict:
    """The metrics.jsonl record of the window, ending after step `done`, timed until now."""
    elapsed = time.perf_counter() - self.start
    weight = max(self.sums["weight"], 1.0)
    return {
      "step": done,
      "loss": self.sums["loss"] / weight,
      "z_loss": self.sums["z_loss"] / weight,
      "accuracy": self.sums["correct"] / weight,
      "learning_rate": self.learning_rate,
      "tokens_per_second": self.tokens / max(elapsed, 1e-9),
      "seconds_per_step": elapsed / max(self.steps, 1),
      "grad_norm": self.grad_norm / max(self.steps, 1),
      "input_wait_share": self.input_wait / max(elapsed, 1e-9),
    } | self._store_counts()

  def _store_counts(self) -> dict:
    now = remote_retries.COUNTS.snapshot()
    return {field: now[key] - self.store[key] for field, key in _STORE_FIELDS.items()}


def progress_line(
  record: dict, steps: int, best_metric: str | None = None, percent: Sequence[str] = ()
) -> str:
  """The line printed for a record of a run to `steps` (`best_metric`: `train.keep_best`;
  `percent`: the evaluators' fields, fractions shown as percentages)."""
  eta = (steps - record["step"]) * record["seconds_per_step"]
  extra = f" eval_loss {record['eval_loss']:.4f}" if "eval_loss" in record else ""
  extra += "".join(f" {k} {100 * record[k]:.1f}" for k in percent if k in record)
  utilisation = f" MFU {100 * record['mfu']:.1f}%" if "mfu" in record else ""
  best = f" (best {best_metric})" if "best_step" in record else ""
  if record.get("store_retries") or record.get("store_slow_requests"):  # the store had trouble
    extra += f" store retries {record['store_retries']} slow {record['store_slow_requests']}"
  return (
    f"step {record['step']}/{steps} loss {record['loss']:.4f}{extra}{best} "
    f"lr {record['learning_rate']:.3g} {record['tokens_per_second']:,.0f} tokens/s"
    f"{utilisation} ETA {format_seconds(eta)}"
  )


def resume_metrics(path: str, step: int) -> list[dict]:
  """The records of metrics.jsonl up to `step` (where a resumed run continues from).

  A crash can tear the last line (an append cut short): it is dropped with a notice. Any other
  bad line (malformed, not an object, no integer `step`: a damaged or edited file, read back as
  hostile input) ends what is kept, with a warning naming the line; the records before it are
  kept (the caller rewrites the file from them), not the whole history dropped.
  """
  if not storage.isfile(path):
    return []
  kept: list[dict] = []
  try:
    lines = storage.read_bytes(path).split(b"\n")
  except OSError as e:
    notice(f"{path}: cannot read ({e.strerror or e}); starting a new one")
    return []
  for i, line in enumerate(lines):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except (ValueError, RecursionError):
      if not any(rest.strip() for rest in lines[i + 1 :]):
        notice(f"{path}: dropped a torn last line (a write cut short by a crash)")
      else:
        warn(f"{path}:{i + 1}: malformed JSON; keeping the {len(kept)} records before it")
      break
    problem = _record_problem(record)
    if problem:
      warn(f"{path}:{i + 1}: {problem}; keeping the {len(kept)} records before it")
      break
    if record["step"] <= step:
      kept.append(record)
  return kept


def _record_problem(record) -> str | None:
  if not isinstance(record, dict):
    return "not a JSON object"
  if not isinstance(record.get("step"), int) or isinstance(record["step"], bool):
    return "no integer 'step'"
  return None


class MetricsLog:
  """A run's metrics.jsonl, appended record by record.

  At start it is rewritten once with the records kept by a resume (`resume_metrics`). Then,
  locally, each record is appended as one line and flushed (a crash tears at most the last
  line, which the next resume drops). An object store (gs://) cannot append: the file is
  uploaded whole, as one object (never torn), at each `flush`, which the loop calls at every
  checkpoint and at the end. A crash then loses the records after the last checkpoint, which
  the resumed run computes again anyway (it restarts at that checkpoint); a record is ~300
  bytes, so the paper's 3,000 records rewritten at its 300 checkpoints upload ~135 MB in all.

  Args:
    path: the metrics.jsonl.
    step: the step the run starts from (records after it are dropped).
  """

  def __init__(self, path: storage.PathArg, step: int):
    self.path = path = storage.location(path)
    self.records = resume_metrics(path, step)
    self.remote = path.is_remote
    write_jsonl(path, self.records)
    self._pending = False

  def append(self, record: dict) -> None:
    self.records.append(record)
    if self.remote:
      self._pending = True
      return
    with open(self.path, "a", encoding="utf-8") as f:
      f.write(json.dumps(record, ensure_ascii=False) + "\n")

  def flush(self) -> None:
    """On an object store, uploads the file if records were appended since the last upload."""
    if self._pending:
      write_jsonl(self.path, self.records)
      self._pending = False
