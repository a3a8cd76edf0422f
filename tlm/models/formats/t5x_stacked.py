"""T5X parameter trees of the scalable layouts rewritten to the names of T5X's t5 example.

tlm's parameter names are those of `t5x/examples/t5/network.py`: `encoder/layers_N/...`,
2-D kernels (`joined_kv`), `relpos_bias` per stack or (`relpos_bias_per_layer`) per layer. Two
other T5X layouts hold the same model differently:

- layers stacked along an axis (`scan_layers=True` in `t5x/examples/scalable_t5/network.py`,
  and flaxformer's scanned T5): `scan_with_axes(..., name="encoder")` inside the `encoder`
  module gives `encoder/encoder/<layer param>` with the layers along `param_scan_axis`
  (default 1), e.g. `pre_attention_layer_norm/scale` [embed, layers] and
  `attention/query/kernel` [embed, layers, heads, kv];
- 3-D attention kernels (scalable_t5's `DenseGeneral` keeps `features=(heads, kv)`): query,
  key and value [embed, heads, kv], out [heads, kv, embed], which are the 2-D kernels
  reshaped (C order: heads major, as `joined_kv`).

`unstack` slices stacked arrays into `layers_N` and reshapes 3-D kernels. Scalable T5 (and
flaxformer, which refuses shared biases with scanned layers) gives each layer its own
relative-position table, `<stack>/<stack>/relpos_bias/rel_embedding` [heads, layers, buckets]
(T5X's `RelativePositionBiases` inside the scanned layer); unstacked it is
`<stack>/layers_N/relpos_bias/rel_embedding`, the name scalable T5 gives it unscanned and
tlm's T5 with `relpos_bias_per_layer` (which `param_convert.infer_t5x_config` infers from it).
"""

import re

import numpy as np

from tlm.errors import CheckpointError

# The first layer norm of each stack's layers: [embed] per layer, which locates the layer axis.
_FIRST_NORM = {
  "encoder": "pre_attention_layer_norm/scale",
  "decoder": "pre_self_attention_layer_norm/scale",
}
_KERNEL_3D = re.compile(
  r"^(encoder|decoder)/layers_\d+/(attention|self_attention|encoder_decoder_attention)/"
  r"(query|key|value|out)/kernel$"
)
# T5X's `param_scan_axis` default (scalable_t5 network.py; flaxformer `scan_axis`).
DEFAULT_SCAN_AXIS = 1


def _scan_axis(tensors: dict, stack: str, source: str) -> tuple[int, int]:
  """(layer axis, number of layers) of a stacked stack, from its first layer norm."""
  norm = tensors.get(f"{stack}/{stack}/{_FIRST_NORM[stack]}")
  embedding = tensors.get("token_embedder/embedding")
  if norm is None or embedding is None or norm.ndim != 2 or embedding.ndim != 2:
    raise CheckpointError(
      f"{source}: stacked {stack} layers without a 2-D {stack}/{stack}/{_FIRST_NORM[stack]} "
      "and token_embedder/embedding"
    )
  emb = embedding.shape[1]
  axes = [axis for axis in (0, 1) if norm.shape[1 - axis] == emb]
  if not axes:
    raise CheckpointError(
      f"{source}: {stack}/{stack}/{_FIRST_NORM[stack]} of shape {list(norm.shape)} has no "
      f"axis of the embedding width {emb}"
    )
  axis = DEFAULT_SCAN_AXIS if DEFAULT_SCAN_AXIS in axes else axes[0]
  return axis, norm.shape[axis]


def unstack(tensors: dict[str, np.ndarray], source: str) -> dict[str, np.ndarray]:
  """`tensors` with stacked layers sliced and 3-D kernels reshaped (see the module docstring).

  Raises:
    CheckpointError: a stack in both layouts, arrays without the layer axis.
  """
  out = dict(tensors)
  for stack in ("encoder", "decoder"):
    prefix = f"{stack}/{stack}/"
    stacked = [name for name in tensors if name.startswith(prefix)]
    if not stacked:
      continue
    if any(name.startswith(f"{stack}/layers_") for name in tensors):
      raise CheckpointError(f"{source}: {stack} has both stacked ({prefix}) and layers_N params")
    axis, layers = _scan_axis(tensors, stack, source)
    for name in stacked:
      value = out.pop(name)
      if value.ndim <= axis or value.shape[axis] != layers:
        raise CheckpointError(
          f"{source}: stacked {name} of shape {list(value.shape)} has not the {layers} layers "
          f"of {prefix}{_FIRST_NORM[stack]} along axis {axis}"
        )
      rest = name[len(prefix) :]
      for i in range(layers):
        out[f"{stack}/layers_{i}/{rest}"] = np.ascontiguousarray(np.take(value, i, axis=axis))
  for name in list(out):
    match = _KERNEL_3D.match(name)
    if match and out[name].ndim == 3:
      value = out[name]
      joined = value.reshape(value.shape[0] * value.shape[1], value.shape[2])
      out[name] = joined if match.group(3) == "out" else value.reshape(value.shape[0], -1)
  return out
