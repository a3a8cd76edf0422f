"""HF `config.json` <-> `T5Config`: the config half of the HF checkpoint format.

The parameter half (name table and transforms) is `tlm.models.param_map.PARAM_MAP`. A
checkpoint's config is hostile input: every dimension is bounded (`CHECKPOINT_LIMITS`) before
anything is built from it.
"""

from tlm.errors import ConfigError
from tlm.models.t5 import T5Config

# HF `feed_forward_proj` <-> T5X activations. HF maps "gated-gelu" to the tanh GELU.
_HF_ACTIVATIONS = {
  "relu": ("relu",),
  "gated-gelu": ("gelu", "linear"),
  "gated-silu": ("silu", "linear"),
  "gated-relu": ("relu", "linear"),
}


# Upper bounds on the dimensions of a checkpoint's config (config.json, model_config.json, or
# the shapes of a Mesh-TF checkpoint), far above every published T5 (t5-11b: d_ff 65536,
# 128 heads; mT5: 250112 pieces; UL2: 32 layers) but low enough that a hostile config cannot
# make building the model's name maps and abstract shapes grow without end.
CHECKPOINT_LIMITS = {
  "vocab_size": 1 << 21,
  "emb_dim": 1 << 16,
  "num_heads": 1 << 10,
  "num_encoder_layers": 256,
  "num_decoder_layers": 256,
  "head_dim": 1 << 13,
  "mlp_dim": 1 << 20,
  "relative_attention_num_buckets": 1 << 12,
  "relative_attention_max_distance": 1 << 20,
}


def check_checkpoint_limits(cfg: T5Config) -> T5Config:
  """`cfg`, if every dimension is within `CHECKPOINT_LIMITS`.

  Limits: vocab_size <= 2**21, emb_dim (d_model) <= 65536, num_heads <= 1024, encoder and
  decoder layers <= 256 each, head_dim (d_kv) <= 8192, mlp_dim (d_ff) <= 2**20, relative
  attention buckets <= 4096 and max distance <= 2**20.

  Raises:
    ConfigError: naming the first field above its limit.
  """
  for name, limit in CHECKPOINT_LIMITS.items():
    if getattr(cfg, name) > limit:
      raise ConfigError(f"{name} {getattr(cfg, name)} is above the limit of {limit}")
  return cfg


# The `model_type` of transformers' UMT5 (a T5 whose every layer has its own relative-position
# table): `relpos_bias_per_layer` configs are read from and written as it.
_UMT5 = "umt5"

# config.json key of each T5Config dimension.
_HF_DIMENSIONS = {
  "vocab_size": "vocab_size",
  "emb_dim": "d_model",
  "num_heads": "num_heads",
  "num_encoder_layers": "num_layers",
  "num_decoder_layers": "num_decoder_layers",
  "head_dim": "d_kv",
  "mlp_dim": "d_ff",
  "relative_attention_num_buckets": "relative_attention_num_buckets",
  "relative_attention_max_distance": "relative_attention_max_distance",
}


def from_hf_config(hf: dict) -> T5Config:
  """A T5Config from an HF `config.json` dict (T5ForConditionalGeneration, MT5, and UMT5:
  `model_type` "umt5" gives `relpos_bias_per_layer`).

  Tying follows transformers: logits are scaled (T5 1.0) unless `tie_word_embeddings` is
  false; transformers >= 5 also writes `scale_decoder_outputs`, which takes precedence.
  An unscaled model whose checkpoint has no separate `lm_head` gets a `logits_dense` equal
  to the embedding (`param_convert.params_from_hf`), which is the same function.

  The file may be hostile: every dimension must be within `CHECKPOINT_LIMITS` (see
  `check_checkpoint_limits`: e.g. at most 256 layers, d_model <= 65536, 1024 heads, a
  vocabulary of 2**21), and a value of the wrong type is an error naming its key.

  Raises:
    ConfigError: a missing size key, a value of the wrong type or out of its limits, or an
      unsupported `feed_forward_proj`.
  """
  proj = hf.get("feed_forward_proj", "relu")
  if not isinstance(proj, str) or proj not in _HF_ACTIVATIONS:
    raise ConfigError(
      f"config.json: feed_forward_proj {str(proj)[:40]!r} is not supported "
      f"(supported: {', '.join(_HF_ACTIVATIONS)})"
    )
  scaled = hf.get("scale_decoder_outputs", hf.get("tie_word_embeddings", True) is not False)
  floats = {}
  for key, default in (("dropout_rate", 0.1), ("layer_norm_epsilon", 1e-6)):
    value = hf.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value == value:
      raise ConfigError(f"config.json: {key} must be a number, got {str(value)[:40]!r}")
    floats[key] = float(value)
  try:
    num_layers = hf["num_layers"]
    dims = dict(
      vocab_size=hf["vocab_size"],
      emb_dim=hf["d_model"],
      num_heads=hf["num_heads"],
      num_encoder_layers=num_layers,
      num_decoder_layers=hf.get("num_decoder_layers") or num_layers,
      head_dim=hf["d_kv"],
      mlp_dim=hf["d_ff"],
      relative_attention_num_buckets=hf.get("relative_attention_num_buckets", 32),
      relative_attention_max_distance=hf.get("relative_attention_max_distance", 128),
    )
  except KeyError as e:
    raise ConfigError(f"config.json: missing key {e.args[0]!r}") from None
  # Checked here, with config.json's key names, before T5Config sees them.
  for field, value in dims.items():
    key = _HF_DIMENSIONS[field]
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
      raise ConfigError(f"config.json: {key} must be a positive integer, got {str(value)[:40]!r}")
    if value > CHECKPOINT_LIMITS[field]:
      raise ConfigError(
        f"config.json: {key} {value} is above the limit of {CHECKPOINT_LIMITS[field]}"
      )
  return T5Config(
    **dims,
    mlp_activations=_HF_ACTIVATIONS[proj],
    logits_via_embedding=bool(scaled),
    # transformers' UMT5 is T5 with a relative-position table in every layer (umT5).
    relpos_bias_per_layer=hf.get("model_type") == _UMT5,
    **floats,
  )


def to_hf_config(cfg: T5Config) -> dict:
  """The HF `config.json` dict of `cfg` (loads in transformers as T5ForConditionalGeneration,
  or UMT5ForConditionalGeneration when `cfg.relpos_bias_per_layer`).

  Raises:
    ConfigError: activations with no HF `feed_forward_proj` name.
  """
  proj = {v: k for k, v in _HF_ACTIVATIONS.items()}.get(cfg.mlp_activations)
  if proj is None:
    raise ConfigError(f"mlp_activations {cfg.mlp_activations} have no HF feed_forward_proj")
  umt5 = cfg.relpos_bias_per_layer
  return {
    "architectures": ["UMT5ForConditionalGeneration" if umt5 else "T5ForConditionalGeneration"],
    "model_type": _UMT5 if umt5 else "t5",
    "vocab_size": cfg.vocab_size,
    "d_model": cfg.emb_dim,
    "d_kv": cfg.head_dim,
    "d_ff": cfg.mlp_dim,
    "num_layers": cfg.num_encoder_layers,
    "num_decoder_layers": cfg.num_decoder_layers,
    "num_heads": cfg.num_heads,
    "relative_attention_num_buckets": cfg.relative_attention_num_buckets,
    "relative_attention_max_distance": cfg.relative_attention_max_distance,
    "dropout_rate": cfg.dropout_rate,
    "layer_norm_epsilon": cfg.layer_norm_epsilon,
    "initializer_factor": 1.0,
    "feed_forward_proj": proj,
    "tie_word_embeddings": cfg.logits_via_embedding,
    "scale_decoder_outputs": cfg.logits_via_embedding,
    "is_encoder_decoder": True,
    "use_cache": True,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
  }
