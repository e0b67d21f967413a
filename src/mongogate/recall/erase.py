"""What long-term memory stores per tenant and subject, and how its erasure keeps every server's
in-process index coherent (`indexing/coherence.py`).

A tenant's memories are every scope of it (the tenant-wide owner `*` and each subject); a
subject's, its own scope. Their history (`memory_versions`) goes with them, then their scopes'
revision documents (`memory_revisions`, `_id` = the scope's key: it names the tenant). A subject's
name is also kept as the `author` of memories it wrote in scopes that are not its own (the
tenant-wide scope): those memories are the tenant's and stay, their `author` and `source` set to
null.

Every scope touched is a write like any other (docs/long-term-memory.md, "Several server
processes, one truth"): the erasure holds the engine's write signal for all of them from before
the first write to after the last (so a recall that trusts the signal reads the revision again),
and marks a write in flight in each scope's revision document first (so a recall meanwhile reads
its results back from the database, which no longer holds them). The revision document is then
deleted; an index built before sees no document, or a new one of another incarnation (`born`),
and reads its scope whole: no server recalls an erased memory afterwards, even after the scope
has been written to again as often as before. Scopes whose document stays (a subject's erasure
in the tenant-wide scope) have their revision moved past every index, which reads them whole.
A run stopped half way leaves its writes in flight: recalls read back (and after
`coherence.LEASE` read the scope whole) until the next run finishes the erasure.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase

from mongogate.engine.write_signal import WriteSignal
from mongogate.erasure import Declared, Kept, Redacted, Removed, Sweeping, Target
from mongogate.indexing import CHANGES, Coherence
from mongogate.leases import keep_unless, literal, same
from mongogate.migrations import META
from mongogate.recall.documents import REVISIONS
from mongogate.recall.model import MemoryScope, scope_key
from mongogate.values import Doc

#: scopes begun between two beats of the erasure's lease
BEAT_EVERY = 200


def memories(target: Target) -> Doc:
    """A tenant's memories (every owner), or a subject's own scope; `memory_versions` alike."""
    if target.subject is None:
        return {"tenant": target.tenant}
    return dict(MemoryScope(target.tenant, target.subject).match())


def revisions(target: Target) -> Doc:
    """The revision documents of the target's scopes: for a tenant, every key `scope_key` makes
    for it (`<len>:<tenant>:<owner>`, a range of `_id`), for a subject its own."""
    if target.subject is not None:
        return {"_id": scope_key(MemoryScope(target.tenant, target.subject))}
    prefix = scope_key(MemoryScope(target.tenant, ""))  # "<len>:<tenant>:"
    return {"_id": {"$gte": prefix, "$lt": prefix[:-1] + ";"}}  # ";" follows ":"


def authored(target: Target) -> Doc | None:
    """What a subject wrote in scopes not its own (the tenant's): the author to redact."""
    if target.subject is None:
        return None  # a tenant's erasure removes them
    return {"tenant": target.tenant, "owner": {"$ne": target.subject}, "author": target.subject}


def unattributed(target: Target, erasure_id: str) -> list[Doc]:
    """`author` set to null, by `_id`, only while it still names the subject; with it the `source`
    (the message of the subject's the fact came from: it leads back to the subject)."""
    return [keep_unless(same("author", target.subject), {"author": literal(None), "source": literal(None)})]


async def scopes_of(db: AsyncDatabase[Doc], target: Target) -> tuple[list[MemoryScope], list[MemoryScope]]:
    """The scopes the erasure writes: those it erases (a tenant's: each owner holding a memory or
    a revision document; a subject's own), and those it keeps and redacts (where a subject wrote)."""
    if target.subject is not None:
        kept = await _owners(db["memories"], authored(target) or {})
        kept |= await _owners(db["memory_versions"], authored(target) or {})
        erased = [MemoryScope(target.tenant, target.subject)]
        return erased, [MemoryScope(target.tenant, o) for o in sorted(kept)]
    owners = await _owners(db["memories"], memories(target))
    prefix = scope_key(MemoryScope(target.tenant, ""))
    async for d in db[REVISIONS].find(revisions(target), {"_id": 1}):
        owners.add(str(d["_id"])[len(prefix) :])
    return [MemoryScope(target.tenant, o) for o in sorted(owners)], []


async def _owners(coll: AsyncCollection[Doc], match: Doc) -> set[str]:
    """The owners of `match`'s documents, one per group (a cursor: never one reply of them all)."""
    cursor = await coll.aggregate([{"$match": match}, {"$group": {"_id": "$owner"}}])
    return {str(d["_id"]) async for d in cursor if d.get("_id") is not None}


@asynccontextmanager
async def bracket(db: AsyncDatabase[Doc], target: Target, sweep: Sweeping) -> AsyncIterator[None]:
    """Around the erasure of long-term memory (module docstring). A scope being erased is marked
    in flight only where its revision document exists (none is made, to be deleted and counted);
    a scope that stays is marked as every write marks it (`Coherence.begin`, which may create it)."""
    erased, kept = await scopes_of(db, target)
    revs = db[REVISIONS]
    guard = Coherence(revs, db.name, WriteSignal.of(db.client))
    async with guard.announcing(*(scope_key(s) for s in (*erased, *kept)), clock=sweep.clock):
        tokens: dict[MemoryScope, str] = {}
        staying = set(kept)
        for i, scope in enumerate([*erased, *kept]):
            if scope in staying:
                tokens[scope] = await guard.begin(scope_key(scope), sweep.clock.now())
            else:
                tokens[scope] = token = uuid.uuid4().hex
                await revs.update_one(
                    {"_id": scope_key(scope)}, {"$set": {f"pending.{token}": sweep.clock.now()}}
                )
            if i % BEAT_EVERY == BEAT_EVERY - 1:
                await sweep.beat()
        try:
            yield
        finally:  # also after a failure: every index of these scopes reads them whole once
            with anyio.CancelScope(shield=True):
                for scope, token in tokens.items():
                    with contextlib.suppress(Exception):
                        await revs.update_one(
                            {"_id": scope_key(scope)},
                            {"$unset": {f"pending.{token}": ""}, "$inc": {"rev": CHANGES + 1}},
                        )


ERASURE = Declared(
    "recall",
    parts=(
        Removed("memories", memories),
        Removed("memory_versions", memories),
        Redacted("memories", authored, unattributed),
        Redacted("memory_versions", authored, unattributed),
        Removed("memory_revisions", revisions),
    ),
    kept=(
        Kept(
            META,
            "mongogate's bookkeeping: whether an earlier version's ids are left, start-up steps done "
            "(no tenant)",
        ),
    ),
    around=bracket,
)

__all__ = ["ERASURE", "bracket", "scopes_of"]
