"""Counter-based random numbers: SplitMix64's finaliser chained over integer counters.

A random number here is a pure function of its counters (a seed key, a step, a row, ...), never
the next value of a stateful stream: the order of the calls, what was drawn before and which
process asks make no difference, and the function is written out here, so no library release
can change it (NumPy does not promise its `Generator` streams across versions). The mixing is
SplitMix64's finaliser (Steele, Lea and Flood, "Fast splittable pseudorandom number
generators", OOPSLA 2014), a bijection of uint64 with full avalanche, vectorised over numpy
uint64 arrays.

Users: the year-uniform mixture (`tlm.input.sampling`), the block sampler's windows and
within-block order (`tlm.input.block_sampling`) and the store's shuffled order
(`tlm.store.store_shuffle`). numpy only; imports nothing of tlm.
"""

import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment (2**64 / golden ratio)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_TO_UNIT = 2.0**-53


def mix(x: np.ndarray) -> np.ndarray:
  """SplitMix64's finaliser: a bijection of uint64 with full avalanche."""
  with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
    x = x ^ (x >> np.uint64(30))
    x = x * _MUL1
    x = x ^ (x >> np.uint64(27))
    x = x * _MUL2
    return x ^ (x >> np.uint64(31))


def chain(key, *counters) -> np.ndarray:
  """The hash of `key` followed by `counters` (non-negative integers or arrays of them,
  broadcast together): h = key, then h = mix(h + GOLDEN * (c + 1)) for each counter c.

  For fixed earlier counters the result is a bijection of the last one (h + GOLDEN * (c + 1)
  is one for odd GOLDEN, `mix` is one), so distinct last counters never collide.
  """
  h = np.asarray(key, np.uint64)
  with np.errstate(over="ignore"):
    for c in counters:
      h = mix(h + GOLDEN * (np.asarray(c).astype(np.uint64) + np.uint64(1)))
  return h


def unit(h: np.ndarray, lane: int) -> np.ndarray:
  """A float64 uniform in [0, 1) from a hash and a lane number (53 random bits): independent
  numbers per lane from one hash."""
  with np.errstate(over="ignore"):
    bits = mix(h + GOLDEN * np.uint64(lane)) >> np.uint64(11)
  return bits.astype(np.float64) * _TO_UNIT


def below(u: np.ndarray, n: np.ndarray | int) -> np.ndarray:
  """floor(u * n) as int64, i.e. uniform over [0, n) for uniform u (bias < n * 2**-53)."""
  n = np.asarray(n, dtype=np.int64)
  return np.minimum((u * n).astype(np.int64), np.maximum(n - 1, 0))


def permutation(key, n: int) -> np.ndarray:
  """A pseudo-random permutation of range(n), a pure function of (key, n): the order of the
  counters' hashes (distinct, `chain`), so no tie is broken by the sort."""
  return np.argsort(chain(key, np.arange(n, dtype=np.uint64)), kind="stable")
