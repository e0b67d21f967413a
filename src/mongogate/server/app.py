"""Server assembly: settings + registry -> an MCPServer whose lifespan owns the database."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, cast

import anyio
from mcp.server.auth.settings import AuthSettings as SdkAuthSettings
from mcp.server.mcpserver import MCPServer

from mongogate.audit.log import AuditLog
from mongogate.audit.setup import audit_from_settings
from mongogate.clock import SYSTEM_CLOCK, Clock, SkewedClock
from mongogate.config import Settings
from mongogate.db import Database
from mongogate.errors import ConfigError
from mongogate.logs import default_instance_id
from mongogate.memory.search import ensure_search_index
from mongogate.memory.store import MemoryStore
from mongogate.memory.turns import Turns
from mongogate.principal import Principal
from mongogate.recall.embedding import make_embedder
from mongogate.recall.search import path_report
from mongogate.recall.store import LongTermMemory
from mongogate.runs import Runs
from mongogate.safefs import check_private_file
from mongogate.server.audit_calls import audited_tools
from mongogate.server.auth.challenge import Challenge, ChallengingServer
from mongogate.server.auth.verify import (
    build_token_verifier,
    current_principal,
    principal_for_stdio,
    require_scopes,
)
from mongogate.server.checks import StartupChecks, check_connection, check_indexes
from mongogate.server.health import Readiness, readiness_for
from mongogate.server.observe import ObserveCalls
from mongogate.server.startup import OpenAfterInitialize
from mongogate.server.surface import UnknownTools, offer_surface
from mongogate.server.tenant_limit import TenantConcurrency
from mongogate.specs import RECALL_TOOL_NAMES, RUN_TOOL_NAMES
from mongogate.tools.memory_tools import INSTRUCTIONS  # the turn protocol, sent at initialize
from mongogate.tools.recall_tools import RECALL_INSTRUCTIONS
from mongogate.tools.registry import ToolRegistry
from mongogate.tools.state import AppState, PendingState
from mongogate.version import __version__

if TYPE_CHECKING:
    from mongogate.server.metrics import Metrics

log = logging.getLogger(__name__)
#: what build_server checks unless told otherwise: everything `serve` checks, nothing allowed
DEFAULT_CHECKS = StartupChecks()


def crash_point_from(env: dict[str, str]) -> Callable[[str], None] | None:
    """Crash tests: `MONGOGATE_TEST_CRASH_AT=<point>` makes the process die (like kill -9) there.

    Points: begin_turn.after_lease, answer.after_commit, answer.after_write,
    end_turn.after_reply_write, remember.after_write, forget.after_memory. Unset in production; it
    only ever ends this process.
    """
    point = env.get("MONGOGATE_TEST_CRASH_AT")
    if not point:
        return None

    def crash(at: str) -> None:
        if at == point:
            os._exit(137)

    return crash


def clock_from(env: dict[str, str]) -> Clock:
    """`MONGOGATE_TEST_CLOCK_SKEW_MS=N` runs this server's clock N ms ahead (race tests only)."""
    skew = env.get("MONGOGATE_TEST_CLOCK_SKEW_MS")
    return SkewedClock(int(skew)) if skew else SYSTEM_CLOCK


async def _log_sizes(db: Database, threshold: int) -> None:
    """The embedded engine's collection sizes at start-up, and what calls cost past ``threshold``."""
    from mongogate.memory.capacity import collection_sizes, size_report

    line, warnings = size_report(await collection_sizes(db.memory), threshold)
    log.info("%s", line)
    for w in warnings:
        log.warning("%s", w)


def public_url(settings: Settings) -> str:
    s = settings.server
    host = f"[{s.host}]" if ":" in s.host else s.host  # an IPv6 literal needs brackets in a URL
    return s.public_url or f"http://{host}:{s.port}"


def build_server(
    settings: Settings,
    registry: ToolRegistry | None = None,
    *,
    transport: Literal["stdio", "http"] = "stdio",
    insecure_no_auth: bool = False,
    environ: dict[str, str] | None = None,
    checks: StartupChecks | None = DEFAULT_CHECKS,
    on_open_failure: Callable[[BaseException], None] | None = None,
) -> MCPServer[AppState]:
    """Assemble the server. The caller's tenant comes from tokens (HTTP) or the launch config (stdio).

    ``checks``: `serve`'s start-up checks (server/checks.py), run in the lifespan before any tool
    can run: the database answers and its query user cannot write (right after the open), and
    every query tool's declared index exists (after the registry's start-up hooks, which may
    create them). A refusal is a ConfigError that stops the start; None skips them (`serve
    --http` ran them already). With ``on_open_failure`` the lifespan does not wait for the
    database: the server answers at once, tool calls wait for the open, and a failed open (or
    check) is handed to ``on_open_failure`` (stdio `serve` prints it and exits)."""
    registry = registry or ToolRegistry.from_settings(settings)
    tools = registry.build(settings)
    env = dict(os.environ if environ is None else environ)

    verifier = None
    sdk_auth = None
    stdio_principal: Principal | None = None
    # every scope a tool of this server requires: granted to a local operator (auth mode "none"),
    # listed in the HTTP metadata. Long-term memory's are its tools' too (tools/recall_tools.py).
    required = {s for spec in registry.query_specs for s in spec.required_scopes}
    if any(t.name in RECALL_TOOL_NAMES for t in tools):
        required |= set(settings.memory.long_term.required_scopes)
    scopes = sorted(required)
    challenge: Challenge | None = None
    if transport == "http" and settings.auth.mode != "none":
        verifier = build_token_verifier(settings.auth)
        url = public_url(settings)
        # The SDK's own metadata would name issuer_url as an authorization server whatever it is:
        # without resource_server_url it serves none, and server/auth/challenge.py serves the truth.
        sdk_auth = SdkAuthSettings.model_validate(
            {"issuer_url": url, "resource_server_url": None, "validate_token_resource": False}
        )
        advertised = (
            (settings.auth.issuer,) if settings.auth.advertise_issuer and settings.auth.issuer else ()
        )
        challenge = Challenge(url + "/mcp", authorization_servers=advertised, scopes=tuple(scopes))
    elif transport == "http" and not insecure_no_auth:
        raise ConfigError(
            "refusing to serve HTTP without authentication: set auth.mode to 'jwt' or 'api_keys', or pass "
            "--insecure-no-auth (loopback only) for local development"
        )
    else:
        stdio_principal = principal_for_stdio(settings.auth, env, grant_scopes=scopes)

    # Before anything is served: an audit file or directory other users could redirect (safefs.py)
    check_private_file(settings.audit_path, what="audit.path")
    instance = settings.server.instance_id or default_instance_id()
    all_tools = frozenset(t.name for t in tools)
    metrics: Metrics | None = None
    if settings.server.metrics:  # prometheus_client is imported only when metrics are served
        from mongogate.server.metrics import Metrics

        metrics = Metrics(all_tools, tenant_labels=settings.server.metrics_tenant_labels)

    def principal(ctx: Any) -> Principal:
        return current_principal(ctx, stdio_principal)

    async def open_state(db: Database, readiness: Readiness, opened: list[AuditLog]) -> AppState:
        await db.open()
        readiness.db = db
        if checks is not None:
            await check_connection(db, settings, checks)
        if db.embedded:
            await _log_sizes(db, settings.database.engine_size_warning)
        memory = MemoryStore(db.memory, settings.memory, clock_from(env))
        memory.fault = crash_point_from(env)
        await memory.ensure_indexes()
        rw_uri = db.uri  # database.uri, or the data dir's engine with its credentials
        audit = audit_from_settings(settings, rw_uri, instance)
        opened.append(audit)
        if metrics is not None:
            metrics.attach_audit(audit)
        recall = LongTermMemory(
            db.memory,
            settings.memory.long_term,
            make_embedder(settings.memory.embedding),
            memory.clock,
            limits=settings.limits,
        )
        recall.fault = memory.fault
        await recall.ensure_indexes()  # and the message search index: idempotent, every start
        await ensure_search_index(memory)
        if metrics is not None:
            metrics.attach_recall_index(recall.index)
        report = await path_report(recall)  # which vector path runs, in the server log
        log.info("%s", report[1])
        for line in (report[0], *report[2:]):
            log.debug("%s", line)
        runs = Runs(db.memory, settings.memory)
        if all_tools & RUN_TOOL_NAMES:  # checkpoints need their unique index before any call
            await runs.ensure_indexes()
        state = AppState(
            settings=settings,
            db=db,
            memory=memory,
            turns=Turns(memory),
            principal=principal,
            require_scopes=require_scopes,
            audit=audit,
            runs=runs,
            recall=recall,
        )
        for hook in registry.startup_hooks:
            await hook(state)
        if checks is not None:  # after the hooks: an application may create its indexes there
            await check_indexes(db, registry.query_specs, checks)
        readiness.writes = state.writes  # /readyz reports write refusals (tools/faults.py)
        return state

    @asynccontextmanager
    async def lifespan(server: MCPServer[AppState]) -> AsyncIterator[AppState | PendingState]:
        db = Database(settings.database, settings.server.data_dir, role_warning=True)
        opened: list[AuditLog] = []
        readiness = readiness_for(server)
        task: asyncio.Task[None] | None = None
        pending: PendingState | None = None
        try:
            if on_open_failure is None:
                yield await open_state(db, readiness, opened)
                return

            # Answer initialize and tools/list now; the database opens once initialize is answered
            # (OpenAfterInitialize) and tool calls wait for it (stdio start-up).
            async def in_background() -> None:
                try:
                    waiting.ready(await open_state(db, readiness, opened))
                except Exception as e:
                    waiting.failed(e)  # calls waiting for the open are refused, never left hanging
                    on_open_failure(e)

            def start() -> None:
                nonlocal task
                task = asyncio.get_running_loop().create_task(in_background())

            waiting = pending = PendingState(settings, principal, start)
            yield waiting
        finally:
            if pending is not None:
                pending.kick()  # a client that left before initialize: still report a bad database
            if task is not None and not task.done():
                # The client left before the open finished: let it finish (bounded by the
                # database timeouts), so a database that cannot be used is still reported.
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await task
            readiness.db = None
            readiness.writes = None
            for audit in opened:  # flush what is queued before the process goes
                await anyio.to_thread.run_sync(audit.close)
            await db.close()

    server = ChallengingServer(
        "mongogate",
        # ObserveCalls first: it opens the request id that the audit, the logs and errors share,
        # and writes the metric and the one audit event of a refused query-tool call
        # TenantConcurrency after UnknownTools: a [busy] refusal is logged and counted, and is no audit event
        middleware=[
            ObserveCalls(metrics, all_tools, audited_tools(registry.query_specs)),
            UnknownTools(all_tools),  # `[not_found] no tool named ...`, before anything else looks
            TenantConcurrency(settings.limits),
            OpenAfterInitialize(),
        ],
        version=__version__,
        instructions=INSTRUCTIONS + "\n" + RECALL_INSTRUCTIONS,
        tools=tools,
        # a PendingState while the database opens: every reader resolves it with tools.state.app_state
        lifespan=cast("Callable[[MCPServer[AppState]], AbstractAsyncContextManager[AppState]]", lifespan),
        token_verifier=verifier,
        auth=sdk_auth,
        log_level=settings.server.log_level,
    )
    server.transport = transport  # its HTTP app refuses a stdio server (server/auth/challenge.py)
    server.unauthenticated = transport == "http" and settings.auth.mode == "none"
    offer_surface(server)  # mongogate's prompts and resources in place of the SDK's
    if challenge is not None:
        server.install_challenge(challenge)
    if metrics is not None:
        from mongogate.server.metrics import register

        register(server, metrics)  # server/http.py serves them at /metrics
    return server
