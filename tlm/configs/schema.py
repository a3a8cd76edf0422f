"""The config schema: one frozen dataclass per section, and the valid range of each number.

Defaults are neutral or equal to the paper's values; the paper's settings themselves are
stated, with the paper's words, where its runs are defined (`tlm.configs.paper`), and
`tlm.configs.tiny` says how the CPU miniature departs from them.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

from tlm.configs.years import EVAL_YEARS, TRAIN_YEARS
from tlm.errors import ConfigError
from tlm.limits import MAX_SEED, MAX_YEAR, MIN_YEAR

VARIANTS = ("temporal", "uniform", "yearly", "cbqa_ft")


SIZES = ("tiny", "small", "base", "large", "xl", "xxl")
# model.remat: the names of `tlm.models.remat.POLICIES` (what each means is said there), which
# the model owns. Listed here, not imported, because the config layer sits below the models
# and `tlm.data` reads configs without loading jax; tests/test_remat.py holds the two equal.
REMAT_POLICIES = ("none", "full", "dots")


MODEL_DTYPES = ("float32", "bfloat16")  # model.dtype (tlm.models.t5's activation dtypes)


def remat_policy(value: Any, key: str) -> str:
  """`value` as one of REMAT_POLICIES; ConfigError naming `key` otherwise."""
  if isinstance(value, str):
    value = value.strip().lower()
  if value not in REMAT_POLICIES:
    raise ConfigError(f"{key} must be one of {', '.join(REMAT_POLICIES)}, got {value!r}")
  return value


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """The network and where its weights start.

  Attributes:
    preset: a `tlm.models.t5.get_preset` name (architecture only).
    dropout_rate: dropout in every layer.
    dtype: activation dtype, "float32" or "bfloat16"; parameters, RMSNorm and logits stay f32.
    remat: what each layer keeps for the backward pass (T5X / MaxText remat policies):
      "none" keeps every activation, "full" recomputes the whole layer (gradient
      checkpointing), "dots" keeps the results of the weight matmuls and recomputes the rest.
    init_checkpoint: weights to start from when the workdir has no checkpoint yet: an HF
      directory, a Mesh-TF checkpoint prefix, a tlm model directory or a tlm training workdir
      (anything `tlm.models.checkpoints.load_checkpoint` reads). "" starts from random weights.
    init_optimizer_state: also start Adafactor's state from `init_checkpoint`, which must then
      be a T5X training checkpoint (T5X's Adafactor slots and step, mapped exactly:
      `tlm.train.t5x_optimizer`): a T5X run continued here. This run's steps still count from
      0; the optimizer's update counts continue T5X's. False starts a fresh optimizer.
    emb_dim: model width; 0 keeps the preset's (the miniature sizes its model with these).
    num_heads: attention heads; 0 keeps the preset's.
    head_dim: width of each head; 0 keeps the preset's.
    mlp_dim: MLP hidden width; 0 keeps the preset's.
    num_layers: encoder and decoder layers (each); 0 keeps the preset's.
    relpos_bias_per_layer: a relative-position table in every layer (T5X's scalable T5 and
      umT5 checkpoints) instead of one per stack, as `T5Config.relpos_bias_per_layer`.
  """

  preset: str = "tiny"
  dropout_rate: float = 0.1
  dtype: str = "float32"
  remat: str = "none"
  init_checkpoint: str = ""
  init_optimizer_state: bool = False
  emb_dim: int = 0
  num_heads: int = 0
  head_dim: int = 0
  mlp_dim: int = 0
  num_layers: int = 0
  relpos_bias_per_layer: bool = False

  def __post_init__(self):
    object.__setattr__(self, "remat", remat_policy(self.remat, "model.remat"))
    # Checked here, naming the key, not later by T5Config once the data is built.
    if self.dtype not in MODEL_DTYPES:
      raise ConfigError(f"model.dtype must be one of {', '.join(MODEL_DTYPES)}, got {self.dtype!r}")


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Training examples: the sources, the year-uniform mixture and the row shapes.

  Attributes:
    synthetic: use the embedded synthetic world (built under `cache_dir` on first use)
      instead of `ssm_dir` / `templama_dir`.
    world_seed: seed of the synthetic world.
    world_scale: size of the synthetic world (1.0 = the default miniature).
    world_version: the synthetic world's version (`tlm.synthetic.settings.VERSIONS`): 4 (the
      default: a start that reads years, coverage by salience, news that looks back) or 3 (the
      world of the results committed before 2026-12-07). A config.json written before this key
      existed means 3 (`ABSENT_MEANS`).
    forward_looking: the synthetic world's forward-looking news sentences
      (`tlm.synthetic.forward`): "off" (the default world), "dated" (a term ending in a
      later year, the year named: "X's contract with Y runs until 2021.") or "undated" (the
      no-year control: the same sentences with the year replaced by an undated phrase).
    forward_share: with `forward_looking` on, their share of all news sentences (the default,
      0.005, is `tlm.synthetic.settings.FORWARD_SHARE`, with its reason).
    cache_dir: where the synthetic world and the data derived from it are built; "" means
      `~/.cache/tlm`.
    ssm_dir: salient-span-masking examples built from the news (`--mode=build_ssm`):
      `{train,val,test}/<year>.jsonl`.
    templama_dir: TempLAMA `train.json`, `val.json`, `test.json` (`--mode=build_templama`, or
      the released files).
    vocab: SentencePiece model; "" takes the init checkpoint's, else the synthetic world's.
    pretrain_corpus: pre-training variants ("t5", "cbqa") only: a `{"text": ...}` JSON-lines
      corpus to pre-train on instead of the synthetic world's (`pretrain/generic.jsonl` for
      "t5", `pretrain/encyclopedia.jsonl` for "cbqa"); "" reads the world's.
    conditioning: "temporal" (`year: 2014 ` prefix) or "none" (Uniform, Yearly, CBQA).
    train_years: the year slices sampled uniformly.
    year: Yearly experts only: train the expert of this year alone; 0 trains one expert per
      year of `train_years`, in turn.
    new_years: adaptation (§3.3): new slices (the paper's 2019) drawn with probability
      `new_year_prob`, the `train_years` with 1 - new_year_prob.
    new_year_prob: the paper's alpha; 0 draws `train_years` only.
    news_to_templama: news SSM examples drawn per TempLAMA-train example; 0 trains on
      TempLAMA alone (T5-CBQA-ft).
    input_length: encoder tokens per packed row.
    target_length: decoder tokens per packed row.
    seed: the sampling seed; a step's batch is a pure function of (seed, step).
    sampler: "example" draws each example uniformly within its year (one read per example:
      the miniature's, whose pre-registered results were computed with it) or "block" (the
      paper's configs: the draws of a year over a block of steps read as one run of
      consecutive examples, two requests per year and host whatever the rows;
      `tlm.input.block_sampling`).
    block_draws: the block sampler's candidate draws per row (a row holds at most this many
      examples); 0 derives it from the store's mean example length and the row lengths.
    allow_corpus_order: let the block sampler read a store in corpus order (built without
      `--shuffle_seed`), whose runs are a few hundred consecutive articles (a warning);
      false refuses it, naming `--mode=shuffle_store`. It does not change the stream.
  """

  synthetic: bool = True
  world_seed: int = 0
  world_scale: float = 1.0
  world_version: int = 4
  forward_looking: str = "off"
  forward_share: float = 0.005
  cache_dir: str = ""
  ssm_dir: str = ""
  templama_dir: str = ""
  vocab: str = ""
  pretrain_corpus: str = ""
  conditioning: str = "temporal"
  train_years: tuple[int, ...] = TRAIN_YEARS
  year: int = 0
  new_years: tuple[int, ...] = ()
  new_year_prob: float = 0.0
  news_to_templama: float = 1000.0
  input_length: int = 128
  target_length: int = 32
  seed: int = 0
  sampler: str = "example"
  block_draws: int = 0
  allow_corpus_order: bool = False


def trained_years(data: DataConfig) -> tuple[int, ...]:
  """The years a run trains on: `data.year` alone when set (a Yearly expert), else
  `data.train_years`. The task metrics during training are on these years too."""
  return (int(data.year),) if data.year else tuple(int(y) for y in data.train_years)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Optimisation, logging and checkpointing.

  Attributes:
    steps: optimizer steps.
    batch_size: packed rows per global batch.
    learning_rate: Adafactor's learning rate.
    schedule: "constant" (the paper) or "rsqrt" (T5 pre-training: constant for
      `warmup_steps`, then decaying as 1/sqrt(step)).
    warmup_steps: length of the constant phase of "rsqrt"; unused by "constant".
    microbatches: the global batch is split into this many parts whose gradients are summed,
      so that a batch of 2048 fits any hardware.
    z_loss: T5X's auxiliary loss on log Z.
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
    steps: adaptation steps.
    new_year: the new slice.
    match_alpha: the alpha whose adapted run is evaluated `eval_points` times along the way,
      to find the step at which it matches the retrained model (the paper's Figure 5 run).
    eval_points: evaluations along the `match_alpha` run (1: only at the end).
  """

  alphas: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)
  steps: int = 50_000
  new_year: int = 2019
  match_alpha: float = 0.5
  eval_points: int = 5


PARAM_DTYPES = ("float32", "bfloat16")  # eval.param_dtype


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
    param_dtype: dtype of the parameters on the devices for inference, one of PARAM_DTYPES
      (bfloat16 halves the memory; activations follow model.dtype either way).
  """

  batch_size: int = 64
  max_decode_length: int = 32
  beam_size: int = 1
  years: tuple[int, ...] = EVAL_YEARS
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


@dataclasses.dataclass(frozen=True)
class ReproduceConfig:
  """`--mode=reproduce` (the miniature reproduction) only.

  Attributes:
    steps: 0 (default): every model trains its own `train.steps`; N > 0: Uniform, Temporal,
      each Yearly expert and the retrained 2010-19 models train N steps (the paper's equal
      steps), the starts (`tiny_t5`, `tiny_cbqa`, `tiny_cbqa_ft`) keep theirs, where
      `--set=train.steps=N` changes every model. The 2800-step protocol of docs/results/:
      `--set=reproduce.steps=2800 --set=adapt.steps=480 --set=reproduce.pin_workers=false`.
    seeds: independent repetitions; each seed S sets data.world_seed, data.seed and
      train.seed to S (a new world, sampling and initialisation) and runs in WORKDIR/seed=S/.
      The summary judges every claim on each seed and over all of them (paper: one run).
    workers: how many of a seed's independent trainings (and its two adaptations) run at once,
      each in its own process (`tlm.miniature.parallel`); 1 runs them one after the other in the
      main process. The numbers do not depend on it.
    pin_workers: each worker on a core of its own with XLA's intra-op threading off (on by
      default: 1.04-1.13x the trainings' throughput with two workers on a 2-core machine,
      docs/reproduction.md "Run time"). Every worker then computes single-threaded, so the
      numbers depend neither on the schedule, nor on the number of workers, nor on the number
      of cores (unpinned, XLA splits each operation over the cores, and the last bits follow);
      a machine with more cores may raise `workers` and get the same numbers. Off reproduces
      the results computed unpinned (the 2800-step protocol's, docs/results/).
  """

  steps: int = 0
  seeds: tuple[int, ...] = (0,)
  workers: int = 2
  pin_workers: bool = True


@dataclasses.dataclass(frozen=True)
class Config:
  """A whole experiment.

  Attributes:
    name: the named config it came from.
    variant: one of VARIANTS; for the miniature's starting points also "t5" (the public T5
      analogue) and "cbqa" (the T5-CBQA analogue).
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


# The path settings: each is parsed once by `tlm.storage.parse` when the config is validated
# ("" leaves it unset), so that an empty bucket, an unknown scheme or a NUL fails at once.
PATH_KEYS = (
  "model.init_checkpoint",
  "data.cache_dir",
  "data.ssm_dir",
  "data.templama_dir",
  "data.vocab",
  "data.pretrain_corpus",
  "eval.future_relations",
)
# The path keys that must be local: the synthetic world's cache is built and read with local
# file operations (docs/operations.md, "Remote storage").
LOCAL_PATH_KEYS = ("data.cache_dir",)

# The limits of what the code can honour, each with its reason. `validate` checks them when the
# config is made, so a run that cannot work costs milliseconds, not a world build and a compile
# (`tlm.train.preflight` adds what needs the devices: the workdir's layout and a floor of the
# step's memory against theirs).
# Seeds (MAX_SEED) and years (MIN_YEAR, MAX_YEAR): `tlm.limits`, which the data layer checks too.
SEED_KEYS = ("data.world_seed", "data.seed", "train.seed", "reproduce.seeds")
# The step counter (TrainState.step, the dropout keys' fold_in) is int32.
MAX_STEPS = 2**31 - 1
# Tokens of one training batch (rows x (input + target length)): the step counts them in
# int32 (jax without 64-bit mode).
MAX_BATCH_TOKENS = 2**31 - 1
# A documented hard cap on every length: attention logits are float32 and one head's L x L
# matrix of one row is never split across devices (no sequence parallelism), so at 2**17 tokens
# a device holds at least 64 GiB for it, at 2**18 256 GiB, beyond any accelerator's memory. The
# paper trains at 512 (inputs) and 128 (targets).
MAX_LENGTH = 2**17
# Beam search ranks beam x vocabulary candidates with int32 indices (`lax.top_k`): 1024 beams
# keep that below 2**31 for any vocabulary up to 2M pieces (T5's has 32,128).
MAX_BEAM = 1024
# The synthetic world draws its names without repetition from about 3M two-syllable words; at
# scale 1000 (about 520,000 entities) a sixth of them are used, and beyond, drawing a new name
# slows without bound.
MAX_WORLD_SCALE = 1000.0
# `data.forward_looking`: the synthetic world's forward-looking sentences, off or in one mode.
FORWARD_LOOKING = ("off", "dated", "undated")
# `data.world_version`: the synthetic world's versions (`tlm.synthetic.settings.VERSIONS`, which a
# test compares with this; the configs never import the world).
WORLD_VERSIONS = (3, 4)
# Keys whose value before they existed was not their default: a config.json or a checkpoint's
# data state written without the key had this value (world v3 was the only world).
ABSENT_MEANS = {"data.world_version": 3}
SAMPLERS = ("example", "block")
# Every other integer (seeds aside): numpy and XLA hold shapes and counters in int64.
MAX_INT = 2**63 - 1

# The numeric keys' valid ranges: (what the message says, the test). Every float must also be
# finite, every other integer fit in int64 (`MAX_INT`). `validate` checks them all, so that
# `--set=train.batch_size=0` is reported as that key, not as whatever fails downstream.
_AT_LEAST_0 = (">= 0", lambda v: v >= 0)
_AT_LEAST_1 = (">= 1", lambda v: v >= 1)
_POSITIVE = ("> 0", lambda v: v > 0)
_PROBABILITY = ("in [0, 1]", lambda v: 0 <= v <= 1)
_MESH_AXIS = ("-1 (all remaining devices) or >= 1", lambda v: v == -1 or v >= 1)
_PRESET_SIZE = (">= 0 (0 keeps the preset's)", lambda v: v >= 0)
_SEED = ("in [0, 2**64 - 1]", lambda v: 0 <= v <= MAX_SEED)
_YEAR = (f"a year in [{MIN_YEAR}, {MAX_YEAR}]", lambda v: MIN_YEAR <= v <= MAX_YEAR)
_STEPS = ("in [1, 2**31 - 1] (the step counter is int32)", lambda v: 1 <= v <= MAX_STEPS)
_STEPS_0 = ("in [0, 2**31 - 1] (the step counter is int32)", lambda v: 0 <= v <= MAX_STEPS)
_LENGTH = (f"in [1, {MAX_LENGTH}] (tlm.configs.schema.MAX_LENGTH)", lambda v: 1 <= v <= MAX_LENGTH)
RANGES: dict[str, tuple[str, Callable[[Any], bool]]] = {
  "model.dropout_rate": ("in [0, 1)", lambda v: 0 <= v < 1),
  "model.emb_dim": _PRESET_SIZE,
  "model.num_heads": _PRESET_SIZE,
  "model.head_dim": _PRESET_SIZE,
  "model.mlp_dim": _PRESET_SIZE,
  "model.num_layers": _PRESET_SIZE,
  "data.world_seed": _SEED,
  "data.world_scale": (
    f"in (0, {MAX_WORLD_SCALE:g}] (tlm.configs.schema.MAX_WORLD_SCALE)",
    lambda v: 0 < v <= MAX_WORLD_SCALE,
  ),
  "data.sampler": (f"one of {', '.join(SAMPLERS)}", lambda v: v in SAMPLERS),
  # A row of 128 + 32 tokens holds at most 80 examples of one token each (EOS included).
  "data.block_draws": ("in [0, 256]", lambda v: 0 <= v <= 256),
  "data.world_version": (
    f"one of {', '.join(map(str, WORLD_VERSIONS))}",
    lambda v: v in WORLD_VERSIONS,
  ),
  "data.forward_looking": (
    f"one of {', '.join(FORWARD_LOOKING)}",
    lambda v: v in FORWARD_LOOKING,
  ),
  # At most one sentence in ten: beyond, the news would be mostly announcements.
  "data.forward_share": ("in (0, 0.1]", lambda v: 0 < v <= 0.1),
  "data.train_years": _YEAR,  # each of them
  "data.year": (
    f"0 (every year of data.train_years) or a year in [{MIN_YEAR}, {MAX_YEAR}]",
    lambda v: v == 0 or MIN_YEAR <= v <= MAX_YEAR,
  ),
  "data.new_years": _YEAR,
  "data.new_year_prob": _PROBABILITY,
  "data.news_to_templama": _AT_LEAST_0,
  "data.input_length": _LENGTH,
  "data.target_length": _LENGTH,
  "data.seed": _SEED,
  "train.steps": _STEPS,
  "train.batch_size": _AT_LEAST_1,
  "train.learning_rate": _POSITIVE,
  "train.warmup_steps": _STEPS_0,
  "train.microbatches": _AT_LEAST_1,
  "train.z_loss": _AT_LEAST_0,
  "train.loss_normalizing_factor": (">= 0 (0: the number of target tokens)", lambda v: v >= 0),
  "train.seed": _SEED,
  "train.checkpoint_every": _STEPS,
  "train.keep_checkpoints": _AT_LEAST_1,
  "train.log_every": _STEPS,
  "train.eval_every": ("in [0, 2**31 - 1] (0 disables evaluation)", lambda v: 0 <= v <= MAX_STEPS),
  "train.eval_batches": _AT_LEAST_1,
  "train.eval_examples": _AT_LEAST_0,
  "train.profile_steps": _STEPS_0,  # each of them
  "mesh.data": _MESH_AXIS,
  "mesh.model": _MESH_AXIS,
  "adapt.alphas": _PROBABILITY,  # each of them
  "adapt.steps": _STEPS,
  "adapt.new_year": _YEAR,
  "adapt.match_alpha": _PROBABILITY,
  "adapt.eval_points": _AT_LEAST_1,
  "eval.batch_size": _AT_LEAST_1,
  "eval.max_decode_length": _LENGTH,
  "eval.beam_size": (
    f"in [1, {MAX_BEAM}] (tlm.configs.schema.MAX_BEAM)",
    lambda v: 1 <= v <= MAX_BEAM,
  ),
  "eval.years": _YEAR,
  "eval.max_examples": (">= 0 (0 keeps all)", lambda v: v >= 0),
  "eval.finetune_steps": _STEPS,
  "reproduce.steps": _STEPS_0,
  "reproduce.seeds": _SEED,
  "reproduce.workers": _AT_LEAST_1,
}
