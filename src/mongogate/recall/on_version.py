"""The conditional update every change of a memory read before is: by `_id` alone (flat on the
embedded engine), applied only if the memory is still at the version read and in the caller's
scope, the condition inside the update's pipeline (`leases.keep_unless`)."""

from __future__ import annotations

from pymongo import ReturnDocument

from mongogate.leases import keep_unless, literal, same
from mongogate.recall import documents as rd
from mongogate.recall.ids import in_scope
from mongogate.recall.model import MemoryScope
from mongogate.recall.repository import RecallRepository
from mongogate.values import Doc


def on_version(scope: MemoryScope, version: int) -> Doc:
    """The condition of every conditional update by `_id`: the caller's scope, the version read."""
    return {"$and": [same(rd.TENANT, scope.tenant), same(rd.OWNER, scope.owner), same(rd.VERSION, version)]}


async def update_on_version(
    store: RecallRepository, scope: MemoryScope, mid: str, version: int, fields: Doc
) -> bool:
    """Set `fields` on memory `mid` by `_id` alone, only if it is still at `version` in the
    caller's scope (the condition inside the pipeline); True when this call's change applied."""
    before = await store.memories.find_one_and_update(
        {"_id": mid},
        [keep_unless(on_version(scope, version), {k: literal(v) for k, v in fields.items()})],
        projection={rd.VERSION: 1, rd.TENANT: 1, rd.OWNER: 1},
        return_document=ReturnDocument.BEFORE,
    )
    return in_scope(before, scope) and before is not None and before.get(rd.VERSION) == version
