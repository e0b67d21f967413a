"""Listing, erasing and expiring sessions: what a user of memory expects besides turns.

- `list_sessions`: the caller's sessions, newest activity first, through the
  (tenant, last_activity desc, _id desc) index; the cursor is the last row's sort key, opaque to
  the caller (base64url of JSON) and always combined with the caller's tenant, so a forged one
  can only page through the caller's own sessions.
- `delete_session`: the session document first (every later write of a turn then finds no
  session and fails with `not_found`), then its messages, what search derived from them and its
  summaries, bracketed by the scope's revision (`memory/guard.py`: every message index drops the
  session). Idempotent: a repeat erases what a write in flight at the first call may still have landed.
- Retention (`memory.retention_days`): TTL indexes on `sessions.last_activity` and
  `messages.created_at` (and `summaries.created_at`, `message_index.created_at`); the server's
  TTL monitor erases what is older. Off: no TTL index.

`last_activity` is written by the existing single-document updates that number messages
(`append`'s `$inc`, the answer commit), so keeping it costs no extra round trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo import ASCENDING, DESCENDING
from pymongo.errors import PyMongoError

from mongogate.clock import as_utc
from mongogate.config import MemorySettings
from mongogate.errors import StorageError
from mongogate.indexes import IndexModel, ensure_indexes
from mongogate.keyset import after, decode_cursor, encode_cursor, newest_first
from mongogate.memory import documents as md
from mongogate.memory.guard import session
from mongogate.memory.repository import LEGACY_UNIQUE, SessionRepository
from mongogate.migrations import SESSION_ACTIVITY, Migrations
from mongogate.values import ByteBudget, Doc, check_int

#: sessions per list_sessions page: default and the most one call returns
PAGE_DEFAULT = 20
PAGE_MAX = 100
LIST_INDEX = "tenant_last_activity"
SESSION_TTL_INDEX = "last_activity_ttl"
MESSAGE_TTL_INDEX = "created_at_ttl"
DERIVED_TTL_INDEX = "message_index_created_at_ttl"
SUMMARY_TTL_INDEX = "summary_created_at_ttl"
LIST_FIELDS = {"title": 1, "created_at": 1, md.LAST_ACTIVITY: 1, md.NEXT_SEQ: 1}


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    title: str | None
    created_at: datetime
    last_activity_at: datetime
    #: seq of the session's latest message (0: none yet); seqs only grow, a few may be unused
    last_seq: int

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> SessionInfo:
        """A session as read from `sessions` (`documents.SessionDoc`, `LIST_FIELDS`)."""
        return cls(
            session_id=str(doc["_id"]),
            title=doc.get("title"),
            created_at=as_utc(doc["created_at"]),
            last_activity_at=as_utc(doc.get(md.LAST_ACTIVITY) or doc["created_at"]),
            last_seq=int(doc.get(md.NEXT_SEQ) or 0),
        )


@dataclass(frozen=True)
class SessionPage:
    sessions: list[SessionInfo]
    next_cursor: str | None
    #: the response byte cap ended the page early; `next_cursor` continues after its last row
    truncated: bool = False


def session_shape(info: SessionInfo) -> dict[str, object]:
    """A session as list_sessions returns it: what the response byte cap measures."""
    return {
        "session_id": info.session_id,
        "title": info.title,
        "created_at": info.created_at.isoformat(),
        "last_activity_at": info.last_activity_at.isoformat(),
        "last_seq": info.last_seq,
    }


@dataclass(frozen=True)
class Erased:
    deleted: bool  # False: no such session for this tenant (already erased, never existed, not theirs)
    messages_deleted: int


def retention_seconds(settings: MemorySettings) -> int | None:
    days = settings.retention_days
    return None if days is None else days * 86_400


def retention_line(settings: MemorySettings) -> str:
    """What `mongogate check` prints about retention."""
    days = settings.retention_days
    if days is None:
        return "retention: off (memory.retention_days unset; sessions and messages are kept)"
    return (
        f"retention: {days} day(s) (sessions idle longer and messages older are erased by TTL indexes "
        f"{SESSION_TTL_INDEX}, {MESSAGE_TTL_INDEX})"
    )


async def ensure_session_indexes(
    store: SessionRepository, migrations: Migrations, held: Mapping[str, Mapping[str, Doc]] | None = None
) -> None:
    """The listing index, `last_activity` on sessions written before it existed (until done once,
    or again after an older version started: mongogate/migrations.py), and retention. ``held``:
    each collection's indexes by name, if the caller read them (mongogate/indexes.py)."""
    try:
        listing = [("tenant", ASCENDING), (md.LAST_ACTIVITY, DESCENDING), ("_id", DESCENDING)]
        known = held or {}
        await ensure_indexes(store.sessions, [IndexModel(listing, name=LIST_INDEX)], known.get("sessions"))
        older = held is None or LEGACY_UNIQUE in known.get("messages", {})  # unknown: look
        if await migrations.needed(SESSION_ACTIVITY, older):
            await store.sessions.update_many(
                {md.LAST_ACTIVITY: {"$exists": False}}, [{"$set": {md.LAST_ACTIVITY: "$created_at"}}]
            )
            await migrations.record(SESSION_ACTIVITY)
        ttl = retention_seconds(store.settings)
        for coll_name, field, name in (
            ("sessions", md.LAST_ACTIVITY, SESSION_TTL_INDEX),
            ("messages", "created_at", MESSAGE_TTL_INDEX),
            ("summaries", "created_at", SUMMARY_TTL_INDEX),
            (md.MESSAGE_INDEX, "created_at", DERIVED_TTL_INDEX),
        ):
            await _ttl_index(store, coll_name, field, name, ttl, known.get(coll_name))
    except PyMongoError as e:
        raise StorageError("could not create the session indexes") from e


async def _ttl_index(
    store: SessionRepository,
    coll_name: str,
    field: str,
    name: str,
    ttl: int | None,
    held: Mapping[str, Doc] | None = None,
) -> None:
    """Make the TTL index match the setting: created, re-created with a new age, or dropped."""
    coll = store.db[coll_name]
    current = (await coll.index_information() if held is None else held).get(name)
    if current is not None and (ttl is None or current.get("expireAfterSeconds") != ttl):
        await coll.drop_index(name)
    if ttl is not None and (current is None or current.get("expireAfterSeconds") != ttl):
        await coll.create_index([(field, ASCENDING)], name=name, expireAfterSeconds=ttl)


def check_page_limit(limit: object) -> int:
    return check_int(limit, "limit", 1, PAGE_MAX, default=PAGE_DEFAULT, hint="sessions per page")


async def list_sessions(
    store: SessionRepository,
    tenant: str,
    limit: object = None,
    cursor: object = None,
    budget: ByteBudget | None = None,
) -> SessionPage:
    """The tenant's sessions, newest activity first; one indexed query per page, ended early by
    `budget` (the response byte cap) if given."""
    n = check_page_limit(limit)
    query: Doc = {"tenant": tenant}
    if cursor is not None:
        at, sid = decode_cursor(cursor, "list_sessions")
        query |= after(md.LAST_ACTIVITY, at, sid)
    try:
        found = store.sessions.find(query, LIST_FIELDS, sort=newest_first(md.LAST_ACTIVITY), limit=n + 1)
        docs = [d async for d in found]
    except PyMongoError as e:
        raise StorageError("could not list the sessions") from e
    rows: list[SessionInfo] = []
    for d in docs[:n]:
        row = SessionInfo.from_doc(d)
        if budget is not None and not budget.take(session_shape(row)):
            break
        rows.append(row)
    capped = budget is not None and budget.capped
    more = (len(docs) > n or capped) and rows
    page_end = encode_cursor(rows[-1].last_activity_at, rows[-1].session_id) if more else None
    return SessionPage(rows, page_end, truncated=capped)


async def delete_session(store: SessionRepository, tenant: str, session_id: object) -> Erased:
    """Erase the session, then its messages. Another tenant's session id is left alone and looks
    missing (`deleted` false), exactly like an id that never existed."""
    sid = store.check_id(session_id, "session_id")
    of = {"session_id": sid, "tenant": tenant}
    try:
        async with store.guard.writing(tenant, [session(sid)]):
            gone = await store.sessions.delete_one({"_id": sid, "tenant": tenant})
            store.at("delete_session.after_session")
            msgs = await store.messages.delete_many(of)
            await store.db[md.MESSAGE_INDEX].delete_many(of)
        await store.db["summaries"].delete_many(of)
    except PyMongoError as e:
        raise StorageError(f"could not erase session {sid!r}; call delete_session again") from e
    if gone.deleted_count:
        await store.changed(tenant, sid)
    return Erased(deleted=gone.deleted_count == 1, messages_deleted=msgs.deleted_count)
