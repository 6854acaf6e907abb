"""A small TTL + LRU cache of search responses.

Keyed by the normalized query (the parsed form, so ``Heat  transfer`` and
``heat transfer`` share an entry), page, size, ranker and generation. Publishing a
generation clears it; the generation in the key makes a stale hit impossible anyway.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class TtlLruCache(Generic[V]):
    def __init__(
        self, max_entries: int = 2048, ttl_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._clock = clock
        self._data: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> V | None:
        if self.max_entries <= 0:
            return None
        now = self._clock()
        with self._lock:
            entry = self._data.get(key)
            if entry is None or entry[0] < now:
                if entry is not None:
                    del self._data[key]
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return entry[1]

    def put(self, key: Hashable, value: V) -> None:
        if self.max_entries <= 0:
            return
        with self._lock:
            self._data[key] = (self._clock() + self.ttl_s, value)
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
