"""Every call to a query tool that does not run leaves exactly one audit event.

The query tool audits the refusals of its own checks; a call can also fail before the tool
runs (arguments that are not an object: the SDK answers -32602 without calling it) or in
make_tool before the handler (bounds, scopes). This SDK middleware sees every ``tools/call``
before validation and writes the one event such a call would otherwise miss.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Collection, Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from mongogate.audit.log import Rejection, count_events
from mongogate.errors import MongogateError
from mongogate.requests import current as current_request
from mongogate.requests import serving
from mongogate.tools.state import AppState, PendingState, app_state

log = logging.getLogger(__name__)
_CODE = re.compile(r"\[([a-z_]{1,40})\]")
_ARGUMENT = re.compile(r"\[invalid_input\] argument '?([^\s']{1,300})")  # tools/bounds.py names the node


#: failures that are not a refusal of what the model sent: their own event type, counted apart
NOT_REFUSALS = frozenset({"storage_error"})


class QueryCallAudit:
    """ServerMiddleware: audit a refused query-tool call that no check audited.

    ``allowed``: each tool's allowed ``$`` names (audit/forbidden.py), so that the event
    lists every other one in the arguments, whichever check refused the call."""

    def __init__(
        self, query_tools: Collection[str], allowed: Mapping[str, frozenset[str]] | None = None
    ) -> None:
        self.query_tools = frozenset(query_tools)
        self.allowed = dict(allowed or {})

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        tool = params.get("name")
        if ctx.method != "tools/call":
            return await call_next(ctx)
        # One request id for the tool, its audit events and log lines: server/observe.py opens
        # it first when installed; on its own this middleware opens it.
        opened = contextlib.nullcontext() if current_request() is not None else serving(ctx.request_id)
        with opened:
            if not isinstance(tool, str) or tool not in self.query_tools:
                return await call_next(ctx)
            return await self._audited(ctx, call_next, tool, params)

    async def _audited(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext, tool: str, params: Mapping[str, Any]
    ) -> HandlerResult:
        with count_events() as events:
            try:
                result = await call_next(ctx)
            except (MCPError, ValidationError) as e:
                reason = (
                    "invalid_params" if isinstance(e, ValidationError) or e.error.code == -32602 else "error"
                )
                if events[0] == 0:
                    await self.record(ctx, tool, reason, params.get("arguments"))
                raise
            if events[0] == 0 and _is_error(result):
                reason, path = _reason(result)
                await self.record(ctx, tool, reason, params.get("arguments"), path)
        return result

    async def record(
        self,
        ctx: ServerRequestContext[Any, Any],
        tool: str,
        reason: str,
        arguments: object,
        path: str = "arguments",
    ) -> None:
        """One event; ``path`` is the offending argument when the refusal named one."""
        value = ctx.lifespan_context
        if not isinstance(value, AppState | PendingState):
            return
        app = await app_state(value)
        if app.audit is None:
            return
        tenant: str | None = None
        subject: str | None = None
        try:
            principal = app.principal(ctx)
            tenant, subject = principal.tenant, principal.subject
        except MongogateError:
            pass  # unauthenticated: still audited, without a tenant
        request_id = ids.request_id if (ids := current_request()) is not None else None
        root = "" if isinstance(arguments, Mapping) else "arguments"
        # On file before the client hears of the refusal (the writer thread; the loop never blocks).
        fields: Rejection = {
            "tool": tool,
            "tenant": tenant,
            "principal": subject,
            "reason": reason,
            "path": path,
            "filter": arguments,
            "request_id": request_id,
            "root": root,
        }
        if reason in NOT_REFUSALS:
            app.audit.call_failed(**fields)
        else:
            fields["allowed"] = self.allowed.get(tool)
            app.audit.filter_rejected(**fields)
        await app.audit.synced()


def _is_error(result: HandlerResult) -> bool:
    if isinstance(result, Mapping):
        return result.get("isError") is True
    return getattr(result, "is_error", False) is True


def _reason(result: HandlerResult) -> tuple[str, str]:
    """The `[code]` a mongogate tool error starts with (else "tool_error"), and the argument it names."""
    content = result.get("content") if isinstance(result, Mapping) else getattr(result, "content", None)
    for item in content or []:
        text = item.get("text") if isinstance(item, Mapping) else getattr(item, "text", None)
        if isinstance(text, str) and (found := refusal_of(text)) is not None:
            return found
    return "tool_error", "arguments"


def refusal_of(text: str) -> tuple[str, str] | None:
    """(code, argument) of a tool error's text, as its audit event records them (None: no code)."""
    m = _CODE.search(text[:200])
    if m is None:
        return None
    arg = _ARGUMENT.search(text[:400])
    return m.group(1), arg.group(1) if arg else "arguments"
