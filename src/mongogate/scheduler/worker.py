"""Running a worker's scheduler: until stopped (first SIGINT/SIGTERM: stop claiming and let running
ticks finish; second: cancel them), or only reading the agents' status.

`run_scheduler` drives a built `Scheduler`; `assembly.run_worker` opens the database, builds the
scheduler (`assembly.build_scheduler`) and calls it, and the `mongogate worker` command
(`cli/worker.py`) parses its arguments and calls that.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio

from mongogate.errors import ConfigError
from mongogate.scheduler.agents import AgentRegistry
from mongogate.scheduler.capacity import Capacity
from mongogate.scheduler.core import Scheduler
from mongogate.scheduler.stats import SchedulerStats
from mongogate.scheduler.status import AgentStatus

log = logging.getLogger(__name__)


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


def require_agents(registry: AgentRegistry) -> None:
    """A worker with no agents to run is a configuration error (before the database is opened)."""
    if not len(registry):
        raise ConfigError(
            "no agents to run: pass --agents package.module:attr (or file.py:attr), or install a package "
            'that declares [project.entry-points."mongogate.agents"]'
        )


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


async def run_scheduler(
    scheduler: Scheduler,
    *,
    duration_s: float | None = None,
    status_only: bool = False,
    stop: anyio.Event | None = None,
) -> WorkerReport:
    """Run the scheduler until `stop`, `duration_s`, or SIGINT/SIGTERM; or only read its agents' status.
    After a second signal (running ticks cancelled) the report has no stats."""
    if status_only:
        statuses = await scheduler.status()
        return WorkerReport(status=statuses, capacity=await scheduler.capacity(statuses))
    stop = stop or anyio.Event()
    stats: SchedulerStats | None = None  # a second signal cancels `run` before it returns them
    async with anyio.create_task_group() as tg:
        if threading.current_thread() is threading.main_thread():
            tg.start_soon(_stop_on_signals, stop, tg.cancel_scope)
        stats = await scheduler.run(stop=stop, duration_s=duration_s)
        tg.cancel_scope.cancel()  # the signal watcher
    if stop.is_set():  # stopped (a signal): exit now, without reading every agent's status
        return WorkerReport(stats=stats)
    return WorkerReport(stats=stats, status=await scheduler.status())
