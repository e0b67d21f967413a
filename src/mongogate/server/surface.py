"""The MCP surface says only what is true: tools, prompts and resources, each answered by mongogate.

The SDK registers prompt and resource handlers on every server (answering an unknown prompt with
an internal error and a traceback in the log); here they are replaced by mongogate's own
(server/prompts.py, server/resources.py: an unknown name is ``-32602``, invalid params), and
resource subscriptions are not advertised. An unknown tool is the protocol error the
specification lists for it, ``-32602`` (invalid params), its message in the one format
``[not_found] no tool named 'x'; tools: ...`` (never the SDK's ``Unknown tool: x``).

mongogate publishes no events (no list or resource ever changes under a client's feet in a way
it must be told of), so nothing is served that would carry them: the server is built without
``subscriptions/listen`` (protocol 2026-07-28), ``server/discover`` and ``initialize`` then say
``listChanged`` and ``subscribe`` false, and a listen request is answered at once with ``-32601``
saying so (`NoEvents`), never a stream that holds a connection and sends nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    GetPromptRequestParams,
    PaginatedRequestParams,
    ReadResourceRequestParams,
)

from mongogate.compat.sdk import add_request_handler, drop_request_handlers
from mongogate.errors import NotFound
from mongogate.policy import seg
from mongogate.server import prompts, resources

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


#: the methods that would deliver events; mongogate serves none of them
EVENT_METHODS = frozenset({"subscriptions/listen", "resources/subscribe", "resources/unsubscribe"})
NO_EVENTS = (
    "{method} is not offered: mongogate publishes no events (server/discover and initialize "
    "advertise no listChanged or subscribe); read tools/list, resources/list or a resource again "
    "when you need it"
)


class NoEvents:
    """ServerMiddleware: a request for an event stream or subscription is ``-32601`` at once, in
    words (the SDK would say only "Method not found"); it holds nothing and runs nothing."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method not in EVENT_METHODS:
            return await call_next(ctx)
        log.info("%s: not offered (no events are published)", ctx.method)
        raise MCPError(code=METHOD_NOT_FOUND, message=NO_EVENTS.format(method=ctx.method), data=ctx.method)


class UnknownTools:
    """ServerMiddleware: a ``tools/call`` naming no registered tool is ``-32602`` in the one format."""

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
        e = unknown_tool(name, self.tools)
        raise MCPError(code=INVALID_PARAMS, message=f"[{e.code}] {e}")


def offer_surface(server: MCPServer[Any]) -> None:
    """Tools, plus mongogate's own prompts (server/prompts.py) and resources (server/resources.py)
    in place of the SDK's (which would answer an unknown name with an internal error)."""
    drop_request_handlers(server, _SDK_HANDLERS)
    add_request_handler(server, "prompts/list", PaginatedRequestParams, prompts.list_prompts)
    add_request_handler(server, "prompts/get", GetPromptRequestParams, prompts.get_prompt)
    add_request_handler(server, "resources/list", PaginatedRequestParams, resources.list_resources)
    add_request_handler(server, "resources/templates/list", PaginatedRequestParams, resources.list_templates)
    add_request_handler(server, "resources/read", ReadResourceRequestParams, resources.read_resource)
