"""The paper's named configs, generated from one table: sizes Small ... XXL x the four variants.

Dhingra et al. (TACL 2022), §2.3 and §3. Every model starts from a public T5 checkpoint ("All
models are initialized from a public T5 checkpoint"; the paper does not say which release, so
these configs name T5.1.1, the architecture of its CBQA baselines' checkpoints) and trains 300K
steps with Adafactor, a constant learning rate of 1e-3, dropout 0.1 and batch 2048 on
CustomNews salient-span-masking examples mixed 1000:1 with TempLAMA-train, documents sampled
uniformly over 2010-2018: each value is stated below, beside the paper's words, and set by
`config` (the schema's defaults are equal, but a paper run does not rest on them). The
variants:
- temporal: each document prefixed with its year (`year: 2014 `);
- uniform: the same data without the prefix;
- yearly: one expert per year, each trained alone on its year as long as the others;
- cbqa_ft: Roberts et al.'s (2020) T5.1.1+SSM checkpoint, the paper's T5-CBQA (T5.1.1
  pre-trained 100K more steps with salient span masking on Wikipedia), finetuned 5K steps on
  TempLAMA alone (HF google/t5-*-ssm; not the -ssm-nq ones, which are finetuned on Natural
  Questions).
The checkpoints and the data are not shipped: each config lists them in `required`, so that a
run without them fails at once. The run times in `RUNS` are estimates from 6 * params * tokens
FLOPs per step (rows of 128 + 32 tokens) at 40% of peak; `--dry_run` prints the compiled
step's FLOPs and memory.
"""

from typing import NamedTuple

from tlm import storage
from tlm.configs.overrides import replace
from tlm.configs.schema import (
  AdaptConfig,
  Config,
  DataConfig,
  MeshConfig,
  ModelConfig,
  TrainConfig,
  trained_years,
)
from tlm.configs.years import TRAIN_YEARS
from tlm.data.conditioning import conditioning_of

# The paper's settings (§2.2): "We use the same set of hyperparameters as Raffel et al. (2020),
# with a batch size of 2048, a fixed learning rate of 0.001 and a dropout rate of 0.1. All our
# models are trained for a fixed number of 300K steps" (T5's optimizer: Adafactor,
# `tlm.train.optim`).
BATCH_SIZE = 2048
LEARNING_RATE = 1e-3
SCHEDULE = "constant"  # "a fixed learning rate"
DROPOUT_RATE = 0.1
STEPS = 300_000
# §2.2: "for every 1000 inputs from CustomNews, the model sees 1 input from TempLAMA"; the
# documents sampled uniformly over the slices 2010-18 (§2.1, `tlm.configs.years`).
NEWS_TO_TEMPLAMA = 1000.0
# T5-CBQA-ft (§2.3): the T5-CBQA checkpoint finetuned on TempLAMA alone, for 5K steps.
CBQA_FT_STEPS = 5_000
# §3.3: from the 2010-18 model, "an additional 50K steps" on a mixture drawing the 2019 slice
# with probability alpha; alpha = 0.5 is the run that matches retraining (Figure 5).
ADAPT_STEPS = 50_000
ADAPT_YEAR = 2019
ADAPT_MATCH_ALPHA = 0.5


class _Size(NamedTuple):
  label: str
  preset: str  # tlm.models.t5 preset: the architecture
  t5: str  # the public T5.1.1 checkpoint (Raffel et al. 2020)
  ssm: str | None  # T5.1.1+SSM, the start of cbqa_ft; None: no public one (Base)
  model_axis: int  # mesh.model: XL and XXL split their parameters over 4 / 8 devices
  remat: str  # model.remat: Large and up recompute each layer in the backward pass (memory)


_SIZES = {
  "small": _Size(
    "Small", "t5-v1_1-small", "google/t5-v1_1-small", "google/t5-small-ssm", 1, "none"
  ),
  "base": _Size("Base", "t5-v1_1-base", "google/t5-v1_1-base", None, 1, "none"),
  "large": _Size(
    "Large", "t5-v1_1-large", "google/t5-v1_1-large", "google/t5-large-ssm", 1, "full"
  ),
  "xl": _Size("XL", "t5-v1_1-xl", "google/t5-v1_1-xl", "google/t5-xl-ssm", 4, "full"),
  "xxl": _Size("XXL", "t5-v1_1-xxl", "google/t5-v1_1-xxl", "google/t5-xxl-ssm", 8, "full"),
}


class Run(NamedTuple):
  """One named config of the paper, `{size}_{variant}`: a row of `RUNS`."""

  size: str
  variant: str
  reported_in: str  # the table of the paper that reports it; "" when the paper has none
  run_time: str  # estimated on 32 TPU v3 cores (the paper's hardware), per expert for yearly
  expected: str  # the paper's result the run should reproduce


# The paper's twenty runs: size, variant, the paper's table that reports it ("" if none), the
# estimated run time (about; per expert for yearly) and the expected result.
# fmt: off
RUNS = (
  Run("small", "temporal", "Table 3", "8 hours",    "above small_uniform on TempLAMA, by less "
                                                    "than at Large"),
  Run("small", "uniform",  "Table 3", "8 hours",    "below small_temporal on TempLAMA"),
  Run("small", "yearly",   "",        "8 hours",    "as large_yearly, at Small scale"),
  Run("small", "cbqa_ft",  "Table 3", "10 minutes", "below the news-trained models; no better on "
                                                    "2019-20 than on 2010-18"),
  Run("base",  "temporal", "",        "1 day",      "between Small and Large"),
  Run("base",  "uniform",  "",        "1 day",      "between Small and Large"),
  Run("base",  "yearly",   "",        "1 day",      "between Small and Large"),
  Run("base",  "cbqa_ft",  "",        "30 minutes", "below large_cbqa_ft; starts from T5.1.1 (no "
                                                    "Base SSM)"),
  Run("large", "temporal", "Table 2", "4 days",     "the best TempLAMA F1 of all models on "
                                                    "2010-18 and on 2019-20, above Uniform; the "
                                                    "lowest CustomNews perplexity (Table 7)"),
  Run("large", "uniform",  "Table 2", "4 days",     "below Temporal on TempLAMA; better on facts "
                                                    "lasting 5+ years (Figure 2)"),
  Run("large", "yearly",   "Table 2", "4 days",     "the best 2010-18 CustomNews F1, much worse "
                                                    "on 2019-20 CustomNews; each expert worse "
                                                    "the further the query's year is from its "
                                                    "own (Figure 2)"),
  Run("large", "cbqa_ft",  "Table 2", "2 hours",    "far below the news-trained models on "
                                                    "TempLAMA; low, flat entropy on future "
                                                    "queries (Figure 4)"),
  Run("xl",    "temporal", "",        "16 days",    "between Large and XXL"),
  Run("xl",    "uniform",  "",        "16 days",    "between Large and XXL"),
  Run("xl",    "yearly",   "",        "16 days",    "between Large and XXL"),
  Run("xl",    "cbqa_ft",  "",        "7 hours",    "between Large and XXL"),
  Run("xxl",   "temporal", "Table 3", "2 months",   "the largest gain of Temporal over Uniform "
                                                    "of all sizes"),
  Run("xxl",   "uniform",  "Table 3", "2 months",   "below xxl_temporal on TempLAMA"),
  Run("xxl",   "yearly",   "",        "2 months",   "as large_yearly, at XXL scale"),
  Run("xxl",   "cbqa_ft",  "Table 3", "1 day",      "below the news-trained models; no better on "
                                                    "2019-20 than on 2010-18"),
)
# fmt: on

_VARIANT_NAMES = {
  "temporal": "Temporal: news prefixed with its year",
  "uniform": "Uniform: Temporal's data without the year prefix",
  "yearly": "Yearly: nine experts 2010-2018, each trained alone on its year, in W/year=YYYY/",
  "cbqa_ft": "T5-CBQA-ft: the T5.1.1+SSM checkpoint finetuned 5K steps on TempLAMA alone",
}
# The placeholders of the required keys in a config's command line, in this order.
_PLACEHOLDERS = {"model.init_checkpoint": "CKPT", "data.ssm_dir": "SSM", "data.templama_dir": "TL"}


def paper_checkpoint(size: str, variant: str) -> str:
  """The public checkpoint a paper config starts from: T5.1.1, or T5.1.1+SSM for cbqa_ft.

  There is no public Base SSM checkpoint: `base_cbqa_ft` starts from T5.1.1 Base (a deviation,
  which `describe` states)."""
  if variant == "cbqa_ft" and _SIZES[size].ssm is not None:
    return _SIZES[size].ssm
  return _SIZES[size].t5


def config(run: Run) -> Config:
  """The paper's settings (§2.3) for one size and variant."""
  size = _SIZES[run.size]
  cbqa = run.variant == "cbqa_ft"
  return Config(
    name=f"{run.size}_{run.variant}",
    variant=run.variant,
    required=("model.init_checkpoint", "data.templama_dir") + (() if cbqa else ("data.ssm_dir",)),
    model=ModelConfig(
      preset=size.preset, dropout_rate=DROPOUT_RATE, dtype="bfloat16", remat=size.remat
    ),
    data=DataConfig(
      synthetic=False,
      conditioning=conditioning_of(run.variant),
      train_years=TRAIN_YEARS,
      news_to_templama=0.0 if cbqa else NEWS_TO_TEMPLAMA,
      sampler="block",  # two requests per year and host per block of 16 steps from gs://
    ),
    train=TrainConfig(
      steps=CBQA_FT_STEPS if cbqa else STEPS,
      batch_size=BATCH_SIZE,
      learning_rate=LEARNING_RATE,
      schedule=SCHEDULE,
      checkpoint_every=500 if cbqa else 5000,
    ),
    mesh=MeshConfig(data=-1, model=size.model_axis),
    adapt=AdaptConfig(steps=ADAPT_STEPS, new_year=ADAPT_YEAR, match_alpha=ADAPT_MATCH_ALPHA),
  )


def describe(run: Run) -> str:
  """What the run is, where it starts, its command, its run time and its expected result."""
  c = config(run)
  where = run.reported_in or "not in the paper"
  year = " [--set=data.year=2014]" if run.variant == "yearly" else ""
  sets = " ".join(f"--set={k}={v}" for k, v in _PLACEHOLDERS.items() if k in c.required)
  per_expert = " per expert" if run.variant == "yearly" else ""
  cbqa_without_ssm = run.variant == "cbqa_ft" and _SIZES[run.size].ssm is None
  no_ssm = " (no public Base SSM checkpoint: a deviation)" if cbqa_without_ssm else ""
  return (
    f"{_SIZES[run.size].label} {_VARIANT_NAMES[run.variant]} ({where}).\n"
    f"Starts from {paper_checkpoint(run.size, run.variant)}{no_ssm}, which must be supplied, "
    "as must the data.\n\n"
    f"Command: python run.py --mode=train --config={c.name} --workdir=W{year}\n  {sets}\n"
    f"Run time: about {run.run_time}{per_expert} on 32 TPU v3 cores (estimate).\n"
    f"Expected: {run.reported_in + ': ' if run.reported_in else ''}{run.expected}."
  )


def expert_runs(config: Config, workdir: str) -> list[tuple[Config, str]]:
  """The (config, workdir) of each model a config trains: one, or one per Yearly expert.

  Yearly experts train in WORKDIR/year=YYYY/, on `data.year` alone if set, else each year of
  `data.train_years` in turn.
  """
  if config.variant != "yearly":
    return [(config, workdir)]
  years = trained_years(config.data)
  return [(replace(config, "data.year", y), storage.join(workdir, f"year={y}")) for y in years]
