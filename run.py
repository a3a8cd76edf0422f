r"""tlm entry point: parses flags, picks a mode, and calls into `tlm/`.

  python run.py --mode=reproduce                       # the embedded miniature reproduction
  python run.py --mode=train --config=large_temporal   # a paper model (needs data + checkpoint)
  python run.py --mode=eval_future --config=large_temporal

Every mode is a function `main(flags)` in `tlm/cli/`, imported only when chosen so that the
numpy-only data modes never import jax. Errors the user can cause (`tlm.errors.UserError`)
are printed as one line on stderr with a non-zero exit status.
"""

import importlib
import sys

from absl import app, flags, logging

# mode -> "module:function". Each function takes the parsed absl FLAGS.
MODES = {
  # Model I/O (tlm/cli/inference.py, tlm/cli/convert.py).
  "predict": "tlm.cli.inference:predict",
  "score": "tlm.cli.inference:score",
  "convert": "tlm.cli.convert:main",
  # Data builders, numpy only (tlm/cli/build_world.py, tlm/cli/data.py).
  "build_world": "tlm.cli.build_world:build_world",
  "build_templama": "tlm.cli.data:build_templama",
  "build_ssm": "tlm.cli.data:build_ssm",
  "convert_ssm": "tlm.cli.data:convert_ssm",
  "shuffle_store": "tlm.cli.data:shuffle_store",
  "check_store": "tlm.cli.data:check_store",
  # Training (tlm/cli/train.py).
  "train": "tlm.cli.train:main",
  # The paper's experiments (tlm/cli/experiment_modes.py).
  "eval": "tlm.cli.experiment_modes:evaluate",
  "eval_future": "tlm.cli.experiment_modes:eval_future",
  "adapt": "tlm.cli.experiment_modes:adapt",
  "cronquestions": "tlm.cli.experiment_modes:cronquestions",
  "reproduce": "tlm.cli.experiment_modes:reproduce",
  "tables": "tlm.cli.experiment_modes:tables",
  "combine_seeds": "tlm.cli.experiment_modes:combine_seeds",
}

flags.DEFINE_enum("mode", "reproduce", sorted(MODES), "What to run.")
flags.DEFINE_string("config", None, "Named config from tlm/configs/, e.g. tiny_temporal.")
flags.DEFINE_multi_string("set", [], "Config override dotted.key=value; repeatable.")
flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and results.")
flags.DEFINE_bool("verbose", False, "Show the libraries' INFO logs (jax, orbax).")
flags.DEFINE_bool(
  "dry_run", False, "train and the modes that load a model: memory per device, no weights read."
)
# Checkpoints and files.
flags.DEFINE_string("checkpoint", None, "HF dir, Mesh-TF prefix, or tlm checkpoint/workdir.")
flags.DEFINE_string("input_file", None, "JSON lines input (predict, score).")
flags.DEFINE_string("output_file", None, "JSON lines output (predict, score).")
flags.DEFINE_string("output_dir", None, "Output directory (convert, build_*).")
flags.DEFINE_enum("format", "hf", ["hf", "tlm", "t5x"], "convert: output checkpoint format.")
flags.DEFINE_integer("batch_size", 32, "predict/score: examples per batch.")
flags.DEFINE_integer("max_decode_length", 32, "predict: maximum number of decoded tokens.")
flags.DEFINE_integer("beam_size", 1, "predict: 1 is greedy decoding.")
flags.DEFINE_float("temperature", 0.0, "predict: > 0 samples (T5X temperature_sample); 0 greedy.")
flags.DEFINE_integer("top_k", 0, "predict, sampling: keep the k likeliest tokens; 0 all.")
flags.DEFINE_float("top_p", 1.0, "predict, sampling: then the top-p nucleus, in (0, 1]; 1 all.")
flags.DEFINE_string(
  "vocab",
  None,
  "SentencePiece model (predict/score: default the one beside the checkpoint; build_ssm, "
  "convert_ssm: store its token ids).",
)
flags.DEFINE_bool(
  "truncate_inputs", False, "predict/score: cut inputs to the model's training input length."
)
# Data builders.
flags.DEFINE_string("facts", None, "build_templama: Wikidata-style facts TSV.")
flags.DEFINE_string("entities", None, "build_templama, build_ssm (names): entities TSV.")
flags.DEFINE_string(
  "news", None, "build_ssm: news JSON lines: files and globs, comma-separated, plain or .gz."
)
flags.DEFINE_integer(
  "num_workers", 1, "build_ssm, shuffle_store: local processes (same output for any)."
)
flags.DEFINE_string(
  "beam_options", None, "build_ssm: run as an Apache Beam pipeline with these options."
)
flags.DEFINE_integer(
  "shuffle_seed",
  -1,
  "build_ssm: write each table in an order seeded with it; < 0: corpus order. shuffle_store: "
  "the seed (>= 0).",
)
flags.DEFINE_string(
  "data",
  None,
  "cronquestions: directory with the released files; convert_ssm: a JSON-lines SSM directory; "
  "check_store, shuffle_store: an example store.",
)
flags.DEFINE_string(
  "check",
  None,
  "reproduce: a committed seed's results folder (or one holding seed=S/ folders) whose "
  "predictions each model of the run must equal; writes WORKDIR/check.json and check.md.",
)
flags.DEFINE_list(
  "workdirs", [], "tables: workdirs whose results/eval.json to tabulate; combine_seeds: seed dirs."
)
flags.DEFINE_integer("min_year", 2010, "build_templama: first year.")
flags.DEFINE_integer("max_year", 2020, "build_templama: last year.")
flags.DEFINE_integer("max_subjects_per_relation", 1000, "build_templama: subjects kept.")
flags.DEFINE_enum("granularity", "year", ["year", "quarter", "month"], "build_templama: bucket.")
flags.DEFINE_integer("seed", 0, "Seed for data builders and predict's sampling.")
flags.DEFINE_float("scale", 1.0, "build_world: size of the synthetic world.")
flags.DEFINE_integer(
  "world_version", 4, "build_world: the world's version (4; 3, the results before 2026-12-07)."
)
# Object stores (tlm/remote_clients.py).
flags.DEFINE_float(
  "storage_deadline_s",
  None,
  "gs://: the longest one ranged read may take, retries included, before it fails in one line "
  "(default 120; each request gets an eighth of it).",
)
# Multi-host (otherwise taken from the cluster environment, if any).
flags.DEFINE_string("coordinator_address", None, "jax.distributed coordinator host:port.")
flags.DEFINE_integer("num_processes", None, "jax.distributed number of processes.")
flags.DEFINE_integer("process_id", None, "jax.distributed index of this process.")

FLAGS = flags.FLAGS
# The flags that name a file or directory (--workdirs: a list of them), parsed once by
# `tlm.storage.parse` before the mode starts.
PATH_FLAGS = (
  "workdir",
  "checkpoint",
  "input_file",
  "output_file",
  "output_dir",
  "vocab",
  "facts",
  "entities",
  "news",
  "data",
  "workdirs",
  "check",
)


def parse_path_flags(values) -> None:
  """Replaces each path flag's value by its canonical form (`tlm.storage.parse`)."""
  from tlm import storage

  for name in PATH_FLAGS:
    value = getattr(values, name)
    if isinstance(value, list):
      setattr(values, name, [storage.parse(v, f"--{name}") for v in value])
    elif name == "news" and value and "," in value:  # build_ssm's comma-separated shards
      setattr(values, name, ",".join(storage.parse(v, f"--{name}") for v in value.split(",")))
    elif value:
      setattr(values, name, storage.parse(value, f"--{name}"))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  from tlm.errors import UserError

  # orbax logs every checkpoint operation at INFO; progress lines are tlm's own prints.
  if not FLAGS.verbose:
    logging.set_verbosity(logging.WARNING)

  from tlm import remote_clients

  try:
    # Before the mode's modules are imported: the object-store clients read some of it then.
    remote_clients.configure(FLAGS.storage_deadline_s, verbose=FLAGS.verbose)
  except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  module_name, function_name = MODES[FLAGS.mode].split(":")
  fn = getattr(importlib.import_module(module_name), function_name)
  try:
    parse_path_flags(FLAGS)
    fn(FLAGS)
  except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  from tlm import host_memory

  # Before jax starts: see tlm/host_memory.py (the reproduction also reuses its heap).
  mode = host_memory.mode_of(sys.argv[1:], FLAGS["mode"].default)
  host_memory.restart_with_hugepages(reuse_heap=mode == "reproduce")
  app.run(main)
