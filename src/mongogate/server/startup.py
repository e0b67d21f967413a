"""Serve HTTP only once everything can work: the port is taken first, the banner printed last.

`bind` takes the port before the database is opened or anything is printed, so a second
`make run` fails at once with one line naming the port and `--port`. `run_bound` serves on
that socket, calls ``on_ready`` (the banner) only once the app has started, and turns a
start-up failure of the app into the error itself (one line from the CLI), not uvicorn's
traceback.
"""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Callable
from typing import Any

import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mongogate.errors import ConfigError, InUse, MongogateError
from mongogate.tools.state import PendingState

BACKLOG = 2048  # uvicorn's default


class OpenAfterInitialize:
    """ServerMiddleware: a stdio server opens its database once `initialize` is answered (or at the
    first other request), so that work never delays the answer a client's start-up timeout counts."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        pending = ctx.lifespan_context
        if not isinstance(pending, PendingState):
            return await call_next(ctx)
        if ctx.method != "initialize":
            pending.kick()
            return await call_next(ctx)
        try:
            return await call_next(ctx)
        finally:
            pending.kick()


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or one ConfigError line saying what to change."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as e:
        raise ConfigError(
            f"cannot listen on {host!r}: the name does not resolve ({e.strerror}); fix server.host or --host"
        ) from e
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no clash
    try:
        sock.bind(addr)
        sock.listen(BACKLOG)
    except OSError as e:
        sock.close()
        where = f"port {port} on {host}"
        if e.errno == errno.EADDRINUSE:
            raise InUse(
                f"{where} is already in use (another mongogate serve, or another program): stop it, "
                "or pick another port with --port N (or server.port)"
            ) from e
        if e.errno == errno.EACCES:
            raise ConfigError(
                f"{where} needs privileges this process lacks: pick one above 1023 with --port N"
            ) from e
        if e.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(
                f"cannot listen on {host}: not an address of this machine; fix server.host or --host"
            ) from e
        raise ConfigError(
            f"cannot listen on {where}: {e.strerror}; fix --host/--port (server.host/port)"
        ) from e
    sock.set_inheritable(True)
    return sock


class _StartupErrors:
    """Keeps the app's start-up failure for the caller instead of letting uvicorn log its traceback."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.error: BaseException | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def quiet(message: Message) -> None:
            if message["type"] == "lifespan.startup.failed":
                message = {"type": "lifespan.startup.failed", "message": ""}  # no traceback in the log
            await send(message)

        try:
            await self.app(scope, receive, quiet)
        except Exception as e:
            self.error = e


class _ReadyServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None] | None) -> None:
        super().__init__(config)
        self._on_ready = on_ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and self._on_ready is not None:
            self._on_ready()


def _leaf(exc: BaseException) -> BaseException:
    """The error an operator can act on inside an exception group (task groups wrap them)."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _leaf(inner)
            if isinstance(found, MongogateError | OSError):
                return found
        return _leaf(exc.exceptions[0])
    return exc


def run_bound(config: uvicorn.Config, sock: socket.socket, on_ready: Callable[[], None] | None) -> None:
    """Serve ``config``'s app on ``sock`` until stopped; raise the app's start-up failure, if any."""
    guard = _StartupErrors(config.app)  # type: ignore[arg-type]  # ours: always an ASGI 3 callable
    config.app = guard

    def not_the_exit_line(record: logging.LogRecord) -> bool:
        return guard.error is None or not record.getMessage().startswith("Application startup failed")

    logging.getLogger("uvicorn.error").addFilter(not_the_exit_line)
    failure: Any = None
    try:
        _ReadyServer(config, on_ready).run(sockets=[sock])
    except SystemExit as e:
        failure = e
    if guard.error is not None:
        err = _leaf(guard.error)
        if isinstance(err, MongogateError):
            raise err from None
        if isinstance(err, OSError):
            raise ConfigError(f"start-up failed: {err}") from err
        raise guard.error
    if failure is not None:
        raise failure
