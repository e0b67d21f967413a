"""A memory's expiry moved without a new version, and the expired memories of a scope found:
LangGraph's TTL on long-term memory (`mongogate.langgraph.MongogateStore`: a read refreshes an
item's TTL, a sweep erases what expired).

A moved expiry is a write of the memory like any other: in the scope's `writing` block and
followed by its revision (`recall/coherence.py`), so every process's in-process index sees the
new time (an index that kept the old one would drop a refreshed memory from recall at the old
time). The history of the memory expires with it (`history.set_expiry`). An expired memory is
erased through `LongTermMemory.forget` (the quota, the history and the revision with it).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pymongo.errors import PyMongoError

from mongogate.errors import StorageError
from mongogate.recall import documents as rd
from mongogate.recall import history as hist
from mongogate.recall.model import MemoryScope
from mongogate.recall.on_version import update_on_version
from mongogate.recall.repository import RecallRepository


async def set_expiries(
    store: RecallRepository, scope: MemoryScope, moves: Sequence[tuple[str, int, datetime | None]]
) -> list[str]:
    """Each memory (its id, the version read, its new expiry) set to expire then, if it is still
    at that version in the caller's scope; one write in flight and one revision for all of them.
    The ids whose expiry moved (a memory changed since the read keeps what its change set)."""
    if not moves:
        return []
    moved: list[str] = []
    try:
        async with store.writing(scope):
            for mid, version, expires in moves:
                if await update_on_version(store, scope, mid, version, {rd.EXPIRES_AT: expires}):
                    await hist.set_expiry(store, scope, mid, version, expires)
                    moved.append(mid)
            if moved:
                await store.changed(scope, *moved)
    except PyMongoError as e:
        raise StorageError("could not refresh the memories' expiry") from e
    return moved


async def expired_ids(store: RecallRepository, scope: MemoryScope, now: datetime, limit: int) -> list[str]:
    """Up to `limit` ids of the scope's memories expired at `now` (the TTL monitor's work, where
    the database has none: the embedded engine)."""
    query = {**scope.match(), rd.EXPIRES_AT: {"$type": "date", "$lte": now}}
    try:
        docs = await store.memories.find(query, {"_id": 1}, limit=limit).to_list()
    except PyMongoError as e:
        raise StorageError("could not read the expired memories") from e
    return [str(d["_id"]) for d in docs]
