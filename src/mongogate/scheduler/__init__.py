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
from mongogate.scheduler.erase import ERASURE
from mongogate.scheduler.events import TickEvent
from mongogate.scheduler.investigations import Investigation, Investigations, OpenResult
from mongogate.scheduler.loop import LoopObserver
from mongogate.scheduler.manage import Schedules
from mongogate.scheduler.slots import Claim
from mongogate.scheduler.stats import SchedulerStats
from mongogate.scheduler.status import STATES, SUMMARY_OVER, AgentStatus, print_status, select
from mongogate.scheduler.worker import WorkerReport, collect_agents, require_agents, run_scheduler
from mongogate.scheduler.worker_metrics import WorkerMetrics

__all__ = [
    "ENTRY_POINT_GROUP",
    "ERASURE",
    "SCHEDULE_COLLECTION",
    "STATES",
    "SUMMARY_OVER",
    "Agent",
    "AgentRegistry",
    "AgentStatus",
    "Claim",
    "Investigation",
    "Investigations",
    "LoopObserver",
    "OpenResult",
    "Scheduler",
    "SchedulerStats",
    "Schedules",
    "TickContext",
    "TickEvent",
    "TickFn",
    "WorkerMetrics",
    "WorkerReport",
    "agents_from",
    "collect_agents",
    "default_worker_id",
    "print_status",
    "require_agents",
    "run_scheduler",
    "select",
]
