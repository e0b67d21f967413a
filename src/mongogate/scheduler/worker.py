"""Running a worker: the registered agents on the configured database (or the embedded engine).

`run_worker` opens the database, runs a `Scheduler` until stopped (first SIGINT/SIGTERM: stop
claiming and let running ticks finish; second: cancel them) or only reads the agents' status.
The `mongogate worker` command (`cli/worker.py`) parses its arguments and calls it; an
embedder can call it directly.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import anyio

from mongogate.config import Settings
from mongogate.db import Database
from mongogate.errors import ConfigError
from mongogate.scheduler.agents import Agent, AgentRegistry
from mongogate.scheduler.capacity import Capacity
from mongogate.scheduler.core import Scheduler
from mongogate.scheduler.stats import SchedulerStats
from mongogate.scheduler.status import AgentStatus
from mongogate.scheduler.worker_metrics import WorkerMetrics

log = logging.getLogger("mongogate.worker")


@dataclass
class WorkerReport:
    stats: SchedulerStats | None = None
    status: list[AgentStatus] = field(default_factory=list)
    #: with status_only: ticks due/s against ticks run/s, and whether the fleet keeps up
    capacity: Capacity | None = None


def collect_agents(refs: Sequence[str] = (), *, entry_points: bool = True) -> AgentRegistry:
    registry = AgentRegistry()
    for ref in refs:
        registry.load_ref(ref)
    if entry_points:
        registry.load_entry_points()
    return registry


async def _stop_on_signals(stop: anyio.Event, scope: anyio.CancelScope) -> None:
    """First SIGINT/SIGTERM: stop claiming and let running ticks finish. Second: cancel them."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if stop.is_set():
                log.warning("second %s: cancelling running ticks", signal.Signals(signum).name)
                scope.cancel()
                return
            log.warning("%s: stopping after the running ticks finish", signal.Signals(signum).name)
            stop.set()


async def run_worker(
    settings: Settings,
    agents: Iterable[Agent] | AgentRegistry,
    *,
    duration_s: float | None = None,
    status_only: bool = False,
    worker_id: str | None = None,
    stop: anyio.Event | None = None,
    concurrency: int | None = None,
    metrics: WorkerMetrics | None = None,
) -> WorkerReport:
    """Run the agents until `stop`, `duration_s`, or SIGINT/SIGTERM; or only read their status."""
    registry = agents if isinstance(agents, AgentRegistry) else AgentRegistry(agents)
    if not status_only and not len(registry):
        raise ConfigError(
            "no agents to run: pass --agents package.module:attr (or file.py:attr), or install a package "
            'that declares [project.entry-points."mongogate.agents"]'
        )
    db = Database(settings.database, settings.server.data_dir)
    await db.open()
    try:
        await db.ping()
        scheduler = Scheduler(
            db.memory,
            registry,
            settings.scheduler,
            worker_id,
            concurrency=concurrency,
            memory=settings.memory,
        )
        if status_only:
            statuses = await scheduler.status()
            return WorkerReport(status=statuses, capacity=await scheduler.capacity(statuses))
        scheduler.observer = metrics  # what the loop reports to (scheduler/loop.py)
        stop = stop or anyio.Event()
        async with anyio.create_task_group() as tg:
            if threading.current_thread() is threading.main_thread():
                tg.start_soon(_stop_on_signals, stop, tg.cancel_scope)
            stats = await scheduler.run(stop=stop, duration_s=duration_s)
            tg.cancel_scope.cancel()  # the signal watcher
        if stop.is_set():  # stopped (a signal): exit now, without reading every agent's status
            return WorkerReport(stats=stats)
        return WorkerReport(stats=stats, status=await scheduler.status())
    finally:
        await db.close()
