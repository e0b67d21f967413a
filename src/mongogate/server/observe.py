"""Every request: its progress and its span; every ``tools/call``: one request id, log fields,
one log line, its metrics and its audit.

The outermost of mongogate's SDK middleware. For every request it opens the progress reporter the
long work reports to (mongogate.progress: rate-limited by the server's clock; the SDK sends a step
only to a client that asked, with `_meta.progressToken` or an in-process callback); with
`server.tracing` it opens the request's span (server/tracing.py, imported only then). For a tool
call it opens the request id (mongogate.requests) that the tool's error text, its audit events and
every log line of the call share, puts the tenant and tool in the log fields (mongogate.logs), and
when the call ends reads its outcome, a value the tool recorded where it was decided
(tools/base.py), never the text the model saw: it logs it (``ok`` or the error code) and the
duration, counts it (server/metrics.py, when enabled), puts it on the span, and writes the one
audit event of a refused query-tool call (server/audit_calls.py).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import ValidationError

from mongogate import progress
from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.errors import MongogateError
from mongogate.logs import call_fields
from mongogate.requests import OK, Outcome, serving
from mongogate.server import prompts
from mongogate.server.audit_calls import AuditedTool, audit_refusal
from mongogate.tools.state import AppState, PendingState

if TYPE_CHECKING:
    from mongogate.server.metrics import Metrics

log = logging.getLogger("mongogate.calls")
#: a failed result no mongogate code made (the SDK's own tool errors)
TOOL_ERROR = Outcome("tool_error")


class RequestTrace(Protocol):
    """A request's span (server/tracing.py): told how the request ended."""

    def ended(self, outcome: str, *, rpc_code: int | None = None, request_id: str | None = None) -> None: ...


class Tracer(Protocol):
    """Opens a request's span, current while the request runs (server/tracing.py `Tracing`)."""

    def request(
        self, ctx: Any, name: str | None, tenant: str | None
    ) -> AbstractContextManager[RequestTrace]: ...


class ObserveCalls:
    """ServerMiddleware: progress and a span for every request; request id, log fields and line,
    metrics and audit for each tools/call.

    ``audited``: the query tools whose refused calls each leave one audit event; ``tracer``: the
    spans (None: no tracing, nothing of OpenTelemetry touched); ``clock``: paces progress."""

    def __init__(
        self,
        metrics: Metrics | None,
        tools: frozenset[str],
        audited: Mapping[str, AuditedTool] | None = None,
        *,
        tracer: Tracer | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.metrics = metrics
        self.tools = tools
        self.audited = dict(audited or {})
        self.tracer = tracer
        self.clock = clock

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        reporter = _reporter(ctx, self.clock)
        if reporter is None and self.tracer is None and ctx.method != "tools/call":
            return await call_next(ctx)
        with contextlib.ExitStack() as stack:
            if reporter is not None:
                stack.enter_context(progress.reporting(reporter))
            trace = None
            if self.tracer is not None and ctx.request_id is not None:  # a request, not a notification
                trace = stack.enter_context(self.tracer.request(ctx, self._name(ctx), _tenant(ctx)))
            try:
                if ctx.method == "tools/call":
                    return await self._tool_call(ctx, call_next, trace)
                return await _traced(ctx, call_next, trace)
            finally:
                if reporter is not None:
                    await reporter.finish()

    def _name(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """What a span is named after besides the method: a registered tool or prompt (bounded)."""
        raw = ctx.params.get("name") if isinstance(ctx.params, Mapping) else None
        if ctx.method == "tools/call":
            return raw if isinstance(raw, str) and raw in self.tools else "unknown"
        if ctx.method == "prompts/get":
            return raw if isinstance(raw, str) and raw in prompts.NAMES else "unknown"
        return None

    async def _tool_call(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext, trace: RequestTrace | None
    ) -> HandlerResult:
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        raw = params.get("name")
        tool = raw if isinstance(raw, str) and raw in self.tools else "unknown"
        audited = self.audited.get(raw) if isinstance(raw, str) else None
        with serving(ctx.request_id) as ids, call_fields(tool=tool, tenant=_tenant(ctx)) as fields:
            started = time.perf_counter()
            outcome, rpc_code = Outcome("error"), None
            try:
                result = await call_next(ctx)
                outcome = ids.outcome or (TOOL_ERROR if _is_error(result) else OK)
                if audited is not None and not outcome.ok:
                    await audit_refusal(ctx, tool, audited, outcome, params.get("arguments"))
                if self.metrics is not None and outcome.ok:
                    self.metrics.observe_mismatches(tool, _structured(result).get("type_mismatches"))
                return result
            except (MCPError, ValidationError) as e:
                outcome, rpc_code = _refused(e), _rpc_code(e)
                if audited is not None:
                    await audit_refusal(ctx, tool, audited, outcome, params.get("arguments"))
                raise
            finally:
                self._ended(tool, outcome, time.perf_counter() - started, fields)
                if trace is not None:
                    trace.ended(outcome.code, rpc_code=rpc_code, request_id=ids.request_id)

    def _ended(self, tool: str, outcome: Outcome, seconds: float, fields: dict[str, Any]) -> None:
        """The call's log fields, its log line and its metrics."""
        fields.update(outcome=outcome.code, ms=round(seconds * 1000, 3))
        log.info("tools/call %s: %s in %.1f ms", tool, outcome.code, seconds * 1000)
        if self.metrics is not None:
            self.metrics.observe_call(tool, outcome.code, seconds, fields.get("tenant"))


async def _traced(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext, trace: RequestTrace | None
) -> HandlerResult:
    """A request other than a tool call: its span told "ok" or the JSON-RPC code it was refused with."""
    if trace is None:
        return await call_next(ctx)
    try:
        result = await call_next(ctx)
    except (MCPError, ValidationError) as e:
        trace.ended("error", rpc_code=_rpc_code(e))
        raise
    except Exception:
        trace.ended("error")
        raise
    trace.ended("ok")
    return result


def _reporter(ctx: ServerRequestContext[Any, Any], clock: Clock) -> progress.Reporter | None:
    """A progress reporter for a request (None for a notification). Whether the client asked is
    the SDK's to know: over JSON-RPC its dispatcher holds the request's `_meta.progressToken`
    (and sends nothing without one), in process the caller's callback; `report_progress` is a
    no-op when there is neither."""
    if ctx.request_id is None:
        return None
    return progress.Reporter(ctx.session.report_progress, clock)


def _rpc_code(e: MCPError | ValidationError) -> int:
    return INVALID_PARAMS if isinstance(e, ValidationError) else e.error.code


def _refused(e: MCPError | ValidationError) -> Outcome:
    """The outcome of a call the SDK refused: invalid params (a validation error, -32602) or an error."""
    invalid = isinstance(e, ValidationError) or e.error.code == -32602
    return Outcome("invalid_params" if invalid else "error")


def _is_error(result: HandlerResult) -> bool:
    if isinstance(result, Mapping):
        return result.get("isError") is True
    return getattr(result, "is_error", False) is True


def _structured(result: HandlerResult) -> Mapping[str, Any]:
    """The call's structured result (a value, never text parsed back), or {}."""
    if isinstance(result, Mapping):
        found = result.get("structuredContent")
    else:
        found = getattr(result, "structured_content", None)
    return found if isinstance(found, Mapping) else {}


def _tenant(ctx: ServerRequestContext[Any, Any]) -> str | None:
    app = ctx.lifespan_context
    if not isinstance(app, AppState | PendingState):
        return None
    try:
        return app.principal(ctx).tenant
    except MongogateError:
        return None  # unauthenticated: the tool answers that itself
