"""Checkpoint import/export: declarative name maps between tlm (T5X) parameter names and the
HF and Mesh-TF names, with named transform hooks, applied strictly in both directions.

Mirrors T5X's `t5x/checkpoint_importer.py` (Mesh-TF -> T5X names: no transposes, optimizer
slots and `global_step` skipped) and HF's `load_tf_weights_in_t5` / `modeling_t5.py` (HF
`nn.Linear` weights are `[out, in]`, so HF <-> T5X transposes every kernel and the relative
attention table; the token embedding is `[vocab, embed]` in all three). The maps are data
(`PARAM_MAP`, one column per naming scheme, and `FORMATS`), expanded per layer for a config;
`HOOKS` names the transforms, each with its inverse for export (MaxText's layout).

Strict: every source tensor is used exactly once (tied-embedding aliases are declared and
must equal what they alias; known-unused keys are declared and skipped), every shape is
checked against the config, and any problem raises one `CheckpointError` listing the
missing, unexpected and mismatched keys. Nothing is re-initialised silently.

Layouts read by `load_checkpoint` (docs/ARCHITECTURE.md): an HF directory (`config.json` +
`model.safetensors` | `pytorch_model.bin` | `flax_model.msgpack`, or their sharded `.index.json`
forms), a Mesh-TF checkpoint prefix (`model.ckpt-1000000`, or a directory with a TF
`checkpoint` file), a tlm model directory (`model_config.json` + `params/`) and a tlm training
workdir (`model_config.json` + `checkpoints/<step>/params`, newest step). Every file is read
as possibly hostile: file names taken from an index (`weight_map`) or a TF `checkpoint` state
file must stay inside the checkpoint directory (formats/guards.py), JSON is size- and
depth-limited, and configs must be within `CHECKPOINT_LIMITS`.
"""

import functools
import os
import re
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from tlm import checksums, storage
from tlm.errors import CheckpointError, ConfigError
from tlm.files import atomic_output_dir, atomic_output_file, write_json
from tlm.models import t5
from tlm.models.formats import guards
from tlm.models.formats.hf_config import (
  check_checkpoint_limits,
  from_hf_config,
  to_hf_config,
)

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


def expand_map(fmt: str, cfg: t5.T5Config) -> list[tuple[str, tuple[str, ...], str]]:
  """Concrete `(tlm path, source alternatives, hook)` rules of a format for a config."""
  column, leaves, hooks = FORMATS[fmt]
  layers = {"encoder": cfg.num_encoder_layers, "decoder": cfg.num_decoder_layers}
  spellings = [dict(norm=n, final_norm=f) for n, f in zip(*_ALTERNATIVES.values())]
  rules = []
  for row in PARAM_MAP:
    target, source = row[0], row[column]
    if target == "decoder/logits_dense/kernel" and cfg.logits_via_embedding:
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


@functools.lru_cache(maxsize=16)
def param_shapes(cfg: t5.T5Config) -> dict[str, tuple[int, ...]]:
  """Flat `{path: shape}` of a config's parameters, from abstract shapes (nothing allocated)."""
  ones = jax.ShapeDtypeStruct((1, 1), jnp.int32)
  abstract = jax.eval_shape(
    lambda x, y: t5.Transformer(cfg).init(jax.random.key(0), x, y, enable_dropout=False),
    ones,
    ones,
  )
  return {path: tuple(leaf.shape) for path, leaf in flatten(abstract["params"])}


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
  `decoder/logits/kernel` means an untied (unscaled) output layer. The relative-position
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


# --- Files ---------------------------------------------------------------------------------


def _read_json(path: str) -> dict:
  obj = guards.load_json(path)  # size- and depth-limited: see guards
  if not isinstance(obj, dict):
    raise CheckpointError(f"{path}: expected a JSON object")
  return obj


def _shard_files(index: str, directory: str) -> list[str]:
  """The shard files a sharded HF checkpoint's `*.index.json` names, inside `directory`."""
  weight_map = _read_json(index).get("weight_map")
  if not isinstance(weight_map, dict):
    raise CheckpointError(f"{index}: no 'weight_map' object")
  for name, shard in weight_map.items():
    if not isinstance(shard, str):
      raise CheckpointError(
        f"{index}: weight_map[{guards.shown(name)}] is a {type(shard).__name__}, not a file name"
      )
  # Each name is confined to the directory: an index must not make tlm read other files.
  return [guards.confined_path(directory, s, index) for s in sorted(set(weight_map.values()))]


def _read_hf_tensors(directory: str) -> tuple[dict[str, np.ndarray], str, bool]:
  """(tensors, file named in errors, are-Flax-names) of an HF directory."""
  from tlm.models.formats import flax_msgpack, safetensors, torch_pickle

  for filename, reader, is_flax in (
    ("model.safetensors", safetensors.read, False),
    ("pytorch_model.bin", torch_pickle.read, False),
    ("flax_model.msgpack", flax_msgpack.read, True),
  ):
    path = os.path.join(directory, filename)
    if os.path.isfile(path):
      return reader(path), path, is_flax
    index = path + ".index.json"
    if os.path.isfile(index):
      tensors = {}
      for shard in _shard_files(index, directory):
        part = reader(shard)
        twice = sorted(set(part) & set(tensors))
        if twice:
          raise CheckpointError(f"{shard}: tensor {guards.shown(twice[0])} is in two shards")
        tensors.update(part)
      return tensors, index, is_flax
  raise CheckpointError(
    f"{directory}: no model.safetensors, pytorch_model.bin or flax_model.msgpack"
  )


# A TF `checkpoint` state file is a few lines of text protobuf.
_MAX_STATE_FILE = 1 << 20


def _mesh_tf_prefix(path: str) -> str | None:
  if os.path.isfile(path + ".index"):
    return path
  state = os.path.join(path, "checkpoint")
  if os.path.isdir(path) and os.path.isfile(state):
    # TF's `checkpoint` state file: model_checkpoint_path: "model.ckpt-1000000"
    raw = guards.read_bounded(state, _MAX_STATE_FILE, "a TF checkpoint state file")
    try:
      text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
      raise CheckpointError(
        f"{state}: not a TF checkpoint state file (not UTF-8 at byte {e.start})"
      ) from None
    match = re.search(r'^model_checkpoint_path:\s*"([^"]+)"', text, re.MULTILINE)
    if match:
      prefix = match.group(1)
      # TF may have written an absolute path (where the checkpoint was saved). Only files in
      # this directory are opened: a state file must not make tlm read anything else.
      inside = prefix.startswith(os.path.abspath(path) + os.sep)
      if "://" in prefix or (os.path.isabs(prefix) and not inside):
        raise CheckpointError(
          f"{state}: model_checkpoint_path {guards.shown(prefix)} is outside this directory; "
          f"pass the checkpoint prefix itself, e.g. "
          f"{os.path.join(path, os.path.basename(prefix))}"
        )
      relative = os.path.relpath(prefix, os.path.abspath(path)) if os.path.isabs(prefix) else prefix
      return guards.confined_path(path, relative + ".index", state)[: -len(".index")]
  return None


def _latest_step_dir(workdir: str) -> str:
  root = storage.join(workdir, "checkpoints")
  names = storage.listdir(root) if storage.isdir(root) else []
  # Complete orbax steps only (in-progress saves live in temporary, non-numeric names).
  steps = [int(d) for d in names if d.isdigit() and storage.isdir(storage.join(root, d, "params"))]
  if not steps:
    raise CheckpointError(f"{workdir}: training workdir without checkpoints/<step>/params")
  # The newest whose params match their checksums (a corrupt one is named in a warning).
  return storage.join(root, str(checksums.newest_good_step(root, steps, ("params",))), "params")


def _tlm_config(config_path: str) -> t5.T5Config:
  if not storage.isfile(config_path):
    raise CheckpointError(f"{config_path}: no such file (the model config of a tlm workdir)")
  try:
    return check_checkpoint_limits(t5.T5Config.from_dict(_read_json(config_path)))
  except ConfigError as e:
    raise CheckpointError(f"{config_path}: {e}") from None


def _tlm_params(params_dir: str, cfg: t5.T5Config) -> dict:
  from tlm.models.formats import orbax_params

  return unflatten(check_params(orbax_params.restore(params_dir), cfg, params_dir))


def load_checkpoint(path: str) -> tuple[t5.T5Config, dict]:
  """Loads any supported checkpoint as (config, float32 numpy params).

  Args:
    path: an HF directory, a Mesh-TF checkpoint prefix (or a directory with a TF
      `checkpoint` file), a tlm model directory, a tlm training workdir (newest step), or
      one step of it (`WORKDIR/checkpoints/STEP`).

  Returns:
    The T5Config and the nested "params" tree.

  Raises:
    CheckpointError: unknown layout, unreadable file, or names/shapes not matching.
  """
  if not storage.exists(path) and not storage.isfile(path + ".index"):
    raise CheckpointError(f"{path}: no such checkpoint")
  path = path.rstrip(os.sep) or path
  step_root = storage.dirname(storage.abspath(path))
  if step_root.endswith(f"{os.sep}checkpoints") and storage.isdir(storage.join(path, "params")):
    # One step of a training workdir, WORKDIR/checkpoints/STEP: its config is the workdir's.
    workdir = storage.dirname(step_root)
    cfg = _tlm_config(storage.join(workdir, "model_config.json"))
    if (reason := checksums.check(path, ("params",))) is not None:
      raise CheckpointError(f"{path}: checkpoint is {reason}")
    return cfg, _tlm_params(storage.join(path, "params"), cfg)
  # A training workdir also holds a config.json (the experiment config), so the tlm layouts
  # are recognised first, by their model_config.json. (Remote: these tlm layouts only.)
  if storage.isfile(storage.join(path, "model_config.json")):
    cfg = _tlm_config(storage.join(path, "model_config.json"))
    params_dir = storage.join(path, "params")
    if not storage.isdir(params_dir):
      params_dir = _latest_step_dir(path)
    return cfg, _tlm_params(params_dir, cfg)
  if os.path.isfile(os.path.join(path, "config.json")):
    hf_config = _read_json(os.path.join(path, "config.json"))
    try:
      cfg = from_hf_config(hf_config)
    except ConfigError as e:
      raise CheckpointError(f"{os.path.join(path, 'config.json')}: {e}") from None
    tensors, source, is_flax = _read_hf_tensors(path)
    tied = hf_config.get("tie_word_embeddings", True) is not False
    params = params_from_hf(tensors, cfg, tie_word_embeddings=tied, flax=is_flax, source=source)
    return cfg, params
  prefix = _mesh_tf_prefix(path)
  if prefix is not None:
    from tlm.models.formats import tensorbundle

    tensors = tensorbundle.read(prefix)
    shapes = {k: v.shape for k, v in tensors.items() if not MESH_TF_IGNORED.search(k)}
    cfg = infer_mesh_tf_config(shapes, prefix)
    return cfg, params_from_mesh_tf(tensors, cfg, prefix)
  raise CheckpointError(
    f"{path}: not a checkpoint (expected an HF directory with config.json, a Mesh-TF prefix "
    "with .index, or a tlm directory with model_config.json)"
  )


def _write_spiece(directory: str, spiece_model: bytes | str | None) -> None:
  if spiece_model is None:
    return
  if isinstance(spiece_model, str):
    spiece_model = storage.read_bytes(spiece_model)
  with atomic_output_file(storage.join(directory, "spiece.model"), "wb") as f:
    f.write(spiece_model)


def save_hf(
  directory: str, cfg: t5.T5Config, params: dict, spiece_model: bytes | str | None = None
) -> None:
  """Writes an HF directory that transformers loads (T5ForConditionalGeneration).

  `config.json`, `model.safetensors` (float32, PyTorch names) and `spiece.model` when
  given (bytes or a path). Atomic: the directory appears complete or not at all.
  """
  from tlm.models.formats import safetensors

  tensors = params_to_hf(params, cfg)
  with atomic_output_dir(directory) as tmp:
    write_json(os.path.join(tmp, "config.json"), to_hf_config(cfg))
    safetensors.write(os.path.join(tmp, "model.safetensors"), tensors, {"format": "pt"})
    _write_spiece(tmp, spiece_model)


def save_tlm(
  directory: str, cfg: t5.T5Config, params: dict, spiece_model: bytes | str | None = None
) -> None:
  """Writes a tlm model directory: `model_config.json`, `params/` (orbax), `spiece.model`.

  Atomic: the directory appears complete or not at all.
  """
  from tlm.models.formats import orbax_params

  params = unflatten(check_params(params, cfg))
  with atomic_output_dir(directory) as tmp:
    write_json(os.path.join(tmp, "model_config.json"), cfg.to_dict())
    orbax_params.save(os.path.join(tmp, "params"), params)
    _write_spiece(tmp, spiece_model)
