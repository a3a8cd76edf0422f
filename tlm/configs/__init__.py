"""Experiment configs: the schema, the named configs and `--set` overrides.

- `schema`: the frozen dataclasses (`Config` and one per section) and the valid ranges;
  `trained_years` (the years a run trains on). A variant's time input is
  `tlm.data.conditioning.conditioning_of`.
- `years`: the paper's year slices, their names and the future probe years.
- `overrides`: dotted keys: `override` (`--set`), `replace`, `validate` (ranges, limits,
  paths), `check_value` (one value against a key's range), `to_dict` / `from_dict` (a
  workdir's config.json).
- `paper`: the paper's configs (`{small,base,large,xl,xxl}_{temporal,uniform,yearly,cbqa_ft}`),
  generated from one table of runs; the paper's settings and their sources; `expert_runs`,
  the models a run trains (one, or one Yearly expert per year).
- `tiny`: the CPU miniature's configs (`tiny_t5`, `tiny_cbqa`, `tiny_{variant}`).
- `registry`: `names()`, `get(name)`, `describe(name)`, `check_required(config)`.

Usage: `configs.override(configs.get("tiny_temporal"), ["train.steps=10"])`.
"""

from tlm.configs.overrides import (
  check_value,
  from_dict,
  lookup,
  override,
  parse_value,
  replace,
  replace_many,
  to_dict,
  valid_keys,
  validate,
)
from tlm.configs.paper import expert_runs, paper_checkpoint
from tlm.configs.registry import check_required, describe, get, names
from tlm.configs.schema import (
  PARAM_DTYPES,
  REMAT_POLICIES,
  SIZES,
  VARIANTS,
  AdaptConfig,
  Config,
  DataConfig,
  EvalConfig,
  MeshConfig,
  ModelConfig,
  ReproduceConfig,
  TrainConfig,
  remat_policy,
  trained_years,
)
from tlm.configs.tiny import (
  tiny_cbqa,
  tiny_cbqa_ft,
  tiny_t5,
  tiny_temporal,
  tiny_uniform,
  tiny_yearly,
)
from tlm.configs.years import TRAIN_YEARS

__all__ = [
  "TRAIN_YEARS",
  "PARAM_DTYPES",
  "REMAT_POLICIES",
  "SIZES",
  "VARIANTS",
  "AdaptConfig",
  "Config",
  "DataConfig",
  "EvalConfig",
  "MeshConfig",
  "ModelConfig",
  "ReproduceConfig",
  "TrainConfig",
  "check_required",
  "check_value",
  "describe",
  "from_dict",
  "get",
  "lookup",
  "names",
  "override",
  "paper_checkpoint",
  "parse_value",
  "expert_runs",
  "remat_policy",
  "replace",
  "replace_many",
  "tiny_cbqa",
  "tiny_cbqa_ft",
  "tiny_t5",
  "tiny_temporal",
  "tiny_uniform",
  "tiny_yearly",
  "to_dict",
  "trained_years",
  "valid_keys",
  "validate",
]
