"""Turns: take the session lease, record the user message, answer once, release.

Rules (docs/decisions/sessions-and-turns.md):
- The lease belongs to a turn. Retrying `begin_turn` for the turn that holds the lease (same
  session, turn id and text) takes it over at once with a new lease id; the earlier attempt is
  fenced out (its `end_turn` gets `lease_lost`), also when it was still inside `begin_turn`
  (it returns a lease already fenced). A different turn waits for release or expiry.
- A fenced turn is five round trips (docs/decisions/turn-write-path.md): begin_turn takes the
  lease and numbers the user message in one update by `_id`, inserts the user message and reads
  the window once (an answer a crashed end_turn left pending, missing from it, is written then);
  end_turn commits the answer and releases the lease in one update, then inserts the answer.
- The answer is committed on the session document together with the ownership check
  (`memory/repository.py`): once another lease owns the session, nothing of the old owner lands.
- A turn that was already answered returns the stored answer and holds no lease, so no model
  is asked twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mongogate import leases
from mongogate.clock import as_utc
from mongogate.errors import LeaseBusy, LeaseLost, StorageError
from mongogate.memory import documents as md
from mongogate.memory.gate import lease_lost, refusal
from mongogate.memory.keys import answer_key, message_id, message_key
from mongogate.memory.model import Context, Message, Summary, key_conflict, message_shape, session_not_found
from mongogate.memory.store import MemoryStore
from mongogate.values import RESPONSE_ENVELOPE, ByteBudget, Doc, json_size

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnStart:
    lease_id: str | None
    answered: bool
    answer: str | None = None
    messages: list[Message] = field(default_factory=list)
    truncated: bool = False
    lease_expires_at: str | None = None
    size_capped: bool = False
    #: summary + window (`memory/compaction.py`): set from the context read by `with_summary`
    summary: Summary | None = None
    unsummarized_bytes: int = 0
    compaction_advised: bool = False


def with_summary(start: TurnStart, ctx: Context) -> TurnStart:
    """The turn's start with the context's summary and compaction advice."""
    return dataclasses.replace(
        start,
        summary=ctx.summary,
        unsummarized_bytes=ctx.unsummarized_bytes,
        compaction_advised=ctx.compaction_advised,
    )


@dataclass(frozen=True)
class TurnEnd:
    status: str  # "inserted" | "duplicate"
    seq: int


@dataclass(frozen=True)
class TurnRenewed:
    lease_id: str
    lease_expires_at: str


def fit_answer(ctx: Context, answer: str, max_bytes: int | None) -> Context:
    """An answered turn returns its answer besides the window: leave out the window's oldest
    messages until both fit `max_bytes` (the window again starting at a user message)."""
    if max_bytes is None:
        return ctx
    room = max_bytes - RESPONSE_ENVELOPE - json_size(answer)
    sizes = [json_size(message_shape(vars(m))) + 1 for m in ctx.messages]
    total, cut = sum(sizes), 0
    while total > room and cut < len(sizes):
        total -= sizes[cut]
        cut += 1
    if cut == 0:
        return ctx
    rest = ctx.messages[cut:]
    first_user = next((i for i, m in enumerate(rest) if m.role == "user"), 0)
    return dataclasses.replace(ctx, messages=rest[first_user:], truncated=True, size_capped=True)


def user_doc(tenant: str, sid: str, tid: str, text: str, seq: int, now: datetime) -> Doc:
    key = message_key(tid, "user", None)
    return {
        "_id": message_id(sid, key),
        "session_id": sid,
        "tenant": tenant,
        "key": key,
        "seq": seq,
        "turn_id": tid,
        "role": "user",
        "call_id": None,
        "content": text,
        "created_at": now,
    }


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Turns:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.settings = store.settings
        self.clock = store.clock

    def _lease_ms(self, lease_ms: object) -> int:
        return leases.check_lease_ms(lease_ms, self.settings.lease_ms, self.settings.max_lease_ms)

    async def begin_turn(
        self,
        tenant: str,
        session_id: object,
        turn_id: object,
        text: object,
        lease_ms: object = None,
        *,
        max_bytes: int | None = None,
    ) -> TurnStart:
        """Take the lease, store the user message, return the context (within `max_bytes` as JSON)."""
        st = self.store
        sid = st.check_id(session_id, "session_id")
        tid = st.check_id(turn_id, "turn_id")
        body = st.check_text(text, "text")
        ttl = self._lease_ms(lease_ms)
        lease_id = leases.new_lease_id()
        digest = text_digest(body)
        taken = await self._take(tenant, sid, tid, digest, lease_id, ttl, max_bytes)
        if isinstance(taken, TurnStart):
            return taken
        doc, now = taken
        expires = (now + timedelta(milliseconds=ttl)).isoformat()
        previous = doc.get(md.LEASE_PREV) or {}
        try:
            st.at("begin_turn.after_lease")
            # The user message, numbered by the take (while this lease owned the session).
            pending = doc.get(md.PENDING) or []
            user = user_doc(tenant, sid, tid, body, int(doc[md.LEASE_SEQ]), now)
            repeated = 0 in await st.insert_turn(tenant, sid, [], user)
            # The answer is looked up beyond the window only if one can exist: a fenced turn is
            # answered after its user message, so only when that was stored already, and not when
            # taken over from this turn's own lease (answering releases it, and a plain answer is
            # refused while it is held); a session given plain answers (`append`) may hold one
            # without its user message.
            own = previous.get(md.LEASE_TURN) == tid and previous.get(md.LOCKED_BY) is not None
            look_up = (repeated and not own) or bool(doc.get(md.PLAIN_ANSWERS))
            ctx, answer = await self._context_and_answer(
                tenant, sid, tid, max_bytes, pending=pending, look_up=look_up, session=doc
            )
            if repeated:  # a retry of this turn (or a key reused): the stored user message must match
                await self._check_user_message(tenant, sid, tid, body, ctx)
        except BaseException:
            await st.give_back(tenant, sid, lease_id, previous)
            raise
        if answer is not None:
            # Already answered: nothing to do, so the lease goes back to whoever had it.
            await st.give_back(tenant, sid, lease_id, previous)
            start = TurnStart(None, True, answer, ctx.messages, ctx.truncated, size_capped=ctx.size_capped)
            return with_summary(start, ctx)
        start = TurnStart(lease_id, False, None, ctx.messages, ctx.truncated, expires, ctx.size_capped)
        return with_summary(start, ctx)

    async def _take(
        self, tenant: str, sid: str, tid: str, digest: str, lease_id: str, ttl: int, max_bytes: int | None
    ) -> tuple[Doc, datetime] | TurnStart:
        """The session as this lease took it and when; or, when the turn was answered already, its
        start (no lease taken)."""
        st = self.store
        for _ in range(3):
            now = self.clock.now()
            doc = await st.take_lease(tenant, sid, tid, digest, lease_id, now, ttl)
            if doc is None:
                raise session_not_found(sid)
            if doc.get(md.LOCKED_BY) == lease_id:
                return doc, now
            if doc.get(md.ANSWERED_TURN) == tid and doc.get(md.ANSWERED_TEXT) == digest:
                return await self._replay(tenant, sid, tid, doc, max_bytes)
            # Busy with another turn; this turn may have been answered long ago (a late retry).
            await st.settle_all(tenant, sid, doc)  # an answer committed by a crashed end_turn lands first
            ctx, answer = await self._context_and_answer(tenant, sid, tid, max_bytes, session=doc)
            if answer is not None:
                done = TurnStart(None, True, answer, ctx.messages, ctx.truncated, size_capped=ctx.size_capped)
                return with_summary(done, ctx)
            if doc.get(md.LOCKED_UNTIL) is not None:
                until, left = leases.remaining_ms(doc, now)
                if left > 0:
                    raise LeaseBusy(f"session {sid!r}", until, left)
        raise StorageError("the session lease kept changing while it was being taken", retry_after_s=1)

    async def _replay(self, tenant: str, sid: str, tid: str, doc: Doc, max_bytes: int | None) -> TurnStart:
        """The session's last fenced turn, asked again: its answer without taking the lease."""
        pending = doc.get(md.PENDING) or []
        ctx, answer = await self._context_and_answer(
            tenant, sid, tid, max_bytes, pending=pending, look_up=True, session=doc
        )
        if answer is None:  # pragma: no cover - only if its messages were erased meanwhile
            raise StorageError(f"the answer of turn {tid!r} is no longer stored", retry_after_s=1)
        done = TurnStart(None, True, answer, ctx.messages, ctx.truncated, size_capped=ctx.size_capped)
        return with_summary(done, ctx)

    async def _check_user_message(self, tenant: str, sid: str, tid: str, body: str, ctx: Context) -> None:
        key = message_key(tid, "user", None)
        found = ctx.find(key)
        stored = vars(found) if found is not None else await self.store.find_message(tenant, sid, key)
        if stored is not None and (stored.get("role") != "user" or stored.get("content") != body):
            raise key_conflict(key)

    async def _context_and_answer(
        self,
        tenant: str,
        sid: str,
        tid: str,
        max_bytes: int | None,
        *,
        pending: list[Doc] | None = None,
        look_up: bool = True,
        session: Doc | None = None,
    ) -> tuple[Context, str | None]:
        """The window, and the turn's answer if stored: in the window, among the `pending` answers,
        or (`look_up`) found by key beyond the window.

        `pending`: the answers parked on the session. Normally each is already stored (a commit
        parks its answer, then inserts it) and the newest is in the window: nothing more to do.
        One missing from the window (a crashed end_turn's) is written now, and the window read
        again if it belongs inside; one older than the window is written without a read (a
        duplicate when stored)."""
        st = self.store
        ctx = await self._window(tenant, sid, max_bytes, pending or [], session)
        key = answer_key(tid)
        found = ctx.find(key)
        if found is not None:
            return fit_answer(ctx, found.content, max_bytes), found.content
        parked = next((p for p in pending or [] if p.get("key") == key), None)
        stored = (
            parked if parked is not None else (await st.find_message(tenant, sid, key) if look_up else None)
        )
        answer = stored["content"] if stored is not None else None
        return (fit_answer(ctx, answer, max_bytes) if answer is not None else ctx), answer

    async def _window(
        self, tenant: str, sid: str, max_bytes: int | None, pending: list[Doc], session: Doc | None
    ) -> Context:
        """The window, with the `pending` answers missing from it written first (and the window
        read again when one belongs inside it)."""
        st = self.store
        budget = ByteBudget(max_bytes) if max_bytes is not None else None
        ctx = await st.context(tenant, sid, self.settings.default_context_limit, budget, session=session)
        missing = [p for p in pending if ctx.find(p["key"]) is None]
        if missing:
            await st.insert_turn(tenant, sid, missing, None)
            oldest = ctx.messages[0].seq if ctx.messages else None
            if oldest is None or any(int(p["seq"]) >= oldest for p in missing):
                budget = ByteBudget(max_bytes) if max_bytes is not None else None
                ctx = await st.context(
                    tenant, sid, self.settings.default_context_limit, budget, session=session
                )
        return ctx

    async def renew_turn(
        self, tenant: str, session_id: object, turn_id: object, lease_id: object, lease_ms: object = None
    ) -> TurnRenewed:
        """Heartbeat: push the lease's expiry out, only while this lease still owns the session."""
        st = self.store
        sid = st.check_id(session_id, "session_id")
        tid = st.check_id(turn_id, "turn_id")
        lid = st.check_id(lease_id, "lease_id")
        ttl = self._lease_ms(lease_ms)
        now = self.clock.now()
        doc = await st.extend_lease(tenant, sid, tid, lid, ttl, now)
        if doc is None:
            raise session_not_found(sid)
        if doc.get(md.LOCKED_BY) != lid or doc.get(md.LEASE_TURN) != tid:
            raise refusal(doc, sid, tid, lid, now) or lease_lost(lid, sid)
        return TurnRenewed(lid, as_utc(doc[md.LOCKED_UNTIL]).isoformat())

    async def end_turn(
        self, tenant: str, session_id: object, turn_id: object, lease_id: object, reply: object
    ) -> TurnEnd:
        st = self.store
        sid = st.check_id(session_id, "session_id")
        tid = st.check_id(turn_id, "turn_id")
        lid = st.check_id(lease_id, "lease_id")
        body = st.check_text(reply, "reply")
        try:
            result = await st.commit_answer(tenant, sid, tid, body, lease_id=lid)
        except LeaseLost:
            stored = await st.find_message(tenant, sid, answer_key(tid))
            if stored is None or stored.get("lease_id") != lid:
                raise
            # This lease already stored the reply (an acknowledgement was lost).
            if stored.get("content") != body:
                raise key_conflict(answer_key(tid)) from None
            return TurnEnd("duplicate", int(stored["seq"]))
        st.at("end_turn.after_reply_write")
        return TurnEnd(result.status, result.seq)
