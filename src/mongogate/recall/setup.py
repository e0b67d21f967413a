"""The indexes of long-term memory, created (and the previous version's dropped) at every start.

Moved from `store.py` as it was (issue 30: modules of at most 450 lines); `LongTermMemory.ensure_indexes`
calls it, so no caller changed.
"""

from __future__ import annotations

import contextlib

from pymongo import ASCENDING, DESCENDING
from pymongo.errors import OperationFailure, PyMongoError

from mongogate import indexes
from mongogate.errors import StorageError
from mongogate.migrations import MEMORY_IDS, Migrations
from mongogate.recall import documents as rd
from mongogate.recall.ids import legacy_ids, look_again
from mongogate.recall.repository import RecallRepository

#: the unique indexes of the previous version, dropped by `ensure_indexes` (uniqueness is the `_id`)
OLD_UNIQUE = {
    "memories": ("scope_namespace_key_unique", "scope_namespace_text_unique"),
    "memory_versions": ("memory_version_unique",),
}
TEXT_INDEX = "memory_text"
TTL_INDEX = "expires_at_ttl"


async def ensure_indexes(store: RecallRepository, migrations: Migrations | None = None) -> None:
    """Idempotent: `serve` and `check` run it at every start. No unique index but `_id`: the
    previous version's compound unique indexes are dropped (each made every insert scan), and
    their presence says an older version has started since the uuid ids were last looked for
    (mongogate/migrations.py)."""
    migrations = migrations or Migrations(store.db)
    older = False
    try:
        ttl = indexes.IndexModel([(rd.EXPIRES_AT, ASCENDING)], name=TTL_INDEX, expireAfterSeconds=0)
        wanted = {
            "memories": [
                indexes.IndexModel(
                    [
                        (rd.TENANT, ASCENDING),
                        (rd.OWNER, ASCENDING),
                        (rd.UPDATED_AT, DESCENDING),
                        ("_id", DESCENDING),
                    ],
                    name="scope_updated",
                ),
                indexes.IndexModel(
                    [(rd.TENANT, ASCENDING), (rd.OWNER, ASCENDING), (rd.NS_PATH, ASCENDING)],
                    name="scope_ns_path",
                ),
                indexes.IndexModel([("text", "text")], name=TEXT_INDEX, default_language="none"),
                ttl,
            ],
            "memory_versions": [
                indexes.IndexModel(
                    [(rd.MEMORY_ID, ASCENDING), (rd.VERSION, ASCENDING)], name="memory_version"
                ),
                ttl,
            ],
        }
        for coll, names in OLD_UNIQUE.items():
            held = await indexes.held_indexes(store.db[coll])
            for name in names:
                if name in held:
                    if not older:  # the sign goes with the index: "none left" forgotten first
                        await migrations.reopen(MEMORY_IDS)
                        await look_again(store.db)
                    older = True
                    with contextlib.suppress(OperationFailure):  # another process dropped it
                        await store.db[coll].drop_index(name)
            await indexes.ensure_indexes(store.db[coll], wanted[coll], held)
        if await migrations.needed(MEMORY_IDS, older):
            store.legacy = await legacy_ids(store.db, store.memories, look=older)
            await migrations.settle(MEMORY_IDS, store.legacy)
        else:
            store.legacy = False
    except PyMongoError as e:
        raise StorageError("could not create the long-term memory indexes") from e
