"""The name maps between tlm (T5X) parameter names and the HF and Mesh-TF names, as data, with
named transform hooks for both directions.

Mirrors T5X's `t5x/checkpoint_importer.py` (Mesh-TF -> T5X names: no transposes, optimizer
slots and `global_step` skipped) and HF's `load_tf_weights_in_t5` / `modeling_t5.py` (HF
`nn.Linear` weights are `[out, in]`, so HF <-> T5X transposes every kernel and the relative
attention table; the token embedding is `[vocab, embed]` in all three). The maps are data
(`PARAM_MAP`, one column per naming scheme, and `FORMATS`), expanded per layer for a config
by `expand_map`; `HOOKS` names the transforms, each with its inverse for export (MaxText's
layout). How HF's `config.json` maps onto `T5Config` is in formats/hf_config.py; applying
these maps, strictly, is param_convert.py's job.
"""

import re
from collections.abc import Callable

from tlm.models import t5

# name: (import transform, export transform). Both directions of every rule use these.
HOOKS: dict[str, tuple[Callable, Callable]] = {
  "identity": (lambda x: x, lambda x: x),
  # HF nn.Linear [out, in] <-> T5X kernel [in, out]; HF relative table [buckets, heads] <->
  # T5X rel_embedding [heads, buckets].
  "transpose": (lambda x: x.T, lambda x: x.T),
}

# Every tlm parameter with its HF module (tensor name = module + the format's leaf below) and
# its Mesh-TF variable. Placeholders, expanded per config: {s} stack (encoder, decoder), {i}
# layer, {a}/{hf_a} attention projection (query/q, key/k, value/v, out/o), {mlp} MLP kernel
# (wi, wo | wi_0, wi_1, wo), {norm}/{final_norm} alternative Mesh-TF spellings (one present).
PARAM_MAP = (
  ("token_embedder/embedding", "shared", "shared/embedding"),
  (
    "{s}/relpos_bias/rel_embedding",
    "{s}.block.0.layer.0.SelfAttention.relative_attention_bias",
    "{s}/block_000/layer_000/SelfAttention/relative_attention_bias",
  ),
  # `relpos_bias_per_layer` configs: each layer's own table (HF UMT5, where every block's
  # self-attention has one; Mesh TF's `relative_attention_type="bias"`, a variable per layer).
  (
    "{s}/layers_{i}/relpos_bias/rel_embedding",
    "{s}.block.{i}.layer.0.SelfAttention.relative_attention_bias",
    "{s}/block_{i:03d}/layer_000/SelfAttention/relative_attention_bias",
  ),
  ("{s}/{s}_norm/scale", "{s}.final_layer_norm", "{s}/{final_norm}/scale"),
  (
    "encoder/layers_{i}/pre_attention_layer_norm/scale",
    "encoder.block.{i}.layer.0.layer_norm",
    "encoder/block_{i:03d}/layer_000/{norm}/scale",
  ),
  (
    "encoder/layers_{i}/attention/{a}/kernel",
    "encoder.block.{i}.layer.0.SelfAttention.{hf_a}",
    "encoder/block_{i:03d}/layer_000/SelfAttention/{hf_a}",
  ),
  (
    "encoder/layers_{i}/pre_mlp_layer_norm/scale",
    "encoder.block.{i}.layer.1.layer_norm",
    "encoder/block_{i:03d}/layer_001/{norm}/scale",
  ),
  (
    "encoder/layers_{i}/mlp/{mlp}/kernel",
    "encoder.block.{i}.layer.1.DenseReluDense.{mlp}",
    "encoder/block_{i:03d}/layer_001/DenseReluDense/{mlp}/kernel",
  ),
  (
    "decoder/layers_{i}/pre_self_attention_layer_norm/scale",
    "decoder.block.{i}.layer.0.layer_norm",
    "decoder/block_{i:03d}/layer_000/{norm}/scale",
  ),
  (
    "decoder/layers_{i}/self_attention/{a}/kernel",
    "decoder.block.{i}.layer.0.SelfAttention.{hf_a}",
    "decoder/block_{i:03d}/layer_000/SelfAttention/{hf_a}",
  ),
  (
    "decoder/layers_{i}/pre_cross_attention_layer_norm/scale",
    "decoder.block.{i}.layer.1.layer_norm",
    "decoder/block_{i:03d}/layer_001/{norm}/scale",
  ),
  (
    "decoder/layers_{i}/encoder_decoder_attention/{a}/kernel",
    "decoder.block.{i}.layer.1.EncDecAttention.{hf_a}",
    "decoder/block_{i:03d}/layer_001/EncDecAttention/{hf_a}",
  ),
  (
    "decoder/layers_{i}/pre_mlp_layer_norm/scale",
    "decoder.block.{i}.layer.2.layer_norm",
    "decoder/block_{i:03d}/layer_002/{norm}/scale",
  ),
  (
    "decoder/layers_{i}/mlp/{mlp}/kernel",
    "decoder.block.{i}.layer.2.DenseReluDense.{mlp}",
    "decoder/block_{i:03d}/layer_002/DenseReluDense/{mlp}/kernel",
  ),
  ("decoder/logits_dense/kernel", "lm_head", "decoder/logits/kernel"),  # untied configs only
)
_ATTENTION = {"query": "q", "key": "k", "value": "v", "out": "o"}
_ALTERNATIVES = {"norm": ("layer_norm", "rms_norm"), "final_norm": ("final_layer_norm", "rms_norm")}

# Per format: the PARAM_MAP column, the tensor-name leaf and the hook, both by the kind of
# parameter (the last component of its tlm path).
FORMATS = {
  # HF PyTorch / safetensors: every tensor is `.weight`; nn.Linear stores [out, in].
  "hf": (1, {"": ".weight"}, {"kernel": "transpose", "rel_embedding": "transpose"}),
  # HF Flax (`flax_model.msgpack`, joined with "."): nn.Dense kernels are already [in, out];
  # the relative table is an nn.Embed ([buckets, heads]); norms keep `.weight`.
  "hf_flax": (
    1,
    {"kernel": ".kernel", "embedding": ".embedding", "rel_embedding": ".embedding", "": ".weight"},
    {"rel_embedding": "transpose"},
  ),
  # Mesh TensorFlow (public T5 / T5-CBQA checkpoints): T5X's layout, no transposes.
  "mesh_tf": (2, {"": ""}, {}),
}
# HF copies of the shared embedding: optional, but when present they must equal it.
# lm_head.weight is one when the output layer is tied (T5 1.0).
HF_EMBEDDING_ALIASES = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
HF_LM_HEAD = "lm_head.weight"
# Written by old transformers versions, never used by the model (HF ignores it too).
HF_IGNORED = ("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",)
# Optimizer state (Adafactor slots `<var>_slot_vc|vr|v|m`) and the step counter are not
# model parameters.
MESH_TF_IGNORED = re.compile(r"^global_step$|_slot_[a-z]+$")


def _mlp_kernels(cfg: t5.T5Config) -> tuple[str, ...]:
  if len(cfg.mlp_activations) == 1:
    return ("wi", "wo")
  return tuple(f"wi_{i}" for i in range(len(cfg.mlp_activations))) + ("wo",)


def _in_config(target: str, cfg: t5.T5Config) -> bool:
  """Whether a PARAM_MAP row's parameter exists in models of `cfg`."""
  if target == "decoder/logits_dense/kernel":
    return not cfg.logits_via_embedding
  if target == "{s}/relpos_bias/rel_embedding":
    return not cfg.relpos_bias_per_layer
  if target == "{s}/layers_{i}/relpos_bias/rel_embedding":
    return cfg.relpos_bias_per_layer
  return True


def expand_map(fmt: str, cfg: t5.T5Config) -> list[tuple[str, tuple[str, ...], str]]:
  """Concrete `(tlm path, source alternatives, hook)` rules of a format for a config."""
  column, leaves, hooks = FORMATS[fmt]
  layers = {"encoder": cfg.num_encoder_layers, "decoder": cfg.num_decoder_layers}
  spellings = [dict(norm=n, final_norm=f) for n, f in zip(*_ALTERNATIVES.values())]
  rules = []
  for row in PARAM_MAP:
    target, source = row[0], row[column]
    if not _in_config(target, cfg):
      continue
    kind = target.rsplit("/", 1)[1]
    leaf, hook = leaves.get(kind, leaves[""]), hooks.get(kind, "identity")
    for s in ("encoder", "decoder") if "{s}" in target else [None]:
      stack = s or target.split("/")[0]
      for i in range(layers[stack]) if "{i}" in target else [None]:
        for a, hf_a in _ATTENTION.items() if "{a}" in target else [(None, None)]:
          for m in _mlp_kernels(cfg) if "{mlp}" in target else [None]:
            fields = dict(s=s, i=i, a=a, hf_a=hf_a, mlp=m)
            names = (source.format(**fields, **sp) + leaf for sp in spellings)
            rules.append((target.format(**fields), tuple(dict.fromkeys(names)), hook))
  return rules
