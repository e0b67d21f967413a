"""Uniqueness carried by a derived `_id`, and the unique indexes of the previous version.

On the embedded engine an insert by a string `_id` into a collection whose only unique index is
`_id` costs the same at 1,000 and 10,000 documents, while a compound unique index makes every
insert compare the whole collection (docs/decisions/engine-writes.md). So messages, summaries
and run events take their `_id` from their identity (`keyed_id`), and a repeat is the
`DuplicateKeyError` the unique index used to raise (docs/decisions/turn-write-path.md).

A database written by the previous version holds documents with ObjectId `_id`s whose identity
only the old unique index protects. `retire_unique` keeps that index while any such document
remains (a retried write of one of them is still refused), and drops it once none does
(retention or `delete_session` erased them); it says which, so lookups by identity know whether
to look beyond the derived `_id`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import OperationFailure

from mongogate.migrations import Migrations
from mongogate.values import Doc

log = logging.getLogger(__name__)


def keyed_id(*parts: str | int) -> str:
    """The `_id` of a document identified by `parts`, joined by ':'. Unambiguous when every part
    but the last holds no ':' (ids are checked for it: `memory/keys.py` `check_id`) or, for a
    tenant, is the first part and every later part but the last holds none."""
    return ":".join(str(p) for p in parts)


async def has_legacy_ids(coll: AsyncCollection[Doc]) -> bool:
    """Whether any document has an ObjectId `_id` (written before derived ids). Read once at start."""
    return await coll.find_one({"_id": {"$type": "objectId"}}, {"_id": 1}) is not None


async def retire_unique(
    coll: AsyncCollection[Doc], name: str, held: Mapping[str, object] | None = None
) -> bool:
    """Drop the previous version's unique index `name` unless documents it protects remain.

    True when documents with ObjectId `_id`s remain (the index, if there, is kept: it still
    refuses a second copy of one of them), False when every document is keyed by its derived
    `_id` (the index is dropped if present). Never creates it. ``held``: the collection's indexes
    by name, if the caller has read them (mongogate/indexes.py `held_indexes`)."""
    if await has_legacy_ids(coll):
        return True
    info = await coll.index_information() if held is None else held
    if name in info:
        try:
            await coll.drop_index(name)
        except OperationFailure as e:  # another process dropped it first
            log.debug("index %s.%s already gone: %s", coll.name, name, e)
        else:
            log.info("dropped the unique index %s.%s: uniqueness is carried by _id", coll.name, name)
    return False


async def retire_unique_once(
    coll: AsyncCollection[Doc], name: str, held: Mapping[str, object], migrations: Migrations, step: str
) -> bool:
    """`retire_unique` until it finds no ObjectId `_id` left, recorded as `step`; after that, only
    when the retired index `name` is back (an older version started since: mongogate/migrations.py)."""
    if not await migrations.needed(step, name in held):
        return False
    left = await retire_unique(coll, name, held)
    await migrations.settle(step, left)
    return left
