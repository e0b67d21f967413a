"""Resumable runs: checkpoints guarded by a lease and a monotonic version, with an event log."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mongogate.lazy import lazy_exports
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

if TYPE_CHECKING:
    from mongogate.runs.erase import ERASURE
else:  # what `erase` reads, never a started server
    __getattr__ = lazy_exports(__name__, {"ERASURE": "mongogate.runs.erase"})

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
