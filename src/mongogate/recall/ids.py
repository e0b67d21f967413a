"""A memory's `_id` derived from its identity, and what databases of the previous version hold.

A memory is one per (tenant, owner, namespace, key), or per (tenant, owner, namespace, text) when
it has no key. Its `_id` is that identity hashed (`memory_id`), so every lookup is a `find_one` by
`_id`, "create if absent" is an `insert_one` whose `DuplicateKeyError` means a concurrent remember
made it, and no compound unique index is needed: the shapes the embedded engine serves in the same
time at 10,000 memories as at none (docs/decisions/engine-writes.md, recall-writes.md). A history
entry's `_id` is the memory's id and the version (`version_id`).

The hash covers the scope, so an id derived for one scope never names another scope's memory; an
id a caller gives is still checked against the caller's scope on the document read (`in_scope`).

Databases created before this version hold memories under random (uuid) ids. They keep them (ids
an agent was given stay valid); `legacy_ids` finds whether any are left, and while some are, an
identity lookup that misses by `_id` falls back to the identity query (a scan).
"""

from __future__ import annotations

import hashlib
import json

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase

from mongogate.migrations import META
from mongogate.recall import documents as rd
from mongogate.recall.model import MemoryScope
from mongogate.values import Doc

#: the fields that make a memory one (what `store.identity` returns)
IDENTITY_FIELDS = {rd.TENANT: 1, rd.OWNER: 1, "namespace": 1, "keyed": 1, "key": 1, rd.TEXT_HASH: 1}
#: the document of `memory_meta` that says whether uuid-id memories are left (read only until
#: the start-up marker records `MEMORY_IDS`, mongogate/migrations.py; kept written for the version before)
_LEGACY = "legacy_ids"


def memory_id(ident: Doc) -> str:
    """32 hex characters (128 bits of SHA-256) of an unambiguous encoding of the identity."""
    keyed = bool(ident["keyed"])
    parts = [
        "mongogate.memory/1",
        ident[rd.TENANT],
        ident[rd.OWNER],
        ident["namespace"],
        "key" if keyed else "text",
        ident["key"] if keyed else ident[rd.TEXT_HASH],
    ]
    raw = json.dumps(parts, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode("ascii")).hexdigest()[:32]


def version_id(mid: str, version: int) -> str:
    return f"{mid}:{version}"


def in_scope(doc: Doc | None, scope: MemoryScope) -> bool:
    return doc is not None and doc.get(rd.TENANT) == scope.tenant and doc.get(rd.OWNER) == scope.owner


def derived(doc: Doc) -> bool:
    """The stored memory sits at the `_id` its identity derives (False: a uuid of an older version)."""
    try:
        return bool(doc["_id"] == memory_id(doc))
    except KeyError:
        return False


async def look_again(db: AsyncDatabase[Doc]) -> None:
    """An older version has started since uuid ids were last looked for (its unique indexes are
    back): its "none left" is forgotten before those indexes are dropped, so the next
    `legacy_ids` scans even if this start is killed first (and so does the version before)."""
    await db[META].delete_one({"_id": _LEGACY})


async def legacy_ids(db: AsyncDatabase[Doc], memories: AsyncCollection[Doc], *, look: bool = False) -> bool:
    """Whether memories stored under uuid ids are left. Once none is (a new database, or every one
    forgotten or expired), that is recorded and not scanned again, unless ``look`` (an older
    version has started since: its unique indexes are back, recall/setup.py)."""
    meta = db[META]
    mark = None if look else await meta.find_one({"_id": _LEGACY})
    if mark is not None and mark.get("left") is False:
        return False
    left = False
    async for doc in memories.find({}, IDENTITY_FIELDS):
        if not derived(doc):
            left = True
            break
    await meta.update_one({"_id": _LEGACY}, {"$set": {"left": left}}, upsert=True)
    return left
