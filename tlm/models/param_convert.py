"""Strict conversion of parameter trees: HF or Mesh-TF tensors -> tlm params, tlm params ->
HF tensors, a params tree checked against its config, and a config inferred from a Mesh-TF
checkpoint's shapes. The names come from param_map.py.

Strict: every source tensor is used exactly once (tied-embedding aliases are declared and
must equal what they alias; known-unused keys are declared and skipped), every shape is
checked against the config, and any problem raises one `CheckpointError` listing the
missing, unexpected and mismatched keys. Nothing is re-initialised silently.
"""

import re
from collections.abc import Callable

import numpy as np
from flax import traverse_util

from tlm.errors import CheckpointError, ConfigError
from tlm.models import t5
from tlm.models.formats.hf_config import check_checkpoint_limits
from tlm.models.param_map import (
  HF_EMBEDDING_ALIASES,
  HF_IGNORED,
  HF_LM_HEAD,
  HOOKS,
  MESH_TF_IGNORED,
  expand_map,
)
from tlm.models.shapes import param_shapes


def flatten(tree) -> list[tuple[str, object]]:
  """`[(path "a/b/c", leaf)]` of nested dicts (boxed flax leaves unboxed)."""
  flat = traverse_util.flatten_dict(tree, sep="/")
  return [(path, getattr(leaf, "value", leaf)) for path, leaf in flat.items()]


def unflatten(flat: dict[str, object]) -> dict:
  """Nested dicts from `{path "a/b/c": leaf}`."""
  return traverse_util.unflatten_dict(flat, sep="/")


def _error_list(label: str, items: list[str], limit: int = 12) -> str:
  shown = ", ".join(items[:limit])
  more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
  return f"{label} ({len(items)}): {shown}{more}"


class _Matcher:
  """Takes source tensors by name, recording which were used and what went wrong."""

  def __init__(self, tensors: dict[str, np.ndarray], source: str):
    self.tensors, self.source = tensors, source
    self.used: set[str] = set()
    self.missing: list[str] = []
    self.mismatched: list[str] = []

  def take(self, alternatives: tuple[str, ...]) -> tuple[str, np.ndarray] | None:
    present = [s for s in alternatives if s in self.tensors]
    if not present:
      self.missing.append(" | ".join(alternatives))
      return None
    if len(present) > 1:
      self.mismatched.append(f"{' and '.join(present)} (both present, one expected)")
    name = present[0]
    if name in self.used:
      self.mismatched.append(f"{name} (used twice)")
    self.used.add(name)
    return name, self.tensors[name]

  def check_alias(self, alias: str, of: str) -> None:
    """An optional copy of tensor `of`: if present it must be equal to it."""
    if alias not in self.tensors:
      return
    self.used.add(alias)
    a, b = self.tensors[alias], self.tensors.get(of)
    if b is None or a.shape != b.shape or not np.array_equal(a, b):
      self.mismatched.append(f"{alias} (must equal {of}, as a tied copy of it)")

  def raise_if_bad(self, ignored: Callable[[str], bool] = lambda name: False) -> None:
    unexpected = sorted(k for k in self.tensors if k not in self.used and not ignored(k))
    problems = [
      _error_list(label, items)
      for label, items in (
        ("missing", self.missing),
        ("unexpected", unexpected),
        ("mismatched", self.mismatched),
      )
      if items
    ]
    if problems:
      raise CheckpointError(f"{self.source}: does not match the model: {'; '.join(problems)}")


def _apply_rules(matcher: _Matcher, rules, cfg: t5.T5Config) -> dict:
  shapes = param_shapes(cfg)
  flat = {}
  for target, sources, hook in rules:
    found = matcher.take(sources)
    if found is None:
      continue
    name, value = found
    expected = HOOKS[hook][1](np.broadcast_to(np.float32(0), shapes[target])).shape
    if value.shape != expected:
      matcher.mismatched.append(f"{name} (shape {list(value.shape)}, expected {list(expected)})")
      continue
    value = np.asarray(HOOKS[hook][0](value), dtype=np.float32)
    flat[target] = value
  return flat


def params_from_hf(
  tensors: dict[str, np.ndarray],
  cfg: t5.T5Config,
  tie_word_embeddings: bool = True,
  flax: bool = False,
  source: str = "HF checkpoint",
) -> dict:
  """tlm params (float32 numpy) from HF tensors, strictly.

  Args:
    tensors: `{HF name: array}` (PyTorch names, or HF Flax names joined with ".").
    cfg: the config (`from_hf_config` of the checkpoint's config.json).
    tie_word_embeddings: config.json's flag. When the output layer is untied in `cfg`
      (unscaled logits) but tied in HF (transformers >= 5 ties T5 1.1 unless the checkpoint
      has its own `lm_head`), `logits_dense` is the transposed embedding.
    flax: the names are HF Flax's (`flax_model.msgpack`).
    source: what to name in errors (the file).

  Returns:
    The nested "params" tree.

  Raises:
    CheckpointError: listing missing, unexpected and mismatched tensors.
  """
  matcher = _Matcher(tensors, source)
  rules = expand_map("hf_flax" if flax else "hf", cfg)
  lm_head = "lm_head.kernel" if flax else HF_LM_HEAD
  embedding = "shared.embedding" if flax else "shared.weight"
  if not cfg.logits_via_embedding and tie_word_embeddings and lm_head not in tensors:
    # Tied in HF, so the output kernel is the embedding transposed (HF Flax: attend()).
    rules = [r for r in rules if r[0] != "decoder/logits_dense/kernel"]
    flat = _apply_rules(matcher, rules, cfg)
    if embedding in tensors:
      flat["decoder/logits_dense/kernel"] = np.asarray(tensors[embedding], np.float32).T
  else:
    flat = _apply_rules(matcher, rules, cfg)
  if not flax:  # HF Flax stores neither the copies nor a tied lm_head
    for alias in HF_EMBEDDING_ALIASES:
      matcher.check_alias(alias, embedding)
    if cfg.logits_via_embedding:
      matcher.check_alias(HF_LM_HEAD, embedding)
  matcher.raise_if_bad(ignored=lambda name: name in HF_IGNORED)
  return unflatten(flat)


def check_params(params: dict, cfg: t5.T5Config, source: str = "params") -> dict[str, np.ndarray]:
  """Flat float32 `{tlm path: array}` of a params tree, which must match the config exactly.

  Raises:
    CheckpointError: listing missing, unexpected and wrongly shaped parameters of `source`.
  """
  matcher = _Matcher(dict(flatten(params)), source)
  flat = _apply_rules(matcher, [(path, (path,), "identity") for path in param_shapes(cfg)], cfg)
  matcher.raise_if_bad()
  return flat


def params_to_hf(params: dict, cfg: t5.T5Config) -> dict[str, np.ndarray]:
  """HF PyTorch-named tensors of tlm params (what transformers' `save_pretrained` writes).

  The tied embedding is written once (`shared.weight`), as transformers does.
  """
  flat = check_params(params, cfg)
  return {
    sources[0]: np.ascontiguousarray(HOOKS[hook][1](flat[target]))
    for target, sources, hook in expand_map("hf", cfg)
  }


def infer_mesh_tf_config(shapes: dict[str, tuple[int, ...]], source: str = "checkpoint"):
  """A T5Config from the variable names and shapes of a Mesh-TF T5 checkpoint.

  Family: `DenseReluDense/wi` -> T5 1.0 (ReLU), `wi_0`/`wi_1` -> 1.1 (gated GELU); a
  `decoder/logits/kernel` means an untied (unscaled) output layer; a relative-position table in
  `block_001` too means one per layer (`relpos_bias_per_layer`). The relative-position
  maximum distance (128), epsilon and dropout are not stored and take T5's values.

  Raises:
    CheckpointError: if the names are not those of a T5 checkpoint.
  """

  def shape(name):  # every variable read here is a matrix
    if name not in shapes:
      raise CheckpointError(f"{source}: not a Mesh-TF T5 checkpoint (no variable {name})")
    if len(shapes[name]) != 2:
      raise CheckpointError(f"{source}: variable {name} has shape {list(shapes[name])}, not 2-D")
    return shapes[name]

  def num_blocks(stack):
    blocks = {m.group(1) for k in shapes if (m := re.match(rf"{stack}/block_(\d+)/", k))}
    return len(blocks)

  vocab, emb = shape("shared/embedding")
  heads, buckets = shape("encoder/block_000/layer_000/SelfAttention/relative_attention_bias")
  # relative_attention_type="bias": a table in every block, not only the first.
  per_layer = "encoder/block_001/layer_000/SelfAttention/relative_attention_bias" in shapes
  joined = shape("encoder/block_000/layer_000/SelfAttention/q")[1]
  mlp_prefix = "encoder/block_000/layer_001/DenseReluDense/"
  if mlp_prefix + "wi/kernel" in shapes:
    activations, mlp_dim = ("relu",), shape(mlp_prefix + "wi/kernel")[1]
  else:
    activations, mlp_dim = ("gelu", "linear"), shape(mlp_prefix + "wi_0/kernel")[1]
  try:
    cfg = t5.T5Config(
      vocab_size=vocab,
      emb_dim=emb,
      num_heads=heads,
      num_encoder_layers=num_blocks("encoder"),
      num_decoder_layers=num_blocks("decoder"),
      head_dim=joined // heads if heads else 0,  # 0: refused by T5Config
      mlp_dim=mlp_dim,
      mlp_activations=activations,
      logits_via_embedding="decoder/logits/kernel" not in shapes,
      relative_attention_num_buckets=buckets,
      relpos_bias_per_layer=per_layer,
    )
    return check_checkpoint_limits(cfg)
  except ConfigError as e:
    raise CheckpointError(f"{source}: cannot infer the model config ({e})") from None


def params_from_mesh_tf(
  tensors: dict[str, np.ndarray], cfg: t5.T5Config, source: str = "Mesh-TF checkpoint"
) -> dict:
  """tlm params from Mesh-TF variables (slots and `global_step` skipped), strictly."""
  matcher = _Matcher(tensors, source)
  flat = _apply_rules(matcher, expand_map("mesh_tf", cfg), cfg)
  matcher.raise_if_bad(ignored=lambda name: bool(MESH_TF_IGNORED.search(name)))
  return unflatten(flat)


_LAYER_RELPOS = re.compile(r"^(encoder|decoder)/layers_\d+/relpos_bias/rel_embedding$")


def infer_t5x_config(shapes: dict[str, tuple[int, ...]], source: str = "checkpoint"):
  """A T5Config from the parameter names and shapes of a T5X T5 (t5x/examples/t5 names).

  Heads and buckets come from the relative-position table [heads, buckets] (a table per
  layer, `<stack>/layers_N/relpos_bias`, gives `relpos_bias_per_layer`), the head width
  from the query kernel [embed, heads * head_dim], the family from the MLP: `wi` -> T5 1.0
  (ReLU), `wi_0`/`wi_1` -> T5 1.1 (gated GELU); a `decoder/logits_dense` means an untied
  output layer. T5X stores no config: the relative-position maximum distance (128),
  epsilon and dropout take T5's values.

  Raises:
    CheckpointError: if the names are not those of a T5X T5 or the sizes are out of limits.
  """

  def shape(name, ndim=2):
    if name not in shapes:
      raise CheckpointError(f"{source}: not a T5X T5 checkpoint (no parameter {name})")
    if len(shapes[name]) != ndim:
      raise CheckpointError(f"{source}: {name} has shape {list(shapes[name])}, not {ndim}-D")
    return shapes[name]

  def num_layers(stack):
    return len({m.group(1) for k in shapes if (m := re.match(rf"{stack}/layers_(\d+)/", k))})

  vocab, emb = shape("token_embedder/embedding")
  # A table per layer (scalable T5, flaxformer's scanned T5, umT5; unstacked by
  # formats/t5x_stacked.py), else one per stack.
  per_layer = sorted(name for name in shapes if _LAYER_RELPOS.match(name))
  shared = [f"{s}/relpos_bias/rel_embedding" for s in ("encoder", "decoder")]
  if per_layer and any(name in shapes for name in shared):
    raise CheckpointError(
      f"{source}: relative-position tables both per stack "
      f"({next(n for n in shared if n in shapes)}) and per layer ({per_layer[0]}); a T5 has "
      "one or the other"
    )
  heads, buckets = shape(per_layer[0] if per_layer else "encoder/relpos_bias/rel_embedding")
  joined = shape("encoder/layers_0/attention/query/kernel")[1]
  mlp = "encoder/layers_0/mlp/"
  if mlp + "wi/kernel" in shapes:
    activations, mlp_dim = ("relu",), shape(mlp + "wi/kernel")[1]
  elif mlp + "wi_2/kernel" in shapes:
    raise CheckpointError(f"{source}: an MLP with more than two input kernels is not T5's")
  else:
    activations, mlp_dim = ("gelu", "linear"), shape(mlp + "wi_0/kernel")[1]
  try:
    cfg = t5.T5Config(
      vocab_size=vocab,
      emb_dim=emb,
      num_heads=heads,
      num_encoder_layers=num_layers("encoder"),
      num_decoder_layers=num_layers("decoder"),
      head_dim=joined // heads if heads and joined % heads == 0 else 0,  # 0: refused
      mlp_dim=mlp_dim,
      mlp_activations=activations,
      logits_via_embedding="decoder/logits_dense/kernel" not in shapes,
      relative_attention_num_buckets=buckets,
      relpos_bias_per_layer=bool(per_layer),
    )
    return check_checkpoint_limits(cfg)
  except ConfigError as e:
    raise CheckpointError(f"{source}: cannot infer the model config ({e})") from None


def params_from_t5x(tensors: dict[str, np.ndarray], cfg: t5.T5Config, source: str) -> dict:
  """tlm params (float32) from a T5X `target` tree (tlm's names are T5X's), strictly: every
  parameter present once with its shape, nothing else (bfloat16 widened exactly)."""
  matcher = _Matcher(tensors, source)
  flat = _apply_rules(matcher, [(path, (path,), "identity") for path in param_shapes(cfg)], cfg)
  matcher.raise_if_bad()
  return unflatten(flat)
