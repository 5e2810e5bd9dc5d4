"""A small least-recently-used map: the bound on every per-conversation or per-user cache.

A long-running process sees an unbounded number of conversations, users and tokens; a
cache keyed by them must forget the least recently used entry instead of growing forever.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """At most `max_size` entries; `get` and `put` make an entry the most recently used."""

    def __init__(self, max_size: int) -> None:
        if max_size < 1:
            raise ValueError("an LRU cache holds at least one entry")
        self.max_size = max_size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The value kept for `key` (now the most recently used), or None."""
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        """Keep `value` for `key`, forgetting the least recently used entry when full."""
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.max_size:
            self._items.popitem(last=False)

    def pop(self, key: K) -> V | None:
        """Forget `key`; its value, or None."""
        return self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)
