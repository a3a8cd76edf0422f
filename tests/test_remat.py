"""What the backward pass stores and how it differentiates the kernel matmul: the remat
policies (`model.remat=none|full|dots`) and `dense._matmul`'s CPU-only custom VJP change the
program, never the gradients."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import random_params
from tlm import configs
from tlm.errors import ConfigError
from tlm.models import dense, remat, t5

X, Y = jnp.asarray([[5, 9, 3, 1, 0, 0]], jnp.int32), jnp.asarray([[7, 2, 1, 0]], jnp.int32)


def _grad_and_jaxpr(cfg):
  params = {"params": random_params(cfg, seed=1)}

  def loss(p):
    return jnp.mean(t5.Transformer(cfg).apply(p, X, Y, enable_dropout=False) ** 2)

  return jax.grad(loss)(params), str(jax.make_jaxpr(jax.grad(loss))(params))


def test_remat_policies_keep_the_gradients():
  cfg = t5.get_preset("tiny-v1_1", vocab_size=128)
  ref, jaxpr = _grad_and_jaxpr(cfg)
  assert cfg.remat == "none" and "checkpoint[" not in jaxpr and "remat2[" not in jaxpr
  for policy in ("full", "dots"):
    grads, jaxpr = _grad_and_jaxpr(dataclasses.replace(cfg, remat=policy))
    # One rematerialised block per layer (2 encoder + 2 decoder) ...
    assert jaxpr.count("checkpoint[") + jaxpr.count("remat2[") == 4, policy
    # ... saving the weight matmuls only under "dots".
    assert ("DotsSaveable(only_if_no_batch_dims=True)" in jaxpr) == (policy == "dots"), policy
    # Recomputation may fuse differently: float32 rounding of each array's scale, nothing more.
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(ref)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * float(np.abs(b).max()))


def test_remat_values():
  cfg = t5.get_preset("tiny")
  with pytest.raises(ConfigError, match="T5Config.remat must be one of none, full, dots"):
    dataclasses.replace(cfg, remat="some")
  with pytest.raises(ConfigError, match="T5Config.remat must be one of none, full, dots"):
    dataclasses.replace(cfg, remat=True)  # no boolean form: the policies are named
  with pytest.raises(ValueError, match="remat policy must be one of none, full, dots"):
    remat.wrap(t5.EncoderLayer, "some", static_argnums=(4,))


def test_config_names_the_models_remat_policies():
  # The config layer lists the names without importing the model (no jax below the models):
  # a policy added to the model's table, or removed, must be added or removed there too.
  assert configs.REMAT_POLICIES == tuple(remat.POLICIES)
  assert configs.get("tiny_temporal").model.remat in remat.POLICIES


def test_custom_matmul_gradient_only_on_cpu(monkeypatch):
  rs = np.random.RandomState(0)
  x, kernel = jnp.asarray(rs.randn(2, 3, 8), jnp.float32), jnp.asarray(rs.randn(8, 5), jnp.float32)

  def grads(backend):
    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    fn = jax.grad(lambda x, k: jnp.sum(jnp.sin(dense._matmul(x, k))), argnums=(0, 1))
    # A fresh function each time: jax caches traces by function.
    forward = jax.make_jaxpr(lambda a, b: dense._matmul(a, b))(x, kernel)
    return fn(x, kernel), str(forward)

  (dx_cpu, dk_cpu), cpu = grads("cpu")
  (dx_gpu, dk_gpu), gpu = grads("gpu")
  assert "custom_vjp_call" in cpu and "custom_vjp_call" not in gpu
  # The two rules sum the same products in another order: an entry that nearly cancels (a
  # gradient of 2e-3 among entries of 1) differs by float32 rounding of the sum's terms,
  # hence a tolerance on the arrays' scale as well as on each entry.
  for a, b in ((dx_cpu, dx_gpu), (dk_cpu, dk_gpu)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6 * float(np.abs(b).max()))
  np.testing.assert_allclose(dk_gpu, np.einsum("bti,bto->io", x, np.cos(x @ kernel)), rtol=1e-5)
