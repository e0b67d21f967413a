"""The scheduler's stored documents, in one place: their shapes (`TypedDict`) and field names.

Three collections: `agent_schedule` (one document per agent: its schedule, its open claims and
its last outcome), `agent_workers` (one per worker: the agents it registers, when it was last
seen) and `investigations` (work items agents open). Code that writes or queries these documents
names their fields through the constants here; code that reads them goes through a reader
(`OpenClaim.from_doc`, `Fleet` in `fleet.py`, `AgentStatus.from_doc`, `Investigation.from_doc`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, TypedDict

from mongogate.clock import utc_or_none
from mongogate.values import Doc

SCHEDULE_COLLECTION: Final = "agent_schedule"
WORKERS_COLLECTION: Final = "agent_workers"
INVESTIGATIONS_COLLECTION: Final = "investigations"

# ---------------------------------------------------------------- agent_schedule
ID: Final = "_id"
AGENT_KEY: Final = "agent_key"
#: the slot the next tick answers (kept through start-up jitter: status measures lag from it)
DUE_AT: Final = "due_at"
#: when the next tick may be claimed; null while paused, orphaned or done (out of the scan)
NEXT_RUN_AT: Final = "next_run_at"
#: the claims whose tick has not reported, by claim id (`OpenClaimDoc`)
OPEN: Final = "open"
SCHEDULE: Final = "schedule"
KIND: Final = "kind"
INTERVAL_S: Final = "interval_s"
CREATED_AT: Final = "created_at"
PAUSED: Final = "paused"
PAUSED_AT: Final = "paused_at"
PAUSED_BY: Final = "paused_by"
RESUMED_AT: Final = "resumed_at"
#: an operator's `schedule run-now` (`RunNowDoc`), until a claim takes it
RUN_NOW: Final = "run_now"
#: set when a worker parks the document of an agent no worker registers
ORPHANED_AT: Final = "orphaned_at"
# counters, moved by claims
TICKS: Final = "ticks"
MISSED_SLOTS: Final = "missed_slots"
MISFIRED: Final = "misfired"
ABANDONED: Final = "abandoned"
LAST_ABANDONED: Final = "last_abandoned"
# the last outcome, written by the tick that finished
LAST_STATUS: Final = "last_status"
LAST_ERROR: Final = "last_error"
LAST_DURATION_S: Final = "last_duration_s"
LAST_FINISHED_AT: Final = "last_finished_at"
DRIFT_S: Final = "drift_s"
LAST_SCHEDULED_AT: Final = "last_scheduled_at"
LAST_RUN_AT: Final = "last_run_at"
LAST_WORKER: Final = "last_worker"

#: what a claim needs to read from a schedule document
CLAIM_FIELDS: Final = {AGENT_KEY: 1, NEXT_RUN_AT: 1, DUE_AT: 1, OPEN: 1, PAUSED: 1, RUN_NOW: 1}


#: an open claim's deadline (`OpenClaimDoc`): past it and `slots.REPORT_GRACE`, the claim is abandoned
OPEN_DEADLINE: Final = "deadline"


class OpenClaimDoc(TypedDict):
    """One claim under `open`: who runs it, which slot, since when, cancelled at `deadline`."""

    worker: str
    slot: datetime
    claimed_at: datetime
    deadline: datetime


class RunNowDoc(TypedDict):
    at: datetime
    by: str


class ScheduleDoc(TypedDict, total=False):
    """An agent's schedule document (`_id` is the agent key)."""

    _id: str
    agent_key: str
    schedule: str
    kind: str
    interval_s: float | None
    due_at: datetime | None
    next_run_at: datetime | None
    created_at: datetime
    open: dict[str, OpenClaimDoc]
    paused: bool
    paused_at: datetime
    paused_by: str
    resumed_at: datetime
    run_now: RunNowDoc
    orphaned_at: datetime
    ticks: int
    missed_slots: int
    misfired: int
    abandoned: int
    last_abandoned: OpenClaimDoc
    last_status: str | None
    last_error: str | None
    last_duration_s: float | None
    last_finished_at: datetime
    drift_s: float
    last_scheduled_at: datetime
    last_run_at: datetime
    last_worker: str


class OutcomeDoc(TypedDict):
    """What a finished tick writes to its schedule document (`ticks.py`)."""

    last_status: str
    last_error: str | None
    last_duration_s: float
    last_finished_at: datetime
    drift_s: float
    last_scheduled_at: datetime
    last_run_at: datetime
    last_worker: str


def agent_key(doc: Doc) -> str:
    """The agent a schedule document belongs to (documents before `agent_key`: their `_id`)."""
    return str(doc.get(AGENT_KEY, doc[ID]))


def next_run_at(doc: Doc) -> datetime | None:
    return utc_or_none(doc.get(NEXT_RUN_AT))


def due_at(doc: Doc) -> datetime | None:
    return utc_or_none(doc.get(DUE_AT))


@dataclass(frozen=True)
class OpenClaim:
    """A claim under `open`, as read."""

    worker: str | None
    slot: datetime | None
    claimed_at: datetime | None
    deadline: datetime | None

    @classmethod
    def from_doc(cls, d: Doc) -> OpenClaim:
        worker = d.get("worker")
        return cls(
            worker=None if worker is None else str(worker),
            slot=utc_or_none(d.get("slot")),
            claimed_at=utc_or_none(d.get("claimed_at")),
            deadline=utc_or_none(d.get(OPEN_DEADLINE)),
        )


def open_claim_doc(worker: str, slot: datetime, claimed_at: datetime, deadline: datetime) -> OpenClaimDoc:
    return {"worker": worker, "slot": slot, "claimed_at": claimed_at, "deadline": deadline}


# ---------------------------------------------------------------- agent_workers
AGENTS: Final = "agents"
STARTED_AT: Final = "started_at"
SEEN_AT: Final = "seen_at"
#: ticks claimed per second at the last heartbeat; present only while the worker runs the claim loop
TICKS_PER_S: Final = "ticks_per_s"


class WorkerDoc(TypedDict, total=False):
    """A worker: the agents it registers, when it started and was last seen, its claim rate."""

    _id: str
    agents: list[str]
    started_at: datetime
    seen_at: datetime
    ticks_per_s: float


# ---------------------------------------------------------------- investigations
TENANT: Final = "tenant"
TRIGGER_SIGNATURE: Final = "trigger_signature"
STATUS: Final = "status"
OPENED_AT: Final = "opened_at"
TITLE: Final = "title"
DETAILS: Final = "details"
CLOSED_AT: Final = "closed_at"
RESOLUTION: Final = "resolution"


class InvestigationDoc(TypedDict):
    """A work item an agent opened; at most one active (open, in_progress) per (tenant, agent, trigger)."""

    _id: str
    tenant: str
    agent_key: str
    trigger_signature: str
    status: str
    title: str
    details: Doc
    opened_at: datetime
    closed_at: datetime | None
    resolution: str | None
