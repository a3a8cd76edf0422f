"""The input pipeline's bounded caches, shared by the threads that build several steps' batches
at once: `LRU` (token ids of texts and examples, `tlm.input.packing.Batcher`) and `RunCache` (a
block's runs of consecutive examples, read once for the block's steps:
`tlm.input.block_sampling`)."""

import collections
import threading
from concurrent.futures import Future


class LRU:
  """A least-recently-used map of at most `size` entries (a text or an example -> token ids)."""

  def __init__(self, size: int):
    self.size = size
    self._items: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()  # batches of several steps may be built at once

  def __len__(self) -> int:
    return len(self._items)

  def get(self, key):
    with self._lock:
      value = self._items.get(key)
      if value is not None:
        self._items.move_to_end(key)
      return value

  def put(self, key, value) -> None:
    with self._lock:
      self._items[key] = value
      if len(self._items) > self.size:
        self._items.popitem(last=False)


class RunCache:
  """Runs of consecutive examples read once and shared by the steps of a block, several of
  which are built at once: (slot, lo, hi) -> a Future of the run's ids, the oldest of at most
  `size` dropped. The first thread to ask reads; the others wait for its result."""

  def __init__(self, size: int):
    self.size = size
    self._items: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()

  def get(self, key, load):
    with self._lock:
      future = self._items.get(key)
      mine = future is None
      if mine:
        future = self._items[key] = Future()
        while len(self._items) > self.size:
          self._items.popitem(last=False)
      else:
        self._items.move_to_end(key)
    if mine:
      try:
        future.set_result(load())
      except BaseException as e:
        with self._lock:  # not kept: a later step reads again
          if self._items.get(key) is future:
            del self._items[key]
        future.set_exception(e)
    return future.result()
