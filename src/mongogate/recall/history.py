"""A memory's history: the replaced texts in `memory_versions`, read back oldest first, and its
chain (what it was stated to replace, what replaces it now: `recall/supersession.py`).

Each entry is one version that really was the memory's text (written history-first by the store's
update, an `insert_one` under the `_id` `{memory id}:{version}`, a duplicate meaning it is already
there), scoped by tenant and owner like the memory. Its writes are by `_id` alone: the versions a
memory keeps are the contiguous `MAX_HISTORY` below its current one, so erasing or re-expiring them
addresses each entry by `_id` rather than querying `memory_id` (a scan on the embedded engine:
60 ms at 10,000 entries, docs/decisions/recall-writes.md).
"""

from __future__ import annotations

import contextlib
from datetime import datetime

from pymongo import DESCENDING
from pymongo.errors import DuplicateKeyError, PyMongoError

from mongogate.clock import as_utc
from mongogate.errors import NotFound, StorageError
from mongogate.recall import checks
from mongogate.recall import documents as rd
from mongogate.recall.ids import in_scope, version_id
from mongogate.recall.model import History, MemoryItem, MemoryScope, Version, links_of
from mongogate.recall.pages import ITEM_FIELDS, newest_within
from mongogate.recall.repository import RecallRepository
from mongogate.recall.supersession import marked, replacers
from mongogate.values import Doc

#: the older versions a memory keeps, and memory_history returns, at most (the newest ones)
MAX_HISTORY = 100
#: what memory_history reads of a memory for its chain (`recall/supersession.py`)
_CHAIN = ("_id", rd.SUPERSEDES, rd.SUPERSEDED_BY, rd.STATED_AT, rd.SOURCE, rd.OCCURRED_AT)


async def prune(store: RecallRepository, scope: MemoryScope, mid: str, newest: int) -> None:
    """Erase the versions older than the newest `MAX_HISTORY`: never returned, they would let one
    key rewritten in a loop grow the database without bound (the quota counts memories). Each new
    version pushes one entry out: that one, by `_id` (a memory of the previous version: a query)."""
    if newest > MAX_HISTORY and not store.legacy:
        await store.versions.delete_one({"_id": version_id(mid, newest - MAX_HISTORY)})
    elif newest > MAX_HISTORY:
        await store.versions.delete_many(
            {rd.MEMORY_ID: mid, **scope.match(), rd.VERSION: {"$lte": newest - MAX_HISTORY}}
        )


async def erase(store: RecallRepository, scope: MemoryScope, mid: str, current: int | None) -> None:
    """Erase the history of memory `mid` of the caller's scope (checked by the caller), whose last
    version was `current`; None (unknown: the memory is already gone) sweeps by query."""
    if current is None or store.legacy:
        await store.versions.delete_many({rd.MEMORY_ID: mid, **scope.match()})
        return
    for v in range(max(1, current - MAX_HISTORY), current):
        await store.versions.delete_one({"_id": version_id(mid, v)})
    # the current version's entry exists only if an update stopped between its history entry and
    # its memory write; a delete that finds nothing scans on the embedded engine, a duplicate
    # insert does not: so the entry is probed by inserting a placeholder (no scope fields, read by
    # no one) and whatever holds the `_id` then is deleted
    with contextlib.suppress(DuplicateKeyError):
        await store.versions.insert_one({"_id": version_id(mid, current), "probe": True})
    await store.versions.delete_one({"_id": version_id(mid, current)})


async def set_expiry(
    store: RecallRepository, scope: MemoryScope, mid: str, current: int, expires: datetime | None
) -> None:
    """The history of memory `mid` (at version `current`) expires with it."""
    if store.legacy:
        await store.versions.update_many(
            {rd.MEMORY_ID: mid, **scope.match()},
            {"$set": {rd.EXPIRES_AT: expires}},
        )
        return
    for v in range(max(1, current - MAX_HISTORY), current):
        await store.versions.update_one({"_id": version_id(mid, v)}, {"$set": {rd.EXPIRES_AT: expires}})


async def _current(store: RecallRepository, scope: MemoryScope, mid: str, fields: Doc) -> Doc | None:
    """Memory `mid` by `_id`, if it is live and the caller's (another scope's looks absent);
    `fields` must keep tenant, owner and expires_at."""
    doc = await store.memories.find_one({"_id": mid}, fields)
    if not in_scope(doc, scope) or doc is None:
        return None
    exp = doc.get(rd.EXPIRES_AT)
    return doc if exp is None or as_utc(exp) > store.clock.now() else None


async def read_history(store: RecallRepository, scope: MemoryScope, id: object) -> History:
    """Every version, oldest first, the current one last; another scope's id is `not_found`."""
    mid = checks.check_memory_id(id)
    try:
        current = await _current(
            store,
            scope,
            mid,
            {"text": 1, rd.VERSION: 1, rd.UPDATED_AT: 1, "created_at": 1, "author": 1}
            | {rd.TENANT: 1, rd.OWNER: 1, rd.EXPIRES_AT: 1}
            | dict.fromkeys(_CHAIN, 1),
        )
        if current is None:
            raise NotFound(f"no memory {mid!r}; it was forgotten, expired, or never existed")
        older = store.versions.find(
            {rd.MEMORY_ID: mid, **scope.match(), rd.VERSION: {"$lt": current[rd.VERSION]}},
            {rd.VERSION: 1, "text": 1, rd.UPDATED_AT: 1, "author": 1, rd.SOURCE: 1, rd.OCCURRED_AT: 1},
            sort=[(rd.VERSION, DESCENDING)],
            limit=MAX_HISTORY,
        )
        docs = [d async for d in older]
        chained = await replacers(store, scope, [current])
    except PyMongoError as e:
        raise StorageError("could not read the memory's history") from e
    # one entry per version (a database of the previous version may hold a second of one)
    versions = list({d[rd.VERSION]: _version(d) for d in reversed(docs)}.values())
    versions.append(_version(current))
    versions = newest_within(versions, store.settings.max_response_bytes)
    left_out = int(current[rd.VERSION]) - len(versions)  # versions are 1, 2, ... with no gaps
    created = current.get("created_at")
    return History(
        mid,
        versions,
        max(left_out, 0),
        None if created is None else as_utc(created),
        links_of(current.get(rd.SUPERSEDES)),
        chained.get(mid, ()),
    )


def _version(doc: Doc) -> Version:
    return Version.from_doc(doc)


async def read_memory(store: RecallRepository, scope: MemoryScope, id: object) -> MemoryItem:
    """One live memory of the caller's scope by id; another scope's id is `not_found` (the same words)."""
    mid = checks.check_memory_id(id)
    try:
        doc = await _current(store, scope, mid, ITEM_FIELDS)
        if doc is None:
            raise NotFound(f"no memory {mid!r}; it was forgotten, expired, or never existed")
        return (await marked(store, scope, [doc]))[0]
    except PyMongoError as e:
        raise StorageError("could not read the memory") from e
