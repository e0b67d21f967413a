"""Compaction: the model's summary of a session's older messages, stored as one keyed document.

- One document per compaction in `summaries`, key `summary:<through_seq>`, `_id` session and key:
  a retry with the same text is `duplicate`, other text for the same `through_seq` a `conflict`.
  The newest `through_seq` supersedes the older summaries; nothing is deleted (`delete_session`
  and retention erase them with the session's messages).
- The write is gated like `append`: one conditional update of the session document (with a
  `lease_id`, only while that lease owns the session; without one, only while no live lease
  holds it), then the insert. A fenced owner lands nothing.
- `through_seq` ends on a turn boundary: its message is a turn's final answer, or the next
  message starts another turn with a user message. It must name a stored message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError, PyMongoError

from mongogate import leases
from mongogate.errors import Conflict, InvalidInput, LeaseBusy, LeaseLost, StorageError
from mongogate.indexes import IndexModel, ensure_indexes, held_indexes
from mongogate.keyed import keyed_id, retire_unique_once
from mongogate.memory import documents as md
from mongogate.memory.documents import SummaryDoc
from mongogate.memory.gate import SESSION_STATE, lease_lost
from mongogate.memory.keys import answer_key
from mongogate.memory.model import Summary, session_not_found
from mongogate.memory.repository import LEGACY_UNIQUE, SessionRepository
from mongogate.migrations import SUMMARY_IDS, Migrations
from mongogate.values import Doc, bson, check_int

SUMMARY_FIELDS = {"text": 1, "through_seq": 1, "created_at": 1, "author": 1, "_id": 0}


@dataclass(frozen=True)
class Compacted:
    status: str  # "inserted" | "duplicate"
    key: str
    through_seq: int


def summary_key(through_seq: int) -> str:
    # Ids may not hold ':' and roles are words, so no message key has a number after the first ':'.
    return f"summary:{through_seq}"


def summary_id(session_id: str, key: str) -> str:
    """A summary's `_id`: its session and key (`<session>:summary:<through_seq>`)."""
    return keyed_id(session_id, key)


def summary_conflict(key: str) -> Conflict:
    return Conflict(
        f"{key!r} is already stored with a different summary; nothing was written. A retry must send "
        "the same text; to summarise again, compact through a later turn"
    )


async def ensure_summary_indexes(
    repo: SessionRepository, migrations: Migrations, held: Mapping[str, Doc] | None = None
) -> None:
    """``held``: the summaries' indexes by name, if the caller read them (mongogate/indexes.py)."""
    coll = repo.db["summaries"]
    try:
        # Uniqueness is the derived `_id` (`summary_id`); the previous version's unique
        # (session_id, key) index stays only while its summaries do (mongogate/keyed.py).
        held = await held_indexes(coll) if held is None else held
        repo.legacy_summaries = await retire_unique_once(coll, LEGACY_UNIQUE, held, migrations, SUMMARY_IDS)
        through = IndexModel(
            [("session_id", ASCENDING), ("through_seq", DESCENDING)], name="session_through_desc"
        )
        await ensure_indexes(coll, [through], held)
    except PyMongoError as e:
        raise StorageError("could not create the summary indexes") from e


async def latest_summary(repo: SessionRepository, tenant: str, sid: str) -> Summary | None:
    """The session's newest summary (highest `through_seq`), or None."""
    try:
        d = await repo.db["summaries"].find_one(
            {"session_id": sid, "tenant": tenant}, SUMMARY_FIELDS, sort=[("through_seq", DESCENDING)]
        )
    except PyMongoError as e:
        raise StorageError("could not read the session summary") from e
    if d is None:
        return None
    return Summary.from_doc(d)


def summary_of(session: Doc) -> Summary | None:
    """The newest summary as published on the session document (`_publish`), or None: what a
    turn's lease take already returns, so `begin_turn` reads no summary of its own."""
    d = session.get(md.SUMMARY)
    if not isinstance(d, dict):
        return None
    return Summary.from_doc(d)


async def _publish(repo: SessionRepository, tenant: str, sid: str, doc: Doc) -> None:
    """Copy a stored summary onto its session when it is newer than the one there, in one update
    by `_id` (flat on the embedded engine; the tenant is checked inside the update). Idempotent:
    a retried compaction (`duplicate`) publishes again, so a crash between the insert and this
    update is repaired by the retry; until then context reads the previous summary and more
    messages, which is still the whole conversation."""
    through = int(doc["through_seq"])
    newer = {
        "$and": [
            leases.same("tenant", tenant),
            {"$gt": [through, {"$ifNull": ["$summary.through_seq", 0]}]},
        ]
    }
    published = {"text": doc["text"], "through_seq": through, "created_at": doc["created_at"]}
    value = leases.literal(published | {"author": doc.get("author")})
    try:
        await repo.sessions.update_one(
            {"_id": sid},
            [{"$set": {md.SUMMARY: {"$cond": [newer, value, leases.field_or_null(md.SUMMARY)]}}}],
        )
    except PyMongoError as e:
        raise StorageError(f"could not store the summary of session {sid!r}", retry_after_s=1) from e


async def compact(
    repo: SessionRepository,
    tenant: str,
    session_id: object,
    through_seq: object,
    summary: object,
    lease_id: object = None,
    *,
    author: str | None = None,
) -> Compacted:
    sid = repo.check_id(session_id, "session_id")
    lid = None if lease_id is None else repo.check_id(lease_id, "lease_id")
    through = check_int(through_seq, "through_seq", 1, 2**62, hint="the seq of a turn's last message")
    text = repo.check_text(summary, "summary")
    if not text.strip():
        raise InvalidInput("summary must not be empty")
    key = summary_key(through)
    coll = repo.db["summaries"]
    try:
        session = await _gate(repo, tenant, sid, lid)
    except (LeaseLost, LeaseBusy):
        stored = await _stored(repo, sid, tenant, key)
        if stored is not None and stored.get("text") == text and stored.get("lease_id") == lid:
            await _publish(repo, tenant, sid, stored)
            return Compacted("duplicate", key, through)  # a retry whose acknowledgement was lost
        raise
    await _check_boundary(repo, tenant, sid, through, int(session.get(md.NEXT_SEQ) or 0))
    doc: SummaryDoc = {
        "_id": summary_id(sid, key),
        "session_id": sid,
        "tenant": tenant,
        "key": key,
        "through_seq": through,
        "text": text,
        "lease_id": lid,
        "created_at": repo.clock.now(),
        "author": author,
    }
    try:
        await coll.insert_one(bson(doc))
    except DuplicateKeyError:
        stored = await _stored(repo, sid, tenant, key)
    except PyMongoError as e:
        raise StorageError(f"could not store the summary of session {sid!r}") from e
    else:
        await _publish(repo, tenant, sid, bson(doc))
        return Compacted("inserted", key, through)
    if stored is None or stored.get("text") != text:
        raise summary_conflict(key)
    await _publish(repo, tenant, sid, stored)
    return Compacted("duplicate", key, through)


async def _stored(repo: SessionRepository, sid: str, tenant: str, key: str) -> Doc | None:
    try:
        coll = repo.db["summaries"]
        doc = await coll.find_one({"_id": summary_id(sid, key)})
        if doc is None and repo.legacy_summaries:  # an ObjectId copy of the previous version
            doc = await coll.find_one({"session_id": sid, "key": key})
        return doc if doc is not None and doc.get("tenant") == tenant else None
    except PyMongoError as e:
        raise StorageError("could not read the session summary") from e


async def _gate(repo: SessionRepository, tenant: str, sid: str, lid: str | None) -> Doc:
    """The session, if this writer may write into it now (the same rule as a message write)."""
    for _ in range(3):
        now = repo.clock.now()
        gate: Doc = {md.LOCKED_BY: lid} if lid is not None else {"$or": leases.free_conditions(now)}
        try:
            doc = await repo.sessions.find_one_and_update(
                {"_id": sid, "tenant": tenant, **gate},
                {"$set": {md.LAST_ACTIVITY: now}},
                projection={md.NEXT_SEQ: 1},
                return_document=ReturnDocument.AFTER,
            )
            current = None
            if doc is None:
                current = await repo.sessions.find_one({"_id": sid, "tenant": tenant}, SESSION_STATE)
        except PyMongoError as e:
            raise StorageError(f"could not compact session {sid!r}") from e
        if doc is not None:
            return doc
        if current is None:
            raise session_not_found(sid)
        if lid is not None:
            raise lease_lost(lid, sid)
        if current.get(md.LOCKED_UNTIL) is not None:
            until, left = leases.remaining_ms(current, now)
            if left > 0:
                raise LeaseBusy(f"session {sid!r} (inside a turn, pass its lease_id)", until, left)
    raise StorageError(f"could not compact session {sid!r} (its lease kept changing)", 1)


async def _check_boundary(repo: SessionRepository, tenant: str, sid: str, through: int, newest: int) -> None:
    if through > newest:
        raise InvalidInput(
            f"through_seq {through} is beyond the newest message of session {sid!r} (seq {newest})"
        )
    base: Doc = {"session_id": sid, "tenant": tenant}
    try:
        last = await repo.messages.find_one({**base, "seq": through}, {"key": 1, "turn_id": 1})
        if last is None:
            raise InvalidInput(f"no message of session {sid!r} has seq {through}; name a turn's last message")
        if last.get("key") == answer_key(str(last.get("turn_id"))):
            return
        nxt = await repo.messages.find_one(
            {**base, "seq": {"$gt": through}}, {"role": 1, "turn_id": 1}, sort=[("seq", ASCENDING)]
        )
    except PyMongoError as e:
        raise StorageError(f"could not read the messages of session {sid!r}") from e
    if nxt is not None and nxt.get("role") == "user" and nxt.get("turn_id") != last.get("turn_id"):
        return
    raise InvalidInput(
        f"through_seq {through} is not on a turn boundary: it must be the seq of a turn's final answer "
        "(or of the last message before another turn's user message)"
    )
