"""`max_per_scope` without counting the collection on every write.

The scope's revision document (`memory_revisions`, `indexing/coherence.py`) carries `held`, an upper
bound of the memories the scope stores: raised BEFORE a memory is created (a reservation),
lowered after a create that did not happen (a duplicate) and in the same update as the revision
bump after a memory was deleted (forget, an expired memory erased). A crash between a write and
its counter update leaves the counter too high, never too low. TTL expiry deletes memories without
telling anyone, so the counter drifts up; when a reservation would pass `max_per_scope`, or the
scope was never counted (`counted` missing: a database of an older version, or a new scope), the
scope is counted exactly (one read of its `expires_at`, a scan, near the limit only) and the counter
set to what is stored plus the reservation. Two creates racing at the limit can both pass (the
recount does not see an insert still in flight), as two `count_documents` could before.
"""

from __future__ import annotations

from datetime import datetime

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection

from mongogate.clock import as_utc
from mongogate.indexing import born
from mongogate.recall import documents as rd
from mongogate.recall.model import MemoryScope, scope_key
from mongogate.values import Doc


async def reserve(
    revisions: AsyncCollection[Doc],
    memories: AsyncCollection[Doc],
    scope: MemoryScope,
    n: int,
    limit: int,
    now: datetime,
) -> tuple[int, int]:
    """Room for `n` new memories: (how many of them fit, the live memories held when counted, or -1
    when not counted). The ones that do not fit are released before this returns."""
    if n <= 0:
        return 0, -1
    key = scope_key(scope)
    doc = await revisions.find_one_and_update(
        {"_id": key},
        {"$inc": {rd.HELD: n}, **born()},
        projection={rd.HELD: 1, rd.COUNTED: 1},
        upsert=True,
        return_document=ReturnDocument.AFTER,
    )
    held = int(doc[rd.HELD]) if doc is not None and rd.HELD in doc else n
    if doc is not None and doc.get(rd.COUNTED) is True and held <= limit:
        return n, -1
    stored, alive = await _count(memories, scope, now)
    room = max(min(n, limit - alive), 0)
    # what is stored now plus what this call keeps; a concurrent reservation since the read above
    # is kept by the relative $inc
    await revisions.update_one(
        {"_id": key}, {"$inc": {rd.HELD: stored + room - held}, "$set": {rd.COUNTED: True}}
    )
    return room, alive


async def release(revisions: AsyncCollection[Doc], scope: MemoryScope, n: int) -> None:
    """Give back `n` reserved places whose memories were not created."""
    if n > 0:
        await revisions.update_one({"_id": scope_key(scope)}, {"$inc": {rd.HELD: -n}})


async def _count(memories: AsyncCollection[Doc], scope: MemoryScope, now: datetime) -> tuple[int, int]:
    """(memories stored in the scope, of which live)."""
    stored = alive = 0
    async for d in memories.find(scope.match(), {rd.EXPIRES_AT: 1}):
        stored += 1
        exp = d.get(rd.EXPIRES_AT)
        alive += exp is None or as_utc(exp) > now
    return stored, alive
