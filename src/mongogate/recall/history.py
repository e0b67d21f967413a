"""A memory's history: the replaced texts in `memory_versions`, read back oldest first.

Each entry is one version that really was the memory's text (written history-first by the store's
update, an idempotent upsert on (memory_id, version)), scoped by tenant and owner like the memory.
"""

from __future__ import annotations

from pymongo import DESCENDING
from pymongo.errors import PyMongoError

from mongogate.clock import as_utc
from mongogate.errors import NotFound, StorageError
from mongogate.recall import checks
from mongogate.recall.model import History, MemoryItem, Scope, Version
from mongogate.recall.pages import ITEM_FIELDS, author_of, item_of, live, newest_within
from mongogate.recall.repository import RecallRepository
from mongogate.values import Doc

#: the older versions a memory keeps, and memory_history returns, at most (the newest ones)
MAX_HISTORY = 100


async def prune(store: RecallRepository, scope: Scope, mid: str, newest: int) -> None:
    """Erase the versions older than the newest `MAX_HISTORY`: never returned, they would let one
    key rewritten in a loop grow the database without bound (the quota counts memories)."""
    if newest > MAX_HISTORY:
        await store.versions.delete_many(
            {
                "memory_id": mid,
                "tenant": scope.tenant,
                "owner": scope.owner,
                "version": {"$lte": newest - MAX_HISTORY},
            }
        )


async def read_history(store: RecallRepository, scope: Scope, id: object) -> History:
    """Every version, oldest first, the current one last; another scope's id is `not_found`."""
    mid = checks.check_memory_id(id)
    now = store.clock.now()
    try:
        current = await store.memories.find_one(
            {"_id": mid, "tenant": scope.tenant, "owner": scope.owner, **live(now)},
            {"text": 1, "version": 1, "updated_at": 1, "created_at": 1, "author": 1},
        )
        if current is None:
            raise NotFound(f"no memory {mid!r}; it was forgotten, expired, or never existed")
        older = store.versions.find(
            {
                "memory_id": mid,
                "tenant": scope.tenant,
                "owner": scope.owner,
                "version": {"$lt": current["version"]},
            },
            {"version": 1, "text": 1, "updated_at": 1, "author": 1},
            sort=[("version", DESCENDING)],
            limit=MAX_HISTORY,
        )
        docs = [d async for d in older]
    except PyMongoError as e:
        raise StorageError("could not read the memory's history") from e
    versions = [_version(d) for d in reversed(docs)]
    versions.append(_version(current))
    versions = newest_within(versions, store.settings.max_response_bytes)
    left_out = int(current["version"]) - len(versions)  # versions are 1, 2, ... with no gaps
    created = current.get("created_at")
    return History(mid, versions, max(left_out, 0), None if created is None else as_utc(created))


def _version(doc: Doc) -> Version:
    return Version(int(doc["version"]), str(doc["text"]), as_utc(doc["updated_at"]), author_of(doc))


async def read_memory(store: RecallRepository, scope: Scope, id: object) -> MemoryItem:
    """One live memory of the caller's scope by id; another scope's id is `not_found` (the same words)."""
    mid = checks.check_memory_id(id)
    try:
        doc = await store.memories.find_one(
            {"_id": mid, "tenant": scope.tenant, "owner": scope.owner, **live(store.clock.now())}, ITEM_FIELDS
        )
    except PyMongoError as e:
        raise StorageError("could not read the memory") from e
    if doc is None:
        raise NotFound(f"no memory {mid!r}; it was forgotten, expired, or never existed")
    return item_of(doc)
