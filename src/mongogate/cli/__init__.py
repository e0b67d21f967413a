"""`mongogate serve | check | tools | try | audit | token | worker | schedule | engine | memory`.

One module per command (each has `register(sub, with_config)`); this one only parses and
dispatches. Human-facing output of commands goes to stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from mongogate import __version__
from mongogate.errors import MongogateError


def build_parser() -> argparse.ArgumentParser:
    from mongogate.cli import audit, check, engine, memory, schedule, serve, token, try_tool

    p = argparse.ArgumentParser(prog="mongogate", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "-v", "--verbose", action="store_true", help="log at INFO on stderr (default: server.log_level)"
    )
    p.add_argument("--version", action="version", version=f"mongogate {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def with_config(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sp.add_argument(
            "--config", help="TOML config file (default: $MONGOGATE_CONFIG, else built-in defaults)"
        )
        return sp

    for module in (serve, check, try_tool, audit, token, engine, memory):
        module.register(sub, with_config)

    from mongogate.scheduler.worker import add_worker_parser

    add_worker_parser(with_config(sub.add_parser("worker", help="run scheduled agents")))
    schedule.register(sub, with_config)
    return p


def configure_logging(args: argparse.Namespace) -> None:
    """Level and format from the settings (server.log_level, server.log_format), read here first.

    `-v` raises the level to INFO. `worker` logs at INFO (one line per tick) unless
    server.log_level is set explicitly. A settings error is left to the command to report."""
    from mongogate.config import load_settings
    from mongogate.logs import LogFormat, configure

    level, fmt, explicit = "WARNING", "text", False
    try:
        settings = load_settings(getattr(args, "config", None))
    except MongogateError:
        settings = None
    if settings is not None:
        level, explicit = settings.server.log_level, "log_level" in settings.server.model_fields_set
        fmt = settings.server.log_format
    status_only = args.command == "worker" and getattr(args, "status", False)
    if args.command == "worker" and not explicit and not status_only:
        level = "INFO"
    if status_only and not explicit and not args.verbose:
        level = "ERROR"  # `worker --status` prints its table and nothing else (no notices on stderr)
    if args.verbose and logging.getLevelName(level) > logging.INFO:
        level = "INFO"
    log_format: LogFormat = "json" if fmt == "json" else "text"
    configure(level, log_format)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        return int(args.func(args))
    except MongogateError as e:
        print(f"mongogate: {e}", file=sys.stderr)
        return e.exit_status  # 2 configuration, 3 database unreachable, 4 port or data directory taken
