"""The dense projection of every T5 layer: `DenseGeneral` and the matmul it runs.

`DenseGeneral` mirrors T5X's `t5x/examples/t5/layers.py` (bias-free, a 2-D kernel, logical
axis names). Its matmul, `_matmul`, takes a custom VJP on the CPU backend only (see there).
"""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

Array = jax.Array
DType = Any
Initializer = Callable[..., Array]

default_kernel_init = nn.initializers.variance_scaling(1.0, "fan_in", "truncated_normal")


def _matmul(x: Array, kernel: Array) -> Array:
  """`x @ kernel` (`x` `[..., in]`, `kernel` `[in, out]`), the matmul of every dense layer.

  On the CPU backend its kernel gradient is computed as `(dy^T x)^T` (`_matmul_cpu`): plain
  autodiff asks for `x^T dy`, and XLA's CPU backend then materialises `dy` transposed (a
  strided `[out, tokens]` copy fused into the activation gradient), a large share of the CPU
  train step (benchmarks/train.py, `--matmul`, measures it). Elsewhere plain autodiff is used:
  the custom rule was never measured on an accelerator, and it hides the matmuls from remat
  policies and from the compilers' own layout choices. The sums are the same either way
  (tests/test_remat.py, tests/test_hf_parity.py).
  """
  if jax.default_backend() == "cpu":
    return _matmul_cpu(x, kernel)
  return jnp.dot(x, kernel)


@jax.custom_vjp
def _matmul_cpu(x: Array, kernel: Array) -> Array:
  """`x @ kernel` whose kernel gradient is the transpose of the small `[out, in]` `dy^T x`."""
  return jnp.dot(x, kernel)


def _matmul_fwd(x: Array, kernel: Array) -> tuple[Array, tuple[Array, Array]]:
  return jnp.dot(x, kernel), (x, kernel)


def _matmul_bwd(residuals: tuple[Array, Array], dy: Array) -> tuple[Array, Array]:
  x, kernel = residuals
  dx = jnp.dot(dy, kernel.T)
  dkernel_t = jnp.dot(dy.reshape(-1, dy.shape[-1]).T, x.reshape(-1, x.shape[-1]))
  return dx, dkernel_t.T


_matmul_cpu.defvjp(_matmul_fwd, _matmul_bwd)


def _canonicalize(x: int | Sequence[int]) -> tuple[int, ...]:
  return tuple(x) if isinstance(x, Sequence) else (x,)


class DenseGeneral(nn.Module):
  """A bias-free linear map over the trailing axes, with a 2-D kernel.

  The kernel is stored as `[prod(input axes), prod(features)]` (T5X's layout, so checkpoints
  map without reshapes) and reshaped at use.

  Attributes:
    features: output feature dims, e.g. `(num_heads, head_dim)` for a query projection.
    axis: the trailing input axes to contract, e.g. `(-2, -1)` for the attention output.
    dtype: computation dtype; the kernel is stored in float32.
    kernel_init: initialiser of the 2-D kernel.
    kernel_axes: logical axis names of the 2-D kernel.
  """

  features: int | Sequence[int]
  axis: int | Sequence[int] = -1
  dtype: DType = jnp.float32
  kernel_init: Initializer = default_kernel_init
  kernel_axes: tuple[str, ...] = ()

  @nn.compact
  def __call__(self, inputs: Array) -> Array:
    features = _canonicalize(self.features)
    axis = tuple(sorted(a % inputs.ndim for a in _canonicalize(self.axis)))
    if axis != tuple(range(inputs.ndim - len(axis), inputs.ndim)):
      raise ValueError(f"DenseGeneral contracts trailing axes only, got {self.axis}")
    in_dims = inputs.shape[axis[0] :]
    kernel = self.param(
      "kernel",
      nn.with_logical_partitioning(self.kernel_init, self.kernel_axes),
      (int(np.prod(in_dims)), int(np.prod(features))),
      jnp.float32,
    )
    kernel = jnp.asarray(kernel, self.dtype)
    # [..., *in_dims] -> [..., prod(in_dims)] @ [prod(in_dims), prod(features)]
    x = jnp.asarray(inputs, self.dtype).reshape(inputs.shape[: axis[0]] + (kernel.shape[0],))
    y = _matmul(x, kernel)
    return y.reshape(inputs.shape[: axis[0]] + features)
