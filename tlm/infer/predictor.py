"""Text in, text and log-likelihoods out: a T5 model with its vocabulary, batched for jit.

`Predictor` is what every evaluation (and `--mode=predict` / `--mode=score`) calls. It turns
strings into T5 inputs (SentencePiece ids + EOS), groups examples of similar length into
batches padded to a few bucketed shapes (powers of two, a fixed number of rows) so that jit
compiles once per bucket rather than once per batch, and restores input order.

It runs on the training mesh (`tlm.sharding.partitioning`): the parameters are placed by the same
logical axis rules as in training (FSDP included), optionally cast to bfloat16, and every batch
is split along "data". In a multi-host run every process computes the same batching of the
whole input (cheap, host-side), feeds only the rows its devices hold, and receives every
result (an all-gather), so that process 0 can write the outputs in input order.

On top of it, the time conditioning of the paper (§2.3): `tlm.infer.conditioned`.
"""

import math
import numbers
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from tlm.data.vocab import Vocabulary, find_spiece_model
from tlm.errors import ConfigError
from tlm.infer.query_programs import (
  Decoding,
  bucket,
  decode_program,
  padded_rows,
  rank_program,
  score_program,
)
from tlm.token_ids import EOS_ID


def _pad(sequences: Sequence[Sequence[int]], rows: int, length: int) -> np.ndarray:
  out = np.zeros((rows, length), np.int32)
  for i, ids in enumerate(sequences):
    out[i, : len(ids)] = ids
  return out


class _Progress:
  """Examples done, rate and ETA on stderr, at most about once every `every` seconds."""

  def __init__(self, label: str, total: int, enabled: bool, every: float = 5.0):
    self.label, self.total, self.done, self.enabled, self.every = label, total, 0, enabled, every
    self.start = self.last = time.time()

  def update(self, n: int) -> None:
    self.done += n
    now = time.time()
    if not self.enabled or (now - self.last < self.every and self.done < self.total):
      return
    self.last = now
    rate = self.done / max(now - self.start, 1e-9)
    eta = (self.total - self.done) / rate if rate > 0 else 0.0
    print(
      f"  {self.label}: {self.done}/{self.total} ({rate:.0f}/s, ETA {eta:.0f}s)",
      file=sys.stderr,
      flush=True,
    )


class Predictor:
  """A T5 model and its vocabulary, applied to lists of strings in bucketed batches.

  Args:
    config: the model's T5Config.
    params: its "params" tree (numpy or jax arrays, plain or boxed).
    vocab: the vocabulary it was trained with.
    batch_size: rows per batch (fixed, the last batch is padded).
    max_decode_length: tokens generated at most by `predict`.
    beam_size: 1 decodes greedily (the paper's CBQA decoding), more uses beam search.
    temperature: > 0 samples instead (`decoding.temperature_sample`, T5X's semantics); 0
      (the default) is greedy decoding, whatever top_k and top_p.
    top_k: sampling keeps the k most likely tokens; 0 keeps all.
    top_p: sampling then keeps the smallest set of most likely tokens whose probability
      reaches top_p, in (0, 1]; 1 keeps all.
    seed: the sampling seed, 0 <= seed < 2**32. An input's tokens depend on the seed and its
      index in the list given to `predict`, not on the batch size or the mesh.
    max_input_length: longer inputs are truncated (keeping EOS); 0 keeps them whole.
    progress: print progress lines to stderr for long lists.
    mesh: the ("data", "model") mesh (`tlm.sharding.partitioning.make_mesh`); None is the first
      device alone. `batch_size` is rounded up to a multiple of its data axis.
    fsdp: place the parameters with the FSDP rules (`partitioning.axis_rules(True)`).
    param_dtype: "float32" or "bfloat16" (`eval.param_dtype`): the parameters' dtype on the
      devices.
  """

  def __init__(
    self,
    config,
    params,
    vocab: Vocabulary,
    *,
    batch_size: int = 64,
    max_decode_length: int = 32,
    beam_size: int = 1,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    max_input_length: int = 0,
    progress: bool = False,
    mesh=None,
    fsdp: bool = False,
    param_dtype: str = "float32",
  ):
    import jax
    import jax.numpy as jnp
    from flax import linen as nn

    from tlm.models import shapes
    from tlm.sharding import partitioning
    from tlm.sharding.partitioning import place_params

    if vocab.vocab_size > config.vocab_size:
      raise ConfigError(
        f"the vocabulary has {vocab.vocab_size} ids but the model embeds only "
        f"{config.vocab_size}: wrong vocabulary for this checkpoint?"
      )
    for name, value in (("batch_size", batch_size), ("max_decode_length", max_decode_length)):
      if value < 1:
        raise ConfigError(f"{name} must be >= 1, got {value}")
    if beam_size < 1:
      raise ConfigError(f"beam_size must be >= 1, got {beam_size}")
    from tlm.models import decoding

    try:
      decoding.check_sampling(temperature, top_k, top_p)
    except ValueError as e:
      raise ConfigError(str(e)) from None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2**32:
      raise ConfigError(f"seed must be an integer in [0, 2**32), got {seed}")
    sampling = temperature > decoding.MIN_TEMPERATURE or top_k > 0 or top_p < 1
    if beam_size > 1 and sampling:
      raise ConfigError(
        f"beam_size {beam_size} with temperature {temperature}, top_k {top_k}, top_p {top_p}: "
        "beam search does not sample; use beam_size 1 to sample"
      )
    dtypes = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
    if param_dtype not in dtypes:
      raise ConfigError(f"eval.param_dtype must be one of {sorted(dtypes)}, got {param_dtype!r}")
    self.config = config
    if mesh is None:  # this process's first device alone
      mesh = partitioning.make_mesh(1, 1, jax.local_devices()[:1])
    self.mesh = mesh
    self.rules = partitioning.axis_rules(fsdp)
    with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
      abstract = shapes.abstract_params(config, self.mesh, self.rules, dtypes[param_dtype])
    params = nn.meta.unbox(params)
    if set(params) == {"params"}:
      params = params["params"]
    # Each process keeps only the shards its devices hold.
    self.params = place_params(params, abstract, "params")
    self.vocab = vocab
    self.batch_size = padded_rows(batch_size, self.mesh)
    self.decoding = Decoding(max_decode_length, beam_size, temperature, top_k, top_p, seed)
    self._decode = decode_program(config, self.decoding)
    self._score = score_program(config)
    self.max_input_length = max_input_length
    self.progress = progress

  @classmethod
  def from_checkpoint(cls, path: str, vocab: Vocabulary | str | None = None, **kwargs):
    """Loads any checkpoint `load_checkpoint` reads; the vocabulary defaults to the
    `spiece.model` beside it."""
    from tlm.models.checkpoints import load_checkpoint

    if vocab is None:
      vocab = find_spiece_model(path)
      if vocab is None:
        raise ConfigError(f"no vocabulary for {path}: put spiece.model beside the checkpoint")
    if isinstance(vocab, str):
      vocab = Vocabulary(vocab)
    config, params = load_checkpoint(path)
    return cls(config, params, vocab, **kwargs)

  # ---- the mesh --------------------------------------------------------------------------

  def _run(self, fn, *arrays: np.ndarray) -> np.ndarray:
    """`fn(params, *global arrays)` on the mesh; every process gets the whole result.

    Each `[rows, ...]` host array is split along "data"; this process contributes only the
    rows its devices hold (all processes hold the same host arrays).
    """
    import jax
    from flax import linen as nn
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding, PartitionSpec

    from tlm.sharding import partitioning

    with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
      placed = []
      for array in arrays:
        start, stop = partitioning.process_rows(self.mesh, array.shape[0])
        spec = PartitionSpec(partitioning.DATA_AXIS, *([None] * (array.ndim - 1)))
        placed.append(
          jax.make_array_from_process_local_data(
            NamedSharding(self.mesh, spec), array[start:stop], array.shape
          )
        )
      out = fn(self.params, *placed)
    if jax.process_count() > 1:
      return np.asarray(multihost_utils.process_allgather(out, tiled=True))
    return np.asarray(out)

  # ---- tokenisation and batching ---------------------------------------------------------

  def tokenize(self, text: str) -> list[int]:
    """Ids of `text` followed by EOS, truncated to max_input_length (EOS kept)."""
    ids = self.vocab.encode(text) + [EOS_ID]
    if self.max_input_length and len(ids) > self.max_input_length:
      ids = ids[: self.max_input_length - 1] + [EOS_ID]
    return ids

  def _batched(
    self,
    label: str,
    keys: Sequence[int],
    run: Callable[[list[int], int], np.ndarray],
  ) -> list:
    """Calls `run(indices, length_bucket)` on groups of similar `keys`; results by index."""
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    results: list = [None] * len(keys)
    progress = _Progress(label, len(keys), self.progress and len(keys) > 4 * self.batch_size)
    for start in range(0, len(order), self.batch_size):
      chunk = order[start : start + self.batch_size]
      out = run(chunk, bucket(max(keys[i] for i in chunk)))
      for row, i in enumerate(chunk):
        results[i] = out[row]
      progress.update(len(chunk))
    return results

  # ---- the three operations --------------------------------------------------------------

  def predict(self, inputs: Sequence[str]) -> list[str]:
    """Decoded text for every input: greedy, sampled (temperature > 0) or beam search.

    A sampled input's key is derived from the seed and its index in `inputs`
    (`decoding.example_keys`), so its text does not depend on the batching or the mesh.
    """
    encoded = [self.tokenize(t) for t in inputs]

    def run(chunk, length):
      tokens = _pad([encoded[i] for i in chunk], self.batch_size, length)
      if not self.decoding.sampled:
        return self._run(self._decode, tokens)
      example_ids = np.zeros(self.batch_size, np.int32)  # padding rows: any id
      example_ids[: len(chunk)] = chunk
      return self._run(self._decode, tokens, example_ids)

    tokens = self._batched("predict", [len(e) for e in encoded], run)
    return [self.vocab.decode(t) for t in tokens]

  def log_likelihood(
    self, inputs: Sequence[str], targets: Sequence[str]
  ) -> tuple[np.ndarray, np.ndarray]:
    """Natural-log p(target | input) summed over target tokens incl. EOS, and token counts."""
    if len(inputs) != len(targets):
      raise ValueError(f"{len(inputs)} inputs but {len(targets)} targets")
    enc = [self.tokenize(t) for t in inputs]
    dec = [self.vocab.encode(t) + [EOS_ID] for t in targets]
    target_length = bucket(max((len(d) for d in dec), default=1))

    def run(chunk, length):
      out = self._run(
        self._score,
        _pad([enc[i] for i in chunk], self.batch_size, length),
        _pad([dec[i] for i in chunk], self.batch_size, target_length),
      )
      return out.astype(np.float64)

    sums = self._batched("score", [len(e) for e in enc], run)
    return np.asarray(sums, np.float64), np.asarray([len(d) for d in dec], np.int64)

  def rank(self, inputs: Sequence[str], candidates: Sequence[str]) -> np.ndarray:
    """`[len(inputs), len(candidates)]` log p(candidate | input), encoder once per input."""
    cand = [self.vocab.encode(c) + [EOS_ID] for c in candidates]
    cand_tokens = _pad(cand, len(cand), bucket(max(len(c) for c in cand)))
    enc = [self.tokenize(t) for t in inputs]
    # A few inputs at a time keeps the [inputs x candidates x length x vocab] logits small.
    per_step = max(1, min(self.batch_size, 4096 // max(len(cand), 1)))
    # Whole steps of `per_step` inputs, split evenly along the mesh's data axis.
    multiple = math.lcm(per_step, self.mesh.shape["data"])
    rows = -(-min(self.batch_size, len(enc)) // multiple) * multiple

    ranked = rank_program(self.config, cand_tokens, per_step)

    def run(chunk, length):
      out = []
      for s in range(0, len(chunk), rows):
        part = chunk[s : s + rows]
        out.append(self._run(ranked, _pad([enc[i] for i in part], rows, length)))
      return np.concatenate(out)[: len(chunk)]

    scores = self._batched("rank", [len(e) for e in enc], run)
    return np.stack(scores).astype(np.float64) if scores else np.zeros((0, len(candidates)))
