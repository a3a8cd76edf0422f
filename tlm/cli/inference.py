"""`--mode=predict` and `--mode=score`: a checkpoint applied to a JSON-lines file.

  python run.py --mode=predict --checkpoint=C --input_file=IN --output_file=OUT \
      [--batch_size=32 --max_decode_length=32 --beam_size=1 --vocab=spiece.model] \
      [--temperature=0 --top_k=0 --top_p=1 --seed=0] [--truncate_inputs]
  python run.py --mode=score --checkpoint=C --input_file=IN --output_file=OUT [--truncate_inputs]

`predict` reads `{"input": str}` per line and writes the same objects with `"prediction"`
added, in input order: greedy decoding (the paper's closed-book QA decoding, section 2), or
with `--beam_size` > 1 beam search, or with `--temperature` > 0 sampling with T5X's
`temperature_sample` semantics (`tlm.models.decoding.temperature_sample`): logits divided by
the temperature, then `--top_k` (0: all tokens) and `--top_p` (1: all) filters, in that order.
A sample is a function of `--seed` and the line's place in the file, whatever the batch size
or the mesh. `score` reads `{"input", "target"}` and adds
`"log_likelihood"` (natural log of p(target | input), summed over the target tokens including
EOS, as in the paper's section 3.2 analyses) and `"num_tokens"`. Inputs and targets are
tokenized T5-style: SentencePiece ids followed by EOS.

`--checkpoint` is anything `tlm.models.checkpoints.load_checkpoint` reads (HF directory,
Mesh-TF prefix, tlm model directory, training workdir). The vocabulary is `--vocab`, else the
`spiece.model` stored with the checkpoint. It is loaded as the evaluations load theirs
(`tlm.infer.trained_models.checkpoint_predictor`), and batching is `Predictor`'s: examples
sorted by length, padded to power-of-two lengths and a fixed number of rows, so jit compiles
once per length bucket; output in input order.

Before jax is imported, so that bad input fails fast: the decoding flags are checked
(`--temperature` >= 0, `--top_k` in [0, 2**31), `--top_p` in (0, 1], `--seed` in [0, 2**32), no
sampling flag with beam search, no filter without a temperature), `--output_file` (not a
directory, creatable), every line of the input file is read and tokenized (invalid UTF-8,
lone surrogates and out-of-range sentinels `<extra_id_N>` are errors naming the file and line),
and the inputs longer than the model's training input length are counted: one warning per
file gives their number. They run whole, as the checkpoint allows (relative position buckets
extend to any length, at quadratic cost); `--truncate_inputs` cuts them to that length instead,
keeping EOS, as the evaluations do. The output file is written atomically, at the end.

Both modes run on a device mesh as the evaluations do, and join a multi-host run with the
flags of `--mode=train` (`--coordinator_address --num_processes --process_id`, or a cluster
environment): every process reads the input, feeds its own rows of each batch, and process 0
writes the output. They take exactly these `--set` keys (any other is an error):
`mesh.data`, `mesh.model`, `mesh.fsdp` and `eval.param_dtype` (bfloat16 halves the parameters'
memory). `--dry_run` reports the memory per device of the largest batch without loading the
weights (only the checkpoint's config is read).
"""

import json
import sys

from tlm import configs, safe_read, storage
from tlm.data.vocab import Vocabulary, find_spiece_model
from tlm.errors import ConfigError, DataError
from tlm.files import check_output_file, write_jsonl
from tlm.line_files import iter_jsonl

FLOAT32_MAX = 3.4028234663852886e38  # numpy.finfo(numpy.float32).max, without importing numpy

# A config.json (tlm's or HF's) is a few kilobytes.
_MAX_CONFIG_BYTES = 1 << 20


def require_flags(flags, mode: str, *names: str) -> None:
  """Raises ConfigError naming the first missing flag."""
  for name in names:
    if getattr(flags, name) in (None, ""):
      raise ConfigError(f"--{name} is required for --mode={mode}")


def _check_sizes(flags, *names: str) -> None:
  """Checks --batch_size, --max_decode_length, --beam_size against the ranges of the config
  keys eval.* that the evaluations use for the same sizes (tlm.configs.schema says why)."""
  for name in names:
    configs.check_value(f"eval.{name}", getattr(flags, name), f"--{name}")


def find_vocabulary(flags) -> str | None:
  """`--vocab`, else the `spiece.model` stored with `--checkpoint` (`find_spiece_model`)."""
  return flags.vocab or find_spiece_model(flags.checkpoint)


def load_vocabulary(flags) -> Vocabulary:
  """The vocabulary for `flags.checkpoint`; ConfigError if there is none."""
  path = find_vocabulary(flags)
  if path is None:
    raise ConfigError(
      f"no vocabulary for {flags.checkpoint}: pass --vocab=spiece.model "
      "or put spiece.model beside the checkpoint"
    )
  return Vocabulary(path)


def _read_examples(path: str, fields: tuple[str, ...]) -> tuple[list[int], list[dict]]:
  """The line numbers and objects of the whole file, each field checked to be a string."""
  lines, rows = [], []
  for line, row in iter_jsonl(path, required=fields):
    for field in fields:
      if not isinstance(row[field], str):
        raise DataError(f"field '{field}' must be a string", path, line)
    lines.append(line)
    rows.append(row)
  return lines, rows


def training_input_length(checkpoint: str) -> tuple[int, str]:
  """The encoder length the checkpoint was trained with, and where that number comes from.

  A tlm training workdir (or one of its steps) records it in its `config.json`
  (`data.input_length`); an HF directory's `config.json` in `n_positions` (512 for the
  public T5 checkpoints). Other layouts record none: tlm's default `data.input_length`.
  """
  path = storage.abspath(checkpoint)
  if storage.dirname(path).endswith("/checkpoints"):
    path = storage.dirname(storage.dirname(path))  # WORKDIR/checkpoints/STEP
  config_path = storage.join(path, "config.json")
  # Unreadable or odd files are load_checkpoint's to report; here they just say nothing
  # (a FIFO or device is not opened, a large file not read: safe_read).
  try:
    config = json.loads(safe_read.read_bounded(config_path, _MAX_CONFIG_BYTES))
  except (OSError, ValueError, RecursionError):
    config = None
  if isinstance(config, dict):
    if storage.isfile(storage.join(path, "model_config.json")):
      data = config.get("data")
      value = data.get("input_length") if isinstance(data, dict) else None
      where = f"{config_path} data.input_length"
    else:
      value, where = config.get("n_positions"), f"{config_path} n_positions"
    if isinstance(value, int) and not isinstance(value, bool) and value > 1:
      return value, where
  return configs.DataConfig.input_length, "tlm's default data.input_length"


def _check_lengths(
  flags, vocab: Vocabulary, lines: list[int], rows: list[dict], fields: tuple[str, ...]
) -> int:
  """Tokenizes every field of every row (DataError naming the line of a bad sentinel) and
  warns once with the number of inputs longer than the training input length.

  Returns:
    The `max_input_length` for the Predictor: that length with --truncate_inputs, else 0.
  """
  limit, where = training_input_length(flags.checkpoint)
  longer = 0
  for line, row in zip(lines, rows, strict=True):
    for field in fields:
      try:
        ids = vocab.encode(row[field])
      except DataError as e:
        raise DataError(f"field '{field}': {e}", flags.input_file, line) from None
      if field == "input" and len(ids) + 1 > limit:  # + EOS, as Predictor.tokenize counts
        longer += 1
  if longer:
    action = (
      f"--truncate_inputs cuts them to {limit} tokens (EOS kept)"
      if flags.truncate_inputs
      else "they run whole (slow, and unlike training); --truncate_inputs cuts them"
    )
    print(
      f"warning: {flags.input_file}: {longer} of {len(rows)} inputs are longer than the "
      f"model's training input length of {limit} tokens ({where}); {action}",
      file=sys.stderr,
      flush=True,
    )
  return limit if flags.truncate_inputs else 0


# The `--set` keys that predict and score use: where the model runs, not what it is.
INFERENCE_KEYS = ("mesh.data", "mesh.model", "mesh.fsdp", "eval.param_dtype")


def inference_settings(flags, mode: str) -> configs.Config:
  """A default Config with the `--set` values of predict / score applied.

  Raises:
    ConfigError: naming a key these modes do not use (unknown keys included), or a bad value.
  """
  for assignment in flags.set:
    key = assignment.partition("=")[0].strip()
    if key not in INFERENCE_KEYS:
      raise ConfigError(
        f"--set={assignment}: --mode={mode} does not use {key!r}; it takes only "
        + ", ".join(INFERENCE_KEYS)
      )
  return configs.override(configs.Config(), flags.set)


def _predictor(
  flags, vocab: Vocabulary, n: int, settings: configs.Config, lengths: tuple[int, int], **kwargs
):
  """The Predictor on the `--set` mesh; None after a `--dry_run` report (`lengths`: the
  input and target lengths of the largest batch)."""
  # jax and the model are imported only once the inputs have been checked.
  from tlm.cli.train import initialize_distributed
  from tlm.infer.trained_models import checkpoint_predictor

  if flags.batch_size < 1:
    raise ConfigError(f"--batch_size must be >= 1, got {flags.batch_size}")
  initialize_distributed(flags.coordinator_address, flags.num_processes, flags.process_id)
  from tlm.sharding import partitioning

  mesh = partitioning.make_mesh(settings.mesh.data, settings.mesh.model)
  # A short file is not padded to a whole --batch_size of rows.
  rows = min(flags.batch_size, 1 << max(n - 1, 0).bit_length())
  if flags.dry_run:
    from tlm.infer.eval_dry_run import eval_dry_run, saved_model_config
    from tlm.infer.query_programs import Decoding

    sampling = {k: kwargs[k] for k in ("temperature", "top_k", "top_p", "seed") if k in kwargs}
    eval_dry_run(
      saved_model_config(flags.checkpoint),
      mesh,
      fsdp=settings.mesh.fsdp,
      param_dtype=settings.eval.param_dtype,
      batch_size=rows,
      input_length=lengths[0],
      target_length=lengths[1],
      decoding=Decoding(lengths[1], kwargs.get("beam_size", 1), **sampling),
    )
    return None
  return checkpoint_predictor(
    flags.checkpoint, settings, vocab=vocab, mesh=mesh, batch_size=rows, progress=True, **kwargs
  )


def _longest(vocab: Vocabulary, texts, max_length: int = 0) -> int:
  """Tokens of the longest text with EOS, as the predictor pads it (a power of two >= 8);
  `max_length` > 0: at most that many (--truncate_inputs)."""
  n = max((len(vocab.encode(t)) + 1 for t in texts), default=1)
  if max_length > 0:
    n = min(n, max_length)
  return 1 << (max(n, 8) - 1).bit_length()


def check_sampling_flags(flags) -> None:
  """ConfigError naming a bad `--temperature`, `--top_k`, `--top_p` or `--seed`, or a
  combination that would silently not do what it says (checked before jax is imported)."""
  temperature, top_k, top_p = flags.temperature, flags.top_k, flags.top_p
  # The decoder divides float32 logits by it: beyond float32's largest it would be inf.
  if not 0 <= temperature <= FLOAT32_MAX:
    raise ConfigError(
      f"--temperature must be a finite number >= 0 and <= {FLOAT32_MAX:.7g} (float32; 0: greedy), "
      f"got {temperature}"
    )
  # The decoder takes k as an int32 (a k beyond the vocabulary keeps every token).
  if not 0 <= top_k < 2**31:
    raise ConfigError(f"--top_k must be in [0, 2**31) (0: no cut-off), got {top_k}")
  if not 0 < top_p <= 1:
    raise ConfigError(f"--top_p must be in (0, 1] (1: no cut-off), got {top_p}")
  if not 0 <= flags.seed < 2**32:
    raise ConfigError(f"--seed must be in [0, 2**32), got {flags.seed}")
  filters = [f"--{n}={v}" for n, v, off in (("top_k", top_k, 0), ("top_p", top_p, 1)) if v != off]
  if flags.beam_size > 1 and (temperature > 0 or filters):
    given = " ".join(([f"--temperature={temperature}"] if temperature > 0 else []) + filters)
    raise ConfigError(
      f"sampling ({given}) and beam search (--beam_size={flags.beam_size}) exclude each other: "
      "sample with --beam_size=1"
    )
  if filters and temperature == 0:
    raise ConfigError(
      f"{' '.join(filters)} only restrict sampling, and --temperature=0 is greedy decoding: "
      "give --temperature > 0 to sample"
    )


def _write_results(path: str, rows: list[dict]) -> None:
  """Process 0 writes (every process holds every result); the others write nothing."""
  import jax

  if jax.process_index() == 0:
    write_jsonl(path, rows)


def predict(flags) -> None:
  """--mode=predict: decodes every input of --input_file into --output_file."""
  require_flags(flags, "predict", "checkpoint", "input_file", "output_file")
  _check_sizes(flags, "batch_size", "max_decode_length", "beam_size")
  check_sampling_flags(flags)
  settings = inference_settings(flags, "predict")
  check_output_file(flags.output_file)
  lines, rows = _read_examples(flags.input_file, ("input",))
  vocab = load_vocabulary(flags)
  max_input_length = _check_lengths(flags, vocab, lines, rows, ("input",))
  predictor = _predictor(
    flags,
    vocab,
    len(rows),
    settings,
    max_decode_length=flags.max_decode_length,
    beam_size=flags.beam_size,
    temperature=flags.temperature,
    top_k=flags.top_k,
    top_p=flags.top_p,
    seed=flags.seed,
    max_input_length=max_input_length,
    lengths=(
      _longest(vocab, [row["input"] for row in rows], max_input_length),
      flags.max_decode_length,
    ),
  )
  if predictor is None:  # --dry_run
    return
  predictions = predictor.predict([row["input"] for row in rows])
  _write_results(
    flags.output_file, [dict(row, prediction=p) for row, p in zip(rows, predictions, strict=True)]
  )


def score(flags) -> None:
  """--mode=score: log p(target | input) of every line of --input_file into --output_file."""
  require_flags(flags, "score", "checkpoint", "input_file", "output_file")
  _check_sizes(flags, "batch_size")
  settings = inference_settings(flags, "score")
  check_output_file(flags.output_file)
  lines, rows = _read_examples(flags.input_file, ("input", "target"))
  vocab = load_vocabulary(flags)
  max_input_length = _check_lengths(flags, vocab, lines, rows, ("input", "target"))
  predictor = _predictor(
    flags,
    vocab,
    len(rows),
    settings,
    max_input_length=max_input_length,
    lengths=(
      _longest(vocab, [r["input"] for r in rows], max_input_length),
      _longest(vocab, [r["target"] for r in rows]),
    ),
  )
  if predictor is None:  # --dry_run
    return
  sums, counts = predictor.log_likelihood([r["input"] for r in rows], [r["target"] for r in rows])
  _write_results(
    flags.output_file,
    [
      dict(row, log_likelihood=float(s), num_tokens=int(n))
      for row, s, n in zip(rows, sums, counts, strict=True)
    ],
  )
