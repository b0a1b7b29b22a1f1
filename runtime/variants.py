"""Compiled variants of one model by the shapes they were made for: at most ``size`` kept, the least recently used
dropped first; safe to use from several threads (a variant is made once, however many threads ask at once)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..errors import LuminalError

V = TypeVar("V")

DEFAULT_SIZE = 8


@dataclass(frozen=True)
class VariantStats:
    hits: int
    misses: int
    evictions: int
    size: int


class VariantCache(Generic[V]):
    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise LuminalError(f"the number of compiled variants kept must be an integer of at least 1, got {size!r}")
        self.size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()  # guards _items and the counters; held briefly
        self._making = threading.Lock()  # held while a variant is made: one compile at a time
        self.hits = self.misses = self.evictions = 0

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        """The variant for ``key``, made by ``make`` the first time (and again after it was dropped)."""
        with self._lock:
            if key in self._items:
                return self._hit(key)
        with self._making:
            with self._lock:  # another thread may have made it while this one waited
                if key in self._items:
                    return self._hit(key)
            value = make()
            with self._lock:
                self.misses += 1
                self._put(key, value)
            return value

    def hold(self, count: int) -> None:
        """Keep at least ``count`` variants from now on (never fewer than the size it was made with)."""
        with self._lock:
            self.size = max(self.size, count)

    def _hit(self, key: Hashable) -> V:
        """The variant kept for ``key``, counted and made the most recently used (``_lock`` held)."""
        self.hits += 1
        self._items.move_to_end(key)
        return self._items[key]

    def put(self, key: Hashable, value: V) -> None:
        """Keep ``value`` for ``key`` (a variant made ahead of time)."""
        with self._lock:
            self._put(key, value)

    def _put(self, key: Hashable, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)
            self.evictions += 1

    def keys(self) -> list[Hashable]:
        """The keys kept, least recently used first."""
        with self._lock:
            return list(self._items)

    def values(self) -> list[V]:
        """The variants kept, least recently used first."""
        with self._lock:
            return list(self._items.values())

    @property
    def stats(self) -> VariantStats:
        with self._lock:
            return VariantStats(self.hits, self.misses, self.evictions, len(self._items))
