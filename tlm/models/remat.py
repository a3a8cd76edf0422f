"""Remat policies: what each layer keeps for the backward pass (T5X / MaxText's names).

"none" keeps every activation; "full" keeps only each layer's input and recomputes the layer in
the backward pass (gradient checkpointing); "dots" also keeps the results of the weight
matmuls (dot_generals without batch dimensions, which the attention scores / values einsums
have), recomputing only the cheap elementwise work and attention.

The config layer lists the same names (`tlm.configs.schema.REMAT_POLICIES`) without importing
this module, so that reading a config never loads jax; tests/test_remat.py holds the two equal.
"""

from collections.abc import Callable

import jax
from flax import linen as nn

# Name -> the `jax.checkpoint` policy (which intermediate results are saved). "none" is absent
# from `nn.remat`: the layer is left unwrapped, not wrapped with an everything-saveable policy,
# so the program is the plain one.
POLICIES: dict[str, Callable[..., bool] | None] = {
  "none": None,
  "full": jax.checkpoint_policies.nothing_saveable,
  "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def wrap(layer_cls: type, policy: str, static_argnums: tuple[int, ...]) -> type:
  """`layer_cls` rematerialised under `policy` (a key of POLICIES; unchanged for "none").
  `static_argnums` counts `self`, as `nn.remat` does. ValueError for another name."""
  if policy not in POLICIES:
    raise ValueError(f"remat policy must be one of {', '.join(POLICIES)}, got {policy!r}")
  if policy == "none":
    return layer_cls
  return nn.remat(layer_cls, static_argnums=static_argnums, policy=POLICIES[policy])
