"""Server assembly: settings + registry -> an MCPServer whose lifespan owns the database.

This module keeps auth, middleware and the lifespan; the services a tool reaches are built by
mongogate/assembly.py (`open_services`), the one place `serve`, `try` and `check` build them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import anyio
from mcp.server.auth.settings import AuthSettings as SdkAuthSettings
from mcp.server.mcpserver import MCPServer

from mongogate.assembly import NO_FAULTS, Faults, open_services
from mongogate.audit import AuditLog, audit_from_settings
from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.compat.sdk import drop_sdk_spans
from mongogate.config import Settings
from mongogate.db import Database
from mongogate.errors import ConfigError
from mongogate.logs import default_instance_id
from mongogate.principal import Principal
from mongogate.safefs import check_private_file
from mongogate.server.audit_calls import audited_tools
from mongogate.server.auth.challenge import Challenge, ChallengingServer
from mongogate.server.auth.verify import (
    build_token_verifier,
    current_principal,
    principal_for_stdio,
    require_scopes,
)
from mongogate.server.health import Readiness, readiness_for
from mongogate.server.observe import ObserveCalls
from mongogate.server.preflight import StartupChecks, check_connection, check_indexes
from mongogate.server.startup import OpenAfterInitialize
from mongogate.server.surface import NoEvents, UnknownTools, offer_surface
from mongogate.server.tenant_limit import TenantConcurrency
from mongogate.specs import RECALL_TOOL_NAMES, RUN_TOOL_NAMES
from mongogate.tools.instructions import INSTRUCTIONS, RECALL_INSTRUCTIONS  # sent at initialize
from mongogate.tools.registry import ToolRegistry
from mongogate.tools.state import AppState, PendingState
from mongogate.version import __version__

if TYPE_CHECKING:
    from mcp.server.auth.provider import TokenVerifier
    from mcp.server.mcpserver.tools import Tool

    from mongogate.server.metrics import Metrics
    from mongogate.server.tracing import Tracing

log = logging.getLogger(__name__)
#: what build_server checks unless told otherwise: everything `serve` checks, nothing allowed
DEFAULT_CHECKS = StartupChecks()


async def _log_sizes(db: Database, threshold: int) -> None:
    """The embedded engine's collection sizes at start-up, and what calls cost past ``threshold``.

    Run once the server is ready, beside the first calls (a count per collection: nothing a call
    needs waits for it; benchmarks/startup.py); a failure only costs the log line."""
    from mongogate.memory import collection_sizes, size_report

    try:
        line, warnings = size_report(await collection_sizes(db.memory), threshold)
    except Exception as e:  # the database went away meanwhile: the calls will say so
        log.debug("embedded engine collection sizes not read: %s", type(e).__name__)
        return
    log.info("%s", line)
    for w in warnings:
        log.warning("%s", w)


def public_url(settings: Settings) -> str:
    s = settings.server
    host = f"[{s.host}]" if ":" in s.host else s.host  # an IPv6 literal needs brackets in a URL
    return s.public_url or f"http://{host}:{s.port}"


@dataclass
class _Auth:
    """How callers are known: a token verifier (HTTP with auth) or the launch principal (stdio)."""

    verifier: TokenVerifier | None = None
    sdk_auth: SdkAuthSettings | None = None
    stdio_principal: Principal | None = None
    challenge: Challenge | None = None


def _auth_for(
    settings: Settings,
    scopes: list[str],
    transport: Literal["stdio", "http"],
    insecure_no_auth: bool,
    env: dict[str, str],
) -> _Auth:
    if transport == "http" and settings.auth.mode != "none":
        url = public_url(settings)
        # The SDK's own metadata would name issuer_url as an authorization server whatever it is:
        # without resource_server_url it serves none, and server/auth/challenge.py serves the truth.
        sdk_auth = SdkAuthSettings.model_validate(
            {"issuer_url": url, "resource_server_url": None, "validate_token_resource": False}
        )
        advertised = (
            (settings.auth.issuer,) if settings.auth.advertise_issuer and settings.auth.issuer else ()
        )
        return _Auth(
            verifier=build_token_verifier(settings.auth),
            sdk_auth=sdk_auth,
            challenge=Challenge(url + "/mcp", authorization_servers=advertised, scopes=tuple(scopes)),
        )
    if transport == "http" and not insecure_no_auth:
        raise ConfigError(
            "refusing to serve HTTP without authentication: set auth.mode to 'jwt' or 'api_keys', or pass "
            "--insecure-no-auth (loopback only) for local development"
        )
    return _Auth(stdio_principal=principal_for_stdio(settings.auth, env, grant_scopes=scopes))


def _required_scopes(settings: Settings, registry: ToolRegistry, tools: list[Tool]) -> list[str]:
    """Every scope a tool of this server requires: granted to a local operator (auth mode "none"),
    listed in the HTTP metadata. Long-term memory's are its tools' too (tools/recall_tools.py)."""
    required = {s for spec in registry.query_specs for s in spec.required_scopes}
    if any(t.name in RECALL_TOOL_NAMES for t in tools):
        required |= set(settings.memory.long_term.required_scopes)
    return sorted(required)


@dataclass
class _Opener:
    """The lifespan's open: the database, its checks, the services (assembly.py), the hooks."""

    settings: Settings
    registry: ToolRegistry
    checks: StartupChecks | None
    principal: Callable[[Any], Principal]
    instance: str
    metrics: Metrics | None
    run_tools: bool
    clock: Clock
    faults: Faults
    tracing: Tracing | None = None

    def database(self) -> Database:
        """The database the lifespan opens: with a span per command when traces are on."""
        listeners = () if self.tracing is None else (self.tracing.commands(),)
        return Database(
            self.settings.database, self.settings.server.data_dir, role_warning=True, listeners=listeners
        )

    async def open(
        self,
        db: Database,
        readiness: Readiness,
        opened: list[AuditLog],
        later: list[asyncio.Task[None]],
        states: list[AppState],
    ) -> AppState:
        """The services over ``db``, checked; ``later`` receives the work started for after it,
        ``states`` the services (their background work is stopped at shutdown)."""
        settings, checks = self.settings, self.checks
        await db.open()
        readiness.db = db
        if checks is not None:
            await check_connection(db, settings, checks)
        audit = audit_from_settings(settings, db.uri, self.instance)  # db.uri: read-write, or the engine's
        opened.append(audit)
        state = await open_services(
            settings,
            db,
            audit=audit,
            principal=self.principal,
            require_scopes=require_scopes,
            run_tools=self.run_tools,
            clock=self.clock,
            faults=self.faults,
        )
        states.append(state)
        if self.metrics is not None:
            self.metrics.attach_audit(audit)
            self.metrics.attach_recall_index(state.recall.index)
            self.metrics.attach_message_search(state.message_search)
        if self.tracing is not None:  # a span per embedding batch (recall and message search)
            state.recall.embedder = self.tracing.embedder(state.recall.embedder)
            found = state.message_search
            if found.embedder is not None:
                found.embedder = found.fill.embedder = state.recall.embedder
        for hook in self.registry.startup_hooks:
            await hook(state)
        if checks is not None:  # after the hooks: an application may create its indexes there
            await check_indexes(db, self.registry.query_specs, checks)
        readiness.writes = state.writes  # /readyz reports write refusals (tools/faults.py)
        if db.embedded:
            sizes = _log_sizes(db, settings.database.engine_size_warning)
            later.append(asyncio.get_running_loop().create_task(sizes))
        return state


def _lifespan(
    opener: _Opener,
    on_open_failure: Callable[[BaseException], None] | None,
    on_closed: Callable[[], None] | None = None,
    on_closing: Callable[[], None] | None = None,
) -> Callable[[MCPServer[AppState]], AbstractAsyncContextManager[AppState | PendingState]]:
    settings = opener.settings

    @asynccontextmanager
    async def lifespan(server: MCPServer[AppState]) -> AsyncIterator[AppState | PendingState]:
        db = opener.database()
        opened: list[AuditLog] = []
        later: list[asyncio.Task[None]] = []  # started by the open, for after it (the size report)
        states: list[AppState] = []
        readiness = readiness_for(server)
        task: asyncio.Task[None] | None = None
        pending: PendingState | None = None
        try:
            if on_open_failure is None:
                yield await opener.open(db, readiness, opened, later, states)
                return

            # Answer initialize and tools/list now; the database opens once initialize is answered
            # (OpenAfterInitialize) and tool calls wait for it (stdio start-up).
            async def in_background() -> None:
                try:
                    waiting.ready(await opener.open(db, readiness, opened, later, states))
                except Exception as e:
                    waiting.failed(e)  # calls waiting for the open are refused, never left hanging
                    on_open_failure(e)

            def start() -> None:
                nonlocal task
                task = asyncio.get_running_loop().create_task(in_background())

            waiting = pending = PendingState(settings, opener.principal, start)
            yield waiting
        finally:
            if on_closing is not None:
                on_closing()  # before any await: a signal from now on must not cut this short
            try:
                if pending is not None:
                    pending.kick()  # a client that left before initialize: still report a bad database
                if task is not None and not task.done():
                    log.info("shutting down: waiting for the database to finish opening")
                    # The client left before the open finished: let it finish (bounded by the
                    # database timeouts), so a database that cannot be used is still reported.
                    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                        await task
                for job in later:  # short (a count per collection): finished, not cut off
                    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                        await job
                for state in states:  # message search's background work: left to later searches
                    with anyio.CancelScope(shield=True):
                        await state.message_search.aclose()
                readiness.db = None
                readiness.writes = None
                for audit in opened:  # flush what is queued before the process goes
                    await anyio.to_thread.run_sync(audit.close)
                await db.close()
                log.info("shut down: the audit log flushed and the database closed")
            finally:
                if on_closed is not None:
                    on_closed()

    return lifespan


def _tracing(settings: Settings, env: dict[str, str], provider: Any) -> Tracing:
    """The traces of `server.tracing` (server/tracing.py, imported only here): a clear refusal
    when the `otel` extra is not installed."""
    try:
        from mongogate.server.tracing import Tracing, provider_from_env
    except ImportError as e:
        raise ConfigError(
            f"server.tracing needs the otel extra ({e.name} is not installed): install mongogate "
            "with it (docs/operations.md, Traces), or set server.tracing = false"
        ) from None
    return Tracing(provider or provider_from_env(env), settings.server.tracing_tenant)


def build_server(
    settings: Settings,
    registry: ToolRegistry | None = None,
    *,
    transport: Literal["stdio", "http"] = "stdio",
    insecure_no_auth: bool = False,
    environ: dict[str, str] | None = None,
    checks: StartupChecks | None = DEFAULT_CHECKS,
    on_open_failure: Callable[[BaseException], None] | None = None,
    on_closed: Callable[[], None] | None = None,
    on_closing: Callable[[], None] | None = None,
    clock: Clock = SYSTEM_CLOCK,
    faults: Faults = NO_FAULTS,
    tracer_provider: Any = None,
) -> MCPServer[AppState]:
    """Assemble the server. The caller's tenant comes from tokens (HTTP) or the launch config (stdio).

    ``checks``: `serve`'s start-up checks (server/preflight.py), run in the lifespan before any tool
    can run: the database answers and its query user cannot write (right after the open), and
    every query tool's declared index exists (after the registry's start-up hooks, which may
    create them). A refusal is a ConfigError that stops the start; None skips them (`serve
    --http` ran them already). With ``on_open_failure`` the lifespan does not wait for the
    database: the server answers at once, tool calls wait for the open, and a failed open (or
    check) is handed to ``on_open_failure`` (stdio `serve` prints it and exits); ``on_closing`` is
    called as the lifespan begins to shut down and ``on_closed`` once it has (stdio `serve`: a
    signal no longer cancels a shutdown under way; a signalled process ends once it is done). ``clock`` and
    ``faults`` are test hooks (mongogate/assembly.py): the system clock and none by default;
    ``tracer_provider`` too (an OpenTelemetry SDK provider for `server.tracing`; None: made from
    the `OTEL_*` environment, server/tracing.py)."""
    registry = registry or ToolRegistry.from_settings(settings)
    tools = registry.build(settings)
    env = dict(os.environ if environ is None else environ)
    auth = _auth_for(settings, _required_scopes(settings, registry, tools), transport, insecure_no_auth, env)

    # Before anything is served: an audit file or directory other users could redirect (safefs.py)
    check_private_file(settings.audit_path, what="audit.path")
    all_tools = frozenset(t.name for t in tools)
    metrics: Metrics | None = None
    if settings.server.metrics:  # prometheus_client is imported only when metrics are served
        from mongogate.server.metrics import Metrics

        metrics = Metrics(all_tools, tenant_labels=settings.server.metrics_tenant_labels)
    tracing = _tracing(settings, env, tracer_provider) if settings.server.tracing else None
    stdio_principal = auth.stdio_principal

    def principal(ctx: Any) -> Principal:
        return current_principal(ctx, stdio_principal)

    opener = _Opener(
        settings,
        registry,
        checks,
        principal,
        instance=settings.server.instance_id or default_instance_id(),
        metrics=metrics,
        run_tools=bool(all_tools & RUN_TOOL_NAMES),
        clock=clock,
        faults=faults,
        tracing=tracing,
    )
    server = ChallengingServer(
        "mongogate",
        # ObserveCalls first: it opens the request id that the audit, the logs and errors share,
        # and writes the metric and the one audit event of a refused query-tool call
        # TenantConcurrency after UnknownTools: a [busy] refusal is logged and counted, and is no audit event
        middleware=[
            ObserveCalls(
                metrics, all_tools, audited_tools(registry.query_specs), tracer=tracing, clock=clock
            ),
            UnknownTools(all_tools),  # `[not_found] no tool named ...`, before anything else looks
            NoEvents(),  # subscriptions/listen: -32601 at once, in words (server/surface.py)
            TenantConcurrency(settings.limits),
            OpenAfterInitialize(),
        ],
        version=__version__,
        instructions=INSTRUCTIONS + "\n" + RECALL_INSTRUCTIONS,
        tools=tools,
        subscriptions=False,  # no events are published: no listen streams (server/surface.py)
        # a PendingState while the database opens: every reader resolves it with tools.state.app_state
        lifespan=cast(
            "Callable[[MCPServer[AppState]], AbstractAsyncContextManager[AppState]]",
            _lifespan(opener, on_open_failure, on_closed, on_closing),
        ),
        token_verifier=auth.verifier,
        auth=auth.sdk_auth,
        log_level=settings.server.log_level,
    )
    drop_sdk_spans(server)  # mongogate's own span per request, only with server.tracing
    server.transport = transport  # its HTTP app refuses a stdio server (server/auth/challenge.py)
    server.unauthenticated = transport == "http" and settings.auth.mode == "none"
    offer_surface(server)  # mongogate's prompts and resources in place of the SDK's
    if auth.challenge is not None:
        server.install_challenge(auth.challenge)
    if metrics is not None:
        from mongogate.server.metrics import register

        register(server, metrics)  # server/http.py serves them at /metrics
    return server
