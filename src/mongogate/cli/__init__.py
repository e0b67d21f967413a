"""The mongogate commands: serve, check, client-config, tools, try, audit, token, worker, schedule, ...

`serve | check | tools | try | audit | token | worker | schedule | engine | memory | erase | spec |
client-config | config-doc`.

One module per command (each has `register(sub, with_config)`); this one only parses and
dispatches. Human-facing output of commands goes to stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mongogate.errors import MongogateError
from mongogate.version import __version__

#: the exit status of a command ended by Ctrl-C (SIGINT), as a shell reports it (128 + 2)
INTERRUPTED = 130


def stopped_by_ctrl_c() -> int:
    """One line for a command stopped with Ctrl-C (a server: once it has shut down; its lifespan
    flushed the audit log and closed the database), and its status, 130."""
    print("mongogate: stopped (Ctrl-C)", file=sys.stderr, flush=True)
    return INTERRUPTED


if TYPE_CHECKING:
    from mongogate.assembly import Faults
    from mongogate.clock import Clock


def _command(argv: Sequence[str] | None) -> str | None:
    """The subcommand named on ``argv`` (its first word that is not an option); None: all."""
    if argv is None:
        return None
    return next((w for w in argv if not w.startswith("-")), None)


#: each command's module (`check` registers `tools` too), in the order `--help` lists them
COMMANDS: dict[str, str] = {
    "serve": "serve",
    "check": "check",
    "tools": "check",
    "try": "try_tool",
    "audit": "audit",
    "token": "token",
    "engine": "engine",
    "memory": "memory",
    "spec": "spec",
    "client-config": "client_config",
    "config-doc": "config_doc",
    "erase": "erase",
    "worker": "worker",
    "schedule": "schedule",
}
#: the commands whose `register` adds their arguments only when asked (they import a package)
_ON_REQUEST = frozenset({"erase", "worker", "schedule"})


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser. Given a command line that names a command, only that command's module is
    imported and registered (the others cost every start, `serve`'s too: benchmarks/startup.py);
    with no command or an unknown one (help, or argparse's list of choices), every command.
    Given the command line, the arguments of `worker`, `schedule` and `erase` (and the scheduler
    and erasure packages behind them) are added only when that command (or none: help) is asked
    for."""
    p = argparse.ArgumentParser(prog="mongogate", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "-v", "--verbose", action="store_true", help="log at INFO on stderr (default: server.log_level)"
    )
    p.add_argument("--version", action="version", version=f"mongogate {__version__}")
    command = _command(argv)
    named = COMMANDS.get(command) if command is not None else None
    # one command's module registered: the usage line a refused command line shows still lists
    # every command, as argparse writes it when all are registered (not `{serve}` alone)
    every = "{" + ",".join(COMMANDS) + "}" if named is not None else None
    sub = p.add_subparsers(dest="command", required=True, metavar=every)

    def with_config(sp: argparse.ArgumentParser, *, config_default: Any = None) -> argparse.ArgumentParser:
        """The options every command takes, before or after its own arguments (`-v` too);
        ``config_default=argparse.SUPPRESS`` leaves a `--config` parsed before this one alone."""
        sp.add_argument(
            "--config",
            default=config_default,
            help="TOML config file (default: $MONGOGATE_CONFIG, else built-in defaults)",
        )
        with contextlib.suppress(argparse.ArgumentError):  # the parser has its own -v already
            sp.add_argument(
                "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="as mongogate -v"
            )
        return sp

    for name in [named] if named is not None else dict.fromkeys(COMMANDS.values()):
        module = importlib.import_module(f"mongogate.cli.{name}")
        if name in _ON_REQUEST:
            module.register(sub, with_config, arguments=command in (None, name))
        else:
            module.register(sub, with_config)
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


def main(
    argv: Sequence[str] | None = None,
    *,
    clock: Clock | None = None,
    faults: Faults | None = None,
    return_freed_memory: bool = True,
) -> int:
    """The `mongogate` command. ``clock`` and ``faults`` are test hooks `serve` hands to
    build_server (mongogate/assembly.py; tests/fault_harness.py): none unless a caller passes them;
    ``return_freed_memory=False``, one `serve --http` hands to serve_http (server/memory_return.py)."""
    words = list(sys.argv[1:] if argv is None else argv)
    if _command(words) == "serve":
        # Start-up builds many long-lived objects (models, schemas, tools) and no garbage cycles:
        # the collector would walk them again and again. `serve` re-enables it (frozen) to serve.
        gc.disable()
    try:
        args = build_parser(words).parse_args(words)
        args.clock, args.faults, args.return_freed_memory = clock, faults, return_freed_memory
        configure_logging(args)
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        return int(args.func(args))
    except MongogateError as e:
        print(f"mongogate: {e}", file=sys.stderr)
        return e.exit_status  # 2 configuration, 3 database unreachable, 4 port or data directory taken
    except KeyboardInterrupt:  # Ctrl-C before the command could handle it (still loading, say)
        return stopped_by_ctrl_c()
    finally:
        gc.enable()  # a start-up that failed (or an in-process caller): never leave it off
