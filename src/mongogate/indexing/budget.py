"""One byte budget for every in-process index of a server process: long-term memory's scope
indexes (`recall/inprocess/cache.py`) and conversation messages' (`memory/message_index.py`) are
held on one shelf, least recently used first out across both, past `[memory.long_term]
index_budget_mb`. The index being used stays, even alone larger than the budget.

Each index is filed under its kind and its scope's key (`Shelf`, one per kind), so the two never
collide; `/metrics` reports the bytes and scopes held of each kind against the one budget.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from typing import Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

__all__ = ["IndexBudget", "Indexed", "Shelf"]


class Indexed(Protocol):
    """An in-process index: how many documents and about how many bytes it holds."""

    def nbytes(self) -> int: ...

    def __len__(self) -> int: ...


T = TypeVar("T", bound=Indexed)


class IndexBudget:
    """(kind, scope key) -> index, least recently used first out past `budget_bytes`."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._held: OrderedDict[tuple[str, str], Indexed] = OrderedDict()
        #: indexes dropped past the budget, by kind
        self.evicted: Counter[str] = Counter()

    def shelf(self, kind: str, cls: type[T]) -> Shelf[T]:
        """The indexes of `kind` (each an instance of `cls`)."""
        return Shelf(self, kind, cls)

    def get(self, kind: str, key: str) -> Indexed | None:
        """The index held for (kind, key), its place in the order unchanged."""
        return self._held.get((kind, key))

    def keep(self, kind: str, key: str, index: Indexed, *, evict: bool = True) -> None:
        """Hold `index` as the most recently used; then (`evict`) drop the least recently used
        of any kind until the budget holds, never this one."""
        at = (kind, key)
        self._held[at] = index
        self._held.move_to_end(at)
        if evict:
            self._evict(keep=at)

    def drop(self, kind: str, key: str) -> None:
        self._held.pop((kind, key), None)

    def nbytes(self, kind: str | None = None) -> int:
        return sum(i.nbytes() for (k, _), i in self._held.items() if kind is None or k == kind)

    def count(self, kind: str | None = None) -> int:
        return sum(1 for k, _ in self._held if kind is None or k == kind)

    def __len__(self) -> int:
        return len(self._held)

    def _evict(self, keep: tuple[str, str]) -> None:
        """The least recently used indexes out until the held bytes fit; never `keep`."""
        total = self.nbytes()
        while total > self.budget_bytes and len(self._held) > 1:
            oldest = next(iter(self._held))
            if oldest == keep:
                break
            total -= self._held.pop(oldest).nbytes()
            self.evicted[oldest[0]] += 1
            log.debug("index budget: evicted %s scope %s (budget %d bytes)", *oldest, self.budget_bytes)


class Shelf(Generic[T]):
    """The indexes of one kind on the shared budget."""

    def __init__(self, budget: IndexBudget, kind: str, cls: type[T]) -> None:
        self.budget = budget
        self.kind = kind
        self._cls = cls

    def get(self, key: str) -> T | None:
        """The index held for `key` (its place in the order unchanged), or None."""
        held = self.budget.get(self.kind, key)
        return held if isinstance(held, self._cls) else None

    def keep(self, key: str, index: T, *, evict: bool = True) -> None:
        """Hold `index` for `key` as the most recently used; then (`evict`) drop the least
        recently used of any kind until the budget holds, never this one."""
        self.budget.keep(self.kind, key, index, evict=evict)

    def drop(self, key: str) -> None:
        self.budget.drop(self.kind, key)

    def nbytes(self) -> int:
        return self.budget.nbytes(self.kind)

    def __len__(self) -> int:
        return self.budget.count(self.kind)

    @property
    def evictions(self) -> int:
        return self.budget.evicted[self.kind]
