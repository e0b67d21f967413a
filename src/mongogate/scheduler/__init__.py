"""Periodic agents on MongoDB alone: agents, their schedule, investigations and the worker command.

Never imports `mongogate.cli`: the CLI imports this package, not the other way round.
"""

from __future__ import annotations

from mongogate.scheduler.agents import (
    ENTRY_POINT_GROUP,
    Agent,
    AgentRegistry,
    TickContext,
    TickFn,
    agents_from,
)
from mongogate.scheduler.core import SCHEDULE_COLLECTION, Scheduler, default_worker_id
from mongogate.scheduler.investigations import Investigation, Investigations, OpenResult
from mongogate.scheduler.slots import Claim
from mongogate.scheduler.stats import SchedulerStats
from mongogate.scheduler.status import AgentStatus

__all__ = [
    "ENTRY_POINT_GROUP",
    "SCHEDULE_COLLECTION",
    "Agent",
    "AgentRegistry",
    "AgentStatus",
    "Claim",
    "Investigation",
    "Investigations",
    "OpenResult",
    "Scheduler",
    "SchedulerStats",
    "TickContext",
    "TickFn",
    "agents_from",
    "default_worker_id",
]
