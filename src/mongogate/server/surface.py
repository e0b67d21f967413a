"""The MCP surface says only what is true: tools, and nothing advertised that is not there.

mongogate offers tools only (the turn protocol travels in the server's ``instructions``). The
SDK registers prompt and resource handlers on every server, which advertises both
capabilities with nothing behind them, and answers an unknown prompt with an internal error
and a traceback in the log on every call. Here neither capability is advertised; a client
that asks anyway for a prompt or a resource by name gets ``-32602`` (invalid params: no
such name) and the log gets one line. An unknown tool is a tool error in the one format,
``[not_found] no tool named 'x'; tools: ...``, never the SDK's ``Unknown tool: x``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, GetPromptRequestParams, ReadResourceRequestParams

from mongogate.compat.sdk import add_request_handler, drop_request_handlers
from mongogate.errors import NotFound
from mongogate.policy.paths import seg
from mongogate.tools.base import error_result

log = logging.getLogger(__name__)

#: tool names listed in the not-found message (the rest are counted)
_LISTED = 50
#: what the SDK registers and mongogate does not offer: dropping them drops the capabilities
_UNOFFERED = ("prompts/list", "resources/list", "resources/templates/list")


def unknown_tool(name: object, tools: Iterable[str]) -> NotFound:
    """``no tool named 'x'; tools: a, b`` (the name escaped and shortened; at most 50 names)."""
    names = sorted(tools)
    shown = ", ".join(names[:_LISTED]) + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")
    return NotFound(f"no tool named '{seg(name)}'; tools: {shown or 'none'}")


class UnknownTools:
    """ServerMiddleware: a ``tools/call`` naming no registered tool gets the coded tool error."""

    def __init__(self, tools: Iterable[str]) -> None:
        self.tools = frozenset(tools)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        name = params.get("name")
        if not isinstance(name, str) or name in self.tools:
            return await call_next(ctx)  # a malformed request is the SDK's -32602
        log.info("tools/call: no tool named %r", seg(name))
        result: CallToolResult = error_result(unknown_tool(name, self.tools))
        return result


def offer_tools_only(server: MCPServer[Any]) -> None:
    """Advertise neither prompts nor resources; answer a prompt or resource by name with -32602."""
    drop_request_handlers(server, _UNOFFERED)  # what is registered is advertised

    async def no_prompt(ctx: ServerRequestContext[Any, Any], params: GetPromptRequestParams) -> Any:
        log.info("prompts/get: no prompt named %r (this server offers tools only)", seg(params.name))
        raise MCPError(
            code=INVALID_PARAMS,
            message=f"no prompt named '{seg(params.name)}': this server offers tools only",
        )

    async def no_resource(ctx: ServerRequestContext[Any, Any], params: ReadResourceRequestParams) -> Any:
        uri = seg(str(params.uri))
        log.info("resources/read: no resource %r (this server offers tools only)", uri)
        raise MCPError(code=INVALID_PARAMS, message=f"no resource '{uri}': this server offers tools only")

    add_request_handler(server, "prompts/get", GetPromptRequestParams, no_prompt)
    add_request_handler(server, "resources/read", ReadResourceRequestParams, no_resource)
