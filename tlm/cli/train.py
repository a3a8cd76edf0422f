"""`--mode=train`: train a named config (all Yearly experts in turn), or `--dry_run` it.

  python run.py --mode=train --config=tiny_temporal --workdir=/tmp/tiny_temporal
  python run.py --mode=train --config=large_temporal --workdir=/shared/large_temporal \\
    --set=model.init_checkpoint=/ckpt/t5-large-ssm --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  python run.py --mode=train --config=xxl_temporal --dry_run     # size it before reserving a pod

Multi-host (JAX multi-controller, the same command on every host): `--coordinator_address`,
`--num_processes` and `--process_id`, or a cluster environment JAX detects by itself (Cloud TPU
pod slices, SLURM, Open MPI, `JAX_COORDINATOR_ADDRESS`), call `jax.distributed.initialize`
before any device is touched. Rerunning the same command resumes from the latest intact
checkpoint. The workdir is locked for the run: a second `train` (or `eval`, ...) on it stops at
once with a one-line error naming the holder's pid and host.
"""

import os

from tlm import configs
from tlm.errors import ConfigError
from tlm.train import preflight

# Environment variables of the clusters jax.distributed.initialize() configures itself from,
# with the condition under which they mean more than one process.
_CLUSTER_HINTS = (
  ("JAX_COORDINATOR_ADDRESS", lambda v: bool(v)),
  ("SLURM_NTASKS", lambda v: v.isdigit() and int(v) > 1),
  ("OMPI_COMM_WORLD_SIZE", lambda v: v.isdigit() and int(v) > 1),
  ("TPU_WORKER_HOSTNAMES", lambda v: "," in v),
)


def initialize_distributed(
  coordinator_address: str | None, num_processes: int | None, process_id: int | None
) -> bool:
  """Calls `jax.distributed.initialize` for a multi-process run; returns whether it did.

  Raises:
    ConfigError: if only some of the three flags are given, or --process_id is not one of
      --num_processes.
  """
  given = [coordinator_address is not None, num_processes is not None, process_id is not None]
  if any(given) and not all(given):
    raise ConfigError(
      "--coordinator_address, --num_processes and --process_id must be given together"
    )
  if all(given) and not 0 <= process_id < num_processes:
    raise ConfigError(f"--process_id={process_id} must be in [0, --num_processes={num_processes})")
  cluster = any(check(os.environ.get(name, "")) for name, check in _CLUSTER_HINTS)
  if not all(given) and not cluster:
    return False
  import jax

  # CPU processes exchange collectives through gloo (GPU/TPU use their own interconnect).
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if all(given):
    jax.distributed.initialize(coordinator_address, num_processes, process_id)
  else:
    jax.distributed.initialize()
  return True


def _evaluators(config: configs.Config) -> tuple:
  """The paper's task metrics during training (`tlm.eval.during_training`) where the config
  asks for them (`train.eval_every` and `train.eval_examples` > 0); the evaluations are
  imported only then: a run without them never loads the decoder, the metrics or the data they
  read."""
  tc = config.train
  if tc.eval_every <= 0 or tc.eval_examples <= 0:
    return ()
  from tlm.eval import during_training

  return during_training.evaluators(config)


def main(flags) -> None:
  """Entry point of `--mode=train` (`flags`: the parsed absl flags of run.py)."""
  if not flags.config:
    raise ConfigError(f"--config is required; one of: {', '.join(configs.names())}")
  config = configs.override(configs.get(flags.config), flags.set)
  runs = []
  if not flags.dry_run:
    if not flags.workdir:
      raise ConfigError("--workdir is required for --mode=train (checkpoints, metrics, config)")
    # Before jax starts, and before the lock creates the workdir: fail at once.
    runs = preflight.check_runs(config, flags.workdir)
  initialize_distributed(flags.coordinator_address, flags.num_processes, flags.process_id)
  if flags.dry_run:
    from tlm.train.train_dry_run import dry_run

    dry_run(config)
    return
  from tlm.train import loop
  from tlm.workdir_lock import acquire_on_main

  # One writer per workdir (process 0 of this job holds the lock; see tlm/workdir_lock.py).
  with acquire_on_main(flags.workdir, "train"):
    loop.train_runs(runs, make_evaluators=_evaluators)
