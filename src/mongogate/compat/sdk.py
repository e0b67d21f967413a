"""The MCP SDK's internals mongogate uses (mcp 2.3; pinned by tests/test_compat.py)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from pydantic import BaseModel

__all__ = ["ArgModelBase", "FuncMetadata", "add_request_handler", "drop_request_handlers", "tool_metadata"]


def tool_metadata(
    arg_model: type[ArgModelBase], output_model: type[BaseModel] | None, output_schema: dict[str, Any] | None
) -> FuncMetadata:
    """What ``Tool(fn_metadata=...)`` needs for a tool built from a schema, not a Python signature.

    The output schema the SDK would derive from ``output_model`` is derived once per model and
    copied out for each tool (the same dict the SDK builds: generating it was a third of a
    server's build time, repeated for every server a process builds)."""
    if output_model is not None and output_schema is None:
        output_schema = json.loads(_derived_output_schema(output_model))
    return FuncMetadata(arg_model=arg_model, output_model=output_model, output_schema=output_schema)


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


def add_request_handler(server: MCPServer[Any], method: str, params: type[BaseModel], handler: Any) -> None:
    """Register a low-level handler (``MCPServer`` keeps its low-level server private)."""
    server._lowlevel_server.add_request_handler(method, params, handler)
