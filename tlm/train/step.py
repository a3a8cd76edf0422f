"""The train step: T5X's loss, microbatch accumulation, dropout keys, the sharded jit step.

Mirrors T5X's `models.py` / `trainer.py`:

- Loss (T5X `losses.compute_weighted_cross_entropy`): token cross-entropy weighted by
  `decoder_loss_weights`, plus T5X's auxiliary z-loss `z_loss * log(Z)^2` (1e-4), summed over
  tokens and divided by `train.loss_normalizing_factor`: T5X's "NUM_REAL_TARGET_TOKENS" (0, the
  global batch's real target tokens) or a constant (233472 = 2048 * 114, T5X's advice when
  finetuning checkpoints pre-trained in Mesh TensorFlow, as the paper's are). Adafactor is
  nearly invariant to this scale; the logged `loss` is always per real target token.
- Microbatching: the global batch is split into `train.microbatches` interleaved parts (rows m,
  m + M, ..., so every device keeps its own rows) whose summed gradients are accumulated in a
  `lax.scan` before one normalisation and one update: batch 2048 fits any memory, and the
  result does not depend on M beyond float rounding (and the dropout masks).
- Dropout keys: `fold_in(seed_key(train.seed), step)` (and the microbatch index), so a resumed run
  draws the same masks as an uninterrupted one.
- One jit-compiled step, lowered and compiled ahead of time on the mesh with input/output
  shardings and the state donated.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn
from jax.sharding import NamedSharding, PartitionSpec

from tlm.models.t5 import Transformer
from tlm.sharding import partitioning
from tlm.train.optim import Adafactor
from tlm.train.state import TrainState, seed_key

SUMS = ("loss", "z_loss", "weight", "correct")


def loss_sums(logits: jax.Array, targets: jax.Array, weights: jax.Array, z_loss: float) -> dict:
  """Weighted sums of T5X's loss terms over all tokens.

  Args:
    logits: `[batch, length, vocab]` float32.
    targets: `[batch, length]` token ids.
    weights: `[batch, length]` loss weights (0 on padding).
    z_loss: coefficient of log(Z)^2.

  Returns:
    {"loss": sum(w * (xent + z)), "z_loss": sum(w * z), "weight": sum(w),
     "correct": sum(w * [argmax == target])}.
  """
  logits = logits.astype(jnp.float32)
  log_z = jax.nn.logsumexp(logits, axis=-1)
  target_logit = jnp.take_along_axis(logits, targets[..., None].astype(jnp.int32), -1)[..., 0]
  z_term = z_loss * jnp.square(log_z)
  weights = weights.astype(jnp.float32)
  correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
  return {
    "loss": jnp.sum((log_z - target_logit + z_term) * weights),
    "z_loss": jnp.sum(z_term * weights),
    "weight": jnp.sum(weights),
    "correct": jnp.sum(correct * weights),
  }


def _logits(model: Transformer, params, batch, enable_dropout: bool, rng=None):
  return model.apply(
    {"params": params},
    batch["encoder_input_tokens"],
    batch["decoder_input_tokens"],
    batch["encoder_segment_ids"],
    batch["decoder_segment_ids"],
    batch["encoder_positions"],
    batch["decoder_positions"],
    enable_dropout=enable_dropout,
    rngs={"dropout": rng} if enable_dropout else None,
  )


def make_train_step(
  model: Transformer,
  optimizer: Adafactor,
  *,
  microbatches: int = 1,
  z_loss: float = 1e-4,
  loss_normalizing_factor: float = 0.0,
  seed: int = 0,
) -> Callable[[TrainState, dict], tuple[TrainState, dict]]:
  """The (unjitted) train step: (state, global batch) -> (new state, metric sums)."""
  dropout = model.config.dropout_rate > 0

  def loss_fn(params, batch, rng):
    sums = loss_sums(
      _logits(model, params, batch, dropout, rng),
      batch["decoder_target_tokens"],
      batch["decoder_loss_weights"],
      z_loss,
    )
    return sums["loss"], sums

  grad_fn = jax.grad(loss_fn, has_aux=True)

  def step(state: TrainState, batch: dict) -> tuple[TrainState, dict]:
    rng = jax.random.fold_in(seed_key(seed), state.step)
    if microbatches == 1:
      grads, sums = grad_fn(state.params, batch, rng)
    else:

      def split(x):
        # [B, L] -> [M, B / M, L] with microbatch m = rows m, m + M, ...: each device's rows
        # stay on it ("batch", i.e. the data axis, shards the second dim).
        x = x.reshape((x.shape[0] // microbatches, microbatches) + x.shape[1:]).swapaxes(0, 1)
        return nn.with_logical_constraint(x, (None, "batch") + (None,) * (x.ndim - 2))

      def body(acc, xs):
        index, micro = xs
        g, s = grad_fn(state.params, micro, jax.random.fold_in(rng, index))
        return jax.tree.map(jnp.add, acc, (g, s)), None

      zeros = (
        jax.tree.map(jnp.zeros_like, state.params),
        {k: jnp.zeros((), jnp.float32) for k in SUMS},
      )
      parts = (jnp.arange(microbatches), jax.tree.map(split, batch))
      (grads, sums), _ = jax.lax.scan(body, zeros, parts)
    if loss_normalizing_factor > 0:
      denominator = jnp.float32(loss_normalizing_factor)
    else:
      denominator = jnp.maximum(sums["weight"], 1.0)
    grads = jax.tree.map(lambda g: g / denominator, grads)
    params, opt_state = optimizer.update(grads, state.opt_state, state.params)
    metrics = dict(sums)
    metrics["grad_norm"] = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grads)))
    metrics["learning_rate"] = optimizer.learning_rate(state.step)
    metrics["tokens"] = jnp.sum(batch["encoder_segment_ids"] > 0) + jnp.sum(
      batch["decoder_segment_ids"] > 0
    )
    return TrainState(state.step + 1, params, opt_state), metrics

  return step


def make_eval_step(model: Transformer, z_loss: float = 1e-4) -> Callable[[Any, dict], dict]:
  """(params, global batch) -> loss sums without dropout."""

  def step(params, batch):
    logits = _logits(model, params, batch, enable_dropout=False)
    return loss_sums(logits, batch["decoder_target_tokens"], batch["decoder_loss_weights"], z_loss)

  return step


def configured_train_step(model: Transformer, optimizer, tc):
  """`make_train_step` with a TrainConfig's settings (the trainer and the dry run share it)."""
  return make_train_step(
    model,
    optimizer,
    microbatches=tc.microbatches,
    z_loss=tc.z_loss,
    loss_normalizing_factor=tc.loss_normalizing_factor,
    seed=tc.seed,
  )


def lower_train_step(step_fn, layout, abstract_batch, mesh):
  """Lowers the step for the mesh: state and batch shardings in and out, the state donated."""
  replicated = NamedSharding(mesh, PartitionSpec())
  batch_sharding = NamedSharding(mesh, partitioning.BATCH_SPEC)
  jitted = jax.jit(
    step_fn,
    in_shardings=(layout.shardings, batch_sharding),
    out_shardings=(layout.shardings, replicated),
    donate_argnums=(0,),
  )
  return jitted.lower(layout.abstract, abstract_batch)


def compile_train_step(step_fn, layout, abstract_batch, mesh):
  """Lowers and compiles the step ahead of time (see `lower_train_step`)."""
  return lower_train_step(step_fn, layout, abstract_batch, mesh).compile()
