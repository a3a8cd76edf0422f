"""Experiment configs: frozen dataclasses, the named configs of the paper, `--set` overrides.

Mirrors the experimental setup of Dhingra et al. (TACL 2022), §2.1-§2.3 and §3: T5 models
initialised from a public T5 checkpoint ("All models are initialized from a public T5
checkpoint"; the configs name the T5.1.1 release, whose architecture the CBQA baselines'
checkpoints share; the paper does not say which release) and trained for 300K steps with
Adafactor, a constant learning rate of 1e-3, dropout 0.1 and batch 2048 on CustomNews
salient-span-masking examples mixed 1000:1 with TempLAMA-train, documents sampled uniformly
over the years 2010-2018.
Variants: Temporal (`year: 2014 ` prefix), Uniform (no prefix), Yearly (one expert per year) and
T5-CBQA-ft (Roberts et al.'s (2020) T5.1.1+SSM checkpoint, the paper's T5-CBQA, finetuned 5K
steps on TempLAMA alone). Sizes small ... xxl use the T5.1.1 architecture; `tiny` trains on a
2-core CPU on the embedded synthetic world, from miniature analogues of both checkpoints
(`tiny_t5`, `tiny_cbqa`; see the README's Deviations table).

Config flow (STYLE.md): `get(name)` -> `override(config, ["train.steps=10", ...])` -> the train
CLI writes `WORKDIR/config.json` -> each function receives only its section. Unknown keys and
wrong types raise ConfigError listing the valid keys, values out of range one naming the key
(`validate`); nothing falls back silently.
"""

import dataclasses
import difflib
import math
import typing
from collections.abc import Callable, Sequence
from typing import Any

from tlm.errors import ConfigError

PAPER_YEARS = tuple(range(2010, 2019))  # the train slices (§2.1); 2019-2020 are held out


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """The network and where its weights start.

  Attributes:
    preset: a `tlm.models.t5.get_preset` name (architecture only).
    dropout_rate: dropout in every layer (paper: 0.1).
    dtype: activation dtype, "float32" or "bfloat16"; parameters, RMSNorm and logits stay f32.
    remat: what each layer keeps for the backward pass (T5X / MaxText remat policies):
      "none" keeps every activation, "full" recomputes the whole layer (gradient
      checkpointing), "dots" keeps the results of the weight matmuls and recomputes the rest.
      The booleans of older configs are read as "full" (true) and "none" (false).
    init_checkpoint: weights to start from when the workdir has no checkpoint yet: an HF
      directory, a Mesh-TF checkpoint prefix, a tlm model directory or a tlm training workdir
      (anything `tlm.models.checkpoints.load_checkpoint` reads). "" starts from random weights.
    emb_dim: model width; 0 keeps the preset's (the miniature sizes its model with these).
    num_heads: attention heads; 0 keeps the preset's.
    head_dim: width of each head; 0 keeps the preset's.
    mlp_dim: MLP hidden width; 0 keeps the preset's.
    num_layers: encoder and decoder layers (each); 0 keeps the preset's.
  """

  preset: str = "tiny"
  dropout_rate: float = 0.1
  dtype: str = "float32"
  remat: str = "none"
  init_checkpoint: str = ""
  emb_dim: int = 0
  num_heads: int = 0
  head_dim: int = 0
  mlp_dim: int = 0
  num_layers: int = 0

  def __post_init__(self):
    object.__setattr__(self, "remat", remat_policy(self.remat, "model.remat"))


REMAT_POLICIES = ("none", "full", "dots")
# The boolean `model.remat` of older configs and `--set=model.remat=true` command lines.
_REMAT_BOOLEANS = {True: "full", False: "none", "true": "full", "false": "none"}


def remat_policy(value: Any, key: str) -> str:
  """`value` as one of REMAT_POLICIES (booleans mapped); ConfigError naming `key` otherwise."""
  if isinstance(value, str):
    value = value.strip().lower()
  value = _REMAT_BOOLEANS.get(value, value)  # type: ignore[arg-type]
  if value not in REMAT_POLICIES:
    raise ConfigError(f"{key} must be one of {', '.join(REMAT_POLICIES)}, got {value!r}")
  return value


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Training examples: the sources, the year-uniform mixture and the row shapes.

  Attributes:
    synthetic: use the embedded synthetic world (built under `cache_dir` on first use)
      instead of `ssm_dir` / `templama_dir`.
    world_seed: seed of the synthetic world.
    world_scale: size of the synthetic world (1.0 = the default miniature).
    cache_dir: where the synthetic world and the data derived from it are built; "" means
      `~/.cache/tlm`.
    ssm_dir: salient-span-masking examples built from the news (`--mode=build_ssm`):
      `{train,val,test}/<year>.jsonl`.
    templama_dir: TempLAMA `train.json`, `val.json`, `test.json` (`--mode=build_templama`, or
      the released files).
    vocab: SentencePiece model; "" takes the init checkpoint's, else the synthetic world's.
    conditioning: "temporal" (`year: 2014 ` prefix) or "none" (Uniform, Yearly, CBQA).
    train_years: the year slices sampled uniformly (paper: 2010-2018).
    year: Yearly experts only: train the expert of this year alone; 0 trains one expert per
      year of `train_years`, in turn.
    new_years: adaptation (§3.3): new slices (the paper's 2019) drawn with probability
      `new_year_prob`, the `train_years` with 1 - new_year_prob.
    new_year_prob: the paper's alpha; 0 draws `train_years` only.
    news_to_templama: news SSM examples drawn per TempLAMA-train example (paper: 1000); 0
      trains on TempLAMA alone (T5-CBQA-ft).
    input_length: encoder tokens per packed row.
    target_length: decoder tokens per packed row.
    seed: the sampling seed; a step's batch is a pure function of (seed, step).
  """

  synthetic: bool = True
  world_seed: int = 0
  world_scale: float = 1.0
  cache_dir: str = ""
  ssm_dir: str = ""
  templama_dir: str = ""
  vocab: str = ""
  conditioning: str = "temporal"
  train_years: tuple[int, ...] = PAPER_YEARS
  year: int = 0
  new_years: tuple[int, ...] = ()
  new_year_prob: float = 0.0
  news_to_templama: float = 1000.0
  input_length: int = 128
  target_length: int = 32
  seed: int = 0


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Optimisation, logging and checkpointing.

  Attributes:
    steps: optimizer steps (paper: 300K; 5K for T5-CBQA-ft).
    batch_size: packed rows per global batch (paper: 2048).
    learning_rate: Adafactor's learning rate (paper: constant 1e-3).
    schedule: "constant" (the paper) or "rsqrt" (T5 pre-training: constant for
      `warmup_steps`, then decaying as 1/sqrt(step)).
    warmup_steps: length of the constant phase of "rsqrt"; unused by "constant".
    microbatches: the global batch is split into this many parts whose gradients are summed,
      so that a batch of 2048 fits any hardware.
    z_loss: T5X's auxiliary loss on log Z (1e-4).
    loss_normalizing_factor: 0 divides the summed token losses by the number of real target
      tokens in the global batch (T5X "NUM_REAL_TARGET_TOKENS"); a positive value divides by
      that constant (T5X's advice when finetuning Mesh-TF T5 checkpoints: 2048 * 114 = 233472).
    seed: seed of the random initialisation and of the per-step dropout keys.
    checkpoint_every: steps between (asynchronous) checkpoints.
    keep_checkpoints: how many of the latest checkpoints are kept.
    log_every: steps between progress lines and `metrics.jsonl` records.
    eval_every: steps between held-out loss evaluations (0 disables them).
    eval_batches: batches of the validation split per evaluation.
    eval_examples: with `eval_every`, also decode (greedily, as `--mode=eval` does) at most
      this many TempLAMA validation queries and this many news SSM validation examples (spread
      evenly over the trained years and over each file; the same subset every time) and log
      templama_f1, templama_em and news_f1; 0 logs only the held-out loss.
    keep_best: a logged metric (e.g. "templama_f1", "eval_loss"); the checkpoint where it was
      best (highest; lowest for losses) is kept in WORKDIR/best/, a workdir of its own, beside
      the newest `keep_checkpoints`, with its step in WORKDIR/best/best.json. "" keeps none.
    profile_steps: (START, END): a jax.profiler trace of steps START..END-1 is written to
      WORKDIR/profile/ (TensorBoard's profile plugin or Perfetto read it); () traces nothing.
  """

  steps: int = 300_000
  batch_size: int = 2048
  learning_rate: float = 1e-3
  schedule: str = "constant"
  warmup_steps: int = 0
  microbatches: int = 1
  z_loss: float = 1e-4
  loss_normalizing_factor: float = 233_472.0
  seed: int = 0
  checkpoint_every: int = 1000
  keep_checkpoints: int = 3
  log_every: int = 100
  eval_every: int = 5000
  eval_batches: int = 8
  eval_examples: int = 0
  keep_best: str = ""
  profile_steps: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """Device mesh with axes ("data", "model"); -1 takes all remaining devices.

  Attributes:
    data: data-parallel axis size (the batch is split along it).
    model: model-parallel axis size (heads, mlp, vocab and joined_kv are split along it).
    fsdp: also split the parameters and the optimizer state along "data" (their "embed"
      dimension; T5X's parameter_partitioning_dims=2), for training and evaluation.
  """

  data: int = -1
  model: int = 1
  fsdp: bool = False


@dataclasses.dataclass(frozen=True)
class AdaptConfig:
  """Adapting a 2010-18 model to a new year (paper §3.3, Figure 5).

  Attributes:
    alphas: probabilities of sampling the new year's slice, one adapted model each.
    steps: adaptation steps (paper: 50K).
    new_year: the new slice (paper: 2019).
    match_alpha: the alpha whose adapted run is evaluated `eval_points` times along the way,
      to find the step at which it matches the retrained model (paper: 0.5, matched after 10K
      of 50K steps).
    eval_points: evaluations along the `match_alpha` run (1: only at the end).
  """

  alphas: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)
  steps: int = 50_000
  new_year: int = 2019
  match_alpha: float = 0.5
  eval_points: int = 5


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  """Evaluation of trained models (paper §3).

  Attributes:
    batch_size: examples per decoding / scoring batch.
    max_decode_length: greedy decoding length in tokens.
    beam_size: 1 is greedy decoding (the paper's CBQA decoding).
    years: the evaluated year slices (2010-2018 seen, 2019-2020 future).
    split: "val" or "test".
    max_examples: at most this many held-out news examples per year, evenly spaced over the
      year's file (0 means all); TempLAMA is always evaluated whole.
    finetune_steps: CronQuestions finetuning steps (Table 4).
    future_relations: directory of the future-relations query sets (Figure 4); "" takes the
      synthetic world's with data.synthetic, else the shipped real-world sets.
    param_dtype: dtype of the parameters on the devices for inference, "float32" or
      "bfloat16" (half the memory; activations follow model.dtype either way).
  """

  batch_size: int = 64
  max_decode_length: int = 32
  beam_size: int = 1
  years: tuple[int, ...] = tuple(range(2010, 2021))
  split: str = "test"
  max_examples: int = 0
  finetune_steps: int = 5000
  future_relations: str = ""
  param_dtype: str = "float32"

  def __post_init__(self):
    if self.param_dtype not in PARAM_DTYPES:
      raise ConfigError(
        f"eval.param_dtype must be one of {', '.join(PARAM_DTYPES)}, got {self.param_dtype!r}"
      )


PARAM_DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class ReproduceConfig:
  """`--mode=reproduce` (the miniature reproduction) only.

  Attributes:
    seeds: independent repetitions; each seed S sets data.world_seed, data.seed and
      train.seed to S (a new world, sampling and initialisation) and runs in WORKDIR/seed=S/.
      The summary judges every claim on each seed and over all of them (paper: one run).
  """

  seeds: tuple[int, ...] = (0,)


@dataclasses.dataclass(frozen=True)
class Config:
  """A whole experiment.

  Attributes:
    name: the named config it came from.
    variant: "temporal", "uniform", "yearly" or "cbqa_ft"; for the miniature's starting
      points also "t5" (span corruption on the world's generic text: the public T5 analogue)
      and "cbqa" (salient span masking on its encyclopedia: the T5-CBQA analogue).
    required: dotted keys that must be set (non-empty) before training; a paper config names
      its checkpoint and data here so that a run without them fails at once.
  """

  name: str = "tiny_temporal"
  variant: str = "temporal"
  required: tuple[str, ...] = ()
  model: ModelConfig = ModelConfig()
  data: DataConfig = DataConfig()
  train: TrainConfig = TrainConfig()
  mesh: MeshConfig = MeshConfig()
  adapt: AdaptConfig = AdaptConfig()
  eval: EvalConfig = EvalConfig()
  reproduce: ReproduceConfig = ReproduceConfig()


VARIANTS = ("temporal", "uniform", "yearly", "cbqa_ft")
SIZES = ("tiny", "small", "base", "large", "xl", "xxl")

# Size -> (preset, public checkpoint of Temporal / Uniform / Yearly, that of T5-CBQA(-ft), mesh,
# remat). The public T5.1.1 checkpoints (Raffel et al. 2020; HF google/t5-v1_1-*); the SSM
# checkpoints (Roberts et al. 2020, https://goo.gle/t5-cbqa) are T5.1.1 models additionally
# pre-trained 100K steps with salient span masking on Wikipedia (HF google/t5-*-ssm; not the
# -ssm-nq ones, which are finetuned on Natural Questions). There is no public Base SSM.
_PAPER_SIZES = {
  "small": ("t5-v1_1-small", "google/t5-v1_1-small", "google/t5-small-ssm", MeshConfig(-1, 1),
            False),
  "base": ("t5-v1_1-base", "google/t5-v1_1-base", "google/t5-v1_1-base (no public Base SSM)",
           MeshConfig(-1, 1), False),
  "large": ("t5-v1_1-large", "google/t5-v1_1-large", "google/t5-large-ssm", MeshConfig(-1, 1),
            True),
  "xl": ("t5-v1_1-xl", "google/t5-v1_1-xl", "google/t5-xl-ssm", MeshConfig(-1, 4), True),
  "xxl": ("t5-v1_1-xxl", "google/t5-v1_1-xxl", "google/t5-xxl-ssm", MeshConfig(-1, 8), True),
}  # fmt: skip


def paper_checkpoint(size: str, variant: str) -> str:
  """The public checkpoint a paper config starts from: T5.1.1, or T5.1.1+SSM for cbqa_ft."""
  _, t5, ssm, _, _ = _PAPER_SIZES[size]
  return ssm if variant == "cbqa_ft" else t5


def _paper(size: str, variant: str) -> Config:
  """The paper's settings (§2.3) for one size and variant."""
  preset, _, _, mesh, remat = _PAPER_SIZES[size]
  cbqa = variant == "cbqa_ft"
  return Config(
    name=f"{size}_{variant}",
    variant=variant,
    required=("model.init_checkpoint", "data.templama_dir") + (() if cbqa else ("data.ssm_dir",)),
    model=ModelConfig(preset=preset, dropout_rate=0.1, dtype="bfloat16", remat=remat),
    data=DataConfig(
      synthetic=False,
      conditioning="temporal" if variant == "temporal" else "none",
      news_to_templama=0.0 if cbqa else 1000.0,
    ),
    train=TrainConfig(steps=5_000 if cbqa else 300_000, checkpoint_every=500 if cbqa else 5000),
    mesh=mesh,
  )


# Steps of the CPU miniature (2 CPU cores; see `tiny_temporal` for the step's cost). As in the
# paper, Uniform, Temporal and every Yearly expert train the same number of steps from the same
# pre-trained start (the experts each on their own year). `t5`: span corruption on the world's
# generic text (the public T5 analogue); `cbqa`: then salient span masking on its encyclopedia
# (T5-CBQA); `cbqa_ft`: then TempLAMA-train alone (~330 queries).
_TINY_STEPS = {
  "t5": 400, "cbqa": 300, "temporal": 800, "uniform": 800, "yearly": 800, "cbqa_ft": 300,
}  # fmt: skip


def _tiny(variant: str) -> Config:
  """The CPU miniature: tiny T5 on the embedded synthetic world, sized to converge in minutes.

  Deviations from the paper's settings, for a 230K-parameter model and minutes of CPU (README,
  Deviations): the starting points are miniature analogues pre-trained on the world's own
  undated text (`tiny_t5`, `tiny_cbqa`), learning rate 3e-2 (1e-2 needs 1.5x the steps, 5e-2
  is worse), no dropout, batch 64, rows of 64 + 16 tokens, news:TempLAMA 20:1 (the world's
  TempLAMA-train is ~330 queries, so that the query format is seen), per-token loss.
  """
  pretraining = variant in ("t5", "cbqa")
  needs_start = variant in ("cbqa", "cbqa_ft")
  return Config(
    name=f"tiny_{variant}",
    variant=variant,
    required=("model.init_checkpoint",) if needs_start else (),
    model=ModelConfig(preset="tiny", dropout_rate=0.0, dtype="float32"),
    data=DataConfig(
      synthetic=True,
      conditioning="temporal" if variant == "temporal" else "none",
      news_to_templama=0.0 if variant == "cbqa_ft" else 20.0,
      input_length=64,
      target_length=16,
    ),
    train=TrainConfig(
      steps=_TINY_STEPS[variant],
      batch_size=64,
      learning_rate=3e-2,
      loss_normalizing_factor=0.0,
      checkpoint_every=400,
      keep_checkpoints=2,
      log_every=50,
      eval_every=0 if pretraining else 400,
      eval_batches=2,
    ),
    mesh=MeshConfig(-1, 1),
    adapt=AdaptConfig(alphas=(0.3, 0.5, 0.7), steps=200),
    # News F1 / perplexity on 250 held-out examples per year (of ~750 at world scale 1): the
    # reproduction evaluates ~30 models, and news scoring dominates its evaluation time.
    eval=EvalConfig(batch_size=256, max_decode_length=16, max_examples=250),
  )


_REGISTRY: dict[str, Callable[[], Config]] = {}


def _named(fn: Callable[[], Config]) -> Callable[[], Config]:
  _REGISTRY[fn.__name__] = fn
  return fn


# Run times for the paper sizes are estimates from 6 * params * tokens FLOPs per step (rows of
# 128 + 32 tokens) at 40% of peak; `--dry_run` prints the compiled step's FLOPs and memory.


@_named
def tiny_t5() -> Config:
  """The miniature's "public T5": span corruption on the world's undated generic text.

  Random initialisation, then T5's objective (15% of the words in spans of mean length 3) on
  `pretrain/generic.jsonl` of the synthetic world, which names its entities and places but
  never a time-varying fact, a year or a news sentence (tlm/data/synthetic_pretrain.py). The
  Uniform, Temporal and Yearly models start from it, as the paper's start from public T5.

  Command: python run.py --mode=train --config=tiny_t5 --workdir=W_T5
  Run time: about a minute on 2 CPU cores (400 steps).
  Expected: a low span-corruption loss; it knows no time-varying fact (TempLAMA F1 near 0).
  """
  return _tiny("t5")


@_named
def tiny_cbqa() -> Config:
  """The miniature's T5-CBQA (Roberts et al., 2020): tiny_t5 plus salient span masking on the
  world's encyclopedia, a snapshot at the end of 2019 (Wikipedia's role).

  Command: python run.py --mode=train --config=tiny_cbqa --workdir=W_CBQA
    --set=model.init_checkpoint=W_T5 (a tiny_t5 workdir)
  Run time: under a minute on 2 CPU cores (300 steps).
  Expected: answers TempLAMA with the end-of-2019 object for every year (the paper's T5-CBQA
  row: far below the news-trained models on 2010-18).
  """
  return _tiny("cbqa")


@_named
def tiny_temporal() -> Config:
  """Tiny Temporal model on the synthetic world (CPU).

  Command: python run.py --mode=train --config=tiny_temporal --workdir=W
    [--set=model.init_checkpoint=W_T5] (a tiny_t5 workdir: the start --mode=reproduce uses)
  Run time: a few minutes on 2 CPU cores (800 steps of 64 packed rows).
  Expected: above tiny_uniform on TempLAMA, most on 2019-20 (the paper's Table 2). Whether the
  miniature shows it is measured by `--mode=reproduce` (claims C1, C5); the README's "Results"
  has the measured numbers.
  """
  return _tiny("temporal")


@_named
def tiny_uniform() -> Config:
  """Tiny Uniform model: tiny_temporal's data and steps without the year prefix.

  Command: python run.py --mode=train --config=tiny_uniform --workdir=W
    [--set=model.init_checkpoint=W_T5]
  Run time: as tiny_temporal (800 steps).
  Expected: below tiny_temporal on TempLAMA; averages over years (README, "Results").
  """
  return _tiny("uniform")


@_named
def tiny_yearly() -> Config:
  """Tiny Yearly experts, one per year 2010-2018, each under W/year=YYYY/.

  Command: python run.py --mode=train --config=tiny_yearly --workdir=W [--set=data.year=2014]
    [--set=model.init_checkpoint=W_T5]
  Run time: nine times tiny_temporal's: each expert trains as long as tiny_temporal, as in
  the paper.
  Expected: good on its own year, worse with the gap to the query's year (Figure 2, left).
  """
  return _tiny("yearly")


@_named
def tiny_cbqa_ft() -> Config:
  """Tiny T5-CBQA-ft analogue: tiny_cbqa finetuned on TempLAMA-train alone (it never reads
  the news, as the paper's T5-CBQA-ft).

  Command: python run.py --mode=train --config=tiny_cbqa_ft --workdir=W
    --set=model.init_checkpoint=W_CBQA (a tiny_cbqa workdir)
  Run time: under a minute on 2 CPU cores (300 steps).
  Expected: learns the query format; no time input, so one answer per fact at all years.
  """
  return _tiny("cbqa_ft")


@_named
def small_temporal() -> Config:
  """T5.1.1-Small Temporal (Table 3). Starts from the public T5.1.1-Small checkpoint
  (google/t5-v1_1-small), which must be supplied, as must the data.

  Command: python run.py --mode=train --config=small_temporal --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  Run time: about 8 hours on 32 TPU v3 cores (estimate).
  Expected: Table 3, Small row: Temporal above Uniform on TempLAMA, with a smaller gap than Large.
  """
  return _paper("small", "temporal")


@_named
def small_uniform() -> Config:
  """T5.1.1-Small Uniform (Table 3), from google/t5-v1_1-small (must be supplied).

  Command: python run.py --mode=train --config=small_uniform --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  Run time: about 8 hours on 32 TPU v3 cores (estimate).
  Expected: Table 3, Small row.
  """
  return _paper("small", "uniform")


@_named
def small_yearly() -> Config:
  """T5.1.1-Small Yearly experts 2010-2018, from google/t5-v1_1-small (must be supplied).

  Command: python run.py --mode=train --config=small_yearly --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  Run time: about 8 hours per expert on 32 TPU v3 cores (estimate), nine experts.
  Expected: as large_yearly, at Small scale.
  """
  return _paper("small", "yearly")


@_named
def small_cbqa_ft() -> Config:
  """T5-CBQA-ft Small: google/t5-small-ssm (must be supplied) + 5K steps on TempLAMA.

  Command: python run.py --mode=train --config=small_cbqa_ft --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.templama_dir=TL
  Run time: under 10 minutes on 32 TPU v3 cores (estimate).
  Expected: Table 3 CBQA-ft Small row; no better on 2019-20 than on 2010-18.
  """
  return _paper("small", "cbqa_ft")


@_named
def base_temporal() -> Config:
  """T5.1.1-Base Temporal (not in the paper). Starts from google/t5-v1_1-base
  (must be supplied).

  Command: python run.py --mode=train --config=base_temporal --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  Run time: about 1 day on 32 TPU v3 cores (estimate).
  Expected: between Small and Large.
  """
  return _paper("base", "temporal")


@_named
def base_uniform() -> Config:
  """T5.1.1-Base Uniform (not in the paper), from google/t5-v1_1-base (must be supplied).

  Command: python run.py --mode=train --config=base_uniform --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  Run time: about 1 day on 32 TPU v3 cores (estimate).
  Expected: between Small and Large.
  """
  return _paper("base", "uniform")


@_named
def base_yearly() -> Config:
  """T5.1.1-Base Yearly experts (not in the paper), from google/t5-v1_1-base (must be supplied).

  Command: python run.py --mode=train --config=base_yearly --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  Run time: about 1 day per expert on 32 TPU v3 cores (estimate).
  Expected: between Small and Large.
  """
  return _paper("base", "yearly")


@_named
def base_cbqa_ft() -> Config:
  """Base + 5K steps of TempLAMA (not in the paper), from google/t5-v1_1-base (must be supplied;
  a deviation: there is no public Base SSM checkpoint).

  Command: python run.py --mode=train --config=base_cbqa_ft --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.templama_dir=TL
  Run time: about 30 minutes on 32 TPU v3 cores (estimate).
  Expected: below T5-CBQA-ft Large.
  """
  return _paper("base", "cbqa_ft")


@_named
def large_temporal() -> Config:
  """T5.1.1-Large (770M) Temporal, the paper's main model (Table 2). Starts from the public
  T5.1.1-Large checkpoint (google/t5-v1_1-large, or Mesh-TF
  gs://t5-data/pretrained_models/t5.1.1.large), which must be supplied, as must the CustomNews
  SSM data and TempLAMA.

  Command: python run.py --mode=train --config=large_temporal --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  Run time: about 4 days on 32 TPU v3 cores (estimate; the paper's hardware).
  Expected: Table 2: the best TempLAMA F1 of all models on 2010-18 and on 2019-20, above
  Uniform; lowest CustomNews perplexity (Table 7).
  """
  return _paper("large", "temporal")


@_named
def large_uniform() -> Config:
  """T5.1.1-Large Uniform (Table 2): large_temporal without the year prefix, from
  google/t5-v1_1-large (must be supplied).

  Command: python run.py --mode=train --config=large_uniform --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  Run time: about 4 days on 32 TPU v3 cores (estimate).
  Expected: Table 2: below Temporal on TempLAMA; better on facts lasting 5+ years (Figure 2).
  """
  return _paper("large", "uniform")


@_named
def large_yearly() -> Config:
  """T5.1.1-Large Yearly ensemble (Table 2): nine experts 2010-2018, each 300K steps on its
  year from google/t5-v1_1-large (must be supplied); W/year=YYYY/ per expert.

  Command: python run.py --mode=train --config=large_yearly --workdir=W [--set=data.year=2014]
    --set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  Run time: about 4 days per expert on 32 TPU v3 cores (estimate).
  Expected: Table 2: best 2010-18 CustomNews F1, much worse on 2019-20 CustomNews.
  """
  return _paper("large", "yearly")


@_named
def large_cbqa_ft() -> Config:
  """T5-CBQA-ft Large (Table 2): google/t5-large-ssm (must be supplied) + 5K TempLAMA steps.

  Command: python run.py --mode=train --config=large_cbqa_ft --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.templama_dir=TL
  Run time: about 2 hours on 32 TPU v3 cores (estimate).
  Expected: Table 2: far below the news-trained models on TempLAMA; low, flat entropy on
  future queries (Figure 4).
  """
  return _paper("large", "cbqa_ft")


@_named
def xl_temporal() -> Config:
  """T5.1.1-XL Temporal (not in the paper), from google/t5-v1_1-xl (must be supplied).

  Command: python run.py --mode=train --config=xl_temporal --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  Run time: about 16 days on 32 TPU v3 cores (estimate); use a larger slice.
  Expected: between Large and XXL.
  """
  return _paper("xl", "temporal")


@_named
def xl_uniform() -> Config:
  """T5.1.1-XL Uniform (not in the paper), from google/t5-v1_1-xl (must be supplied).

  Command: python run.py --mode=train --config=xl_uniform --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  Run time: about 16 days on 32 TPU v3 cores (estimate).
  Expected: between Large and XXL.
  """
  return _paper("xl", "uniform")


@_named
def xl_yearly() -> Config:
  """T5.1.1-XL Yearly experts (not in the paper), from google/t5-v1_1-xl (must be supplied).

  Command: python run.py --mode=train --config=xl_yearly --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  Run time: about 16 days per expert on 32 TPU v3 cores (estimate).
  Expected: between Large and XXL.
  """
  return _paper("xl", "yearly")


@_named
def xl_cbqa_ft() -> Config:
  """T5-CBQA-ft XL (not in the paper): google/t5-xl-ssm (must be supplied) + 5K TempLAMA steps.

  Command: python run.py --mode=train --config=xl_cbqa_ft --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.templama_dir=TL
  Run time: about 7 hours on 32 TPU v3 cores (estimate).
  Expected: between Large and XXL.
  """
  return _paper("xl", "cbqa_ft")


@_named
def xxl_temporal() -> Config:
  """T5.1.1-XXL (11B) Temporal (Table 3), from google/t5-v1_1-xxl (must be supplied).

  Command: python run.py --mode=train --config=xxl_temporal --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  Run time: about 2 months on 32 TPU v3 cores, a week on 256 (estimate).
  Expected: Table 3, XXL row: the largest gain of Temporal over Uniform.
  """
  return _paper("xxl", "temporal")


@_named
def xxl_uniform() -> Config:
  """T5.1.1-XXL Uniform (Table 3), from google/t5-v1_1-xxl (must be supplied).

  Command: python run.py --mode=train --config=xxl_uniform --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  Run time: about 2 months on 32 TPU v3 cores, a week on 256 (estimate).
  Expected: Table 3, XXL row.
  """
  return _paper("xxl", "uniform")


@_named
def xxl_yearly() -> Config:
  """T5.1.1-XXL Yearly experts (not run in the paper), from google/t5-v1_1-xxl (supplied).

  Command: python run.py --mode=train --config=xxl_yearly --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.ssm_dir=SSM --set=data.templama_dir=TL
  Run time: about 2 months per expert on 32 TPU v3 cores (estimate).
  Expected: not reported in the paper.
  """
  return _paper("xxl", "yearly")


@_named
def xxl_cbqa_ft() -> Config:
  """T5-CBQA-ft XXL (Table 3): google/t5-xxl-ssm (must be supplied) + 5K TempLAMA steps.

  Command: python run.py --mode=train --config=xxl_cbqa_ft --workdir=W
    --set=model.init_checkpoint=CKPT --set=data.templama_dir=TL
  Run time: about 1 day on 32 TPU v3 cores (estimate).
  Expected: Table 3, CBQA-ft XXL row.
  """
  return _paper("xxl", "cbqa_ft")


def names() -> list[str]:
  """All named configs, sorted."""
  return sorted(_REGISTRY)


def get(name: str) -> Config:
  """Returns the named config.

  Raises:
    ConfigError: for an unknown name, listing the known ones.
  """
  if name not in _REGISTRY:
    close = difflib.get_close_matches(name or "", names(), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise ConfigError(f"unknown config {name!r}{hint}; known configs: {', '.join(names())}")
  return _REGISTRY[name]()


def describe(name: str) -> str:
  """The docstring of a named config: its command, run time and expected result."""
  get(name)
  return typing.cast(str, _REGISTRY[name].__doc__)


# --- Dotted keys and overrides ----------------------------------------------------------------


def _fields(cls) -> dict[str, Any]:
  hints = typing.get_type_hints(cls)
  return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def valid_keys(config: Config | None = None) -> list[str]:
  """Every dotted key that `--set` accepts, e.g. "train.steps"."""
  keys = []
  for name, hint in _fields(Config).items():
    if dataclasses.is_dataclass(hint):
      keys.extend(f"{name}.{sub}" for sub in _fields(hint))
    else:
      keys.append(name)
  return sorted(keys)


def _unknown_key(key: str) -> ConfigError:
  keys = valid_keys()
  close = difflib.get_close_matches(key, keys, n=3)
  hint = f" (did you mean {', '.join(close)}?)" if close else ""
  return ConfigError(f"unknown config key {key!r}{hint}; valid keys: {', '.join(keys)}")


def _type_name(hint) -> str:
  if typing.get_origin(hint) is tuple:
    return f"comma-separated {typing.get_args(hint)[0].__name__}s"
  return hint.__name__


def _parse_scalar(text: str, kind: type, key: str):
  text = text.strip()
  try:
    if kind is bool:
      lowered = text.lower()
      if lowered in ("true", "1", "yes"):
        return True
      if lowered in ("false", "0", "no"):
        return False
      raise ValueError
    if kind is int:
      return int(text)
    if kind is float:
      return float(text)
    return text
  except ValueError:
    raise ConfigError(f"config key {key!r} expects {kind.__name__}, got {text!r}") from None


def parse_value(key: str, text: str, hint) -> Any:
  """Parses the text of `--set=key=text` as the field's type (tuples are comma-separated)."""
  if typing.get_origin(hint) is tuple:
    kind = typing.get_args(hint)[0]
    parts = [p for p in text.split(",") if p.strip()]
    try:
      return tuple(_parse_scalar(p, kind, key) for p in parts)
    except ConfigError:
      raise ConfigError(f"config key {key!r} expects {_type_name(hint)}, got {text!r}") from None
  return _parse_scalar(text, hint, key)


def _field_hint(key: str):
  section, _, field = key.partition(".")
  top = _fields(Config)
  if section not in top:
    raise _unknown_key(key)
  hint = top[section]
  if dataclasses.is_dataclass(hint):
    sub = _fields(hint)
    if field not in sub:
      raise _unknown_key(key)
    return sub[field]
  if field:
    raise _unknown_key(key)
  return hint


def replace(config: Config, key: str, value: Any) -> Config:
  """Returns `config` with the dotted `key` set to an already typed `value`."""
  _field_hint(key)
  section, _, field = key.partition(".")
  if not field:
    return dataclasses.replace(config, **{section: value})
  sub = dataclasses.replace(getattr(config, section), **{field: value})
  return dataclasses.replace(config, **{section: sub})


def replace_many(config: Config, values: dict[str, Any]) -> Config:
  """Returns `config` with each dotted key of `values` set to its already typed value."""
  for key, value in values.items():
    config = replace(config, key, value)
  return config


# The numeric keys' valid ranges: (what the message says, the test). Keys not listed (seeds,
# years) take any value; every float must also be finite. `validate` checks them all, so that
# `--set=train.batch_size=0` is reported as that key, not as whatever fails downstream.
_AT_LEAST_0 = (">= 0", lambda v: v >= 0)
_AT_LEAST_1 = (">= 1", lambda v: v >= 1)
_POSITIVE = ("> 0", lambda v: v > 0)
_PROBABILITY = ("in [0, 1]", lambda v: 0 <= v <= 1)
_MESH_AXIS = ("-1 (all remaining devices) or >= 1", lambda v: v == -1 or v >= 1)
_RANGES: dict[str, tuple[str, Callable[[Any], bool]]] = {
  "model.dropout_rate": ("in [0, 1)", lambda v: 0 <= v < 1),
  "model.emb_dim": (">= 0 (0 keeps the preset's)", lambda v: v >= 0),
  "model.num_heads": (">= 0 (0 keeps the preset's)", lambda v: v >= 0),
  "model.head_dim": (">= 0 (0 keeps the preset's)", lambda v: v >= 0),
  "model.mlp_dim": (">= 0 (0 keeps the preset's)", lambda v: v >= 0),
  "model.num_layers": (">= 0 (0 keeps the preset's)", lambda v: v >= 0),
  "data.world_scale": _POSITIVE,
  "data.year": (">= 0 (0: every year of data.train_years)", lambda v: v >= 0),
  "data.new_year_prob": _PROBABILITY,
  "data.news_to_templama": _AT_LEAST_0,
  "data.input_length": _AT_LEAST_1,
  "data.target_length": _AT_LEAST_1,
  "train.steps": _AT_LEAST_1,
  "train.batch_size": _AT_LEAST_1,
  "train.learning_rate": _POSITIVE,
  "train.warmup_steps": _AT_LEAST_0,
  "train.microbatches": _AT_LEAST_1,
  "train.z_loss": _AT_LEAST_0,
  "train.loss_normalizing_factor": (">= 0 (0: the number of target tokens)", lambda v: v >= 0),
  "train.checkpoint_every": _AT_LEAST_1,
  "train.keep_checkpoints": _AT_LEAST_1,
  "train.log_every": _AT_LEAST_1,
  "train.eval_every": (">= 0 (0 disables evaluation)", lambda v: v >= 0),
  "train.eval_batches": _AT_LEAST_1,
  "mesh.data": _MESH_AXIS,
  "mesh.model": _MESH_AXIS,
  "adapt.alphas": _PROBABILITY,  # each of them
  "adapt.steps": _AT_LEAST_1,
  "adapt.match_alpha": _PROBABILITY,
  "adapt.eval_points": _AT_LEAST_1,
  "eval.batch_size": _AT_LEAST_1,
  "eval.max_decode_length": _AT_LEAST_1,
  "eval.beam_size": _AT_LEAST_1,
  "eval.max_examples": (">= 0 (0 keeps all)", lambda v: v >= 0),
  "eval.finetune_steps": _AT_LEAST_1,
}


def validate(config: Config) -> Config:
  """Checks every numeric key against its range; returns the config unchanged.

  Raises:
    ConfigError: naming the first key out of range (or a float that is NaN or infinite).
  """
  for key in valid_keys():
    value = lookup(config, key)
    for v in value if isinstance(value, tuple) else (value,):
      if isinstance(v, float) and not math.isfinite(v):
        raise ConfigError(f"config key {key!r} must be a finite number, got {v!r}")
      if key in _RANGES and not _RANGES[key][1](v):
        raise ConfigError(f"config key {key!r} must be {_RANGES[key][0]}, got {v!r}")
  return config


def override(config: Config, assignments: Sequence[str]) -> Config:
  """Applies `--set=dotted.key=value` assignments in order.

  Args:
    config: the base config.
    assignments: strings "section.field=value"; tuples are written "a,b,c".

  Returns:
    The new config.

  Raises:
    ConfigError: for a malformed assignment, an unknown key (listing the valid keys), a
      value that does not parse as the field's type, or one out of its range (`validate`).
  """
  for assignment in assignments:
    key, sep, text = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
      raise ConfigError(f"--set expects dotted.key=value, got {assignment!r}")
    config = replace(config, key, parse_value(key, text, _field_hint(key)))
  return validate(config)


def to_dict(config: Config) -> dict[str, Any]:
  """The config as JSON-ready nested dicts (tuples become lists)."""

  def convert(value):
    if isinstance(value, tuple):
      return [convert(v) for v in value]
    return value

  out = {}
  for name in _fields(Config):
    value = getattr(config, name)
    if dataclasses.is_dataclass(value):
      out[name] = {k: convert(getattr(value, k)) for k in _fields(type(value))}
    else:
      out[name] = convert(value)
  return out


def _typed(key: str, value: Any, hint) -> Any:
  """Checks a JSON value against a field type (ints are accepted as floats)."""
  if typing.get_origin(hint) is tuple:
    if not isinstance(value, list | tuple):
      raise ConfigError(f"config key {key!r} expects {_type_name(hint)}, got {value!r}")
    kind = typing.get_args(hint)[0]
    return tuple(_typed(key, v, kind) for v in value)
  if hint is float and isinstance(value, int) and not isinstance(value, bool):
    return float(value)
  if key == "model.remat" and isinstance(value, bool):  # config.json of older workdirs
    return remat_policy(value, key)
  if type(value) is not hint:
    raise ConfigError(f"config key {key!r} expects {_type_name(hint)}, got {value!r}")
  return value


_LATER_SECTIONS = ("reproduce",)


def from_dict(data: dict[str, Any]) -> Config:
  """Rebuilds a Config from `to_dict` output (e.g. a workdir's config.json), strictly.

  Raises:
    ConfigError: for an unknown or missing key or a value of the wrong type or range.
  """
  top = _fields(Config)
  # Sections added after workdirs were written: a config.json without them takes the defaults.
  data = {**{k: to_dict(Config())[k] for k in _LATER_SECTIONS if k not in data}, **data}
  unknown = sorted(set(data) - set(top))
  missing = sorted(set(top) - set(data))
  if unknown or missing:
    raise ConfigError(f"config.json: unknown keys {unknown}, missing keys {missing}")
  kwargs = {}
  for name, hint in top.items():
    value = data[name]
    if dataclasses.is_dataclass(hint):
      sub = _fields(hint)
      if not isinstance(value, dict) or set(value) - set(sub):
        have = set(value) if isinstance(value, dict) else set()
        raise ConfigError(
          f"config.json: section {name!r} has unknown keys {sorted(have - set(sub))}, "
          f"missing keys {sorted(set(sub) - have)}"
        )
      # A key added since the workdir was trained (absent from its config.json) takes its
      # default, so that older workdirs stay readable.
      typed = {k: _typed(f"{name}.{k}", value[k], h) for k, h in sub.items() if k in value}
      kwargs[name] = hint(**typed)
    else:
      kwargs[name] = _typed(name, value, hint)
  return validate(Config(**kwargs))


def lookup(config: Config, key: str) -> Any:
  """The value of a dotted key."""
  _field_hint(key)
  section, _, field = key.partition(".")
  value = getattr(config, section)
  return getattr(value, field) if field else value


def check_required(config: Config) -> None:
  """Fails at once if a key the config requires (its checkpoint, its data) is unset.

  Raises:
    ConfigError: naming every unset key, how to set it, and the CPU configs that need none.
  """
  # The embedded world replaces the data directories.
  waived = ("data.ssm_dir", "data.templama_dir") if config.data.synthetic else ()
  missing = [
    k for k in config.required if k not in waived and lookup(config, k) in ("", 0, None, ())
  ]
  if missing:
    sets = " ".join(f"--set={k}=..." for k in missing)
    raise ConfigError(
      f"config {config.name!r} needs {', '.join(missing)} (the public checkpoint and data it "
      f"trains on; see `python -c \"import tlm.configs as c; print(c.describe('{config.name}'))\"`"
      f"); pass {sets}, or use a CPU config that needs nothing: "
      + ", ".join(n for n in names() if n.startswith("tiny_") and not get(n).required)
    )
