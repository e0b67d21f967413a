"""`mongogate worker`: run the registered agents on the configured database (or the embedded engine).

    mongogate worker [--config F] [--agents module:attr ...] [--duration S]
                     [--concurrency N] [--worker-id ID] [--metrics-port PORT]
    mongogate worker [--config F] --status [--json] [--state S] [--agent PATTERN] [--all]

Agents come from `--agents` references (``package.module:attr`` or ``path/to/file.py:attr``)
and from packages' ``mongogate.agents`` entry points. Run as many workers as you like, on
as many machines: each due tick runs once. Logs go to stderr; `--status` prints its table to
stdout and nothing else (a one-screen summary when there are many agents and no filter).
The arguments (and the scheduler package behind them) are added only when `worker` (or no
command: help) is asked for, which keeps `serve`'s start-up short (benchmarks/startup.py);
the scheduler itself is imported when the command runs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import Any

import anyio

from mongogate.cli.common import settings_from
from mongogate.errors import ConfigError

log = logging.getLogger(__name__)


def register(
    sub: Any, with_config: Callable[[argparse.ArgumentParser], argparse.ArgumentParser], *, arguments: bool
) -> None:
    """`mongogate worker`; with `arguments`, its options too (they import the scheduler)."""
    p = with_config(sub.add_parser("worker", help="run scheduled agents"))
    if arguments:
        add_arguments(p)


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of `mongogate worker` (the caller adds --config); sets ``func`` to `cmd_worker`."""
    from mongogate.config import SchedulerSettings
    from mongogate.scheduler import STATES, SUMMARY_OVER

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


def _metrics(args: argparse.Namespace, settings: Any) -> tuple[Any, Any]:
    """`--metrics-port`: the worker's metrics and their HTTP exporter (None, None without it)."""
    from mongogate.scheduler import WorkerMetrics

    port = getattr(args, "metrics_port", None)
    if port is None or args.status:
        return None, None
    if not 0 <= port <= 65535:
        raise ConfigError("--metrics-port must be a TCP port (0-65535)")
    metrics = WorkerMetrics()
    exporter = metrics.serve(port, settings.server.host)
    log.info("worker metrics at http://%s:%d/metrics", settings.server.host, exporter.server_port)
    return metrics, exporter


def _print_status(args: argparse.Namespace, report: Any) -> None:
    """`--status`: the chosen agents' status, and the fleet's capacity line."""
    from mongogate.scheduler import print_status, select

    chosen = select(report.status, args.state or (), args.agent)
    filtered = bool(args.state or args.agent or args.all)
    print_status(chosen, sys.stdout, as_json=args.json, summary=False if filtered else None)
    if report.capacity is not None and not args.json:
        sys.stdout.write(report.capacity.line() + "\n")


def cmd_worker(args: argparse.Namespace) -> int:
    from mongogate.assembly import run_worker
    from mongogate.clock import SYSTEM_CLOCK
    from mongogate.scheduler import AgentRegistry, collect_agents

    settings = settings_from(args)
    if args.duration is not None and args.duration <= 0:
        raise ConfigError("--duration must be a positive number of seconds")
    if args.concurrency is not None and args.concurrency < 1:
        raise ConfigError("--concurrency must be at least 1")
    agents = (
        AgentRegistry() if args.status else collect_agents(args.agents, entry_points=not args.no_entry_points)
    )
    metrics, exporter = _metrics(args, settings)
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
                clock=getattr(args, "clock", None) or SYSTEM_CLOCK,
            )
        )
    finally:
        if exporter is not None:
            exporter.shutdown()
            exporter.server_close()
    if args.status:
        _print_status(args, report)
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
