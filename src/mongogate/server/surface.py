"""The MCP surface says only what is true: tools, prompts and resources, each answered by mongogate.

The SDK registers prompt and resource handlers on every server (answering an unknown prompt with
an internal error and a traceback in the log); here they are replaced by mongogate's own
(server/prompts.py, server/resources.py: an unknown name is ``-32602``, invalid params), and
resource subscriptions are not advertised. An unknown tool is a tool error in the one format,
``[not_found] no tool named 'x'; tools: ...``, never the SDK's ``Unknown tool: x``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp_types import (
    CallToolResult,
    GetPromptRequestParams,
    PaginatedRequestParams,
    ReadResourceRequestParams,
)

from mongogate.compat.sdk import add_request_handler, drop_request_handlers
from mongogate.errors import NotFound
from mongogate.policy import seg
from mongogate.server import prompts, resources
from mongogate.tools.base import error_result

log = logging.getLogger(__name__)

#: tool names listed in the not-found message (the rest are counted)
_LISTED = 50
#: the SDK's prompt and resource handlers, replaced by mongogate's (subscriptions are not offered)
_SDK_HANDLERS = (
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
)


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


def offer_surface(server: MCPServer[Any]) -> None:
    """Tools, plus mongogate's own prompts (server/prompts.py) and resources (server/resources.py)
    in place of the SDK's (which would answer an unknown name with an internal error)."""
    drop_request_handlers(server, _SDK_HANDLERS)
    add_request_handler(server, "prompts/list", PaginatedRequestParams, prompts.list_prompts)
    add_request_handler(server, "prompts/get", GetPromptRequestParams, prompts.get_prompt)
    add_request_handler(server, "resources/list", PaginatedRequestParams, resources.list_resources)
    add_request_handler(server, "resources/templates/list", PaginatedRequestParams, resources.list_templates)
    add_request_handler(server, "resources/read", ReadResourceRequestParams, resources.read_resource)
