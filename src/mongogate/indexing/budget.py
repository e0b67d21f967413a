"""One byte budget for every in-process index of a server process: long-term memory's scope
indexes (`recall/inprocess/cache.py`) and conversation messages' (`memory/message_index.py`) are
held on one shelf, least recently used first out across both, past `[memory.long_term]
index_budget_mb`.

Each tenant has a share of it (`index_tenant_share`, a fraction): while the budget is full, the
scopes of a tenant holding more than its share go first (its own least recently used first), and
a tenant over its share never pushes out another tenant's scope. When the scope being kept is all
that puts its tenant over its share and no other tenant is over theirs, it is used for its call
and not kept (`unkept`): its tenant reads it again next time, the others keep theirs. The share
binds only while the budget is full: a tenant alone may use all of it, and the scope being used
stays when it is the only one held, even larger than the budget
(docs/decisions/recall-index.md, "One tenant's share of the index budget").

Each index is filed under its kind and its scope's key (`Shelf`, one per kind), so the two never
collide, and under its tenant, given as a value by the caller (a key is never parsed back);
`/metrics` reports the bytes and scopes held of each kind against the one budget.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from typing import Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

__all__ = ["IndexBudget", "Indexed", "Shelf"]

#: `index_tenant_share` when none is given: one tenant holds at most a quarter of a full budget
TENANT_SHARE = 0.25

Slot = tuple[str, str]


class Indexed(Protocol):
    """An in-process index: how many documents and about how many bytes it holds."""

    def nbytes(self) -> int: ...

    def __len__(self) -> int: ...


T = TypeVar("T", bound=Indexed)


class IndexBudget:
    """(kind, scope key) -> index, each of a tenant; least recently used first out past
    `budget_bytes`, a tenant over `tenant_share` of it first (the module's docstring)."""

    def __init__(self, budget_bytes: int, tenant_share: float = TENANT_SHARE) -> None:
        self.budget_bytes = budget_bytes
        #: the fraction of the budget one tenant holds before its scopes go first (1: only a tenant
        #: past the whole budget)
        self.tenant_share = tenant_share
        self._held: OrderedDict[Slot, Indexed] = OrderedDict()
        self._tenant: dict[Slot, str] = {}
        #: indexes dropped past the budget, by kind
        self.evicted: Counter[str] = Counter()
        #: indexes used for their call and not kept (their tenant over its share), by kind
        self.unkept: Counter[str] = Counter()

    @property
    def share_bytes(self) -> int:
        """What one tenant holds before its scopes go first while the budget is full."""
        return int(self.budget_bytes * self.tenant_share)

    def shelf(self, kind: str, cls: type[T]) -> Shelf[T]:
        """The indexes of `kind` (each an instance of `cls`)."""
        return Shelf(self, kind, cls)

    def get(self, kind: str, key: str) -> Indexed | None:
        """The index held for (kind, key), its place in the order unchanged."""
        return self._held.get((kind, key))

    def keep(self, kind: str, key: str, index: Indexed, *, tenant: str, evict: bool = True) -> bool:
        """Hold `index` (of `tenant`) as the most recently used; then (`evict`) drop indexes until
        the budget holds (the module's docstring). False: `index` itself was not kept."""
        at = (kind, key)
        self._held[at] = index
        self._held.move_to_end(at)
        self._tenant[at] = tenant
        return self._evict(keep=at) if evict else True

    def drop(self, kind: str, key: str) -> None:
        self._held.pop((kind, key), None)
        self._tenant.pop((kind, key), None)

    def nbytes(self, kind: str | None = None) -> int:
        return sum(i.nbytes() for (k, _), i in self._held.items() if kind is None or k == kind)

    def count(self, kind: str | None = None) -> int:
        return sum(1 for k, _ in self._held if kind is None or k == kind)

    def tenant_bytes(self) -> Counter[str]:
        """The bytes each tenant's indexes hold."""
        out: Counter[str] = Counter()
        for at, index in self._held.items():
            out[self._tenant[at]] += index.nbytes()
        return out

    def __len__(self) -> int:
        return len(self._held)

    def _evict(self, keep: Slot) -> bool:
        """Indexes out until the held bytes fit: the least recently used of a tenant over its
        share, else `keep` itself when its tenant is over its share, else the least recently
        used. `keep` stays when it is the only one held. False: `keep` went."""
        sizes = {at: index.nbytes() for at, index in self._held.items()}
        total = sum(sizes.values())
        if total <= self.budget_bytes:
            return True
        per: Counter[str] = Counter()
        for at, size in sizes.items():
            per[self._tenant[at]] += size
        share = self.share_bytes
        while total > self.budget_bytes and len(self._held) > 1:
            victim = next((at for at in self._held if at != keep and per[self._tenant[at]] > share), None)
            if victim is None:
                over = per[self._tenant[keep]] > share
                victim = keep if over else next(at for at in self._held if at != keep)
            total -= sizes[victim]
            per[self._tenant[victim]] -= sizes[victim]
            self.drop(*victim)
            if victim == keep:
                self.unkept[keep[0]] += 1
                log.info("index budget: %s scope %s not kept (its tenant is over its share)", *keep)
                return False
            self.evicted[victim[0]] += 1
            log.debug("index budget: evicted %s scope %s (budget %d bytes)", *victim, self.budget_bytes)
        return True


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

    def keep(self, key: str, index: T, *, tenant: str, evict: bool = True) -> bool:
        """Hold `index` for `key` (of `tenant`) as the most recently used; then (`evict`) drop
        indexes until the budget holds (`IndexBudget.keep`). False: `index` was not kept."""
        return self.budget.keep(self.kind, key, index, tenant=tenant, evict=evict)

    def drop(self, key: str) -> None:
        self.budget.drop(self.kind, key)

    def nbytes(self) -> int:
        return self.budget.nbytes(self.kind)

    def __len__(self) -> int:
        return self.budget.count(self.kind)

    @property
    def evictions(self) -> int:
        return self.budget.evicted[self.kind]
