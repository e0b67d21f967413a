"""Slots: which slot a claim runs, what it passes over, and how far start-up jitter may go.

A slot is a due time of the agent's schedule (`kinds`). The next slot is computed from the
previous slot, never from when the tick happened to be claimed, so cadence does not slip by
the claim latency. When slots were missed (the fleet was down, the agent was paused, a tick
outlasted several slots), the agent's misfire rules decide what happens:

- ``coalesce`` (default, = ``scheduler.catch_up = "skip"``): one run answers the oldest missed
  slot, then the schedule continues at the next slot in the future; the slots in between are
  counted (``missed_slots``), never run.
- no coalescing (``catch_up = "all"``): every missed slot runs, one claim after another.
- ``misfire_grace_s``: a run later than this past its slot is not run but skipped and counted
  (``misfired``); with coalescing the lateness is measured from the newest slot the run covers.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from mongogate.clock import truncate_ms, utc_or_none
from mongogate.scheduler.documents import CLAIM_FIELDS, OPEN, OPEN_DEADLINE
from mongogate.scheduler.kinds import Schedule, step
from mongogate.values import Doc

CatchUp = Literal["skip", "all"]

#: how long after its deadline an unreported tick counts as abandoned (its worker died): the
#: deadline cancels the tick and the outcome is written at once, so this only covers that write
REPORT_GRACE = timedelta(seconds=5)
_MS = timedelta(milliseconds=1)

__all__ = ["CLAIM_FIELDS", "REPORT_GRACE", "CatchUp", "Claim", "Plan", "jitter_bound", "plan", "step"]


@dataclass(frozen=True)
class Plan:
    #: the slot this claim runs; None: nothing runs (every due slot was past the misfire grace)
    run: datetime | None
    #: the slot after this claim (None: the schedule has no more slots)
    next: datetime | None
    #: slots passed over without a run (coalesced or misfired)
    missed: int
    #: of those, runs skipped because they were later than the misfire grace
    misfired: int


def plan(schedule: Schedule, slot: datetime, now: datetime, coalesce: bool, grace_s: float | None) -> Plan:
    """What a claim at `now` of the agent whose oldest unanswered slot is `slot` does."""
    grace = None if grace_s is None else timedelta(seconds=grace_s)
    if coalesce:
        newest, passed = schedule.newest(slot, now)
        nxt = schedule.after(newest)
        if grace is not None and now - newest > grace:
            return Plan(None, nxt, passed + 1, 1)
        return Plan(slot, nxt, passed, 0)
    s, skipped = slot, 0
    if grace is not None and now - slot > grace:
        # every slot at or before the cutoff is too late: jump past them (no slot-by-slot walk)
        newest, passed = schedule.newest(slot, now - grace - _MS)
        skipped = passed + 1
        n = schedule.after(newest)
        if n is None or n > now:
            return Plan(None, n, skipped, skipped)
        s = n
    return Plan(s, schedule.after(s), skipped, skipped)


def jitter_bound(
    jitter_max_s: float, schedule: Schedule, slot: datetime, now: datetime, grace_s: float | None
) -> float:
    """How far a restart may push an overdue agent's start: never onto or past its next slot (that
    slot would be lost), never past its misfire grace (the run would be skipped), at most jitter_max_s."""
    bound = max(0.0, jitter_max_s)
    newest, _ = schedule.newest(slot, now)
    nxt = schedule.after(newest)
    if nxt is not None:
        bound = min(bound, (nxt - now - _MS).total_seconds())
    if grace_s is not None:
        bound = min(bound, (newest + timedelta(seconds=grace_s) - now).total_seconds())
    return max(0.0, bound)


@dataclass(frozen=True)
class Claim:
    """One claim: the slot it answers, when it was taken, and until when its tick may run."""

    #: the slot this tick answers (its identity: one tick per (agent, scheduled_at))
    scheduled_at: datetime
    claimed_at: datetime
    #: the slot after this one (set by this claim); None when the schedule is done or paused
    next_run_at: datetime | None
    #: the tick is cancelled at this time
    deadline: datetime
    claim_id: str
    #: slots this claim passed over (coalesced, or skipped by the misfire grace)
    missed_slots: int = 0
    #: True: every due slot was past the misfire grace, so nothing runs (the slots are counted)
    skipped: bool = False
    #: an operator's `schedule run-now`, outside the agent's slots
    manual: bool = False
    #: earlier claims of this agent this one found expired without an outcome (their worker died)
    abandoned: int = 0

    @property
    def drift_s(self) -> float:
        """How late the tick was claimed, measured from its slot (not from a jittered start)."""
        return (self.claimed_at - self.scheduled_at).total_seconds()

    @property
    def expires_at(self) -> datetime:
        return truncate_ms(self.deadline + REPORT_GRACE)


def new_claim_id(slot: datetime) -> str:
    """Ordered by slot, unique per claim; also a field name under `open` (digits, '-', hex only)."""
    return f"{int(slot.timestamp() * 1000):015d}-{uuid.uuid4().hex[:12]}"


def open_claims(doc: Doc) -> dict[str, Doc]:
    """The claims of a schedule document whose tick has not reported (by claim id)."""
    found = doc.get(OPEN)
    return {k: v for k, v in found.items() if isinstance(v, dict)} if isinstance(found, dict) else {}


def claim_expiry(c: Doc) -> datetime | None:
    deadline = utc_or_none(c.get(OPEN_DEADLINE))
    return None if deadline is None else truncate_ms(deadline + REPORT_GRACE)


def live_and_expired(doc: Doc, now: datetime) -> tuple[dict[str, Doc], dict[str, Doc]]:
    """Open claims still within deadline + grace (running), and those past it (their worker died)."""
    live: dict[str, Doc] = {}
    expired: dict[str, Doc] = {}
    for cid, c in open_claims(doc).items():
        exp = claim_expiry(c)
        (live if exp is not None and now < exp else expired)[cid] = c
    return live, expired
