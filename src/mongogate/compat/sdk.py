"""The MCP SDK's internals mongogate uses (mcp 2.3; pinned by tests/test_compat.py)."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from anyio.abc import TaskGroup
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from pydantic import BaseModel

__all__ = [
    "ArgModelBase",
    "FuncMetadata",
    "add_request_handler",
    "derived_output_schema",
    "drop_request_handlers",
    "drop_sdk_spans",
    "forget_session",
    "session_hooks",
    "session_task_group",
    "set_session_hooks",
    "tool_metadata",
]


def tool_metadata(
    arg_model: type[ArgModelBase], output_model: type[BaseModel] | None, output_schema: dict[str, Any] | None
) -> FuncMetadata:
    """What ``Tool(fn_metadata=...)`` needs for a tool built from a schema, not a Python signature.

    The output schema the SDK would derive from ``output_model`` is derived once per model and
    copied out for each tool (the same dict the SDK builds: generating it was a third of a
    server's build time, repeated for every server a process builds)."""
    if output_model is not None and output_schema is None:
        output_schema = derived_output_schema(output_model)
    return FuncMetadata(arg_model=arg_model, output_model=output_model, output_schema=output_schema)


def derived_output_schema(output_model: type[BaseModel]) -> dict[str, Any]:
    """The output schema the SDK derives from ``output_model`` (a fresh copy each call)."""
    loaded: dict[str, Any] = json.loads(_derived_output_schema(output_model))
    return loaded


@functools.cache
def _derived_output_schema(output_model: type[BaseModel]) -> str:
    """The SDK's own derivation (``FuncMetadata.model_post_init``), kept as text so that no
    caller can change what the next one gets."""
    return json.dumps(FuncMetadata(arg_model=ArgModelBase, output_model=output_model).output_schema)


def drop_request_handlers(server: MCPServer[Any], methods: Iterable[str]) -> None:
    """Unregister the SDK's handlers for ``methods``: the low-level server advertises a
    capability (prompts, resources) exactly when a handler for it is registered."""
    table: dict[str, Any] = server._lowlevel_server._request_handlers
    for method in methods:
        table.pop(method, None)


def drop_sdk_spans(server: MCPServer[Any]) -> None:
    """Take the SDK's own per-request OpenTelemetry span out of the middleware (the low-level
    server puts an ``OpenTelemetryMiddleware`` first in every server): mongogate opens its own
    span with `server.tracing` (server/tracing.py), and without it nothing of OpenTelemetry runs
    per request."""
    from mcp.server._otel import OpenTelemetryMiddleware

    chain: list[Any] = server._lowlevel_server.middleware
    chain[:] = [m for m in chain if not isinstance(m, OpenTelemetryMiddleware)]


def add_request_handler(server: MCPServer[Any], method: str, params: type[BaseModel], handler: Any) -> None:
    """Register a low-level handler (``MCPServer`` keeps its low-level server private)."""
    server._lowlevel_server.add_request_handler(method, params, handler)


# The streamable-HTTP session manager (server/session_cap.py): the SDK has one global session
# cap and no hook per session, so the per-principal cap wraps two of its methods on the instance
# and evicts through its two tables.

Admit = Callable[[Any], Any]
Discard = Callable[[str, Any], Awaitable[None]]


def session_hooks(manager: StreamableHTTPSessionManager) -> tuple[Admit, Discard]:
    """The manager's ``_admit_session`` (registers a new session's transport, or returns None at
    the SDK's own cap) and ``_discard_session`` (forgets an ended one), bound to ``manager``."""
    return manager._admit_session, manager._discard_session


def set_session_hooks(manager: StreamableHTTPSessionManager, admit: Admit, discard: Discard) -> None:
    """Replace ``_admit_session`` and ``_discard_session`` on the instance: the SDK looks each one
    up at call time, so the wrappers see every session opened and ended."""
    setattr(manager, "_admit_session", admit)  # noqa: B010
    setattr(manager, "_discard_session", discard)  # noqa: B010


def forget_session(manager: StreamableHTTPSessionManager, session_id: str) -> Any:
    """Remove a session from the manager's ``_server_instances`` and ``_session_owners`` (its id
    answers 404 from then on) and return its transport (None if it was not there)."""
    instances: dict[str, Any] = manager._server_instances
    owners: dict[str, Any] = manager._session_owners
    owners.pop(session_id, None)
    return instances.pop(session_id, None)


def session_task_group(manager: StreamableHTTPSessionManager) -> TaskGroup | None:
    """The manager's ``_task_group`` (the one its session tasks run in; None before ``run``)."""
    group: TaskGroup | None = manager._task_group
    return group
