"""Every ``tools/call``: one request id, log fields, one log line, its metrics and its audit.

The outermost SDK middleware. It opens the request id (mongogate.requests) that the tool's
error text, its audit events and every log line of the call share, puts the tenant and tool
in the log fields (mongogate.logs), and when the call ends reads its outcome, a value the tool
recorded where it was decided (tools/base.py), never the text the model saw: it logs it (``ok``
or the error code) and the duration, counts it (server/metrics.py, when enabled), and writes
the one audit event of a refused query-tool call (server/audit_calls.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from mongogate.errors import MongogateError
from mongogate.logs import call_fields
from mongogate.requests import OK, Outcome, serving
from mongogate.server.audit_calls import AuditedTool, audit_refusal
from mongogate.tools.state import AppState, PendingState

if TYPE_CHECKING:
    from mongogate.server.metrics import Metrics

log = logging.getLogger("mongogate.calls")
#: a failed result no mongogate code made (the SDK's own tool errors)
TOOL_ERROR = Outcome("tool_error")


class ObserveCalls:
    """ServerMiddleware: request id, log fields and line, metrics and audit for each tools/call.

    ``audited``: the query tools whose refused calls each leave one audit event."""

    def __init__(
        self, metrics: Metrics | None, tools: frozenset[str], audited: Mapping[str, AuditedTool] | None = None
    ) -> None:
        self.metrics = metrics
        self.tools = tools
        self.audited = dict(audited or {})

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        raw = params.get("name")
        tool = raw if isinstance(raw, str) and raw in self.tools else "unknown"
        audited = self.audited.get(raw) if isinstance(raw, str) else None
        with serving(ctx.request_id) as ids, call_fields(tool=tool, tenant=_tenant(ctx)) as fields:
            started = time.perf_counter()
            outcome = Outcome("error")
            try:
                result = await call_next(ctx)
                outcome = ids.outcome or (TOOL_ERROR if _is_error(result) else OK)
                if audited is not None and not outcome.ok:
                    await audit_refusal(ctx, tool, audited, outcome, params.get("arguments"))
                if self.metrics is not None and outcome.ok:
                    self.metrics.observe_mismatches(tool, _structured(result).get("type_mismatches"))
                return result
            except (MCPError, ValidationError) as e:
                outcome = _refused(e)
                if audited is not None:
                    await audit_refusal(ctx, tool, audited, outcome, params.get("arguments"))
                raise
            finally:
                self._ended(tool, outcome, time.perf_counter() - started, fields)

    def _ended(self, tool: str, outcome: Outcome, seconds: float, fields: dict[str, Any]) -> None:
        """The call's log fields, its log line and its metrics."""
        fields.update(outcome=outcome.code, ms=round(seconds * 1000, 3))
        log.info("tools/call %s: %s in %.1f ms", tool, outcome.code, seconds * 1000)
        if self.metrics is not None:
            self.metrics.observe_call(tool, outcome.code, seconds, fields.get("tenant"))


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
