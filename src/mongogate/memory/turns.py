"""Turns: take the session lease, record the user message, answer once, release.

A replayed turn (the client crashed after the reply was stored) finds the stored
answer and returns it, so no model is asked twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pymongo.errors import PyMongoError

from mongogate.clock import SYSTEM_CLOCK, as_utc
from mongogate.errors import LeaseBusy, LeaseLost, StorageError
from mongogate.memory import lease
from mongogate.memory.keys import check_content
from mongogate.memory.store import Doc, MemoryStore, Message, session_not_found


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


class Turns:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.settings = store.settings

    def _lease_ms(self, lease_ms: object) -> int:
        return lease.check_lease_ms(lease_ms, self.settings.lease_ms, self.settings.max_lease_ms)

    async def begin_turn(
        self, tenant: str, session_id: object, turn_id: object, text: object, lease_ms: object = None
    ) -> TurnStart:
        st = self.store
        sid = st._id(session_id, "session_id")
        tid = st._id(turn_id, "turn_id")
        check_content(text, "text", self.settings.max_message_bytes)
        ttl = self._lease_ms(lease_ms)
        lease_id = lease.new_lease_id()
        match = {"_id": sid, "tenant": tenant}
        try:
            taken = await self._take(match, sid, lease_id, ttl)
        except PyMongoError as e:
            raise StorageError(f"could not take the session lease: {e}") from e
        try:
            await st.append(tenant, sid, tid, "user", text)
            answer = await st.find_message(sid, f"{tid}:assistant")
            # The lease update above already matched (session, tenant): no second session read.
            ctx = await st.window(sid, self.settings.default_context_limit)
        except BaseException:
            await lease.release(st.sessions, match, lease_id)
            raise
        if answer is not None:
            # Already answered: nothing to do, so the lease is released at once.
            await lease.release(st.sessions, match, lease_id)
            return TurnStart(None, True, answer["content"], ctx.messages, ctx.truncated)
        expires = as_utc(taken["locked_until"]).isoformat()
        return TurnStart(lease_id, False, None, ctx.messages, ctx.truncated, expires)

    async def _take(self, match: Doc, sid: str, lease_id: str, ttl: int) -> Doc:
        sessions = self.store.sessions
        for _ in range(5):
            taken = await lease.acquire(sessions, match, lease_id, ttl, SYSTEM_CLOCK.now())
            if taken is not None:
                return taken
            current = await sessions.find_one(match, {"locked_until": 1})
            if current is None:
                raise session_not_found(sid)
            until, left = (
                lease.remaining_ms(current, SYSTEM_CLOCK.now()) if current.get("locked_until") else (None, 0)
            )
            if until is not None and left > 0:
                raise LeaseBusy(f"session {sid!r}", until, left)
            # released (or expired) between our two reads: try again
        raise StorageError(f"could not take the lease of session {sid!r} after 5 attempts; retry")

    async def end_turn(
        self, tenant: str, session_id: object, turn_id: object, lease_id: object, reply: object
    ) -> TurnEnd:
        st = self.store
        sid = st._id(session_id, "session_id")
        tid = st._id(turn_id, "turn_id")
        lid = st._id(lease_id, "lease_id")
        check_content(reply, "reply", self.settings.max_message_bytes)
        match = {"_id": sid, "tenant": tenant}
        key = f"{tid}:assistant"
        try:
            # Ownership is checked, not extended: a worker that dies here must not hold the
            # session longer than its lease said. The reply's key makes a late write harmless.
            owned = await st.sessions.find_one({**match, "locked_by": lid}, {"_id": 1})
            if owned is None:
                if await st.sessions.find_one(match, {"_id": 1}) is None:
                    raise session_not_found(sid)
                stored = await st.find_message(sid, key)
                if stored is not None and stored.get("lease_id") == lid:
                    # This lease already stored the reply (an acknowledgement was lost).
                    return TurnEnd("duplicate", int(stored["seq"]))
                raise LeaseLost(
                    f"lease {lid!r} no longer owns session {sid!r} (it expired and was taken, was released, "
                    "or was never issued); nothing was written. Call begin_turn again."
                )
            result = await st.append(tenant, sid, tid, "assistant", reply, extra={"lease_id": lid})
            if st.fault is not None:
                st.fault("end_turn.after_reply_write")
            await lease.release(st.sessions, match, lid)
        except PyMongoError as e:
            raise StorageError(f"could not end the turn: {e}") from e
        return TurnEnd(result.status, result.seq)
