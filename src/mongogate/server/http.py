"""Streamable HTTP with uvicorn: in the foreground (CLI) or on a background thread (tests, embedding).

The connection layer is bounded (``server.*`` settings): a request head must arrive within
``header_timeout_s``, its body within ``body_timeout_s``; at most ``max_connections`` are open
(503 beyond; probes have their own budget) and one address has at most
``max_pending_heads_per_address`` heads unfinished (server/conn_budget.py); idle keep-alive
connections close after ``keep_alive_timeout_s`` and any connection after
``keep_alive_max_requests`` requests. Host and Origin are checked for
whatever address the server binds (guards.HostOriginGuard).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp

from mongogate.compat.uvicorn import CLOSE_HEADER, H11Protocol
from mongogate.config import ServerSettings
from mongogate.errors import ConfigError
from mongogate.server import memory_return
from mongogate.server.conn_budget import TOO_MANY_HEADS, BudgetGate, ConnectionBudget, address_of
from mongogate.server.guards import BodyDeadline, HostOriginGuard, is_loopback
from mongogate.server.health import HealthRoutes, readiness_for
from mongogate.server.session_cap import SessionCap
from mongogate.server.startup import bind, run_bound
from mongogate.server.stateless import NoStreamsWhenStateless

__all__ = ["BackgroundHttpServer", "GuardedH11Protocol", "http_app", "is_loopback", "serve_http"]

log = logging.getLogger(__name__)
_TIMEOUT_RESPONSE = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def http_app(
    server: MCPServer[Any], settings: ServerSettings, *, return_freed_memory: bool = True
) -> ASGIApp:
    """The MCP app behind the Host/Origin guard and the body deadline (``return_freed_memory``:
    the test hook of server/memory_return.py).

    The SDK's own Host check (on only for three loopback spellings, and unaware of
    ``server.allowed_hosts``) is replaced by the guard, which runs first for every route.
    """
    app = server.streamable_http_app(
        host=settings.host,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=settings.max_request_bytes,
        stateless_http=settings.stateless,  # no Mcp-Session-Id: any process answers any request
        session_idle_timeout=settings.session_idle_timeout_s,
    )
    # per principal: its live sessions, or its requests in flight where there is no session
    SessionCap(server.session_manager, settings.max_sessions_per_principal, stateless=settings.stateless)
    # stateless: GET answers 405 instead of holding an idle stream that can never carry anything
    mcp: ASGIApp = NoStreamsWhenStateless(app) if settings.stateless else app
    body: ASGIApp = BodyDeadline(
        mcp,
        settings.body_timeout_s,
        settings.max_json_tokens,
        settings.max_request_bytes,
        return_freed_memory=return_freed_memory,
    )
    # /metrics when server.metrics is on: behind the Host guard, beside (not inside) the MCP app
    # Only a server built with metrics has them (server/metrics.py `register`, which build_server
    # imports only then): without that module loaded, no server has metrics, and prometheus_client
    # stays unimported (issue 38.6).
    if "mongogate.server.metrics" in sys.modules:
        from mongogate.server.metrics import with_metrics

        body = with_metrics(body, server)
    guarded = HostOriginGuard(body, settings)
    return HealthRoutes(guarded, readiness_for(server), settings.ready_timeout_s)  # /healthz, /readyz


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a request-head deadline and a per-connection request budget.

    uvicorn times out idle keep-alive connections but not a head that never completes; here a
    timer runs from the connection (or from the first byte of a later request) until the head
    is parsed, and closes the connection with 408 when it fires.
    """

    _header_timer: asyncio.TimerHandle | None = None
    _waiting_cycle: object = None
    _served = 0
    _address = "unknown"

    @property
    def _budget(self) -> ConnectionBudget | None:
        return getattr(self.config, "budget", None)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._address = address_of(self.client)
        if self._budget is not None:
            self._budget.connections = self.connections
            self._budget.make_room()  # past the budget: the longest idle connection closes
        self._arm()

    def _unsupported_upgrade_warning(self) -> None:
        # uvicorn warns twice per request with an `Upgrade` header (the second line advises
        # installing a websocket library): any client could fill the log. The request is served
        # as plain HTTP; say so once, at debug.
        log.debug("an Upgrade header was ignored: mongogate serves plain HTTP")

    def data_received(self, data: bytes) -> None:
        if self._budget is not None:
            self._budget.idle_done(self)
        if self._header_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._arm()  # bytes of a next request on a kept-alive connection
        super().data_received(data)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        kept = self.timeout_keep_alive_task is not None and not self.transport.is_closing()
        if kept and self._budget is not None and self.cycle is not None and self.cycle.response_complete:
            self._budget.idle_started(self)  # kept alive, waiting for a next request

    def close_idle(self) -> None:
        """Closed to make room for a new connection, as the keep-alive timeout would close it."""
        log.debug("closed an idle keep-alive connection from %s (server.max_connections)", self._address)
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_handler()

    def handle_events(self) -> None:
        before = self.cycle
        super().handle_events()
        if self.cycle is not None and self.cycle is not before:  # a request head was parsed
            self._disarm()
            self._served += 1
            if self._served >= int(getattr(self.config, "keep_alive_max_requests", 1000)):
                self.cycle.keep_alive = False  # close after this response, and say so
                self.headers.append(CLOSE_HEADER)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._budget is not None:
            self._budget.forget(self)
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._waiting_cycle = self.cycle
        timeout = float(getattr(self.config, "header_timeout_s", 10.0))
        self._header_timer = self.loop.call_later(timeout, self._head_timed_out)
        if self._budget is not None:  # may close this address's oldest unfinished head
            self._budget.head_started(self._address, self)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
            if self._budget is not None:
                self._budget.head_done(self._address, self)

    def evict_pending(self) -> None:
        """Too many unfinished heads from this address: this one, the oldest, is closed (429)."""
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        if not self.transport.is_closing():
            log.warning("closed a connection from %s: too many unfinished request heads", self._address)
            self.transport.write(TOO_MANY_HEADS)
            self.transport.close()

    def _head_timed_out(self) -> None:
        self._header_timer = None
        if self._budget is not None:
            self._budget.head_done(self._address, self)
        if self.cycle is self._waiting_cycle and not self.transport.is_closing():
            self.transport.write(_TIMEOUT_RESPONSE)
            self.transport.close()


class GuardedConfig(uvicorn.Config):
    """uvicorn's Config carrying the limits GuardedH11Protocol reads."""

    def __init__(
        self,
        app: ASGIApp,
        settings: ServerSettings,
        host: str,
        port: int,
        *,
        return_freed_memory: bool = True,
    ) -> None:
        if return_freed_memory:
            memory_return.configure()  # large bodies' memory is handed back once freed
        self.budget = ConnectionBudget(
            settings.max_connections, settings.probe_concurrency, settings.max_pending_heads_per_address
        )
        super().__init__(
            BudgetGate(app, self.budget),
            host=host,
            port=port,
            log_level="warning",
            log_config=None,  # uvicorn's lines go through mongogate's handler (text or JSON, logs.py)
            lifespan="on",
            http=GuardedH11Protocol,
            # mongogate serves no websocket: uvicorn's default ("auto") imported `websockets` and
            # its protocol at every start (about 9 ms) and handed an upgrade request to it, off
            # this guarded h11 path; now such a request is an ordinary HTTP request here
            ws="none",
            limit_concurrency=None,  # BudgetGate: probes have their own budget (server/conn_budget.py)
            timeout_keep_alive=max(1, round(settings.keep_alive_timeout_s)),
        )
        self.header_timeout_s = settings.header_timeout_s
        self.keep_alive_max_requests = settings.keep_alive_max_requests


def _config(
    server: MCPServer[Any],
    settings: ServerSettings,
    host: str,
    port: int,
    *,
    return_freed_memory: bool = True,
) -> uvicorn.Config:
    bound = settings.model_copy(update={"host": host, "port": port})
    app = http_app(server, bound, return_freed_memory=return_freed_memory)
    return GuardedConfig(app, bound, host, port, return_freed_memory=return_freed_memory)


def serve_http(
    server: MCPServer[Any],
    host: str,
    port: int,
    settings: ServerSettings | None = None,
    *,
    sock: socket.socket | None = None,
    on_ready: Callable[[], None] | None = None,
    return_freed_memory: bool = True,
) -> None:
    """Serve in the foreground (the guards of `serve --http`) until stopped; call ``on_ready``
    once serving, and raise a start-up failure of the app (a refused start-up check, a database
    that cannot be used) as itself. ``sock``: a socket taken first by startup.bind (`serve`
    takes the port before it opens the database); without it the port is taken here.
    ``return_freed_memory=False`` is a test hook: large bodies' memory is kept once freed, the
    behaviour before server/memory_return.py (benchmarks/slow_bodies.py's baseline)."""
    config = _config(
        server, settings or ServerSettings(), host, port, return_freed_memory=return_freed_memory
    )
    if sock is not None:
        run_bound(config, sock, on_ready)
        return
    own = bind(host, port)
    try:
        run_bound(config, own, on_ready)
    finally:
        own.close()


class BackgroundHttpServer:
    """Serve on its own thread and loop; `url` is known once started (port 0 picks a free one)."""

    def __init__(
        self,
        server: MCPServer[Any],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        settings: ServerSettings | None = None,
    ) -> None:
        if not is_loopback(host):
            raise ConfigError("BackgroundHttpServer binds loopback addresses only")
        self._uv = uvicorn.Server(_config(server, settings or ServerSettings(), host, port))
        self._thread = threading.Thread(target=self._run, name="mongogate-http", daemon=True)
        self.host = host
        self.port = port
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self._uv.serve())
        except BaseException as e:  # pragma: no cover - surfaced by start()
            self._error = e

    @property
    def open_connections(self) -> int:
        """Connections the server holds open right now (for tests and health checks)."""
        return len(self._uv.server_state.connections)

    @property
    def budget(self) -> ConnectionBudget:
        """The server's connection budget (server/conn_budget.py), for tests and health checks."""
        budget: ConnectionBudget = self._uv.config.budget  # type: ignore[attr-defined]
        return budget

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/mcp"

    def start(self, timeout: float = 30.0) -> BackgroundHttpServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._uv.started:
            if self._error is not None or not self._thread.is_alive():
                raise RuntimeError(f"HTTP server failed to start: {self._error!r}")
            if time.monotonic() > deadline:
                raise TimeoutError("HTTP server did not start")
            time.sleep(0.02)
        sock = self._uv.servers[0].sockets[0]
        self.port = int(sock.getsockname()[1])
        return self

    def stop(self) -> None:
        self._uv.should_exit = True
        self._thread.join(timeout=30)

    def __enter__(self) -> BackgroundHttpServer:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
