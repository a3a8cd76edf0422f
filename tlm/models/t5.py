"""The T5 encoder-decoder in Flax Linen: config, size presets, and wiring.

The mapping to and from HF `config.json` is format knowledge: `tlm.models.formats.hf_config`.

Mirrors T5X's `t5x/examples/t5/network.py` (module names = checkpoint tree, `encode` /
`decode` / `__call__`) for both public families (Raffel et al., 2020):
- T5 1.0 (`t5-small` .. `t5-11b`, and the T5-CBQA / SSM checkpoints the paper's baselines
  use): ReLU MLP, output layer tied to the token embedding with logits scaled by
  1/sqrt(emb_dim);
- T5 1.1 (`t5-v1_1-small` .. `-xxl`): gated-GELU MLP, separate `logits_dense` (no scaling).
The paper (Dhingra et al., 2022, section 2) adapts these public checkpoints; `tiny` and
`tiny-v1_1` are CPU-sized members of the two families for tests and the miniature runs.
`relpos_bias_per_layer` gives every layer its own relative-position table, as T5X's
`t5x/examples/scalable_t5/network.py` (umT5) and HF's `UMT5` do, where T5 has one per stack.

Packing: segment ids restrict attention to the own segment; relative positions are
differences of row indices, which within a segment equal differences of in-segment
positions, so packing leaves them unchanged and the `*_positions` inputs are not needed
(accepted for T5X compatibility).
"""

import dataclasses
import math
from typing import Any

import jax.numpy as jnp
from flax import linen as nn

from tlm.errors import ConfigError
from tlm.models import layers, remat

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


@dataclasses.dataclass(frozen=True)
class T5Config:
  """Hyperparameters of a T5 model (T5X's names).

  Attributes:
    vocab_size: rows of the embedding table (t5: 32128, above the 32100 pieces).
    emb_dim: model width (`d_model`).
    num_heads: attention heads.
    num_encoder_layers: encoder blocks.
    num_decoder_layers: decoder blocks.
    head_dim: width of each head (`d_kv`).
    mlp_dim: MLP hidden width (`d_ff`).
    mlp_activations: `("relu",)` (1.0) or `("gelu", "linear")` (1.1 gated GELU, tanh).
    logits_via_embedding: tied output layer, logits scaled by 1/sqrt(emb_dim) (1.0).
    dropout_rate: dropout everywhere (T5X placement).
    relative_attention_num_buckets: relative-position buckets.
    relative_attention_max_distance: distance of the last bucket.
    relpos_bias_per_layer: every layer's self-attention has its own relative-position table
      (`<stack>/layers_N/relpos_bias/rel_embedding`; T5X's scalable T5 and flaxformer's
      scanned T5, umT5 / HF `UMT5`) instead of one per stack (`<stack>/relpos_bias`, T5).
    layer_norm_epsilon: RMS norm epsilon.
    dtype: computation dtype, "float32" or "bfloat16" (params, norms, logits stay float32).
    remat: what each layer keeps for the backward pass, a key of `tlm.models.remat.POLICIES`:
      "none" (everything), "full" (recompute the layer: gradient checkpointing) or "dots"
      (keep the weight matmuls' results, recompute the rest). Only these names: a boolean is
      refused (ConfigError), not read as "full" / "none".
  """

  vocab_size: int
  emb_dim: int = 512
  num_heads: int = 8
  num_encoder_layers: int = 6
  num_decoder_layers: int = 6
  head_dim: int = 64
  mlp_dim: int = 2048
  mlp_activations: tuple[str, ...] = ("relu",)
  logits_via_embedding: bool = True
  dropout_rate: float = 0.1
  relative_attention_num_buckets: int = 32
  relative_attention_max_distance: int = 128
  relpos_bias_per_layer: bool = False
  layer_norm_epsilon: float = 1e-6
  dtype: str = "float32"
  remat: str = "none"

  def __post_init__(self):
    object.__setattr__(self, "mlp_activations", tuple(self.mlp_activations))
    for f in dataclasses.fields(self):
      value = getattr(self, f.name)
      if f.type in (int, "int") and (
        not isinstance(value, int) or isinstance(value, bool) or value <= 0
      ):
        raise ConfigError(f"T5Config.{f.name} must be a positive integer, got {value!r}")
    unknown = [a for a in self.mlp_activations if a not in layers.ACTIVATIONS]
    if unknown or not self.mlp_activations:
      raise ConfigError(
        f"T5Config.mlp_activations: unknown {unknown or 'empty'}; "
        f"choose from {sorted(layers.ACTIVATIONS)}"
      )
    if self.dtype not in _DTYPES:
      raise ConfigError(f"T5Config.dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")
    if not 0.0 <= self.dropout_rate < 1.0:
      raise ConfigError(f"T5Config.dropout_rate must be in [0, 1), got {self.dropout_rate}")
    for name in ("logits_via_embedding", "relpos_bias_per_layer"):
      if not isinstance(getattr(self, name), bool):
        raise ConfigError(f"T5Config.{name} must be a boolean")
    if self.remat not in remat.POLICIES:
      raise ConfigError(
        f"T5Config.remat must be one of {', '.join(remat.POLICIES)}, got {self.remat!r}"
      )

  @property
  def compute_dtype(self) -> Any:
    """The jnp dtype of `dtype`."""
    return _DTYPES[self.dtype]

  def to_dict(self) -> dict:
    """JSON-serialisable dict (`model_config.json`)."""
    d = dataclasses.asdict(self)
    d["mlp_activations"] = list(self.mlp_activations)
    return d

  @classmethod
  def from_dict(cls, d: dict) -> "T5Config":
    """Inverse of `to_dict`. Unknown keys or a missing `vocab_size` raise ConfigError."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
      raise ConfigError(f"unknown T5Config key(s): {', '.join(map(repr, unknown))}")
    if "vocab_size" not in d:
      raise ConfigError("T5Config: missing key 'vocab_size'")
    return cls(**d)


_T5_VOCAB = 32128
# name: (emb_dim, num_heads, layers, head_dim, mlp_dim), published dimensions.
_V1_0 = {
  "t5-small": (512, 8, 6, 64, 2048),
  "t5-base": (768, 12, 12, 64, 3072),
  "t5-large": (1024, 16, 24, 64, 4096),
  "t5-3b": (1024, 32, 24, 128, 16384),
  "t5-11b": (1024, 128, 24, 128, 65536),
  "tiny": (64, 4, 2, 16, 128),
}
_V1_1 = {
  "t5-v1_1-small": (512, 6, 8, 64, 1024),
  "t5-v1_1-base": (768, 12, 12, 64, 2048),
  "t5-v1_1-large": (1024, 16, 24, 64, 2816),
  "t5-v1_1-xl": (2048, 32, 24, 64, 5120),
  "t5-v1_1-xxl": (4096, 64, 24, 64, 10240),
  "tiny-v1_1": (64, 4, 2, 16, 128),
}
PRESETS = tuple(_V1_0) + tuple(_V1_1)
# The tiny presets' default vocabulary; callers set the size of their SentencePiece model.
TINY_VOCAB_SIZE = 512


def get_preset(name: str, **overrides) -> T5Config:
  """The config of a published size (or `tiny`, `tiny-v1_1`), with optional field overrides.

  Args:
    name: one of `PRESETS`.
    **overrides: T5Config fields to replace, e.g. `vocab_size=1100, dtype="bfloat16"`.

  Returns:
    The config.

  Raises:
    ConfigError: unknown preset or field.
  """
  if name in _V1_0:
    dims, family = _V1_0[name], {"mlp_activations": ("relu",), "logits_via_embedding": True}
  elif name in _V1_1:
    dims = _V1_1[name]
    family = {"mlp_activations": ("gelu", "linear"), "logits_via_embedding": False}
  else:
    # Every caller's name is a config's model.preset: the error names that key.
    raise ConfigError(
      f"config key 'model.preset': unknown model preset {name!r}; choose from {', '.join(PRESETS)}"
    )
  emb_dim, num_heads, num_layers, head_dim, mlp_dim = dims
  fields = dict(
    vocab_size=TINY_VOCAB_SIZE if name.startswith("tiny") else _T5_VOCAB,
    emb_dim=emb_dim,
    num_heads=num_heads,
    num_encoder_layers=num_layers,
    num_decoder_layers=num_layers,
    head_dim=head_dim,
    mlp_dim=mlp_dim,
    **family,
  )
  unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(T5Config)})
  if unknown:
    raise ConfigError(f"unknown T5Config key(s): {', '.join(unknown)}")
  fields.update(overrides)
  return T5Config(**fields)


def _dropout(cfg: T5Config, name: str, broadcast: bool = True) -> nn.Dropout:
  # T5X shares each dropout mask along the length axis (broadcast_dims=(-2,)).
  return nn.Dropout(rate=cfg.dropout_rate, broadcast_dims=(-2,) if broadcast else (), name=name)


_HIDDEN_AXES = ("batch", "length", "embed")


class EncoderLayer(nn.Module):
  """Pre-norm self-attention + MLP block with residuals."""

  config: T5Config

  @nn.compact
  def __call__(self, inputs, mask, bias, deterministic):
    cfg = self.config
    dtype = cfg.compute_dtype
    if cfg.relpos_bias_per_layer:  # the layer's own table (the stack passes bias=None)
      bias = _relpos(cfg)(inputs.shape[-2], inputs.shape[-2], bidirectional=True)
    x = layers.RMSNorm(cfg.layer_norm_epsilon, dtype, name="pre_attention_layer_norm")(inputs)
    x = layers.MultiHeadDotProductAttention(
      cfg.num_heads, cfg.head_dim, dtype, cfg.dropout_rate, name="attention"
    )(x, x, mask, bias, deterministic=deterministic)
    x = _dropout(cfg, "post_attention_dropout")(x, deterministic=deterministic) + inputs
    x = nn.with_logical_constraint(x, _HIDDEN_AXES)
    y = layers.RMSNorm(cfg.layer_norm_epsilon, dtype, name="pre_mlp_layer_norm")(x)
    y = layers.MlpBlock(cfg.mlp_dim, cfg.mlp_activations, cfg.dropout_rate, dtype, name="mlp")(
      y, deterministic=deterministic
    )
    y = _dropout(cfg, "post_mlp_dropout")(y, deterministic=deterministic) + x
    return nn.with_logical_constraint(y, _HIDDEN_AXES)


class DecoderLayer(nn.Module):
  """Pre-norm causal self-attention, cross-attention and MLP, with residuals."""

  config: T5Config

  @nn.compact
  def __call__(
    self, inputs, encoded, self_mask, self_bias, cross_mask, deterministic, decode, decode_index
  ):
    cfg = self.config
    dtype = cfg.compute_dtype
    if cfg.relpos_bias_per_layer:
      # The layer's own table at the positions the stack's would take (the stack passes
      # self_bias=None): queries from `decode_index` in a decode step, keys along the last
      # axis of the causal mask (every cache slot in a decode step).
      offset = 0 if decode_index is None else decode_index
      self_bias = _relpos(cfg)(
        inputs.shape[-2], self_mask.shape[-1], bidirectional=False, query_offset=offset
      )
    norm = lambda name: layers.RMSNorm(cfg.layer_norm_epsilon, dtype, name=name)
    x = norm("pre_self_attention_layer_norm")(inputs)
    x = layers.MultiHeadDotProductAttention(
      cfg.num_heads, cfg.head_dim, dtype, cfg.dropout_rate, name="self_attention"
    )(
      x,
      x,
      self_mask,
      self_bias,
      decode=decode,
      decode_index=decode_index,
      deterministic=deterministic,
    )
    x = _dropout(cfg, "post_self_attention_dropout")(x, deterministic=deterministic) + inputs
    x = nn.with_logical_constraint(x, _HIDDEN_AXES)
    y = norm("pre_cross_attention_layer_norm")(x)
    y = layers.MultiHeadDotProductAttention(
      cfg.num_heads,
      cfg.head_dim,
      dtype,
      cfg.dropout_rate,
      is_cross_attention=True,
      name="encoder_decoder_attention",
    )(y, encoded, cross_mask, decode=decode, deterministic=deterministic)
    y = _dropout(cfg, "post_cross_attention_dropout")(y, deterministic=deterministic) + x
    y = nn.with_logical_constraint(y, _HIDDEN_AXES)
    z = norm("pre_mlp_layer_norm")(y)
    z = layers.MlpBlock(cfg.mlp_dim, cfg.mlp_activations, cfg.dropout_rate, dtype, name="mlp")(
      z, deterministic=deterministic
    )
    z = _dropout(cfg, "post_mlp_dropout")(z, deterministic=deterministic) + y
    return nn.with_logical_constraint(z, _HIDDEN_AXES)


def _relpos(cfg: T5Config) -> layers.RelativePositionBiases:
  return layers.RelativePositionBiases(
    num_buckets=cfg.relative_attention_num_buckets,
    max_distance=cfg.relative_attention_max_distance,
    num_heads=cfg.num_heads,
    dtype=jnp.float32,
    name="relpos_bias",
  )


class Encoder(nn.Module):
  """Token embedding, encoder layers, final norm."""

  config: T5Config
  shared_embedding: nn.Module

  @nn.compact
  def __call__(self, encoder_input_tokens, encoder_mask, deterministic):
    cfg = self.config
    length = encoder_input_tokens.shape[-1]
    # One bias for all layers, [1, heads, length, length], unless each layer has its own.
    bias = None if cfg.relpos_bias_per_layer else _relpos(cfg)(length, length, bidirectional=True)
    x = self.shared_embedding(encoder_input_tokens.astype(jnp.int32))
    x = _dropout(cfg, "input_dropout")(x, deterministic=deterministic).astype(cfg.compute_dtype)
    layer_cls = remat.wrap(EncoderLayer, cfg.remat, static_argnums=(4,))
    for i in range(cfg.num_encoder_layers):
      x = layer_cls(cfg, name=f"layers_{i}")(x, encoder_mask, bias, deterministic)
    x = layers.RMSNorm(cfg.layer_norm_epsilon, cfg.compute_dtype, name="encoder_norm")(x)
    # T5X's final encoder dropout is not broadcast along the length.
    return _dropout(cfg, "output_dropout", broadcast=False)(x, deterministic=deterministic)


class Decoder(nn.Module):
  """Token embedding, decoder layers, final norm, output logits (float32).

  Decode mode keeps, besides each layer's attention caches, `cache_index` (the position
  being decoded) and `slot_positions` (arange over the cache length) in the "cache"
  collection; see `Transformer.decode`.
  """

  config: T5Config
  shared_embedding: nn.Module

  @nn.compact
  def __call__(self, encoded, decoder_input_tokens, self_mask, cross_mask, deterministic, decode):
    cfg = self.config
    # One table for all layers, unless each layer has its own (then the biases stay None).
    relpos = None if cfg.relpos_bias_per_layer else _relpos(cfg)
    self_bias, decode_index = None, None
    if decode and self.has_variable("cache", "cache_index"):
      # One decode step: query position `index` against every cache slot.
      index = self.get_variable("cache", "cache_index")
      slots = self.get_variable("cache", "slot_positions")
      self.put_variable("cache", "cache_index", index + 1)
      if decoder_input_tokens.shape[1] != 1:
        raise ValueError("decode steps take one token per row")
      if relpos is not None:
        self_bias = relpos(1, slots.shape[0], bidirectional=False, query_offset=index)
      self_mask = (slots <= index)[None, None, None, :]
      decode_index = index
    else:
      length = decoder_input_tokens.shape[1]
      if decode:  # first call: allocate the decode bookkeeping for `length` slots
        self.put_variable("cache", "cache_index", jnp.array(0, jnp.int32))
        self.put_variable("cache", "slot_positions", jnp.arange(length, dtype=jnp.int32))
      if relpos is not None:
        self_bias = relpos(length, length, bidirectional=False)

    y = self.shared_embedding(decoder_input_tokens.astype(jnp.int32))
    y = _dropout(cfg, "input_dropout")(y, deterministic=deterministic).astype(cfg.compute_dtype)
    # Decoding computes no gradient: nothing to rematerialise.
    layer_cls = remat.wrap(DecoderLayer, "none" if decode else cfg.remat, static_argnums=(6, 7))
    for i in range(cfg.num_decoder_layers):
      y = layer_cls(cfg, name=f"layers_{i}")(
        y, encoded, self_mask, self_bias, cross_mask, deterministic, decode, decode_index
      )
    y = layers.RMSNorm(cfg.layer_norm_epsilon, cfg.compute_dtype, name="decoder_norm")(y)
    y = _dropout(cfg, "output_dropout")(y, deterministic=deterministic)

    if cfg.logits_via_embedding:
      # Tied output layer: T5 1.0 rescales the logits by 1/sqrt(emb_dim).
      logits = self.shared_embedding.attend(y) / math.sqrt(cfg.emb_dim)
    else:
      logits = layers.DenseGeneral(
        cfg.vocab_size, dtype=jnp.float32, kernel_axes=("embed", "vocab"), name="logits_dense"
      )(y)
    return nn.with_logical_constraint(logits, ("batch", "length", "vocab"))


class Transformer(nn.Module):
  """The T5 encoder-decoder. Token id 0 is padding; logits are float32.

  Attributes:
    config: the T5Config.
  """

  config: T5Config

  def setup(self):
    cfg = self.config
    self.token_embedder = layers.Embed(
      num_embeddings=cfg.vocab_size,
      features=cfg.emb_dim,
      dtype=cfg.compute_dtype,
      attend_dtype=jnp.float32,
    )
    self.encoder = Encoder(cfg, self.token_embedder)
    self.decoder = Decoder(cfg, self.token_embedder)

  def encode(self, encoder_input_tokens, encoder_segment_ids=None, enable_dropout=True):
    """Encodes `[batch, length]` tokens -> `[batch, length, emb_dim]` (compute dtype).

    Args:
      encoder_input_tokens: int tokens, 0 = padding.
      encoder_segment_ids: packing segment ids (1, 2, ...; 0 = padding), optional.
      enable_dropout: training mode (needs a "dropout" rng when dropout_rate > 0).
    """
    valid = encoder_input_tokens > 0
    mask = layers.make_padding_and_segment_mask(
      valid, valid, encoder_segment_ids, encoder_segment_ids
    )
    return self.encoder(encoder_input_tokens, mask, deterministic=not enable_dropout)

  def decode(
    self,
    encoded,
    encoder_input_tokens,
    decoder_input_tokens,
    encoder_segment_ids=None,
    decoder_segment_ids=None,
    decoder_positions=None,
    enable_dropout=True,
    decode=False,
  ):
    """Decoder logits `[batch, target_len, vocab]` (float32) given the encoder output.

    `decoder_input_tokens` are the targets shifted right (0 first). Rows may outnumber the
    encoder rows by a factor r: decoder rows `i*r .. i*r + r-1` read encoder row `i` (beams,
    ranked candidates); packing is then not allowed.

    Decode mode (`decode=True`, apply with `mutable=["cache"]`): the first call, without a
    cache, allocates it for `decoder_input_tokens.shape[1]` positions and stores the
    cross-attention keys/values (its logits are those of a normal pass, unused: under jit
    XLA drops them); each later call feeds one token per row `[batch, 1]` at the next
    position and returns its logits `[batch, 1, vocab]`.

    Args:
      encoded: `[encoder_batch, input_len, emb_dim]` from `encode`.
      encoder_input_tokens: `[encoder_batch, input_len]`, for the padding mask.
      decoder_input_tokens: `[batch, target_len]`.
      encoder_segment_ids: packing segment ids of the inputs, optional.
      decoder_segment_ids: packing segment ids of the targets, given with the above.
      decoder_positions: unused (see module docstring).
      enable_dropout: training mode.
      decode: incremental decoding with the cache.
    """
    del decoder_positions
    if decode and (encoder_segment_ids is not None or decoder_segment_ids is not None):
      raise ValueError("packed inputs cannot be decoded incrementally")
    if (encoder_segment_ids is None) != (decoder_segment_ids is None):
      raise ValueError("give both encoder_segment_ids and decoder_segment_ids, or neither")
    encoder_valid = encoder_input_tokens > 0
    length = decoder_input_tokens.shape[1]
    if decoder_segment_ids is not None:
      decoder_valid = decoder_segment_ids > 0
      cross_mask = layers.make_padding_and_segment_mask(
        decoder_valid, encoder_valid, decoder_segment_ids, encoder_segment_ids
      )
      self_mask = layers.combine_masks(
        layers.make_causal_mask(length),
        layers.make_padding_and_segment_mask(
          decoder_valid, decoder_valid, decoder_segment_ids, decoder_segment_ids
        ),
      )
    else:
      # Causal attention never reaches trailing decoder padding, so only the encoder side
      # needs a padding mask: [encoder_batch, 1, 1, input_len].
      cross_mask = encoder_valid[:, None, None, :]
      self_mask = layers.make_causal_mask(length)
    return self.decoder(
      encoded,
      decoder_input_tokens,
      self_mask,
      cross_mask,
      deterministic=not enable_dropout,
      decode=decode,
    )

  def __call__(
    self,
    encoder_input_tokens,
    decoder_input_tokens,
    encoder_segment_ids=None,
    decoder_segment_ids=None,
    encoder_positions=None,
    decoder_positions=None,
    enable_dropout=True,
  ):
    """Teacher-forced logits `[batch, target_len, vocab]` (float32).

    Args:
      encoder_input_tokens: `[batch, input_len]`, 0 = padding.
      decoder_input_tokens: `[batch, target_len]`, targets shifted right.
      encoder_segment_ids: packing segment ids of the inputs, optional.
      decoder_segment_ids: packing segment ids of the targets, optional.
      encoder_positions: unused (see module docstring).
      decoder_positions: unused.
      enable_dropout: training mode.
    """
    del encoder_positions
    encoded = self.encode(encoder_input_tokens, encoder_segment_ids, enable_dropout)
    return self.decode(
      encoded,
      encoder_input_tokens,
      decoder_input_tokens,
      encoder_segment_ids,
      decoder_segment_ids,
      decoder_positions,
      enable_dropout=enable_dropout,
    )
