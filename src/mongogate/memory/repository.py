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

A fenced turn (a lease id) takes, renews and commits by `_id` alone (`memory/fenced.py`: flat in
the collection's size on the embedded engine) and does not pull its answer from `pending` after
writing it: the copy stays parked until the next write under a lease (a leased append,
`number_leased`, or the commit) drops every answer below its lease's `lease_seq` (each was
written by that lease's begin_turn before it returned the lease), or a plain writer settles it
(`settle_with`: in its message's insert). Parked answers are only ever copies of stored messages or answers
still to write.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from mongogate import leases
from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.config import MemorySettings
from mongogate.errors import Conflict, StorageError
from mongogate.memory import documents as md
from mongogate.memory import fenced
from mongogate.memory.gate import SESSION_LEASE, SESSION_STATE, lease_lost, refusal, write_gate
from mongogate.memory.guard import MessageGuard
from mongogate.memory.keys import MAX_TITLE_BYTES, answer_key, check_content, check_id
from mongogate.memory.messages import MessageWrites, answer_doc
from mongogate.memory.model import AppendResult, key_conflict, session_not_found
from mongogate.values import Doc, check_finite

log = logging.getLogger(__name__)


_literal = leases.literal
#: what begin_turn and renew_turn decide from (`memory/fenced.py`)
TAKE_FIELDS = {
    **SESSION_STATE,
    **dict.fromkeys(("tenant", md.NEXT_SEQ, md.LEASE_SEQ, md.LEASE_PREV), 1),
    **dict.fromkeys((md.ANSWERED_TURN, md.ANSWERED_TEXT, md.PLAIN_ANSWERS), 1),
    md.SUMMARY: 1,  # the newest compaction, published on the session (memory/compaction.py)
}
#: what a fenced commit decides from
COMMIT_FIELDS = {**SESSION_STATE, **dict.fromkeys(("tenant", md.NEXT_SEQ, md.COMMIT_NONCE), 1)}
#: what a leased append decides from
NUMBER_FIELDS = {**SESSION_STATE, **dict.fromkeys(("tenant", md.NEXT_SEQ), 1)}
#: the previous version's unique (session_id, key) index of `messages` and `summaries` (mongogate/keyed.py)
LEGACY_UNIQUE = "session_key_unique"


class SessionRepository(MessageWrites):
    """The `sessions` and `messages` collections of one database, and the session-document rules."""

    def __init__(self, db: AsyncDatabase[Doc], settings: MemorySettings, clock: Clock = SYSTEM_CLOCK) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock
        self.sessions: AsyncCollection[Doc] = db["sessions"]
        self.messages: AsyncCollection[Doc] = db["messages"]
        #: test seam: called at named points between a write and its acknowledgement
        self.fault: Callable[[str], None] | None = None
        #: every write of messages is bracketed by its scope's revision (`memory/guard.py`)
        self.guard = MessageGuard(db, clock, self.at)
        self.legacy_messages = True
        #: the same for `summaries` (`memory/compaction.py`)
        self.legacy_summaries = True
        #: told after a session is created or deleted: (its stored `tenant`, its id). The assembly
        #: moves the completion index's revision there (tools/session_ids.py); None: nobody listens
        self.on_change: Callable[[str, str], Awaitable[None]] | None = None

    def at(self, point: str) -> None:
        if self.fault is not None:
            self.fault(point)

    def check_id(self, value: object, what: str) -> str:
        return check_id(value, what, self.settings.max_id_length)

    async def changed(self, tenant: str, sid: str) -> None:
        """A session was created or deleted (`on_change`). Told after the write, so a listener
        never reads a change before it is made; a failure to tell only costs its listener a
        session it misses until it reads the scope again, so it is logged, never raised."""
        if self.on_change is None:
            return
        try:
            await self.on_change(tenant, sid)
        except Exception as e:  # the write is done; the caller gets its answer
            log.warning("session %s: its change was not recorded for completions: %s", sid, type(e).__name__)

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
            md.NEXT_SEQ: 0,
            md.LOCKED_BY: None,
            md.LOCKED_UNTIL: None,
            md.LEASE_TURN: None,
            "created_at": now,
            md.LAST_ACTIVITY: now,
        }
        try:
            await self.sessions.insert_one(doc)
        except PyMongoError as e:
            raise StorageError("could not create the session") from e
        await self.changed(tenant, session_id)
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
        """One update by `_id` (`memory/fenced.py` `take`): the lease is taken if free, expired, or
        held by this same turn and text (a retry takes it over), unless the turn is answered; the
        user message's seq is numbered in the same step.

        Returns the session after the update (None: missing or another tenant's); the lease was
        taken if and only if `locked_by` is `lease_id`. `lease_prev` is the lease as it was, for
        `give_back`; `pending` the answers to write before the user message.
        """
        update = fenced.take(tenant, tid, digest, lease_id, now, now + timedelta(milliseconds=ttl))
        try:
            doc = await self.sessions.find_one_and_update(
                {"_id": sid}, update, projection=TAKE_FIELDS, return_document=ReturnDocument.AFTER
            )
        except PyMongoError as e:
            raise StorageError("could not take the session lease") from e
        return doc if doc is not None and doc.get("tenant") == tenant else None

    async def give_back(self, tenant: str, sid: str, lease_id: str, previous: Doc) -> None:
        """Undo a take: restore the previous holder's lease (expired or not), only if still ours.

        A begin_turn that ends with nothing to do must not fence an owner whose lease merely
        expired. Cleanup never replaces the original error; a lease left behind is taken over by
        a retry of the same turn.
        """
        restored = {k: previous.get(k) for k in SESSION_LEASE}
        try:
            await self.sessions.update_one({"_id": sid}, fenced.give_back(lease_id, restored))
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
        """Heartbeat, one update by `_id`: the session after it (None: missing or another tenant's).
        The lease was extended if and only if it is `lease_id`'s for `tid`."""
        update = fenced.renew(tenant, tid, lease_id, now + timedelta(milliseconds=ttl))
        try:
            doc = await self.sessions.find_one_and_update(
                {"_id": sid}, update, projection=TAKE_FIELDS, return_document=ReturnDocument.AFTER
            )
        except PyMongoError as e:
            raise StorageError("could not renew the session lease") from e
        return doc if doc is not None and doc.get("tenant") == tenant else None

    async def number_leased(self, tenant: str, sid: str, tid: str, lease_id: str) -> Doc:
        """A message's seq under the lease, one update by `_id` (`fenced.number`, flat in the
        collection's size): the session after it, whose `pending` holds only the answers the lease
        cannot vouch for (normally none), or the gate's error, nothing written."""
        now = self.clock.now()
        try:
            doc = await self.sessions.find_one_and_update(
                {"_id": sid},
                fenced.number(tenant, tid, lease_id, now),
                projection=NUMBER_FIELDS,
                return_document=ReturnDocument.AFTER,
            )
        except PyMongoError as e:
            raise StorageError(f"could not append to session {sid!r}") from e
        if doc is None or doc.get("tenant") != tenant:
            raise session_not_found(sid)
        if doc.get("locked_by") == lease_id and doc.get("lease_turn") == tid:
            return doc
        await self.settle_all(tenant, sid, doc)  # e.g. this lease's own crashed commit
        raise refusal(doc, sid, tid, lease_id, now) or lease_lost(lease_id, sid)

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
        if lease_id is not None:
            return await self._commit_fenced(tenant, sid, tid, text, lease_id)
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
        # `plain_answers`: a turn may be answered without its user message, so begin_turn looks
        # an answer up beyond the window on this session (memory/turns.py).
        update: Doc = {
            md.NEXT_SEQ: next_seq,
            md.PENDING: queued,
            md.LAST_ACTIVITY: pending["at"],
            md.PLAIN_ANSWERS: True,
        }
        doc = await self.gated_update(
            tenant,
            sid,
            tid,
            lease_id,
            [{"$set": update}],
            {md.PENDING: 1, md.NEXT_SEQ: 1},
            what=f"could not store the answer of turn {tid!r}",
            final_answer=True,
        )
        self.at("answer.after_commit")
        mine = next(p for p in doc[md.PENDING] if p["seq"] == doc[md.NEXT_SEQ])
        status, seq = await self.settle(tenant, sid, mine, raise_conflict=True)
        return AppendResult(status, key, seq)

    async def _commit_fenced(self, tenant: str, sid: str, tid: str, text: str, lease_id: str) -> AppendResult:
        """End a leased turn in two round trips: one update by `_id` (`fenced.commit`: check the
        lease, number the answer, park it in `pending`, release the lease), then the answer's insert.

        The parked copy stays on the session until the next fenced commit drops it (every answer
        pending when a lease is taken is written by that begin_turn), or a plain writer settles it.
        """
        key = answer_key(tid)
        for _ in range(3):
            now = self.clock.now()
            nonce = uuid.uuid4().hex
            entry = {"key": key, "turn_id": tid, "content": text, "lease_id": lease_id, "at": now}
            try:
                doc = await self.sessions.find_one_and_update(
                    {"_id": sid},
                    fenced.commit(tenant, tid, lease_id, entry, nonce, now),
                    projection=COMMIT_FIELDS,
                    return_document=ReturnDocument.AFTER,
                )
            except PyMongoError as e:
                raise StorageError(f"could not store the answer of turn {tid!r}") from e
            if doc is None or doc.get("tenant") != tenant:
                raise session_not_found(sid)
            if doc.get(md.COMMIT_NONCE) == nonce:
                break
            await self.settle_all(tenant, sid, doc)  # e.g. this lease's own crashed commit
            refused = refusal(doc, sid, tid, lease_id, now)
            if refused is not None:
                raise refused
        else:
            raise StorageError(f"could not store the answer of turn {tid!r} (its lease kept changing)", 1)
        self.at("answer.after_commit")
        mine = next(p for p in doc[md.PENDING] if p["seq"] == doc[md.NEXT_SEQ])
        status, seq = await self.settle(tenant, sid, mine, raise_conflict=True, clear=False)
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
        for pending in session.get(md.PENDING) or []:
            await self.settle(tenant, sid, pending)

    async def settle(
        self, tenant: str, sid: str, pending: Doc, *, raise_conflict: bool = False, clear: bool = True
    ) -> tuple[str, int]:
        """Write a committed answer as a message (idempotent by key), then clear `pending`.

        Settling on behalf of another (crashed) writer never fails the caller: a conflict there
        means the key already holds an answer, which stands, and is only logged.
        """
        doc = answer_doc(tenant, sid, pending, self.clock.now())
        try:
            result = await self.insert_message(doc)
            if result == ("duplicate", int(pending["seq"])):
                result = ("inserted", int(pending["seq"]))  # our own commit, settled by a concurrent reader
        except Conflict:
            result = None
        self.at("answer.after_write")
        if clear:
            await self._clear_pending(sid, pending)
        if result is None:
            if raise_conflict:
                raise key_conflict(pending["key"])
            log.warning("session %s: committed answer %s conflicts with the stored one", sid, pending["key"])
            return "duplicate", int(pending["seq"])
        return result

    async def settle_with(self, tenant: str, sid: str, pending: list[Doc], doc: Doc) -> tuple[str, int]:
        """Insert `doc` (a message just numbered) with the answers still parked on the session, in
        one insert (those already stored are duplicates), then clear them: 2 round trips where
        `settle_all` then `insert_message` took 3 per answer and 1. `doc` is inserted or a
        `duplicate` as in `insert_message`; the parked answers' stored text is not compared (a
        conflict there means the stored answer stands, as in `settle`)."""
        repeated = await self.insert_turn(tenant, sid, pending, doc)
        self.at("answer.after_write")
        for entry in pending:
            await self._clear_pending(sid, entry)
        if len(pending) in repeated:
            return await self.stored_copy(doc)
        return "inserted", int(doc["seq"])

    async def _clear_pending(self, sid: str, pending: Doc) -> None:
        try:
            await self.sessions.update_one(
                {"_id": sid}, {"$pull": {md.PENDING: {"key": pending["key"], "seq": pending["seq"]}}}
            )
        except PyMongoError as e:  # the next writer settles it again (the insert is idempotent)
            log.warning("could not clear the settled answer of session %s: %s", sid, type(e).__name__)
