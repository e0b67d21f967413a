"""Turns: take the session lease, record the user message, answer once, release.

Rules (docs/DECISIONS.md, "Turns"):
- The lease belongs to a turn. Retrying `begin_turn` for the turn that holds the lease (same
  session, turn id and text) takes it over at once with a new lease id; the earlier attempt is
  fenced out (its `end_turn` gets `lease_lost`). A different turn waits for release or expiry.
- The answer is committed on the session document together with the ownership check
  (`memory/answers.py`): once another lease owns the session, nothing of the old owner lands.
- A turn that was already answered returns the stored answer and holds no lease, so no model
  is asked twice.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from datetime import timedelta

from pymongo import ReturnDocument
from pymongo.errors import PyMongoError

from mongogate.clock import as_utc
from mongogate.errors import InvalidInput, LeaseBusy, LeaseLost, StorageError
from mongogate.memory import lease
from mongogate.memory.answers import LeaseRefused, commit_answer, settle_all
from mongogate.memory.keys import answer_key
from mongogate.memory.store import Context, MemoryStore, Message, key_conflict, session_not_found
from mongogate.values import Doc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnStart:
    lease_id: str | None
    answered: bool
    answer: str | None = None
    messages: list[Message] = field(default_factory=list)
    truncated: bool = False
    lease_expires_at: str | None = None


@dataclass(frozen=True)
class TurnEnd:
    status: str  # "inserted" | "duplicate"
    seq: int


@dataclass(frozen=True)
class TurnRenewed:
    lease_id: str
    lease_expires_at: str


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Turns:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.settings = store.settings
        self.clock = store.clock

    def _lease_ms(self, lease_ms: object) -> int:
        return lease.check_lease_ms(lease_ms, self.settings.lease_ms, self.settings.max_lease_ms)

    async def begin_turn(
        self, tenant: str, session_id: object, turn_id: object, text: object, lease_ms: object = None
    ) -> TurnStart:
        st = self.store
        sid = st.check_id(session_id, "session_id")
        tid = st.check_id(turn_id, "turn_id")
        body = st.check_text(text, "text")
        ttl = self._lease_ms(lease_ms)
        lease_id = lease.new_lease_id()
        digest = text_digest(body)
        for _ in range(3):
            taken = await self._take(tenant, sid, tid, digest, lease_id, ttl)
            if taken is not None:
                break
            # Busy with another turn; this turn may have been answered long ago (a late retry).
            ctx, answer = await self._context_and_answer(tenant, sid, tid)
            if answer is not None:
                return TurnStart(None, True, answer, ctx.messages, ctx.truncated)
            await self._raise_if_busy(tenant, sid)
        else:
            raise StorageError("the session lease kept changing while it was being taken", retry_after_s=1)
        try:
            st.at("begin_turn.after_lease")
            await settle_all(st, tenant, sid, taken)  # a crashed end_turn's answer lands first
            await st.append(tenant, sid, tid, "user", body)
            ctx, answer = await self._context_and_answer(tenant, sid, tid)
        except BaseException:
            await self._release_quietly(tenant, sid, lease_id)
            raise
        if answer is not None:
            # Already answered: nothing to do, so the lease is released at once.
            await self._release_quietly(tenant, sid, lease_id)
            return TurnStart(None, True, answer, ctx.messages, ctx.truncated)
        expires = as_utc(taken["locked_until"]).isoformat()
        return TurnStart(lease_id, False, None, ctx.messages, ctx.truncated, expires)

    async def _take(
        self, tenant: str, sid: str, tid: str, digest: str, lease_id: str, ttl: int
    ) -> Doc | None:
        """One conditional update: free, expired, or held by this same turn (a retry takes it over)."""
        now = self.clock.now()
        mine = {"lease_turn": tid, "lease_text": digest}
        try:
            return await self.store.sessions.find_one_and_update(
                {"_id": sid, "tenant": tenant, "$or": [*lease.free_filter(now)["$or"], mine]},
                {
                    "$set": {
                        "locked_by": lease_id,
                        "locked_until": now + timedelta(milliseconds=ttl),
                        **mine,
                    }
                },
                projection={"locked_until": 1, "pending": 1},
                return_document=ReturnDocument.AFTER,
            )
        except PyMongoError as e:
            raise StorageError("could not take the session lease") from e

    async def _raise_if_busy(self, tenant: str, sid: str) -> None:
        """After a refused take: not found, busy until when, or (released meanwhile) return to retry."""
        try:
            current = await self.store.sessions.find_one({"_id": sid, "tenant": tenant}, {"locked_until": 1})
        except PyMongoError as e:
            raise StorageError("could not read the session lease") from e
        if current is None:
            raise session_not_found(sid)
        if current.get("locked_until") is not None:
            until, left = lease.remaining_ms(current, self.clock.now())
            if left > 0:
                raise LeaseBusy(f"session {sid!r}", until, left)

    async def _context_and_answer(self, tenant: str, sid: str, tid: str) -> tuple[Context, str | None]:
        st = self.store
        ctx = await st.window(tenant, sid, self.settings.default_context_limit)
        key = answer_key(tid)
        found = ctx.find(key)
        if found is not None:
            return ctx, found.content
        stored = await st.find_message(tenant, sid, key)
        return ctx, (stored["content"] if stored is not None else None)

    async def _release_quietly(self, tenant: str, sid: str, lease_id: str) -> None:
        """Cleanup never replaces the original error; an unreleased lease is reclaimable by a retry."""
        try:
            await lease.release(self.store.sessions, {"_id": sid, "tenant": tenant}, lease_id)
        except PyMongoError as e:
            log.warning(
                "could not release lease %s of session %s (%s); a retry of the same turn takes it over",
                lease_id,
                sid,
                type(e).__name__,
            )

    async def renew_turn(
        self, tenant: str, session_id: object, turn_id: object, lease_id: object, lease_ms: object = None
    ) -> TurnRenewed:
        """Heartbeat: push the lease's expiry out, only while this lease still owns the session."""
        st = self.store
        sid = st.check_id(session_id, "session_id")
        tid = st.check_id(turn_id, "turn_id")
        lid = st.check_id(lease_id, "lease_id")
        ttl = self._lease_ms(lease_ms)
        match = {"_id": sid, "tenant": tenant, "lease_turn": tid}
        try:
            doc = await lease.extend(st.sessions, match, lid, ttl, self.clock.now())
            if doc is None and await st.sessions.find_one({"_id": sid, "tenant": tenant}, {"_id": 1}) is None:
                raise session_not_found(sid)
        except PyMongoError as e:
            raise StorageError("could not renew the session lease") from e
        if doc is None:
            raise self._lost(lid, sid)
        return TurnRenewed(lid, as_utc(doc["locked_until"]).isoformat())

    def _lost(self, lid: str, sid: str) -> LeaseLost:
        return LeaseLost(
            f"lease {lid!r} no longer owns session {sid!r} (a retry of the turn took it over, it expired "
            "and another turn took it, it was released, or it was never issued); nothing was written. "
            "Call begin_turn again."
        )

    async def end_turn(
        self, tenant: str, session_id: object, turn_id: object, lease_id: object, reply: object
    ) -> TurnEnd:
        st = self.store
        sid = st.check_id(session_id, "session_id")
        tid = st.check_id(turn_id, "turn_id")
        lid = st.check_id(lease_id, "lease_id")
        body = st.check_text(reply, "reply")
        try:
            result = await commit_answer(st, tenant, sid, tid, body, lease_id=lid)
            st.at("end_turn.after_reply_write")
            return TurnEnd(result.status, result.seq)
        except LeaseRefused as refused:
            session = refused.session
        if session.get("locked_by") == lid:  # this lease owns the session, for another turn
            raise InvalidInput(
                f"turn {tid!r} was not begun under lease {lid!r} (it is the lease of turn "
                f"{session.get('lease_turn')!r}); end the turn you began"
            )
        stored = await st.find_message(tenant, sid, answer_key(tid))
        if stored is not None and stored.get("lease_id") == lid:
            # This lease already stored the reply (an acknowledgement was lost).
            if stored.get("content") != body:
                raise key_conflict(answer_key(tid))
            return TurnEnd("duplicate", int(stored["seq"]))
        raise self._lost(lid, sid)
