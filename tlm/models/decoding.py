"""Decoding and scoring with a T5 `Transformer`: greedy, temperature / top-k / top-p sampling
and beam search with a KV cache, log-likelihood scoring, ranking of a fixed candidate set, and
teacher-forced logits.

Mirrors T5X's `t5x/decoding.py` (whole search inside one `lax.while_loop`, a
`tokens_to_logits` step over the flax "cache" collection, the brevity penalty
`((5 + length) / 6) ** alpha`, `temperature_sample`'s filtering). The paper decodes TempLAMA
answers greedily (CBQA, section 2) and scores candidate answers for the calibration analyses
(section 3.2), which is what `score` and `rank_candidates` are for; sampling is for users who
bring T5X or HF habits.

Every public function takes `(model_or_config, params, arrays, static lengths...)` and runs
as one jitted program (it can be called inside an outer jit too, with sharded params).
`params` is the plain (or boxed) "params" tree. Outputs follow T5 conventions: generated
tokens exclude the initial 0 (decoder start), include EOS (id 1) and are padded with 0.
"""

import functools
import numbers
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import linen as nn
from jax import lax

from tlm.models.t5 import T5Config, Transformer
from tlm.token_ids import EOS_ID

# Log-probability of impossible beams (finite, as T5X, so sums never become NaN).
NEG_INF = -1.0e7
# T5X's MIN_TEMPERATURE: at or below it sampling is greedy (dividing by it would overflow).
MIN_TEMPERATURE = 1e-4


def _config(model_or_config: Transformer | T5Config) -> T5Config:
  if isinstance(model_or_config, Transformer):
    return model_or_config.config
  if isinstance(model_or_config, T5Config):
    return model_or_config
  raise TypeError(f"expected a Transformer or T5Config, got {type(model_or_config).__name__}")


def _variables(params) -> dict:
  params = nn.meta.unbox(params)
  if set(params) == {"params"}:
    params = params["params"]
  return {"params": params}


def _arguments(model_or_config: Transformer | T5Config, params, *tokens) -> tuple:
  """(config, variables, *int32 token arrays): how the public functions call the jitted ones."""
  return (
    _config(model_or_config),
    _variables(params),
    *(jnp.asarray(t, jnp.int32) for t in tokens),
  )


def shift_right(targets: jax.Array) -> jax.Array:
  """Decoder inputs for `[batch, length]` targets: a 0 (start) then the targets but the last."""
  return jnp.pad(targets, ((0, 0), (1, 0)))[:, :-1]


def brevity_penalty(alpha: float, length: jax.Array) -> jax.Array:
  """T5X/GNMT length penalty `((5 + length) / 6) ** alpha`; scores are log p / penalty."""
  return jnp.power((5.0 + length) / 6.0, alpha)


def _encode(model: Transformer, variables: dict, encoder_input_tokens: jax.Array) -> jax.Array:
  return model.apply(
    variables, encoder_input_tokens, enable_dropout=False, method=Transformer.encode
  )


def _decoder_fns(
  model: Transformer,
  variables: dict,
  encoder_input_tokens: jax.Array,
  decoder_batch: int,
  max_decode_length: int,
) -> tuple[dict, Callable]:
  """Encodes once, builds the decode cache, and returns it with the step function.

  The step maps (`[decoder_batch, 1]` tokens, cache) to (`[decoder_batch, vocab]` float32
  logits, cache). The encoder output is projected to cross-attention keys/values here, once;
  `decoder_batch` may be a multiple of the encoder batch (beams).
  """
  encoded = _encode(model, variables, encoder_input_tokens)
  init_tokens = jnp.zeros((decoder_batch, max_decode_length), jnp.int32)

  def decode(cache_variables: dict, tokens: jax.Array) -> tuple[jax.Array, dict]:
    """(logits, mutated "cache") of the decoder on `tokens`; without a cache it makes one."""
    return model.apply(
      cache_variables,
      encoded,
      encoder_input_tokens,
      tokens,
      enable_dropout=False,
      decode=True,
      mutable=["cache"],
      method=Transformer.decode,
    )

  # The initialising pass only allocates the cache; XLA drops its unused logits.
  _, state = decode(variables, init_tokens)

  def step(tokens: jax.Array, cache: dict) -> tuple[jax.Array, dict]:
    logits, new_state = decode({**variables, "cache": cache}, tokens)
    return logits[:, 0], new_state["cache"]

  return state["cache"], step


def _decode_loop(step, cache, batch: int, max_decode_length: int, eos_id: int, pick: Callable):
  """Decodes one token per row and step until every row has produced EOS (or the length).

  `pick(logits, i)` maps the `[batch, vocab]` logits of step `i` to `[batch]` int32 tokens.
  Rows that have ended emit 0. Returns the `[batch, max_decode_length]` tokens.
  """

  def cond(state):
    i, _, _, done, _ = state
    return (i < max_decode_length) & ~jnp.all(done)

  def body(state):
    i, tokens, cache, done, out = state
    logits, cache = step(tokens, cache)
    next_tokens = jnp.where(done, 0, pick(logits, i))
    out = lax.dynamic_update_slice(out, next_tokens[:, None], (0, i))
    return i + 1, next_tokens[:, None], cache, done | (next_tokens == eos_id), out

  state = (
    jnp.array(0, jnp.int32),
    jnp.zeros((batch, 1), jnp.int32),
    cache,
    jnp.zeros((batch,), bool),
    jnp.zeros((batch, max_decode_length), jnp.int32),
  )
  return lax.while_loop(cond, body, state)[-1]


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def _greedy(cfg, variables, encoder_input_tokens, max_decode_length, eos_id):
  model = Transformer(cfg)
  batch = encoder_input_tokens.shape[0]
  cache, step = _decoder_fns(model, variables, encoder_input_tokens, batch, max_decode_length)

  def argmax(logits, _):
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)

  return _decode_loop(step, cache, batch, max_decode_length, eos_id, argmax)


def greedy_decode(
  model_or_config: Transformer | T5Config,
  params,
  encoder_input_tokens: jax.Array,
  max_decode_length: int,
  eos_id: int = EOS_ID,
) -> jax.Array:
  """Greedy decoding with a KV cache, stopping when every row has produced EOS.

  Args:
    model_or_config: the model or its config.
    params: the "params" tree.
    encoder_input_tokens: `[batch, input_len]` int, 0 = padding.
    max_decode_length: most tokens generated per row (static).
    eos_id: end-of-sequence id.

  Returns:
    `[batch, max_decode_length]` int32 tokens, EOS included, 0 after it.
  """
  return _greedy(
    *_arguments(model_or_config, params, encoder_input_tokens), max_decode_length, eos_id
  )


def filter_logits(logits: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
  """T5X's top-k then top-p masks of `[..., vocab]` (temperature-scaled) logits, -inf outside.

  Top-k keeps the logits >= the k-th largest (ties at the k-th all kept, as T5X's
  `binary_search.topk_mask`); `top_k` 0 keeps all. Top-p then keeps the smallest set of the
  most likely tokens whose probability, renormalised over what top-k kept, sums to at least
  `top_p` (ties at the threshold all kept, as `binary_search.topp_mask`); `top_p` 1 keeps all
  (exactly: a float sum may fall short of 1). The most likely token is always kept.
  """
  vocab = logits.shape[-1]
  ordered = -jnp.sort(-logits, axis=-1)  # descending
  kth = jnp.take(ordered, jnp.clip(top_k, 1, vocab) - 1, axis=-1)[..., None]
  keep = (top_k <= 0) | (logits >= kth)
  ordered = jnp.where((top_k <= 0) | (ordered >= kth), ordered, -jnp.inf)
  # Probabilities in descending order: the mass before token j decides whether j is needed.
  probs = jax.nn.softmax(ordered, axis=-1)
  before = jnp.cumsum(probs, axis=-1) - probs
  needed = jnp.sum(before < top_p, axis=-1, keepdims=True)  # >= 1: before[0] = 0 < top_p
  threshold = jnp.take_along_axis(ordered, needed - 1, axis=-1)
  keep &= (top_p >= 1.0) | (logits >= threshold)
  return jnp.where(keep, logits, -jnp.inf)


def example_keys(seed: jax.Array, example_ids: jax.Array, step: jax.Array) -> jax.Array:
  """`[batch]` keys of one decoding step: `fold_in(fold_in(key(seed), example_id), step)`.

  A row's key depends on nothing else (not its place in the batch, the batch size, the mesh
  or the number of steps the batch runs), so an example draws the same tokens however it is
  batched and sharded.
  """
  base = jax.random.key(seed)
  return jax.vmap(lambda e: jax.random.fold_in(jax.random.fold_in(base, e), step))(example_ids)


@functools.partial(jax.jit, static_argnums=(0, 8, 9))
def _sample(
  cfg,
  variables,
  encoder_input_tokens,
  example_ids,
  seed,
  temperature,
  top_k,
  top_p,
  max_decode_length,
  eos_id,
):
  model = Transformer(cfg)
  batch = encoder_input_tokens.shape[0]
  cache, step = _decoder_fns(model, variables, encoder_input_tokens, batch, max_decode_length)
  filtering = (top_k > 0) | (top_p < 1.0)

  def draw(logits, i):
    scaled = logits.astype(jnp.float32) / temperature
    # The sort of the filters runs only when one is on (the predicate is one scalar).
    scaled = lax.cond(filtering, filter_logits, lambda x, *_: x, scaled, top_k, top_p)
    keys = example_keys(seed, example_ids, i)
    return jax.vmap(jax.random.categorical)(keys, scaled).astype(jnp.int32)

  return _decode_loop(step, cache, batch, max_decode_length, eos_id, draw)


def temperature_sample(
  model_or_config: Transformer | T5Config,
  params,
  encoder_input_tokens: jax.Array,
  max_decode_length: int,
  *,
  seed: int = 0,
  example_ids: jax.Array | None = None,
  temperature: float = 1.0,
  top_k: int = 0,
  top_p: float = 1.0,
  eos_id: int = EOS_ID,
) -> jax.Array:
  """Ancestral sampling with a KV cache, with T5X `temperature_sample`'s semantics.

  Each step draws the next token from `softmax(logits / temperature)` restricted by
  `filter_logits`: top-k first, then top-p over the renormalised top-k probabilities (T5X's
  order; T5X refuses both at once when they are Python numbers, tlm applies both, as T5X does
  with traced values and as HF's warpers do). A temperature at or below `MIN_TEMPERATURE`
  (1e-4) is greedy decoding, whatever `top_k` and `top_p` (T5X: "for zero temperature, we
  always want the greedy output"); this function then returns `greedy_decode`'s tokens. As in
  T5X, decoding starts from token 0 at index 0 (no decoder prompt, T5X's `initial_index`
  unused), a row that has produced EOS emits 0, and the loop stops when every row has ended.
  One sample per input (T5X's `num_decodes` 1); T5X's `topk=1` default is not kept (0 here:
  no cut-off, so that the default is sampling).

  Randomness: row r's token at step t is `jax.random.categorical` (Gumbel-max) with the key
  `fold_in(fold_in(jax.random.key(seed), example_ids[r]), t)` (`example_keys`), where T5X
  splits one key per step over the whole batch. The tokens of an example are thus a function
  of (seed, its example id, its input, the model) alone: the same on any mesh and in any batch
  (the same distribution as T5X's, not T5X's draws).

  Args:
    model_or_config: the model or its config.
    params: the "params" tree.
    encoder_input_tokens: `[batch, input_len]`, 0 = padding.
    max_decode_length: most tokens generated per row (static).
    seed: 0 <= seed < 2**32 (a traced uint32 too: new seeds do not recompile).
    example_ids: `[batch]` int ids that name the rows for their keys (the examples' places in
      the whole input); None is `arange(batch)`.
    temperature: >= 0; the logits are divided by it.
    top_k: >= 0; 0 is no cut-off.
    top_p: in (0, 1]; 1 is no nucleus cut-off.
    eos_id: end-of-sequence id.

  Returns:
    `[batch, max_decode_length]` int32 tokens, EOS included, 0 after it.
  """
  check_sampling(temperature, top_k, top_p)
  if temperature <= MIN_TEMPERATURE:
    return greedy_decode(model_or_config, params, encoder_input_tokens, max_decode_length, eos_id)
  batch = encoder_input_tokens.shape[0]
  if example_ids is None:
    example_ids = jnp.arange(batch, dtype=jnp.int32)
  if getattr(example_ids, "shape", None) != (batch,):
    raise ValueError(f"example_ids must have shape ({batch},), got {jnp.shape(example_ids)}")
  if isinstance(seed, numbers.Integral) and not 0 <= seed < 2**32:
    raise ValueError(f"seed must be in [0, 2**32), got {seed}")
  return _sample(
    *_arguments(model_or_config, params, encoder_input_tokens, example_ids),
    jnp.asarray(seed, jnp.uint32),
    jnp.float32(temperature),
    jnp.int32(top_k),
    jnp.float32(top_p),
    max_decode_length,
    eos_id,
  )


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
  """ValueError unless 0 <= temperature <= float32's largest, 0 <= top_k < 2**31 (it is passed as an
  int32) and 0 < top_p <= 1."""
  float32_max = float(jnp.finfo(jnp.float32).max)  # logits are divided by it in float32
  if not (isinstance(temperature, numbers.Real) and 0 <= temperature <= float32_max):
    raise ValueError(
      f"temperature must be a finite number >= 0 and <= {float32_max:.7g} (float32), "
      f"got {temperature}"
    )
  if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or not 0 <= top_k < 2**31:
    raise ValueError(f"top_k must be an integer in [0, 2**31) (0: no cut-off), got {top_k}")
  if not (isinstance(top_p, numbers.Real) and 0 < top_p <= 1):
    raise ValueError(f"top_p must be in (0, 1] (1: no cut-off), got {top_p}")


def _gather_beams(x: jax.Array, beam_indices: jax.Array) -> jax.Array:
  """`x[b, beam_indices[b, j]]` for `x` `[batch, beams, ...]`, indices `[batch, k]`."""
  return jnp.take_along_axis(x, beam_indices.reshape(beam_indices.shape + (1,) * (x.ndim - 2)), 1)


def _gather_cache(cache: dict, parents: jax.Array, batch: int, beam_size: int) -> dict:
  """Reorders the per-beam self-attention caches after a beam step.

  Only the self-attention keys/values are per beam; cross-attention keys/values are per
  input (shared by its beams) and the step counters are global, so they are not gathered.
  """

  def gather(path, x):
    names = [getattr(k, "key", None) for k in path]
    if "self_attention" not in names:
      return x
    x = x.reshape((batch, beam_size) + x.shape[1:])
    return _gather_beams(x, parents).reshape((batch * beam_size,) + x.shape[2:])

  return jax.tree_util.tree_map_with_path(gather, cache)


@functools.partial(jax.jit, static_argnums=(0, 3, 4, 5, 6))
def _beam(cfg, variables, encoder_input_tokens, max_decode_length, beam_size, alpha, eos_id):
  model = Transformer(cfg)
  batch, k, length = encoder_input_tokens.shape[0], beam_size, max_decode_length
  cache, step = _decoder_fns(model, variables, encoder_input_tokens, batch * k, length)

  def cond(state):
    i, _, live_logp, _, fin_scores, fin_flags, _ = state
    # Log-probs only fall as a beam grows and the penalty grows with length, so no live beam
    # can end above its current log-prob over the largest penalty.
    best_live = jnp.max(live_logp, axis=1) / brevity_penalty(alpha, length)
    worst_finished = jnp.where(jnp.all(fin_flags, axis=1), jnp.min(fin_scores, axis=1), NEG_INF)
    return (i < length) & ~jnp.all(worst_finished > best_live)

  def body(state):
    i, live_seqs, live_logp, fin_seqs, fin_scores, fin_flags, cache = state
    tokens = lax.dynamic_slice_in_dim(live_seqs, jnp.maximum(i - 1, 0), 1, axis=2)
    tokens = jnp.where(i == 0, 0, tokens).reshape(batch * k, 1)
    logits, cache = step(tokens, cache)
    logp = jax.nn.log_softmax(logits).reshape(batch, k, -1) + live_logp[:, :, None]
    vocab = logp.shape[-1]
    # 2k candidates: even if k of them end in EOS, k remain to continue.
    cand_logp, cand_index = lax.top_k(logp.reshape(batch, k * vocab), 2 * k)
    parents, cand_tokens = cand_index // vocab, cand_index % vocab
    cand_seqs = _gather_beams(live_seqs, parents)
    cand_seqs = lax.dynamic_update_slice(cand_seqs, cand_tokens[:, :, None], (0, 0, i))
    is_eos = cand_tokens == eos_id

    # Live: the best k candidates that did not end.
    _, live_pick = lax.top_k(jnp.where(is_eos, -jnp.inf, cand_logp), k)
    new_live_seqs = _gather_beams(cand_seqs, live_pick)
    new_live_logp = jnp.take_along_axis(cand_logp, live_pick, axis=1)
    cache = _gather_cache(cache, jnp.take_along_axis(parents, live_pick, axis=1), batch, k)

    # Finished: EOS candidates ranked among the top k (HF/fairseq rule, which makes beam 1
    # with alpha 0 exactly greedy), scored with the brevity penalty of their length i + 1.
    # (Candidates extending the dead filler beams of the first steps never finish.)
    finishes = is_eos & (jnp.arange(2 * k) < k)[None, :] & (cand_logp > 0.5 * NEG_INF)
    new_scores = jnp.where(finishes, cand_logp / brevity_penalty(alpha, i + 1), NEG_INF)
    all_seqs = jnp.concatenate([fin_seqs, cand_seqs], axis=1)
    all_scores = jnp.concatenate([fin_scores, new_scores], axis=1)
    all_flags = jnp.concatenate([fin_flags, finishes], axis=1)
    _, fin_pick = lax.top_k(jnp.where(all_flags, all_scores, -jnp.inf), k)
    return (
      i + 1,
      new_live_seqs,
      new_live_logp,
      _gather_beams(all_seqs, fin_pick),
      jnp.take_along_axis(all_scores, fin_pick, axis=1),
      jnp.take_along_axis(all_flags, fin_pick, axis=1),
      cache,
    )

  seqs0 = jnp.zeros((batch, k, length), jnp.int32)
  state = (
    jnp.array(0, jnp.int32),
    seqs0,
    jnp.tile(jnp.array([0.0] + [NEG_INF] * (k - 1)), (batch, 1)),  # only beam 0 starts live
    seqs0,
    jnp.full((batch, k), NEG_INF),
    jnp.zeros((batch, k), bool),
    cache,
  )
  _, live_seqs, live_logp, fin_seqs, fin_scores, fin_flags, _ = lax.while_loop(cond, body, state)
  # Rows that ran out of length fill their empty slots with live beams (penalised at full
  # length), ranked after every finished beam.
  live_scores = live_logp / brevity_penalty(alpha, length)
  seqs = jnp.concatenate([fin_seqs, live_seqs], axis=1)
  scores = jnp.concatenate([jnp.where(fin_flags, fin_scores, NEG_INF), live_scores], axis=1)
  flags = jnp.concatenate([fin_flags, jnp.zeros_like(fin_flags)], axis=1)
  # Finished first, then by score (the last key of lexsort is the primary one).
  pick = jnp.lexsort((-scores, ~flags), axis=-1)[:, :k]
  return _gather_beams(seqs, pick), jnp.take_along_axis(scores, pick, axis=1)


def beam_search(
  model_or_config: Transformer | T5Config,
  params,
  encoder_input_tokens: jax.Array,
  max_decode_length: int,
  beam_size: int = 4,
  alpha: float = 0.6,
  eos_id: int = EOS_ID,
) -> tuple[jax.Array, jax.Array]:
  """Beam search with a KV cache and T5X's length penalty.

  A beam's score is `log p(tokens incl. EOS) / ((5 + n) / 6) ** alpha`, n = its length with
  EOS. The search stops when every row has `beam_size` finished beams and no live beam can
  still beat the worst of them. Beams share their input's cross-attention keys/values.

  Args:
    model_or_config: the model or its config.
    params: the "params" tree.
    encoder_input_tokens: `[batch, input_len]`, 0 = padding.
    max_decode_length: most tokens per beam (static).
    beam_size: beams kept (static).
    alpha: length-penalty exponent >= 0 (0: plain log-likelihood; with beam_size 1 the
      search is then exactly greedy).
    eos_id: end-of-sequence id.

  Returns:
    `[batch, beam_size, max_decode_length]` int32 sequences (EOS included, 0 after) and
    `[batch, beam_size]` scores, best first. A row without `beam_size` finished beams fills
    the rest with unfinished ones scored at full length, after the finished.
  """
  if alpha < 0:
    raise ValueError(f"alpha must be >= 0 (the stopping rule assumes it), got {alpha}")
  return _beam(
    *_arguments(model_or_config, params, encoder_input_tokens),
    max_decode_length,
    beam_size,
    float(alpha),
    eos_id,
  )


@functools.partial(jax.jit, static_argnums=(0,))
def _logits(cfg, variables, encoder_input_tokens, decoder_input_tokens):
  return Transformer(cfg).apply(
    variables, encoder_input_tokens, decoder_input_tokens, enable_dropout=False
  )


def logits(
  model_or_config: Transformer | T5Config,
  params,
  encoder_input_tokens: jax.Array,
  decoder_input_tokens: jax.Array,
) -> jax.Array:
  """Teacher-forced logits, no dropout: `[batch, target_len, vocab]` float32.

  Args:
    model_or_config: the model or its config.
    params: the "params" tree.
    encoder_input_tokens: `[batch, input_len]`, 0 = padding.
    decoder_input_tokens: `[batch, target_len]`, the targets shifted right (`shift_right`).
  """
  return _logits(*_arguments(model_or_config, params, encoder_input_tokens, decoder_input_tokens))


def _token_log_probs(logits: jax.Array, targets: jax.Array) -> jax.Array:
  # log_softmax gathered at the targets; 0 at padding (target id 0).
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  picked = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
  return jnp.where(targets > 0, picked, 0.0)


@functools.partial(jax.jit, static_argnums=(0,))
def _score(cfg, variables, encoder_input_tokens, decoder_target_tokens):
  decoder_input_tokens = shift_right(decoder_target_tokens)
  per_token = _token_log_probs(
    _logits(cfg, variables, encoder_input_tokens, decoder_input_tokens), decoder_target_tokens
  )
  return per_token.sum(axis=-1), per_token


def score(
  model_or_config: Transformer | T5Config,
  params,
  encoder_input_tokens: jax.Array,
  decoder_target_tokens: jax.Array,
) -> tuple[jax.Array, jax.Array]:
  """Log-likelihood of each target given its input (teacher forcing, natural log).

  Args:
    model_or_config: the model or its config.
    params: the "params" tree.
    encoder_input_tokens: `[batch, input_len]`, 0 = padding.
    decoder_target_tokens: `[batch, target_len]` targets ending in EOS, 0 = padding.

  Returns:
    `[batch]` log p(target | input) summed over the target tokens (EOS included) and
    `[batch, target_len]` per-token log-probs (0 at padding).
  """
  return _score(*_arguments(model_or_config, params, encoder_input_tokens, decoder_target_tokens))


@functools.partial(jax.jit, static_argnums=(0, 4))
def _rank(cfg, variables, encoder_input_tokens, candidate_tokens, inputs_per_step):
  model = Transformer(cfg)
  encoded = _encode(model, variables, encoder_input_tokens)
  batch, num_candidates = encoder_input_tokens.shape[0], candidate_tokens.shape[0]
  n = inputs_per_step
  decoder_inputs = jnp.tile(shift_right(candidate_tokens), (n, 1))
  targets = jnp.tile(candidate_tokens, (n, 1))

  def chunk(args):
    chunk_encoded, chunk_tokens = args
    # n inputs x C candidates: decoder rows i*C .. i*C + C-1 read encoder row i, whose
    # cross-attention keys/values are computed once.
    logits = model.apply(
      variables,
      chunk_encoded,
      chunk_tokens,
      decoder_inputs,
      enable_dropout=False,
      method=Transformer.decode,
    )
    return _token_log_probs(logits, targets).sum(-1).reshape(n, num_candidates)

  chunks = (
    encoded.reshape((batch // n, n) + encoded.shape[1:]),
    encoder_input_tokens.reshape(batch // n, n, -1),
  )
  return lax.map(chunk, chunks).reshape(batch, num_candidates)


def rank_candidates(
  model_or_config: Transformer | T5Config,
  params,
  encoder_input_tokens: jax.Array,
  candidate_tokens: jax.Array,
  inputs_per_step: int = 1,
) -> jax.Array:
  """Log-likelihood of every candidate target for every input, encoder run once per input.

  The decoder scores all candidates of `inputs_per_step` inputs at a time (memory is about
  `inputs_per_step * C * target_len * vocab` floats of logits).

  Args:
    model_or_config: the model or its config.
    params: the "params" tree.
    encoder_input_tokens: `[batch, input_len]`, 0 = padding.
    candidate_tokens: `[C, target_len]` candidates ending in EOS, 0 = padding.
    inputs_per_step: inputs scored together; must divide `batch` (static).

  Returns:
    `[batch, C]` log p(candidate | input), summed over candidate tokens incl. EOS.
  """
  batch = encoder_input_tokens.shape[0]
  if inputs_per_step < 1 or batch % inputs_per_step:
    raise ValueError(f"inputs_per_step {inputs_per_step} must divide the batch {batch}")
  return _rank(
    *_arguments(model_or_config, params, encoder_input_tokens, candidate_tokens), inputs_per_step
  )
