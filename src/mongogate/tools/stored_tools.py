"""mongogate's own tools built from their stored declarations, their modules imported at the first
call of one of them (issue 38.6).

Importing the memory, run and long-term memory tools' modules (their ~60 input and output
models, their handlers) and building them was about 25 ms of every `serve`'s start (quiet
machine, benchmarks/startup.py), all before `tools/list` or `/readyz` could answer, though
listing a tool needs only its declaration. tools/schemas.json holds each family's declarations
(`stored_schemas.declarations`: name, title, description, annotations, the keys of its input
and output models' stored schemas, whether its schema is filled from the settings), written by
``python -m mongogate.tools.write_schemas`` from the very `make_tool` calls; the schemas are
filled from the server's settings as `make_tool` fills them (`tools/limits.py`).

Each tool listed this way runs, at its first call, the family's own factory with the server's
settings (once per server and family) and hands the call to the tool of that name it built:
the same function, so the same checks, errors, scopes and output validation
(`tests/tools/test_stored_tools.py` compares both builds for several settings). A family with no
stored declarations (a checkout before the file was written, or `write_schemas` recording) is
built from its module, as before; so is every family while `output_schema.LEAN` is off (the
benchmarks' server of the code before the lean output schemas: the file holds only those).
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, ToolAnnotations

from mongogate.compat.sdk import tool_metadata
from mongogate.config import Settings
from mongogate.errors import CodeUnavailable
from mongogate.requests import current as current_request
from mongogate.requests import new_request_id
from mongogate.tools import output_schema, stored_schemas
from mongogate.tools.base import RawArguments, error_result, fill_limits
from mongogate.tools.limits import memory_limits, recall_limits, run_limits

__all__ = ["FAMILIES", "family_tools"]

log = logging.getLogger(__name__)

#: each built-in family's factory (module:function): memory (sessions and turns), runs, recall
FAMILIES: dict[str, str] = {
    "memory": "mongogate.tools.memory_tools:memory_tools",
    "runs": "mongogate.tools.run_tools:run_tools",
    "recall": "mongogate.tools.recall_tools:recall_tools",
}

#: the values each family's schemas are filled from, as its factory fills them
_LIMITS: dict[str, Callable[[Settings], Mapping[str, object]]] = {
    "memory": lambda s: memory_limits(s.memory, s.limits),
    "runs": lambda s: run_limits(s.memory),
    "recall": lambda s: recall_limits(s.memory, s.limits),
}


def family_tools(family: str, settings: Settings, *, declared: bool = True) -> list[Tool]:
    """The tools of a built-in family for a server with ``settings``: from their stored
    declarations when the file has them all (and ``declared``), else from the family's module."""
    return (_declared(family, settings) if declared else None) or _factory(family)(settings)


def _factory(family: str) -> Callable[[Settings], list[Tool]]:
    module, _, name = FAMILIES[family].partition(":")
    made: Callable[[Settings], list[Tool]] = getattr(importlib.import_module(module), name)
    return made


class _Family:
    """One family's tools as its factory builds them for one server, at the first call of one."""

    def __init__(self, family: str, settings: Settings) -> None:
        self.family = family
        self.settings = settings
        self._built: dict[str, Tool] | None = None

    def tool(self, name: str) -> Tool:
        if self._built is None:
            self._built = {t.name: t for t in _factory(self.family)(self.settings)}
        return self._built[name]


def _declared(family: str, settings: Settings) -> list[Tool] | None:
    found = stored_schemas.declarations(family)
    if not found or any(d["custom"] for d in found):
        return None
    if not output_schema.LEAN:  # pydantic's output schemas asked for: the file holds the lean ones
        return None
    limits = _LIMITS[family](settings)
    built = _Family(family, settings)
    tools: list[Tool] = []
    for d in found:
        schema_text = stored_schemas.text("input", d["input"])
        output_text = None if d["output"] is None else stored_schemas.text("output", d["output"])
        if schema_text is None or (d["output"] is not None and output_text is None):
            return None  # a model not stored: the file is older than the code
        schema = json.loads(schema_text)
        tools.append(
            _listed(
                built,
                d,
                fill_limits(schema, limits) if d["limits"] else schema,
                None if output_text is None else json.loads(output_text),
            )
        )
    return tools


def _listed(built: _Family, d: dict[str, Any], schema: dict[str, Any], output: dict[str, Any] | None) -> Tool:
    """A tool as declared, whose calls run the tool of its name its family builds."""
    name: str = d["name"]

    async def fn(ctx: Context[Any, Any], **kwargs: Any) -> Any:
        try:
            tool = built.tool(name)
        except Exception as e:  # its module or factory failed: the code is broken, not the call
            ids = current_request()
            request_id = ids.request_id if ids is not None else new_request_id()
            log.error("request %s: tool %s could not be built: %s", request_id, name, type(e).__name__)
            log.debug("request %s: traceback", request_id, exc_info=True)
            failed = CodeUnavailable(
                f"{name} cannot run: its code failed to load in this server; nothing was written"
            )
            return error_result(failed, request_id)
        result: CallToolResult = await tool.fn(ctx, **kwargs)
        return tool.fn_metadata.convert_result(result)  # the built tool's output check, as the SDK does

    annotations = d["annotations"]
    return Tool(
        fn=fn,
        name=name,
        title=d["title"],
        description=d["description"],
        parameters=schema,
        fn_metadata=tool_metadata(RawArguments, None, output),
        is_async=True,
        context_kwarg="ctx",
        annotations=None if annotations is None else ToolAnnotations.model_validate(annotations),
    )
