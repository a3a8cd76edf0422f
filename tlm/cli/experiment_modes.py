"""`--mode=eval | eval_future | adapt | cronquestions | reproduce`: the paper's experiments.

  python run.py --mode=reproduce [--workdir=runs/reproduce] [--set=train.steps=...]
  python run.py --mode=reproduce --set=reproduce.seeds=0 --check=docs/results/budget30/seed=0
  python run.py --mode=eval --config=tiny_temporal --workdir=W
  python run.py --mode=eval_future --config=large_temporal --workdir=W
  python run.py --mode=adapt --config=tiny_uniform --workdir=W --set=adapt.alphas=0.3,0.5
  python run.py --mode=cronquestions --config=large_temporal --workdir=W --data=CRONQ_DIR
  python run.py --mode=tables --workdirs=W_SMALL,W_LARGE,... --output_dir=D   # Tables 2, 3, 7
  python run.py --mode=combine_seeds --workdirs=A/seed=0,B/seed=1 --output_dir=D

Without --config and --workdir, eval / eval_future / adapt / cronquestions use the Temporal
model of the miniature reproduction (tiny_temporal in runs/reproduce/seed=0/temporal) and say
what to run first if it is not there yet. A workdir that holds a trained model also holds its
resolved config (`config.json`): that is the base, so a model trained with `--set=data...` is
evaluated on its own data, and `--set` applies on top.

eval, eval_future, adapt and cronquestions run on the config's mesh (`--set=mesh.data=...`,
`mesh.model`, `mesh.fsdp`, `eval.param_dtype`) and join a multi-host run with the flags of
`--mode=train`; `--dry_run` reports their memory per device without loading any weights.
Each holds the workdir's lock (`tlm.workdir_lock`; process 0 of a multi-host run) while it
writes results there.
"""

from tlm import configs, storage
from tlm.console import log_line
from tlm.errors import ConfigError, UserError
from tlm.files import check_layout
from tlm.infer.trained_models import read_saved_config, saved_config_path
from tlm.miniature.reproduce import DEFAULT_WORKDIR, seed_dir
from tlm.train import preflight
from tlm.workdir_lock import WorkdirLock, acquire_on_main


def config_and_workdir(flags):
  """The experiment's config (the workdir's saved one, if any, with `--set` on top), workdir
  (default: the miniature's model of the config's variant) and the saved config's path (or
  None)."""
  config = configs.get(flags.config or "tiny_temporal")
  workdir = flags.workdir or storage.join(seed_dir(DEFAULT_WORKDIR, 0), config.variant)
  path = saved_config_path(workdir)
  saved = None if path is None else read_saved_config(path)
  if saved is not None:
    if flags.config and saved.name != flags.config:
      raise ConfigError(f"{workdir} holds a {saved.name} model, not {flags.config}")
    # A Yearly expert's config names its year; the experiment covers them all.
    config = configs.replace(saved, "data.year", 0) if saved.variant == "yearly" else saved
  return configs.override(config, flags.set), workdir, path


def _origin(flags, saved_path, key: str) -> str:
  """Where the value of `key` came from, for an error about it: "" where a `--set` gave it
  (the error names the key), else the saved config.json it was read from (if any)."""
  if saved_path is None or any(a.partition("=")[0].strip() == key for a in flags.set):
    return ""
  return saved_path


def _start(flags):
  """(config, workdir, saved config's path) of an experiment mode, after joining a multi-host
  run if there is one."""
  from tlm.cli.train import initialize_distributed

  config, workdir, saved_path = config_and_workdir(flags)
  initialize_distributed(flags.coordinator_address, flags.num_processes, flags.process_id)
  return config, workdir, saved_path


def _dry_run(config, trains: bool) -> None:
  """`--dry_run`: the evaluation's (and, for modes that train, the train step's) memory."""
  from tlm.infer import eval_dry_run as infer_dry_run
  from tlm.train import train_dry_run as train_dry_run

  if trains:
    train_dry_run.dry_run(config)
  infer_dry_run.config_eval_dry_run(config)


def _experiment(flags, mode: str, fn, *, trains: bool, data=None, report=None) -> None:
  """Runs `fn(config, workdir, log, data)`, the one signature of the experiments, holding the
  workdir's lock, or its `--dry_run` report.

  Args:
    mode: the lock's label (the mode's name).
    trains: whether the experiment trains (its `--dry_run` then reports the train step too).
    data: the experiment's `data` argument (None: it loads the config's data).
    report: `report(config, result)` prints what the experiment returned, before the results
      directory is named.
  """
  config, workdir, saved_path = _start(flags)
  if flags.dry_run:
    return _dry_run(config, trains=trains)
  # Before the evaluation, not after it.
  check_layout(workdir, dirs=("results",))
  preflight.check_eval_batch(config, origin=_origin(flags, saved_path, "eval.batch_size"))
  with acquire_on_main(workdir, mode):
    result = fn(config, workdir, log_line, data)
  if report is not None:
    report(config, result)
  log_line(f"results in {storage.join(workdir, 'results')}")


def evaluate(flags) -> None:
  from tlm.eval import experiments, tables
  from tlm.eval.results import answer_baselines

  def report(config, result):
    log_line("\n" + tables.table2({config.name: result}, answer_baselines(result)))

  _experiment(flags, "eval", experiments.evaluate, trains=False, report=report)


def eval_future(flags) -> None:
  from tlm.eval import experiments

  _experiment(flags, "eval_future", experiments.eval_future, trains=False)


def adapt(flags) -> None:
  from tlm.eval import adaptation

  def report(config, out):
    log_line(f"adapted model matches the retrained one at step: {out['matched_at_step']}")

  _experiment(flags, "adapt", adaptation.adapt, trains=True, report=report)


def cronquestions(flags) -> None:
  from tlm.eval.cronquestions_eval import cronquestions as run

  _experiment(flags, "cronquestions", run, trains=True, data=flags.data)


def reproduce(flags) -> None:
  """--mode=reproduce; with --check=DIR, then each seed's models against the committed ones
  in DIR (`tlm.miniature.regeneration`): a non-zero exit when any differs."""
  from tlm.miniature import regeneration
  from tlm.miniature.reproduce import reproduce as run
  from tlm.miniature.reproduce import seeds_of

  if flags.config:
    log_line("note: --mode=reproduce uses the tiny configs; --config is ignored (use --set)")
  workdir = storage.abspath(flags.workdir or DEFAULT_WORKDIR)
  # DIR is read before the run, so a wrong DIR fails in a second, not after the training.
  refs = regeneration.committed_seeds(flags.check, seeds_of(flags.set)) if flags.check else None
  if refs is not None:
    from tlm.miniature.reproduce import reproduction_configs

    version = reproduction_configs(flags.set)["temporal"].data.world_version
    regeneration.check_world_versions(refs, version)
  with WorkdirLock(workdir, "reproduce"):
    run(flags.set, workdir, log_line)
    if refs is None:
      return
    reports = regeneration.check(refs, workdir, log_line)
  if not all(r["equal"] for r in reports):
    differing = sorted({m for r in reports for m in r["models_differing"]})
    raise UserError(
      f"{len(differing)} models differ from {flags.check}: {', '.join(differing)} "
      f"(report: {storage.join(workdir, 'check.md')})"
    )


def combine_seeds(flags) -> None:
  """--mode=combine_seeds: the claims, Tables 2 and 7 and Figures 2-5 with bands over seeds
  that ran separately (each a `--mode=reproduce --set=reproduce.seeds=S` run, e.g. in
  parallel), from their seed=S dirs."""
  from tlm.miniature import claim_summary, over_seeds

  if len(flags.workdirs) < 1 or not flags.output_dir:
    raise ConfigError(
      "--workdirs=RUN_A/seed=0,RUN_B/seed=1,... and --output_dir are required for "
      "--mode=combine_seeds"
    )
  with WorkdirLock.beside(flags.output_dir, "combine_seeds"):
    summary = over_seeds.combine_saved(flags.workdirs, flags.output_dir, log_line)
  log_line(claim_summary.claims_table(summary))


def tables(flags) -> None:
  """--mode=tables: Tables 2, 3 (over model sizes) and 7 from the eval.json of several workdirs."""
  from tlm.eval import tables as render

  if not flags.workdirs or not flags.output_dir:
    raise ConfigError("--workdirs=W1,W2,... and --output_dir are required for --mode=tables")
  with WorkdirLock.beside(flags.output_dir, "tables"):
    outputs = render.write_tables(flags.workdirs, flags.output_dir)
  log_line(outputs["table3.md"])
  log_line(f"tables in {flags.output_dir}")
