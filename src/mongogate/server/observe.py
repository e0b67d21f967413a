"""Every ``tools/call``: one request id, log fields, one log line, and its metrics.

The outermost SDK middleware. It opens the request id (mongogate.requests) that the tool's
error text, its audit events and every log line of the call share, puts the tenant and tool
in the log fields (mongogate.logs), and when the call ends logs its outcome (``ok`` or the
error code the model saw) and duration, and counts it (server/metrics.py, when enabled).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from mongogate.errors import MongogateError
from mongogate.logs import call_fields
from mongogate.requests import serving
from mongogate.tools.state import AppState, PendingState

if TYPE_CHECKING:
    from mongogate.server.metrics import Metrics

log = logging.getLogger("mongogate.calls")
_CODE = re.compile(r"\[([a-z_]{1,40})\]")


class ObserveCalls:
    """ServerMiddleware: request id, log fields and line, metrics for each tools/call."""

    def __init__(self, metrics: Metrics | None, tools: frozenset[str]) -> None:
        self.metrics = metrics
        self.tools = tools

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        raw = params.get("name")
        tool = raw if isinstance(raw, str) and raw in self.tools else "unknown"
        with serving(ctx.request_id), call_fields(tool=tool, tenant=_tenant(ctx)) as fields:
            started = time.perf_counter()
            outcome = "error"
            try:
                result = await call_next(ctx)
                outcome = outcome_of(result)
                if self.metrics is not None and outcome == "ok":
                    self.metrics.observe_mismatches(tool, _structured(result).get("type_mismatches"))
                return result
            except (MCPError, ValidationError) as e:
                outcome = (
                    "invalid_params" if isinstance(e, ValidationError) or e.error.code == -32602 else "error"
                )
                raise
            finally:
                seconds = time.perf_counter() - started
                fields.update(outcome=outcome, ms=round(seconds * 1000, 3))
                log.info("tools/call %s: %s in %.1f ms", tool, outcome, seconds * 1000)
                if self.metrics is not None:
                    self.metrics.observe_call(tool, outcome, seconds, fields.get("tenant"))


def outcome_of(result: HandlerResult) -> str:
    """``ok``, or the ``[code]`` a failed call's text starts with (else ``tool_error``)."""
    is_error = result.get("isError") if isinstance(result, Mapping) else getattr(result, "is_error", False)
    if is_error is not True:
        return "ok"
    content = result.get("content") if isinstance(result, Mapping) else getattr(result, "content", None)
    for item in content or []:
        text = item.get("text") if isinstance(item, Mapping) else getattr(item, "text", None)
        if isinstance(text, str) and (m := _CODE.match(text)):
            return m.group(1)
    return "tool_error"


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
