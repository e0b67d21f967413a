"""What memory stores per tenant and subject: conversations (sessions, their summaries and messages,
what search derived from the messages, and the revision documents of their scopes).

Every one of these documents carries `tenant`: the tenant, or, with conversations per subject
(`[memory] conversations = "scope"` under `[memory.long_term] scope = "subject"`), the tenant and
the subject joined by U+001F (`tools/base.py` conversations_of; a tenant holds no control
character, so the joined form names one subject of one tenant). A tenant's conversations are both
forms (the setting may have changed); a subject's, the joined form only. Sessions go first: a turn
still running finds its session gone and writes no message after the erasure passed.

Message search's indexes stay coherent (`memory/guard.py`): the erasure holds the engine's write
signal for the target's conversation scopes from before its first write to after its last, and
marks a write in flight in each scope's revision document first (a search meanwhile reads its
results back from the database, which no longer holds them); the revision documents are then
deleted, so every index of those scopes reads them whole (finding nothing) at its next search. A
run stopped half way leaves the writes in flight until the next run finishes the erasure.

A summary also names the subject that stored it (`author`, in `summaries` and copied onto its
session as `summary.author`). In conversations that stay (the tenant's, where a subject's are
not told apart) a subject's erasure sets that `author` to null, by `_id`, only while it still
names the subject: the summary is the tenant's, the name is the subject's.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from pymongo.asynchronous.database import AsyncDatabase

from mongogate.engine.write_signal import WriteSignal
from mongogate.erasure import Declared, Redacted, Removed, Sweeping, Target
from mongogate.indexing import CHANGES, Coherence
from mongogate.leases import keep_unless, literal, same
from mongogate.memory import documents as md
from mongogate.memory.documents import SESSION_REVISIONS
from mongogate.memory.guard import KIND
from mongogate.values import Doc

#: between the tenant and the subject in a per-subject conversation's `tenant`
JOIN = "\x1f"


def conversations(target: Target) -> Doc:
    """The target's sessions, summaries and messages: the plain tenant or any subject of it (a
    range, which an index on `tenant` serves), or one subject's joined form."""
    if target.subject is not None:
        return {"tenant": target.tenant + JOIN + target.subject}
    # every string starting with tenant + U+001F sorts between it and tenant + U+0020
    joined = {"$gte": target.tenant + JOIN, "$lt": target.tenant + " "}
    return {"$or": [{"tenant": target.tenant}, {"tenant": joined}]}


def revisions(target: Target) -> Doc:
    """The revision documents of the target's conversation scopes (their `_id` is the stored
    `tenant`: `conversations` on `_id`): message search's, and the session ids' of completions,
    removed last, so every server's completion index reads the scope again (a new incarnation)."""
    if target.subject is not None:
        return {"_id": target.tenant + JOIN + target.subject}
    joined = {"$gte": target.tenant + JOIN, "$lt": target.tenant + " "}
    return {"$or": [{"_id": target.tenant}, {"_id": joined}]}


@asynccontextmanager
async def bracket(db: AsyncDatabase[Doc], target: Target, sweep: Sweeping) -> AsyncIterator[None]:
    """Around the erasure of conversations (module docstring): every scope of the target with a
    revision document, and its own scope, in flight until the erasure ends."""
    revs = db[md.MESSAGE_REVISIONS]
    keys = {str(d["_id"]) async for d in revs.find(revisions(target), {"_id": 1})}
    keys.add(target.tenant if target.subject is None else target.tenant + JOIN + target.subject)
    guard = Coherence(revs, db.name, WriteSignal.of(db.client), kind=KIND)
    async with guard.announcing(*sorted(keys), clock=sweep.clock):
        token = uuid.uuid4().hex
        for key in sorted(keys):  # no document is made here (it would only be deleted)
            await revs.update_one({"_id": key}, {"$set": {f"pending.{token}": sweep.clock.now()}})
        try:
            yield
        finally:  # also after a failure: every index of these scopes reads them whole once
            with anyio.CancelScope(shield=True):
                for key in sorted(keys):
                    with contextlib.suppress(Exception):
                        await revs.update_one(
                            {"_id": key}, {"$unset": {f"pending.{token}": ""}, "$inc": {"rev": CHANGES + 1}}
                        )


def authored(target: Target) -> Doc | None:
    """Summaries the subject stored in conversations that stay (any of its tenant's): `author`."""
    if target.subject is None:
        return None  # a tenant's erasure removes them
    return {"$and": [conversations(Target(target.tenant)), {"author": target.subject}]}


def published(target: Target) -> Doc | None:
    """Sessions showing a summary the subject stored (`summary.author`)."""
    if target.subject is None:
        return None
    return {"$and": [conversations(Target(target.tenant)), {"summary.author": target.subject}]}


def unattributed(target: Target, erasure_id: str) -> list[Doc]:
    """`author` set to null, only while it still names the subject."""
    return [keep_unless(same("author", target.subject), {"author": literal(None)})]


def unpublished(target: Target, erasure_id: str) -> list[Doc]:
    """The session's `summary.author` set to null, only while it still names the subject."""
    summary = {"$mergeObjects": ["$summary", {"author": literal(None)}]}
    return [keep_unless(same("summary.author", target.subject), {"summary": summary})]


#: what the receipt says of a tenant's erasure for the redactions
REMOVED_WITH_THEM = "a tenant's erasure removes its summaries: none is kept to redact"


def notes(target: Target) -> tuple[str, ...]:
    if target.subject is None:
        return ()
    return (
        'conversations stored for the whole tenant ([memory] conversations = "tenant", or '
        '[memory.long_term] scope = "tenant") carry no subject: a subject\'s erasure cannot tell '
        "them apart; they go with the tenant's (the summaries it stored there lose their author)",
    )


ERASURE = Declared(
    "memory",
    parts=(
        Removed("sessions", conversations),
        Removed("summaries", conversations),
        Removed("messages", conversations),
        Removed(md.MESSAGE_INDEX, conversations),
        Removed(md.MESSAGE_REVISIONS, revisions),
        Redacted("summaries", authored, unattributed, REMOVED_WITH_THEM),
        Redacted("sessions", published, unpublished, REMOVED_WITH_THEM),
        Removed(SESSION_REVISIONS, revisions),
    ),
    notes=notes,
    around=bracket,
)
