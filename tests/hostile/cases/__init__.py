"""The hostile-input probe's cases, written as a careless or hostile user would try them:
`CASES`, a list of `Case` (tests/hostile/probe.py says what each field means and how an outcome
is classified), in the order of the surfaces below; tests/hostile/test_probe.py runs them.

One module per surface, each a set of tables (one row per case) and a builder per table
(common.py holds what they share):
- `paths` (paths.py): every path flag and path config key: URIs, schemes, NUL / newline,
  relative, dotted and symlinked paths, special files;
- `state` (state_manifests.py, state_workdir.py, state_results.py): the project's own files
  read back: checksum manifests; best.json, lock files, config.json / model_config.json /
  spiece.model, data state, metrics.jsonl; results read by tables / combine_seeds;
- `layout` (layout.py): the workdir's entries of the wrong kind, unwritable;
- `extremes` (extremes.py): settings at and beyond their limits;
- `builders` (builders.py): build_templama, build_ssm;
- `checkpoints` (checkpoints.py): damaged checkpoints loaded by every mode; a named step
  against a workdir;
- `store` (store.py): the example store: check_store, convert_ssm, training on a damaged store;
- `t5x` (t5x.py): T5X checkpoints through --checkpoint and model.init_checkpoint;
- `sampling` (sampling.py): predict's sampling flags;
- `midrun` (midrun.py): files damaged while a run reads them (a store truncated, rewritten or
  replaced while training draws from it; a checkpoint deleted while a resumed run restores it);
- `disk_full` (disk_full.py): a disk that fills up (a small tmpfs; root only, else `skipped`).
"""

from . import (
  builders,
  checkpoints,
  disk_full,
  extremes,
  layout,
  midrun,
  paths,
  sampling,
  state_manifests,
  state_results,
  state_workdir,
  store,
  t5x,
)

CASES = [
  *paths.CASES,
  *state_manifests.CASES,
  *state_workdir.CASES,
  *state_results.CASES,
  *layout.CASES,
  *extremes.CASES,
  *builders.CASES,
  *checkpoints.CASES,
  *store.CASES,
  *t5x.CASES,
  *sampling.CASES,
  *midrun.CASES,
  *disk_full.CASES,
]
