"""`mongogate worker`: run the registered agents on the configured database (or the embedded engine).

    mongogate worker [--config F] [--agents module:attr ...] [--duration S]
                     [--concurrency N] [--worker-id ID] [--metrics-port PORT]
    mongogate worker [--config F] --status [--json] [--state S] [--agent PATTERN] [--all]

Agents come from `--agents` references (``package.module:attr`` or ``path/to/file.py:attr``)
and from packages' ``mongogate.agents`` entry points. Run as many workers as you like, on
as many machines: each due tick runs once. Logs go to stderr; `--status` prints its table to
stdout and nothing else (a one-screen summary when there are many agents and no filter).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import anyio

from mongogate.config import SchedulerSettings, Settings, load_settings
from mongogate.db import Database
from mongogate.errors import ConfigError
from mongogate.scheduler.agents import Agent, AgentRegistry
from mongogate.scheduler.core import Scheduler
from mongogate.scheduler.stats import SchedulerStats
from mongogate.scheduler.status import STATES, SUMMARY_OVER, AgentStatus, print_status, select
from mongogate.scheduler.worker_metrics import WorkerMetrics

log = logging.getLogger("mongogate.worker")


@dataclass
class WorkerReport:
    stats: SchedulerStats | None = None
    status: list[AgentStatus] = field(default_factory=list)


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
            return WorkerReport(status=await scheduler.status())
        scheduler.observer = metrics  # type: ignore[attr-defined]  # read by scheduler/loop.py
        stop = stop or anyio.Event()
        async with anyio.create_task_group() as tg:
            if threading.current_thread() is threading.main_thread():
                tg.start_soon(_stop_on_signals, stop, tg.cancel_scope)
            stats = await scheduler.run(stop=stop, duration_s=duration_s)
            tg.cancel_scope.cancel()  # the signal watcher
        return WorkerReport(stats=stats, status=await scheduler.status())
    finally:
        await db.close()


def add_worker_parser(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of `mongogate worker` (the caller adds --config); sets ``func`` to `cmd_worker`."""
    p.add_argument(
        "--agents",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="agents to run: package.module:attr or path/to/file.py:attr (an Agent, AgentRegistry or list); "
        "repeatable",
    )
    p.add_argument(
        "--no-entry-points", action="store_true", help="ignore agents declared by installed packages"
    )
    p.add_argument(
        "--status",
        action="store_true",
        help="print each agent's state (running with its deadline, abandoned, orphaned, paused, late, ...), "
        "next slot, lag from it, missed slots and last error, then exit; works beside a running server",
    )
    p.add_argument("--json", action="store_true", help="with --status: one JSON object per line")
    p.add_argument(
        "--state",
        action="append",
        choices=STATES,
        help="with --status: only agents in this state (repeatable), e.g. late, abandoned, orphaned",
    )
    p.add_argument(
        "--agent", metavar="PATTERN", help="with --status: only agents matching a shell pattern ('billing-*')"
    )
    p.add_argument(
        "--all",
        action="store_true",
        help=f"with --status: the full table even for more than {SUMMARY_OVER} agents (default: a summary)",
    )
    p.add_argument(
        "--duration", type=float, metavar="S", help="stop after S seconds (default: until signalled)"
    )
    p.add_argument("--worker-id", help="name in logs and status (default host:pid:random)")
    default = SchedulerSettings.model_fields["concurrency"].default
    p.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help=f"ticks run at once by this worker (default: the setting scheduler.concurrency, {default})",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus /metrics (ticks, lag, drift per agent) on PORT at server.host",
    )
    p.set_defaults(func=cmd_worker)
    return p


def cmd_worker(args: argparse.Namespace) -> int:
    settings = load_settings(getattr(args, "config", None))
    if args.duration is not None and args.duration <= 0:
        raise ConfigError("--duration must be a positive number of seconds")
    if args.concurrency is not None and args.concurrency < 1:
        raise ConfigError("--concurrency must be at least 1")
    agents = (
        AgentRegistry() if args.status else collect_agents(args.agents, entry_points=not args.no_entry_points)
    )
    metrics = exporter = None
    port = getattr(args, "metrics_port", None)
    if port is not None and not args.status:
        if not 0 <= port <= 65535:
            raise ConfigError("--metrics-port must be a TCP port (0-65535)")
        metrics = WorkerMetrics()
        exporter = metrics.serve(port, settings.server.host)
        log.info("worker metrics at http://%s:%d/metrics", settings.server.host, exporter.server_port)
    try:
        report = anyio.run(
            lambda: run_worker(
                settings,
                agents,
                duration_s=args.duration,
                status_only=args.status,
                worker_id=args.worker_id,
                concurrency=args.concurrency,
                metrics=metrics,
            )
        )
    finally:
        if exporter is not None:
            exporter.shutdown()
            exporter.server_close()
    if args.status:
        chosen = select(report.status, args.state or (), args.agent)
        filtered = bool(args.state or args.agent or args.all)
        print_status(chosen, sys.stdout, as_json=args.json, summary=False if filtered else None)
    elif report.stats is not None:
        s = report.stats
        log.info(
            "ran %d ticks: %d ok, %d failed, %d timed out, %d slots skipped",
            s.claimed,
            s.ok,
            s.failed,
            s.timed_out,
            s.missed_slots,
        )
    return 0
