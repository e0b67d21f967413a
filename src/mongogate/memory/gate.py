"""Who may write into a session right now: the lease gate, as a filter and as a diagnosis.

Every message write carries the gate in the same atomic update that numbers the message
(`$inc` of `next_seq`, or the answer commit), so a writer that lost the session can never
land a message inside another turn:
- with a lease id: only while that lease owns the session for this turn;
- without one: while the session is free, its lease has expired, or it is leased to this
  same turn (a turn's tool results may come from another worker of the same turn);
- a turn's final answer without a lease: only while the session is free or its expired
  lease belongs to another turn (the holder of this turn's lease may still end it).
"""

from __future__ import annotations

from datetime import datetime

from mongogate import leases
from mongogate.errors import Conflict, InvalidInput, LeaseBusy, LeaseLost, MongogateError
from mongogate.memory import documents as md
from mongogate.values import Doc

#: what a session's lease is made of (`lease_text`: digest of the leased turn's text)
SESSION_LEASE = (md.LOCKED_BY, md.LOCKED_UNTIL, md.LEASE_TURN, md.LEASE_TEXT)
#: projection of everything the gate and the commit point decide from
SESSION_STATE = dict.fromkeys((*SESSION_LEASE, md.PENDING), 1)


def write_gate(tid: str, lease_id: str | None, now: datetime, *, final_answer: bool = False) -> Doc:
    if lease_id is not None:
        return {md.LOCKED_BY: lease_id, md.LEASE_TURN: tid}
    if final_answer:
        return {"$or": [{md.LOCKED_BY: None}, {md.LOCKED_UNTIL: {"$lte": now}, md.LEASE_TURN: {"$ne": tid}}]}
    return {"$or": [*leases.free_conditions(now), {md.LEASE_TURN: tid}]}


def lease_lost(lid: str, sid: str) -> LeaseLost:
    return LeaseLost(
        f"lease {lid!r} no longer owns session {sid!r} (a retry of the turn took it over, it expired "
        "and another turn took it, it was released, or it was never issued); nothing was written. "
        "Call begin_turn again."
    )


class AnswerHeld(Conflict):
    """The final answer of a leased turn: only `end_turn` with that lease may store it."""

    def __init__(self, session: Doc) -> None:
        self.session = session
        super().__init__(
            "this turn's answer is being produced under the session lease: only end_turn with that "
            "lease may store it (begin_turn the same turn again to take the lease over); nothing was written"
        )


def refusal(
    session: Doc, sid: str, tid: str, lease_id: str | None, now: datetime, *, final_answer: bool = False
) -> MongogateError | None:
    """Why the gate refused, from the session's state; None if it would pass now (state changed)."""
    holder, turn = session.get(md.LOCKED_BY), session.get(md.LEASE_TURN)
    if lease_id is not None:
        if holder == lease_id and turn == tid:
            return None
        if holder == lease_id:
            return InvalidInput(
                f"turn {tid!r} was not begun under lease {lease_id!r} (it is the lease of turn "
                f"{turn!r}); use the turn you began"
            )
        return lease_lost(lease_id, sid)
    live = holder is not None and session.get(md.LOCKED_UNTIL) is not None
    until, left = leases.remaining_ms(session, now) if live else (None, 0)
    if final_answer and holder is not None and turn == tid:
        return AnswerHeld(session)
    if until is not None and left > 0 and turn != tid:
        return LeaseBusy(f"session {sid!r}", until, left)
    return None
