"""Checkpoint directories: `load_checkpoint` detects a checkpoint's layout, reads its files and
converts them to tlm params; `save_hf`, `save_tlm` and `save_t5x` write the layouts tlm exports.

Layouts read by `load_checkpoint` (docs/ARCHITECTURE.md): an HF directory (`config.json` +
`model.safetensors` | `pytorch_model.bin` | `flax_model.msgpack`, or their sharded `.index.json`
forms), a Mesh-TF checkpoint prefix (`model.ckpt-1000000`, or a directory with a TF
`checkpoint` file), a T5X checkpoint (a model directory, newest `checkpoint_STEP`, or one
`checkpoint_STEP`: the legacy msgpack + zarr layout or the Orbax `state/` one; config inferred
from the shapes, scanned layers unstacked), a tlm model directory (`model_config.json` +
`params/`) and a tlm training workdir (`model_config.json` + `checkpoints/<step>/params`,
newest step). Each may be local or on an object store (`gs://...`): files are read through
`tlm.storage`, by ranged reads where the format allows. Every file is read as possibly
hostile: file names taken from an index (`weight_map`), a TF `checkpoint` state file or a T5X
tensorstore spec must stay inside the checkpoint directory (`safe_read.confined_path`), JSON and
msgpack are size- and depth-limited, and configs must be within `CHECKPOINT_LIMITS`.
tlm's own checkpoints (a workdir's steps, a model directory) are checked against their checksum
manifests (`tlm.checksums`) before anything is restored: a workdir falls back to its newest
intact step with a warning, a named step or model directory that fails is a one-line error.

The name maps are param_map.py (`PARAM_MAP`, `FORMATS`, `HOOKS`) and their strict application
param_convert.py; the conversions are re-exported here (`checkpoints.params_to_hf`,
`checkpoints.param_shapes`, ...), where their callers have always found them.
"""

import os
import re

import numpy as np

from tlm import checksums, safe_read, storage
from tlm.console import warn
from tlm.errors import CheckpointError, ConfigError
from tlm.files import atomic_output_dir, atomic_output_file, write_json
from tlm.models import t5
from tlm.models.formats import guards, t5x
from tlm.models.formats.hf_config import (
  check_checkpoint_limits,
  from_hf_config,
  to_hf_config,
)
from tlm.models.param_convert import check_params as check_params
from tlm.models.param_convert import flatten as flatten
from tlm.models.param_convert import infer_mesh_tf_config as infer_mesh_tf_config
from tlm.models.param_convert import infer_t5x_config as infer_t5x_config
from tlm.models.param_convert import params_from_hf as params_from_hf
from tlm.models.param_convert import params_from_mesh_tf as params_from_mesh_tf
from tlm.models.param_convert import params_from_t5x as params_from_t5x
from tlm.models.param_convert import params_to_hf as params_to_hf
from tlm.models.param_convert import unflatten as unflatten
from tlm.models.param_map import MESH_TF_IGNORED
from tlm.models.shapes import param_shapes as param_shapes


def _read_json(path: str) -> dict:
  # size- and depth-limited: see safe_read
  return safe_read.read_json_object(path, guards.MAX_JSON_BYTES, error=CheckpointError)


def _shard_files(index: str, directory: str) -> list[str]:
  """The shard files a sharded HF checkpoint's `*.index.json` names, inside `directory`."""
  weight_map = _read_json(index).get("weight_map")
  if not isinstance(weight_map, dict):
    raise CheckpointError(f"{index}: no 'weight_map' object")
  for name, shard in weight_map.items():
    if not isinstance(shard, str):
      raise CheckpointError(
        f"{index}: weight_map[{safe_read.shown(name)}] is a {type(shard).__name__}, not a file name"
      )
  # Each name is confined to the directory: an index must not make tlm read other files.
  return [safe_read.confined_path(directory, s, index) for s in sorted(set(weight_map.values()))]


# What an HF weights file may hold beyond its parameters: headers, framing and names (a few
# hundred bytes per array).
_HF_SLACK = 64 << 20


def _hf_file_bound(cfg: t5.T5Config) -> int:
  """The most the weights of an HF directory of `cfg` can take (one file, or all its shards
  together): every parameter the config declares in float64, the widest dtype such files
  hold (float32 and bfloat16 are usual), twice over for the copies some hold (an untied
  `lm_head`, the embedding stored once per stack), plus the framing."""
  elements = sum(int(np.prod(s, dtype=object)) for s in param_shapes(cfg).values())
  return 2 * 8 * elements + _HF_SLACK


def _check_hf_sizes(paths: list[str], named: str, bound: int) -> None:
  """Refuses weights larger than the config allows by their size, before any is read: a
  header may declare tensors as large as the file (a sparse file of gigabytes of nothing),
  and the readers allocate what is declared."""
  total = 0
  for path in paths:
    try:
      total += safe_read.regular_size(path)
    except OSError:
      return  # missing or special: the reader names it
  if total > bound:
    raise CheckpointError(
      f"{named}: {total} bytes of weights, more than the parameters config.json declares can "
      f"take ({bound})"
    )


def _read_hf_tensors(
  directory: str, cfg: t5.T5Config | None = None
) -> tuple[dict[str, np.ndarray], str, bool]:
  """(tensors, file named in errors, are-Flax-names) of an HF directory (of config `cfg`,
  which bounds what its weights may take)."""
  from tlm.models.formats import flax_msgpack, safetensors, torch_pickle

  bound = None if cfg is None else _hf_file_bound(cfg)

  def read_flax(path: str) -> dict[str, np.ndarray]:
    return flax_msgpack.read(path) if bound is None else flax_msgpack.read(path, bound)

  for filename, reader, is_flax in (
    ("model.safetensors", safetensors.read, False),
    ("pytorch_model.bin", torch_pickle.read, False),
    ("flax_model.msgpack", read_flax, True),
  ):
    path = storage.join(directory, filename)
    if storage.isfile(path):
      if bound is not None:
        _check_hf_sizes([path], path, bound)
      return reader(path), path, is_flax
    index = path + ".index.json"
    if storage.isfile(index):
      tensors = {}
      shards = _shard_files(index, directory)
      if bound is not None:
        _check_hf_sizes(shards, index, bound)
      for shard in shards:
        part = reader(shard)
        twice = sorted(set(part) & set(tensors))
        if twice:
          raise CheckpointError(f"{shard}: tensor {safe_read.shown(twice[0])} is in two shards")
        tensors.update(part)
      return tensors, index, is_flax
  raise CheckpointError(
    f"{directory}: no model.safetensors, pytorch_model.bin or flax_model.msgpack"
  )


# A TF `checkpoint` state file is a few lines of text protobuf.
_MAX_STATE_FILE = 1 << 20


def _mesh_tf_prefix(path: str) -> str | None:
  if storage.isfile(path + ".index"):
    return path
  state = storage.join(path, "checkpoint")
  if storage.isdir(path) and storage.isfile(state):
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
      relative = _relative_state_prefix(path, prefix)
      if relative is None:
        raise CheckpointError(
          f"{state}: model_checkpoint_path {safe_read.shown(prefix)} is outside this directory; "
          f"pass the checkpoint prefix itself, e.g. "
          f"{storage.join(path, os.path.basename(prefix))}"
        )
      return safe_read.confined_path(path, relative + ".index", state)[: -len(".index")]
  return None


def _relative_state_prefix(path: str, prefix: str) -> str | None:
  """A state file's `model_checkpoint_path` relative to its directory `path`; None if the
  prefix is absolute (a local path or, for a checkpoint on an object store, a URI as TF
  writes on GCS) and outside `path`."""
  if storage.is_remote(path):
    if storage.scheme(prefix) is None:
      return None if os.path.isabs(prefix) else prefix
    root = path.rstrip("/") + "/"
    return prefix[len(root) :] if prefix.startswith(root) else None
  inside = prefix.startswith(os.path.abspath(path) + os.sep)
  if "://" in prefix or (os.path.isabs(prefix) and not inside):
    return None
  return os.path.relpath(prefix, os.path.abspath(path)) if os.path.isabs(prefix) else prefix


def _latest_step_dir(workdir: str) -> str:
  root = storage.join(workdir, "checkpoints")
  names = storage.listdir(root) if storage.isdir(root) else []
  # Complete orbax steps only (in-progress saves live in temporary, non-numeric names).
  steps = [int(d) for d in names if d.isdigit() and storage.isdir(storage.join(root, d, "params"))]
  if not steps:
    raise CheckpointError(f"{workdir}: training workdir without checkpoints/<step>/params")
  # The newest whose params match their checksums (a corrupt one is named in a warning).
  return storage.join(root, str(checksums.newest_good_step(root, steps, ("params",))), "params")


def _verify_model_dir(path: str) -> None:
  """Checks a tlm model directory's `params/` against its manifest, as a step is checked.

  Raises:
    CheckpointError: a file is missing, corrupt or special, or the manifest is unreadable.
  """
  if (reason := checksums.check(path, ("params",))) is not None:
    raise CheckpointError(f"{path}: checkpoint is {reason}")
  if not checksums.has_manifest(path):
    warn(
      f"checkpoint {path} has no {checksums.MANIFEST} (an older tlm wrote it); using it "
      "unverified (convert it again with --mode=convert --format=tlm to add one)"
    )


def _has_steps(path: str) -> bool:
  """Whether `path` is a tlm training workdir by its layout: checkpoints/ holds a step."""
  steps = storage.join(path, "checkpoints")
  return storage.isdir(steps) and any(n.isdigit() for n in storage.listdir(steps))


def read_model_config(config_path: str) -> t5.T5Config:
  """A tlm `model_config.json` (bounded JSON, dimensions within `CHECKPOINT_LIMITS`).

  Raises:
    CheckpointError: naming the file, if it is missing, unreadable or not a model config.
  """
  if not storage.exists(config_path):  # a FIFO or device: safe_read's error names it
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
      `checkpoint` file), a T5X model directory (newest step) or `checkpoint_STEP`
      directory, a tlm model directory, a tlm training workdir (newest step), or one step
      of it (`WORKDIR/checkpoints/STEP`).

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
    cfg = read_model_config(storage.join(workdir, "model_config.json"))
    if (reason := checksums.check(path, ("params",))) is not None:
      raise CheckpointError(f"{path}: checkpoint is {reason}")
    return cfg, _tlm_params(storage.join(path, "params"), cfg)
  # A training workdir also holds a config.json (the experiment config), so the tlm layouts
  # are recognised first: by their model_config.json, whatever it is, or by a saved step. A
  # model_config.json that is missing or a FIFO is then named as the file at fault, rather
  # than the workdir's config.json read as an HF config.
  model_config = storage.join(path, "model_config.json")
  if storage.exists(model_config) or _has_steps(path):
    cfg = read_model_config(model_config)
    params_dir = storage.join(path, "params")
    if storage.isdir(params_dir):  # a tlm model directory (`save_tlm`)
      _verify_model_dir(path)
    else:
      params_dir = _latest_step_dir(path)
    return cfg, _tlm_params(params_dir, cfg)
  if storage.isfile(storage.join(path, "config.json")):
    hf_config = _read_json(storage.join(path, "config.json"))
    try:
      cfg = from_hf_config(hf_config)
    except ConfigError as e:
      raise CheckpointError(f"{storage.join(path, 'config.json')}: {e}") from None
    tensors, source, is_flax = _read_hf_tensors(path, cfg)
    tied = hf_config.get("tie_word_embeddings", True) is not False
    params = params_from_hf(tensors, cfg, tie_word_embeddings=tied, flax=is_flax, source=source)
    return cfg, params
  # Before Mesh-TF: a T5X `checkpoint_STEP` directory also holds a file named `checkpoint`
  # (msgpack, where TF's is text).
  found = t5x.find(path)
  if found is not None:
    return _t5x_checkpoint(*found)
  prefix = _mesh_tf_prefix(path)
  if prefix is not None:
    from tlm.models.formats import tensorbundle

    tensors = tensorbundle.read(prefix)
    shapes = {k: v.shape for k, v in tensors.items() if not MESH_TF_IGNORED.search(k)}
    cfg = infer_mesh_tf_config(shapes, prefix)
    return cfg, params_from_mesh_tf(tensors, cfg, prefix)
  raise CheckpointError(
    f"{path}: not a checkpoint (expected an HF directory with config.json, a Mesh-TF prefix "
    "with .index, a T5X checkpoint_STEP directory or model directory, or a tlm directory "
    "with model_config.json)"
  )


def _t5x_checkpoint(step_dir: str, kind: str) -> tuple[t5.T5Config, dict]:
  """(config inferred from the shapes, params) of a T5X `checkpoint_STEP` directory."""
  from tlm.models.formats import t5x_stacked

  source = storage.join(step_dir, "checkpoint" if kind == "legacy" else t5x.ORBAX_ITEM)
  tensors = t5x_stacked.unstack(t5x.read(step_dir, kind, "target"), source)
  cfg = infer_t5x_config({name: value.shape for name, value in tensors.items()}, source)
  return cfg, params_from_t5x(tensors, cfg, source)


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
  """Writes a tlm model directory: `model_config.json`, `params/` (orbax), `spiece.model` and
  the checksum manifest `tlm_checksums.json` that every load checks (`tlm.checksums`).

  Atomic: the directory appears complete or not at all.
  """
  from tlm.models.formats import orbax_params

  params = unflatten(check_params(params, cfg))
  with atomic_output_dir(directory) as tmp:
    write_json(os.path.join(tmp, "model_config.json"), cfg.to_dict())
    orbax_params.save(os.path.join(tmp, "params"), params)
    _write_spiece(tmp, spiece_model)
    checksums.write_manifest(tmp)  # last: it lists every file above


def save_t5x(
  directory: str,
  cfg: t5.T5Config,
  params: dict,
  spiece_model: bytes | str | None = None,
  step: int = 0,
) -> None:
  """Writes a T5X model directory that T5X's `restore_checkpoint` reads (the legacy layout).

  `checkpoint_STEP/` (msgpack `checkpoint`, version 3, and a gzip zarr directory per
  parameter, float32, as T5X's `Checkpointer.save` writes them; with T5X's initial Adafactor
  state, so that a T5X training run restores it too) and `spiece.model` when given. The specs
  are T5X's local (`file`) ones, on `gs://` too, which every T5X version reads locally and on
  GCS (formats/t5x_zarr.py `spec_for`). Atomic: the directory appears complete or not at all.
  """
  flat = check_params(params, cfg)
  with atomic_output_dir(directory) as tmp:
    t5x.write(tmp, flat, step)
    _write_spiece(tmp, spiece_model)
