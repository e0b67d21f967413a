"""Fixed-rate slots: when an agent's ticks are due, what a claim skips, and how far jitter may go.

A slot is a due time on the agent's grid ``first_due + k * interval``. The next slot is computed
from the previous slot, never from when the tick happened to be claimed, so cadence does not
slip by the claim latency. When ticks were missed (the fleet was down, or a tick outlasted
several intervals), the catch-up policy decides what happens:

- ``skip`` (default): run once for the oldest missed slot, then continue at the next slot in
  the future; the slots passed over are counted (``missed_slots``), never run.
- ``all``: run every missed slot, one after another, until the schedule is in the future again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from mongogate.clock import truncate_ms

CatchUp = Literal["skip", "all"]

#: how long after its deadline an unreported tick counts as abandoned (its worker died): the
#: deadline cancels the tick and the outcome is written at once, so this only covers that write
REPORT_GRACE = timedelta(seconds=5)


def step(interval_s: float) -> timedelta:
    """The interval in whole milliseconds (what BSON dates hold), so slots add up exactly."""
    return timedelta(milliseconds=max(1, round(interval_s * 1000)))


def next_slot(due_at: datetime, interval_s: float, now: datetime, catch_up: CatchUp) -> tuple[datetime, int]:
    """The slot after `due_at`, and how many slots in between were skipped."""
    delta = step(interval_s)
    nxt = due_at + delta
    if catch_up == "all" or nxt > now:
        return nxt, 0
    passed = (now - due_at) // delta  # slots due_at + j*delta, 1 <= j <= passed, are all <= now
    return due_at + (passed + 1) * delta, passed


def jitter_bound(jitter_max_s: float, interval_s: float) -> float:
    """A restart delays an overdue agent by at most one interval (and by at most jitter_max_s)."""
    return max(0.0, min(jitter_max_s, interval_s))


@dataclass(frozen=True)
class Claim:
    """One claimed tick: the slot it answers, when it was taken, and until when it may run."""

    #: the slot this tick answers (its identity: one tick per (agent, scheduled_at))
    scheduled_at: datetime
    claimed_at: datetime
    #: the slot after this one (set by this claim)
    next_run_at: datetime
    #: the tick is cancelled at this time
    deadline: datetime
    claim_id: str
    #: slots this claim passed over (catch-up policy `skip`)
    missed_slots: int = 0

    @property
    def drift_s(self) -> float:
        """How late the tick was claimed, measured from its slot (not from a jittered start)."""
        return (self.claimed_at - self.scheduled_at).total_seconds()

    @property
    def expires_at(self) -> datetime:
        return truncate_ms(self.deadline + REPORT_GRACE)


def new_claim_id(slot: datetime) -> str:
    """Ordered by slot (slots of one agent only grow), so `$max` keeps the newest finished claim."""
    return f"{int(slot.timestamp() * 1000):015d}-{uuid.uuid4().hex[:12]}"


def is_finished(running: dict[str, object], finished_claim: object) -> bool:
    """Whether the claim in `running` has reported (`finished_claim` is the newest that did)."""
    rid = running.get("id")
    return isinstance(rid, str) and isinstance(finished_claim, str) and finished_claim >= rid
