"""Resumable runs: checkpoints guarded by a lease and a monotonic version, with an event log."""

from __future__ import annotations

from mongogate.runs.erase import ERASURE
from mongogate.runs.model import (
    DEFAULT_EVENTS_LIMIT,
    MAX_EVENTS_LIMIT,
    RUN_STATUSES,
    Checkpoint,
    EventPage,
    RunEvent,
    RunLease,
    RunStatus,
    SaveResult,
    run_key,
    run_not_found,
)
from mongogate.runs.service import Runs

__all__ = [
    "DEFAULT_EVENTS_LIMIT",
    "ERASURE",
    "MAX_EVENTS_LIMIT",
    "RUN_STATUSES",
    "Checkpoint",
    "EventPage",
    "RunEvent",
    "RunLease",
    "RunStatus",
    "Runs",
    "SaveResult",
    "run_key",
    "run_not_found",
]
