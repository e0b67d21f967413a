"""`mongogate serve`: stdio by default, Streamable HTTP with `--http`.

Nothing here prints to stdout while a stdio server runs: stdout carries the protocol.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

import anyio

from mongogate.cli import stopped_by_ctrl_c
from mongogate.cli.common import data_dir_line, registry_for, settings_from
from mongogate.config import Settings
from mongogate.errors import MongogateError

log = logging.getLogger(__name__)


def _stdio_open_failed(e: BaseException) -> None:
    """A stdio server whose database cannot be used ends with one line and the command's status
    (it may already have answered `initialize`: the client then sees the server exit)."""
    if isinstance(e, MongogateError):
        print(f"mongogate: {e}", file=sys.stderr, flush=True)
        status = e.exit_status
    else:
        log.error("start-up failed: %s", type(e).__name__, exc_info=e)
        status = 1
    sys.stderr.flush()
    os._exit(status)  # stdout carries the protocol: no interpreter shutdown that could write to it


def _banner(settings: Settings, url: str, demo: bool) -> None:
    lines = [f"mongogate serving MCP over Streamable HTTP at {url}", data_dir_line(settings)]
    if demo and settings.auth.mode == "jwt" and settings.auth.jwt_secret is not None:
        # Only `--demo` (what `make run` starts) prints a token: a real server never mints one.
        from mongogate.server.auth.tokens import mint_dev_token

        token = mint_dev_token(settings.auth, tenant="acme", ttl_s=8 * 3600, subject="dev")
        lines += [
            "development token for tenant 'acme' (8 h):",
            f"  export MONGOGATE_TOKEN={token}",
            "try a whole turn and a query:",
            f"  .venv/bin/python examples/http_client.py --url {url}",
        ]
    elif settings.auth.mode == "jwt":
        lines.append("clients need a bearer token from your identity provider (tenant claim required)")
    elif settings.auth.mode == "none":
        lines.append(
            f"no authentication (--insecure-no-auth): every call acts as tenant {settings.auth.tenant!r}"
        )
    if demo:
        lines.append("demo data: tenants acme, globex, initech; tools find_orders, order_stats")
    print("\n".join(lines), file=sys.stderr, flush=True)


def _keep_our_logging() -> None:
    """`MCPServer()` calls the SDK's ``configure_logging``, which imports rich and builds a console
    handler (about 30 ms of CPU at every start) that ``logging.basicConfig`` then discards, since
    the CLI has installed mongogate's own handler (mongogate.logs). `serve` skips that work."""
    import mcp.server.mcpserver.server as sdk_server

    def configure_logging(level: str = "INFO") -> None:
        if not logging.getLogger().handlers:  # nothing installed: what the SDK would do, without rich
            logging.basicConfig(level=level, format="%(message)s")

    sdk_server.configure_logging = configure_logging  # type: ignore[attr-defined]  # a module global


def _client_went_away(exc: BaseException) -> bool:
    """True when every leaf of `exc` says the stdio peer closed its pipes."""
    gone = (BrokenPipeError, ConnectionResetError, anyio.BrokenResourceError, anyio.ClosedResourceError)
    if isinstance(exc, BaseExceptionGroup):
        return all(_client_went_away(e) for e in exc.exceptions)
    return isinstance(exc, gone)


def _collect_from_now_on() -> None:
    """Turn the collector back on for serving, with what start-up built left out of its scans."""
    gc.freeze()
    gc.enable()


@dataclass
class _StdioStop:
    """What ends a stdio server early: Ctrl-C (SIGINT) or SIGTERM (what a client sends a server
    that does not leave once its stdin is closed). Either cancels the server, whose lifespan then
    flushes the audit log and closes the database (SIGTERM's default action would end the process
    at once, both skipped); the process ends right there (`closed`), since the SDK's stdin reader
    can stay blocked in its thread, uncancellable, for as long as the client keeps the pipe open.
    A signal once the lifespan is shutting down already (`closing`: the client closed stdin, then
    sent SIGTERM) cancels nothing: that shutdown runs to its end, then the process ends."""

    signum: int | None = None
    #: the lifespan has begun to shut down (build_server's ``on_closing``)
    shutting_down: bool = False

    def received(self, signum: int, task: asyncio.Task[Any]) -> None:
        if self.signum is not None:  # a second signal: no more waiting
            self.end()
        self.signum = signum
        log.info("%s: stopping once shut down (a second signal: at once)", signal.Signals(signum).name)
        if not self.shutting_down:
            task.cancel()  # edge-triggered, as the asyncio runner's own Ctrl-C: the lifespan's awaits run

    def closing(self) -> None:
        """The lifespan begins to shut down (build_server's ``on_closing``)."""
        self.shutting_down = True

    def closed(self) -> None:
        """The lifespan has shut down (build_server's ``on_closed``)."""
        if self.signum is not None:
            self.end()

    def end(self) -> NoReturn:
        sys.stderr.flush()
        if self.signum == signal.SIGTERM:  # ended by the signal, as a supervisor expects
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)
        os._exit(stopped_by_ctrl_c())  # stdout carries the protocol: no interpreter shutdown


async def _stdio_until_stopped(server: Any, stop: _StdioStop) -> None:
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.received, signum, task)
    await server.run_stdio_async()


def _serve_stdio(server: Any, stop: _StdioStop) -> int:
    """A client that vanishes (its process died) is a normal shutdown: status 0, one INFO line.

    The lifespan has closed the database (and released the data directory) by the time
    `run` returns or raises; in-flight turns keep their leases, which a retry of the same
    turn takes over at once. A signal ends the process in `stop` (`_StdioStop`).
    """
    _collect_from_now_on()
    try:
        anyio.run(_stdio_until_stopped, server, stop)  # what the SDK's `run("stdio")` runs, and `stop`
        if stop.signum is not None:  # came once the lifespan had shut down, before the loop ended
            stop.end()
    except BaseException as e:
        if stop.signum is not None:  # cancelled before the lifespan began
            stop.end()
        if not _client_went_away(e):
            raise
        log.info("stdio client went away; shutting down")
        sys.stderr.flush()
        # stdout is a broken pipe: the interpreter's final flush of it would print a traceback.
        os._exit(0)
    return 0


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """What serve's flags set in the settings (`--host`, `--port`, `--stateless`)."""
    overrides: dict[str, Any] = {}
    if args.host or args.port is not None:
        overrides["server"] = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if args.stateless:
        overrides.setdefault("server", {})["stateless"] = True
    return overrides


def cmd_serve(args: argparse.Namespace) -> int:
    """`_serve`; Ctrl-C ends it in one line, status 130 (SIGTERM over HTTP: uvicorn shuts down,
    then ends the process by the signal)."""
    try:
        return _serve(args)
    except KeyboardInterrupt:  # uvicorn (HTTP) and the asyncio runner raise it only once shut down
        return stopped_by_ctrl_c()


def _serve(args: argparse.Namespace) -> int:
    """Config, port, database, then serve; the banner is printed only once the server is up."""
    from mongogate.server.app import build_server

    _keep_our_logging()
    settings = settings_from(args, **_overrides(args))
    transport: Literal["stdio", "http"] = "http" if args.http else "stdio"
    if args.http and args.insecure_no_auth:
        from mongogate.server.http import is_loopback

        if not is_loopback(settings.server.host):
            raise MongogateError("--insecure-no-auth is allowed on a loopback address only (e.g. 127.0.0.1)")
        settings = settings.model_copy(update={"auth": settings.auth.model_copy(update={"mode": "none"})})
    registry = registry_for(settings, args.demo)
    from mongogate.assembly import NO_FAULTS
    from mongogate.clock import SYSTEM_CLOCK
    from mongogate.server.preflight import StartupChecks

    # test hooks only a caller of cli.main passes (tests/fault_harness.py), never the environment
    hooks: dict[str, Any] = {
        "clock": getattr(args, "clock", None) or SYSTEM_CLOCK,
        "faults": getattr(args, "faults", None) or NO_FAULTS,
    }

    # build_server's checks, with the words of serve's flags in a refusal
    checks = StartupChecks(
        allow_missing_indexes=args.allow_missing_indexes,
        allow_writable_query_user=args.allow_writable_query_user,
        hints="cli",
    )
    if transport == "stdio":
        log.info("%s", data_dir_line(settings))  # stderr; stdout carries the protocol
        # initialize is answered at once; the database opens (and is checked, the indexes after
        # the demo's seeding) meanwhile, and a tool call waits for it. A failed check ends the
        # process with its one line.
        stop = _StdioStop()
        stdio = build_server(
            settings,
            registry,
            transport="stdio",
            checks=checks,
            on_open_failure=_stdio_open_failed,
            on_closing=stop.closing,
            on_closed=stop.closed,
            **hooks,
        )
        return _serve_stdio(stdio, stop)
    # The database opens once, in the server's lifespan, which runs the checks (after the start-up
    # hooks: --demo's seeding creates its own index) before the port is served; a refusal comes
    # back from serve_http as the error itself, one line (server/startup.py run_bound).
    server = build_server(
        settings,
        registry,
        transport=transport,
        insecure_no_auth=args.insecure_no_auth,
        checks=checks,
        **hooks,
    )
    from mongogate.server.app import public_url
    from mongogate.server.http import serve_http
    from mongogate.server.startup import bind

    sock = bind(settings.server.host, settings.server.port)
    _collect_from_now_on()
    try:
        url = public_url(settings) + "/mcp"
        serve_http(
            server,
            settings.server.host,
            settings.server.port,
            settings.server,
            sock=sock,
            on_ready=lambda: _banner(settings, url, args.demo),
            return_freed_memory=getattr(args, "return_freed_memory", True),  # a test hook, as `hooks`
        )
    finally:
        sock.close()
    return 0


def register(sub: Any, with_config: Any) -> None:
    s = with_config(sub.add_parser("serve", help="run the MCP server (stdio by default)"))
    s.add_argument("--http", action="store_true", help="serve Streamable HTTP instead of stdio")
    s.add_argument("--host", help="HTTP bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="HTTP port (default 8000)")
    s.add_argument("--demo", action="store_true", help="seed demo orders; register find_orders, order_stats")
    s.add_argument("--allow-writable-query-user", action="store_true")
    s.add_argument(
        "--allow-missing-indexes",
        action="store_true",
        help="serve even if a spec's declared index is missing",
    )
    s.add_argument("--insecure-no-auth", action="store_true", help="HTTP without auth (loopback only)")
    s.add_argument(
        "--stateless", action="store_true", help="HTTP without MCP sessions, for a round-robin load balancer"
    )
    s.set_defaults(func=cmd_serve)
