"""A session as a list of items (the OpenAI Agents SDK's `Session`, `mongogate/openai_agents.py`),
on the same `sessions` and `messages` documents as every conversation and the same counter.

Each call of the adapter is one write here: `add` reserves a block of `next_seq` values with one
atomic `$inc` on the session (creating it on first use, by an insert: both flat in the collection's
size on the embedded engine), then inserts the block, so the items of one call stay together and
in order whatever runs beside it; `latest` reads the newest (or all of them, in replies under
the wire limit), `pop` deletes the newest, `clear` erases the session. Each write of messages is
bracketed by its scope's revision (`memory/guard.py`). The session's `_id` is the adapter's
(derived from the tenant), so every read and write is by `_id` or by (session, tenant). `name` is
the session as its caller knows it, for the errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError, PyMongoError

from mongogate.errors import StorageError
from mongogate.memory.documents import (
    LAST_ACTIVITY,
    LEASE_TURN,
    LOCKED_BY,
    LOCKED_UNTIL,
    MESSAGE_INDEX,
    NEXT_SEQ,
    SEQ,
    SESSION_ID,
    TENANT,
    MessageDoc,
)
from mongogate.memory.guard import message, session
from mongogate.memory.keys import message_id
from mongogate.memory.repository import SessionRepository
from mongogate.values import Doc, bson


async def add(
    repo: SessionRepository,
    tenant: str,
    sid: str,
    items: Sequence[tuple[str, str]],
    *,
    turn: str,
    new: Doc,
    name: str,
) -> None:
    """Store `items` ((role, content) each) as the session's next messages, keyed `<turn>:<seq>`;
    `new` holds the title and metadata of a session created by this call."""
    try:
        end = await reserve(repo, tenant, sid, len(items), new=new, name=name)
        first = end - len(items) + 1
        now = repo.clock.now()
        docs: list[MessageDoc] = [
            {
                "_id": message_id(sid, f"{turn}:{first + i}"),
                "session_id": sid,
                "tenant": tenant,
                "key": f"{turn}:{first + i}",
                "seq": first + i,
                "turn_id": turn,
                "role": role,
                "call_id": None,
                "content": content,
                "created_at": now,
            }
            for i, (role, content) in enumerate(items)
        ]
        ids = [d["_id"] for d in docs]
        async with repo.guard.writing(tenant, map(message, ids)):
            await repo.messages.insert_many([bson(d) for d in docs], ordered=True)
    except PyMongoError as e:
        raise StorageError(f"could not add items to session {name!r}") from e
    repo.guard.wrote(tenant, ids)


async def reserve(repo: SessionRepository, tenant: str, sid: str, n: int, *, new: Doc, name: str) -> int:
    """The last of `n` seqs reserved on the session (created on first use); one atomic `$inc`."""
    now = repo.clock.now()
    on_insert: Doc = {
        TENANT: tenant,
        "created_at": now,
        **new,
        LOCKED_BY: None,
        LOCKED_UNTIL: None,
        LEASE_TURN: None,
    }
    # By `_id` alone (the id is the tenant's), and created by an insert, not an upsert: both flat
    # in the collection's size on the embedded engine.
    for _ in range(2):  # two first uses at once: one creates, the other's insert retries
        doc = await repo.sessions.find_one_and_update(
            {"_id": sid},
            {"$inc": {NEXT_SEQ: n}, "$set": {LAST_ACTIVITY: now}},
            projection={NEXT_SEQ: 1, TENANT: 1},
            return_document=ReturnDocument.AFTER,
        )
        if doc is not None:
            if doc.get(TENANT) != tenant:  # pragma: no cover - the id hashes the tenant
                raise StorageError(f"session {name!r} belongs to another tenant")
            return int(doc[NEXT_SEQ])
        try:
            await repo.sessions.insert_one({"_id": sid, **on_insert, NEXT_SEQ: n, LAST_ACTIVITY: now})
        except DuplicateKeyError:
            continue
        await repo.changed(tenant, sid)
        return n
    raise StorageError(f"could not create session {name!r}; retry")


async def latest(
    repo: SessionRepository, tenant: str, sid: str, n: int | None, *, batch: int, name: str
) -> list[str]:
    """The contents of the newest `n` messages (None: every message), oldest first, read in
    replies of at most `batch` documents (`values.reply_batch`): a long session is never one reply."""
    try:
        if n is None:
            found = repo.messages.find(_of(tenant, sid), _CONTENT, sort=[(SEQ, ASCENDING)], batch_size=batch)
            return [str(d["content"]) for d in await found.to_list()]
        found = repo.messages.find(
            _of(tenant, sid), _CONTENT, sort=[(SEQ, DESCENDING)], limit=n, batch_size=batch
        )
        docs = await found.to_list()
    except PyMongoError as e:
        raise StorageError(f"could not read session {name!r}") from e
    return [str(d["content"]) for d in reversed(docs)]


async def pop(repo: SessionRepository, tenant: str, sid: str, *, name: str) -> str | None:
    """Delete the newest message; its content (None: there was none)."""
    try:
        async with repo.guard.writing(tenant) as changes:
            doc: Any = await repo.messages.find_one_and_delete(
                _of(tenant, sid), projection={"content": 1}, sort=[(SEQ, DESCENDING)]
            )
            if doc is not None:
                changes.append(message(str(doc["_id"])))
                await repo.db[MESSAGE_INDEX].delete_one({"_id": doc["_id"]})
    except PyMongoError as e:
        raise StorageError(f"could not pop from session {name!r}") from e
    return None if doc is None else str(doc["content"])


async def clear(repo: SessionRepository, tenant: str, sid: str, *, name: str) -> None:
    """Erase the session's messages, then the session."""
    try:
        async with repo.guard.writing(tenant, [session(sid)]):
            await repo.messages.delete_many(_of(tenant, sid))
            await repo.db[MESSAGE_INDEX].delete_many(_of(tenant, sid))
            gone = await repo.sessions.delete_one({"_id": sid, TENANT: tenant})
    except PyMongoError as e:
        raise StorageError(f"could not clear session {name!r}") from e
    if gone.deleted_count:
        await repo.changed(tenant, sid)


_CONTENT: Doc = {"content": 1, "_id": 0}


def _of(tenant: str, sid: str) -> Doc:
    return {SESSION_ID: sid, TENANT: tenant}
