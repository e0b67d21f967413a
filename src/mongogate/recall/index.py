"""The in-process scope indexes, kept coherent across server processes by the database.

Every write of a scope's memories (remember, forget, an expiry set, an expired memory erased)
bumps the scope's revision document in `memory_revisions` right after the memory write, before
the call answers: `{_id: scope, rev: n, changes: [the ids written, last CHANGES of them]}`, one
update by `_id` (flat on the embedded engine). A recall reads that document by `_id` first, then:

- same revision as its index: the index answers;
- newer, and every change since is still in `changes`: the index re-reads only those memories
  by `_id` (gone ones are removed);
- else (first use, evicted, too far behind, another model): the scope is read whole.

The revision is read BEFORE the memories, so an index is never labelled newer than what it
holds; a write between the two shows as a newer revision at the next recall. A write another
process made and answered is always seen by the next recall anywhere.

Indexes live in one LRU map bounded by `[memory.long_term] index_budget_mb`; the least recently
used scope is dropped past the budget (the one being used stays, even alone larger).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

from pymongo.asynchronous.collection import AsyncCollection

from mongogate.recall.model import Scope
from mongogate.recall.scope_index import INDEX_FIELDS, ScopeIndex
from mongogate.values import Doc

log = logging.getLogger(__name__)

#: changes kept in a revision document (an index further behind is rebuilt)
CHANGES = 256
REVISIONS = "memory_revisions"


def scope_key(scope: Scope) -> str:
    return f"{len(scope.tenant)}:{scope.tenant}:{scope.owner}"


async def bump(revisions: AsyncCollection[Doc], scope: Scope, *memory_ids: str, held: int = 0) -> None:
    """The scope's revision + 1 per memory that changed, naming each (one change per revision is
    what a refresh patches from). A bulk import names many in one write; more than `CHANGES` of
    them make every index of the scope rebuild. `held` is added to the scope's quota counter in
    the same update (-1 after a memory was deleted; `recall/quota.py`)."""
    if not memory_ids:
        return
    await revisions.update_one(
        {"_id": scope_key(scope)},
        {
            "$inc": {"rev": len(memory_ids), **({"held": held} if held else {})},
            "$push": {"changes": {"$each": list(memory_ids), "$slice": -CHANGES}},
        },
        upsert=True,
    )


async def read_by_id(memories: AsyncCollection[Doc], ids: list[str], fields: Doc) -> dict[str, Doc]:
    """The documents of `ids`, one `find_one` by `_id` each: on the embedded engine that stays
    flat in the collection's size (1-6 ms at 10,000 documents) where `{_id: {$in: ids}}` and any
    filter beside `_id` scan (0.2-1.9 s; docs/decisions/recall-index.md)."""
    out: dict[str, Doc] = {}
    for mid in ids:
        doc = await memories.find_one({"_id": mid}, fields)
        if doc is not None:
            out[mid] = doc
    return out


@dataclass
class IndexStats:
    rebuilds: int = 0
    patches: int = 0
    fresh: int = 0
    evictions: int = 0


class IndexCache:
    """Scope -> ScopeIndex, least recently used first out past `budget_bytes`."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._indexes: OrderedDict[str, ScopeIndex] = OrderedDict()
        self.stats = IndexStats()

    def nbytes(self) -> int:
        return sum(i.nbytes() for i in self._indexes.values())

    def __len__(self) -> int:
        return len(self._indexes)

    async def get(
        self,
        memories: AsyncCollection[Doc],
        revisions: AsyncCollection[Doc],
        scope: Scope,
        model: str,
        dims: int,
    ) -> ScopeIndex:
        """The scope's index, fresh as of the revision read now."""
        key = scope_key(scope)
        head = await revisions.find_one({"_id": key}, {"rev": 1, "changes": 1})
        rev = int(head["rev"]) if head else 0
        changes: list[str] = [str(c) for c in (head.get("changes") or [])] if head else []
        idx = self._indexes.get(key)
        if idx is not None and (idx.model != model or idx.dims != dims or idx.rev > rev):
            idx = None
        if idx is not None and idx.rev == rev:
            self.stats.fresh += 1
        elif idx is not None and rev - idx.rev <= len(changes):
            changed = list(dict.fromkeys(changes[len(changes) - (rev - idx.rev) :]))
            docs = await read_by_id(memories, changed, INDEX_FIELDS | {"tenant": 1, "owner": 1})
            docs = {
                i: d
                for i, d in docs.items()
                if d.get("tenant") == scope.tenant and d.get("owner") == scope.owner
            }
            for mid in changed:
                if mid in docs:
                    idx.put(docs[mid])
                else:
                    idx.remove(mid)
            idx.rev = rev
            self.stats.patches += 1
        else:
            idx = ScopeIndex(model, dims, rev)
            async for d in memories.find({"tenant": scope.tenant, "owner": scope.owner}, INDEX_FIELDS):
                idx.put(d)
            self.stats.rebuilds += 1
        self._indexes[key] = idx
        self._indexes.move_to_end(key)
        self._evict(keep=key)
        return idx

    def _evict(self, keep: str) -> None:
        total = self.nbytes()
        while total > self.budget_bytes and len(self._indexes) > 1:
            oldest = next(iter(self._indexes))
            if oldest == keep:
                break
            total -= self._indexes.pop(oldest).nbytes()
            self.stats.evictions += 1
            log.debug("recall index: evicted scope %s (budget %d bytes)", oldest, self.budget_bytes)
