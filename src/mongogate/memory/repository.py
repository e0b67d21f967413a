"""The sessions and messages collections: every read and write of a session document's lease.

One place decides who may write into a session: the lease is taken here (`take_lease`; a
retry of the same turn takes it over), given back here (`give_back`), extended here
(`extend_lease`) and released here, in the same update that commits the turn's answer
(`commit_answer`); every message write numbers itself through the lease gate of
`memory/gate.py` (`gated_update`). `MemoryStore` (messages, windows, listing) and `Turns`
build on it; no other module touches a session's lease fields.

The commit point of a turn's final answer is one conditional update of the session document.
Why there and not in the message insert: "is this lease still the owner?" and "store the
answer" must be one atomic step, and MongoDB makes a single-document update atomic on every
deployment (no transaction needed). The update checks the lease, releases it, takes the
answer's sequence number from the session's counter and appends the answer to
`session.pending`, all at once. `settle` then writes the answer as an ordinary message and
pulls it from `pending`. A process that dies between the two leaves it in `pending`, and the
next writer of the session's document (`begin_turn`, `append`, `end_turn`) settles it first,
so a committed answer is never lost and never lands twice. `pending` is a list so that
concurrent commits (plain appends of answers of different turns) never wait for each other.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError, PyMongoError

from mongogate import leases
from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.config import MemorySettings
from mongogate.errors import Conflict, StorageError
from mongogate.memory.gate import SESSION_LEASE, SESSION_STATE, refusal, write_gate
from mongogate.memory.keys import MAX_TITLE_BYTES, answer_key, check_content, check_id
from mongogate.memory.model import AppendResult, key_conflict, session_not_found
from mongogate.values import Doc, check_finite

log = logging.getLogger(__name__)


def _literal(value: object) -> Doc:
    # Pipeline updates read "$x" strings as field paths: caller text must never be one.
    return {"$literal": value}


class SessionRepository:
    """The `sessions` and `messages` collections of one database, and the session-document rules."""

    def __init__(self, db: AsyncDatabase[Doc], settings: MemorySettings, clock: Clock = SYSTEM_CLOCK) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock
        self.sessions: AsyncCollection[Doc] = db["sessions"]
        self.messages: AsyncCollection[Doc] = db["messages"]
        #: test seam: called at named points between a write and its acknowledgement
        self.fault: Callable[[str], None] | None = None

    def at(self, point: str) -> None:
        if self.fault is not None:
            self.fault(point)

    def check_id(self, value: object, what: str) -> str:
        return check_id(value, what, self.settings.max_id_length)

    def check_text(self, value: object, what: str) -> str:
        return check_content(value, what, self.settings.max_message_bytes)

    # ---------------------------------------------------------------- the session document

    async def create_session(self, tenant: str, title: str | None = None, metadata: Doc | None = None) -> str:
        if title is not None:
            check_content(title, "title", MAX_TITLE_BYTES)
        check_finite(metadata, "metadata")
        session_id = uuid.uuid4().hex
        now = self.clock.now()
        doc: Doc = {
            "_id": session_id,
            "tenant": tenant,
            "title": title,
            "metadata": metadata or {},
            "next_seq": 0,
            "locked_by": None,
            "locked_until": None,
            "lease_turn": None,
            "created_at": now,
            "last_activity": now,
        }
        try:
            await self.sessions.insert_one(doc)
        except PyMongoError as e:
            raise StorageError("could not create the session") from e
        return session_id

    # ---------------------------------------------------------------- the lease

    async def state(self, tenant: str, sid: str, *, what: str) -> Doc | None:
        """The session's lease and pending answers (`SESSION_STATE`); None if missing or another tenant's."""
        try:
            return await self.sessions.find_one({"_id": sid, "tenant": tenant}, SESSION_STATE)
        except PyMongoError as e:
            raise StorageError(what) from e

    async def take_lease(
        self, tenant: str, sid: str, tid: str, digest: str, lease_id: str, now: datetime, ttl: int
    ) -> Doc | None:
        """One conditional update: free, expired, or held by this same turn (a retry takes it over).

        Returns the session as it was before, so a begin_turn that turns out to have nothing to
        do (answered, conflicting text) can give the previous holder its lease back.
        """
        mine = {"lease_turn": tid, "lease_text": digest}
        try:
            return await self.sessions.find_one_and_update(
                {"_id": sid, "tenant": tenant, "$or": [*leases.free_conditions(now), mine]},
                {"$set": {"locked_by": lease_id, "locked_until": now + timedelta(milliseconds=ttl), **mine}},
                projection=SESSION_STATE,
                return_document=ReturnDocument.BEFORE,
            )
        except PyMongoError as e:
            raise StorageError("could not take the session lease") from e

    async def give_back(self, tenant: str, sid: str, lease_id: str, before: Doc) -> None:
        """Undo a take: restore the previous holder's lease (expired or not), only if still ours.

        A begin_turn that ends with nothing to do must not fence an owner whose lease merely
        expired. Cleanup never replaces the original error; a lease left behind is taken over by
        a retry of the same turn.
        """
        previous = {k: before.get(k) for k in SESSION_LEASE}
        try:
            await self.sessions.update_one(
                {"_id": sid, "tenant": tenant, "locked_by": lease_id}, {"$set": previous}
            )
        except PyMongoError as e:
            log.warning(
                "could not give back lease %s of session %s (%s); a retry of the same turn takes it over",
                lease_id,
                sid,
                type(e).__name__,
            )

    async def extend_lease(
        self, tenant: str, sid: str, tid: str, lease_id: str, ttl: int, now: datetime
    ) -> Doc | None:
        """Heartbeat: the session with its new expiry, or None if this lease no longer owns `tid`."""
        match = {"_id": sid, "tenant": tenant, "lease_turn": tid}
        try:
            return await leases.extend(self.sessions, match, lease_id, ttl, now)
        except PyMongoError as e:
            raise StorageError("could not renew the session lease") from e

    # ---------------------------------------------------------------- gated writes and the commit point

    async def commit_answer(
        self, tenant: str, sid: str, tid: str, text: str, *, lease_id: str | None
    ) -> AppendResult:
        """Store `tid`'s answer if the lease gate lets the caller (`memory/gate.py`): with
        `lease_id`, only while that lease owns the session for this turn; without one (plain
        `append`), only while the session is free or its expired lease belongs to another turn.

        Raises the gate's error (`lease_lost`, `lease_busy`, `conflict`, `invalid_input`) when
        refused, or `conflict` when the key already holds other text.
        """
        key = answer_key(tid)
        next_seq = {"$add": ["$next_seq", 1]}
        pending = {
            "key": _literal(key),
            "turn_id": _literal(tid),
            "content": _literal(text),
            "lease_id": _literal(lease_id),
            "seq": next_seq,
            "at": _literal(self.clock.now()),
        }
        queued = {"$concatArrays": [{"$ifNull": ["$pending", []]}, [pending]]}
        update: Doc = {"next_seq": next_seq, "pending": queued, "last_activity": pending["at"]}
        if lease_id is not None:  # committing ends the turn: the lease is released in the same step
            update |= {"locked_by": None, "locked_until": None, "lease_turn": None}
        doc = await self.gated_update(
            tenant,
            sid,
            tid,
            lease_id,
            [{"$set": update}],
            {"pending": 1, "next_seq": 1},
            what=f"could not store the answer of turn {tid!r}",
            final_answer=lease_id is None,
        )
        self.at("answer.after_commit")
        mine = next(p for p in doc["pending"] if p["seq"] == doc["next_seq"])
        status, seq = await self.settle(tenant, sid, mine, raise_conflict=True)
        return AppendResult(status, key, seq)

    async def gated_update(
        self,
        tenant: str,
        sid: str,
        tid: str,
        lease_id: str | None,
        update: Doc | list[Doc],
        projection: Doc,
        *,
        what: str,
        final_answer: bool = False,
    ) -> Doc:
        """Apply `update` to the session only if the lease gate (`memory/gate.py`) lets this writer
        write for `tid` now; the session after the update, or the gate's error saying why not.

        Every message write numbers itself through here, so "may I write?" and "my seq" are one
        atomic step. A refusal first settles answers a crashed writer left on the session.
        """
        for _ in range(3):
            now = self.clock.now()
            try:
                doc = await self.sessions.find_one_and_update(
                    {
                        "_id": sid,
                        "tenant": tenant,
                        **write_gate(tid, lease_id, now, final_answer=final_answer),
                    },
                    update,
                    projection=projection,
                    return_document=ReturnDocument.AFTER,
                )
                current = None
                if doc is None:
                    current = await self.sessions.find_one({"_id": sid, "tenant": tenant}, SESSION_STATE)
            except PyMongoError as e:
                raise StorageError(what) from e
            if doc is not None:
                return doc
            if current is None:
                raise session_not_found(sid)
            await self.settle_all(tenant, sid, current)  # e.g. this lease's own crashed commit
            refused = refusal(current, sid, tid, lease_id, now, final_answer=final_answer)
            if refused is not None:
                raise refused
        raise StorageError(f"{what} (its lease kept changing)", 1)

    async def settle_all(self, tenant: str, sid: str, session: Doc) -> None:
        """Settle every committed answer still parked on the session (a crashed writer's)."""
        for pending in session.get("pending") or []:
            await self.settle(tenant, sid, pending)

    async def settle(
        self, tenant: str, sid: str, pending: Doc, *, raise_conflict: bool = False
    ) -> tuple[str, int]:
        """Write a committed answer as a message (idempotent by key), then clear `pending`.

        Settling on behalf of another (crashed) writer never fails the caller: a conflict there
        means the key already holds an answer, which stands, and is only logged.
        """
        doc: Doc = {
            "session_id": sid,
            "tenant": tenant,
            "key": pending["key"],
            "seq": int(pending["seq"]),
            "turn_id": pending["turn_id"],
            "role": "assistant",
            "call_id": None,
            "content": pending["content"],
            "created_at": pending.get("at") or self.clock.now(),
            "lease_id": pending.get("lease_id"),
        }
        try:
            result = await self.insert_message(doc)
            if result == ("duplicate", int(pending["seq"])):
                result = ("inserted", int(pending["seq"]))  # our own commit, settled by a concurrent reader
        except Conflict:
            result = None
        self.at("answer.after_write")
        try:
            await self.sessions.update_one(
                {"_id": sid}, {"$pull": {"pending": {"key": pending["key"], "seq": pending["seq"]}}}
            )
        except PyMongoError as e:  # the next writer settles it again (the insert is idempotent)
            log.warning("could not clear the settled answer of session %s: %s", sid, type(e).__name__)
        if result is None:
            if raise_conflict:
                raise key_conflict(pending["key"])
            log.warning("session %s: committed answer %s conflicts with the stored one", sid, pending["key"])
            return "duplicate", int(pending["seq"])
        return result

    # ---------------------------------------------------------------- messages

    async def insert_message(self, doc: Doc) -> tuple[str, int]:
        """Insert; a key already stored is `duplicate` with the same role and content, else a conflict."""
        try:
            try:
                await self.messages.insert_one(doc)
                return "inserted", int(doc["seq"])
            except DuplicateKeyError:
                stored = await self.messages.find_one(
                    {"session_id": doc["session_id"], "key": doc["key"]}, {"seq": 1, "role": 1, "content": 1}
                )
        except PyMongoError as e:
            raise StorageError(f"could not append to session {doc['session_id']!r}") from e
        if stored is None:  # pragma: no cover - a unique-index hit always has a stored copy
            raise StorageError(f"could not read back message {doc['key']!r}")
        if stored.get("role") != doc["role"] or stored.get("content") != doc["content"]:
            raise key_conflict(doc["key"])
        return "duplicate", int(stored["seq"])

    async def find_message(self, tenant: str, session_id: str, key: str) -> Doc | None:
        try:
            return await self.messages.find_one({"session_id": session_id, "tenant": tenant, "key": key})
        except PyMongoError as e:
            raise StorageError("could not read the message") from e
