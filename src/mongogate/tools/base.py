"""Build MCP tools from pydantic input/output models (or hand-built schemas).

The SDK's `add_tool()` only takes functions; mongogate builds every tool from a spec so
that input schemas forbid unknown arguments and errors reach the model with their text.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict

from mongogate.errors import MongogateError
from mongogate.principal import Principal
from mongogate.tools.bounds import check_arguments
from mongogate.tools.state import AppState

log = logging.getLogger(__name__)


class ToolInput(ArgModelBase):
    """Tool arguments: unknown keys are an error, and there is never a tenant argument."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


class ToolOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MongogateToolError(ToolError):
    """A mongogate error shown to the model with its message (and code)."""

    def __init__(self, err: MongogateError) -> None:
        self.code = err.code
        self.retryable = err.retryable
        hint = " (retryable)" if err.retryable else ""
        super().__init__(f"[{err.code}]{hint} {err}")


@dataclass(frozen=True)
class Call:
    """What a tool body gets: the app, the authenticated caller, and the request id."""

    app: AppState
    principal: Principal
    request_id: str
    tool: str


Handler = Callable[[Call, Any], Awaitable[BaseModel | dict[str, Any]]]

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, destructive_hint=False)


def make_tool(
    *,
    name: str,
    description: str,
    input_model: type[ToolInput],
    handler: Handler,
    output_model: type[BaseModel] | None = None,
    output_schema: dict[str, Any] | None = None,
    parameters: dict[str, Any] | None = None,
    annotations: ToolAnnotations | None = None,
    required_scopes: list[str] | tuple[str, ...] = (),
    title: str | None = None,
) -> Tool:
    async def fn(ctx: Context[AppState, Any], **kwargs: Any) -> CallToolResult:
        app: AppState = ctx.request_context.lifespan_context
        principal: Principal | None = None
        try:
            principal = app.principal(ctx)
            check_arguments(kwargs, app.settings.limits, schema=parameters)  # before schema/policy work
            if required_scopes:
                app.require_scopes(principal, list(required_scopes), name)
            call = Call(app=app, principal=principal, request_id=str(ctx.request_id), tool=name)
            result = await handler(call, input_model.model_construct(**kwargs))
        except MongogateError as e:
            who = f"{principal.tenant}/{principal.subject}" if principal else "unauthenticated"
            log.info("tool %s refused for %s: %s", name, who, e.code)
            raise MongogateToolError(e) from e
        data = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(data, ensure_ascii=False))],
            structured_content=data,
        )

    meta = FuncMetadata(arg_model=input_model, output_model=output_model, output_schema=output_schema)
    return Tool(
        fn=fn,
        name=name,
        title=title,
        description=description,
        parameters=parameters or input_model.model_json_schema(by_alias=True),
        fn_metadata=meta,
        is_async=True,
        context_kwarg="ctx",
        annotations=annotations,
    )
