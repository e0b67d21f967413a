"""Build MCP tools from pydantic input/output models (or hand-built schemas).

The SDK's `add_tool()` only takes functions; mongogate builds every tool from a spec so
that input schemas forbid unknown arguments and every failure reaches the model in one
shape: `[code] (retryable)? message`. The tool function returns the error result itself
(the SDK would prefix raised errors with "Error executing tool X:" or hide them), and the
driver's detail goes to the server log under the request id, never to the model. How the call
ended is recorded as an `Outcome` value in the request (mongogate.requests); the text is
rendered from it here, once, and the metric and the audit read the value (server/observe.py).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from bson.errors import InvalidDocument
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mongogate.compat.sdk import ArgModelBase, tool_metadata
from mongogate.config import Settings
from mongogate.errors import (
    InternalError,
    InvalidInput,
    MongogateError,
    PolicyViolation,
    StorageError,
    WriteRefused,
)
from mongogate.memory_scope import MemoryScope, conversations_for
from mongogate.principal import Principal
from mongogate.requests import OK, Outcome, new_request_id
from mongogate.requests import current as current_request
from mongogate.tools import stored_schemas
from mongogate.tools.bounds import check_arguments, key_caps_from_schema
from mongogate.tools.faults import classify
from mongogate.tools.output_schema import published
from mongogate.tools.state import AppState, app_state
from mongogate.values import ByteBudget, shown

log = logging.getLogger(__name__)


#: an id argument. The store checks it (memory/keys.py check_id); the schema shows the same
#: limits, filled in from the settings by `fill_limits` so the two cannot drift.
ID_PATTERN = "^[^:\\u0000-\\u001f\\u007f-\\u009f\\u2028\\u2029]+$"
IdStr = Annotated[
    str,
    Field(
        json_schema_extra={"minLength": 1, "pattern": ID_PATTERN, "x-limits": {"maxLength": "max_id_length"}}
    ),
]
ID_RULES = "at most {max_id_length} characters, no ':' or control characters"


def limit(**keywords: str | int) -> Any:
    """Schema keywords whose values come from the settings (names of `fill_limits` values)."""
    return {"x-limits": keywords}


def fill_limits(schema: dict[str, Any], values: Mapping[str, object]) -> dict[str, Any]:
    """Resolve `{name}` in descriptions and `x-limits` markers from the settings the checks use.

    Pydantic models stay loose (the stores word the refusals); what the model reads is made here
    from the very values the stores enforce, so schema and checks cannot disagree.
    """
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "x-limits":
            for word, name in value.items():
                out[word] = values[name] if isinstance(name, str) else name
        elif key == "description" and isinstance(value, str):
            out[key] = value.format_map(values)
        elif isinstance(value, dict):
            out[key] = fill_limits(value, values)
        elif isinstance(value, list):
            out[key] = [fill_limits(v, values) if isinstance(v, dict) else v for v in value]
        else:
            out[key] = value
    return out


class ToolInput(ArgModelBase):
    """Tool arguments: unknown keys are an error, and there is never a tenant argument."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, defer_build=True)


class RawArguments(ArgModelBase):
    """What the SDK validates: anything. mongogate validates inside the tool, to word the error."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return dict(self.__pydantic_extra__ or {})


class ToolOutput(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


def outcome_of(err: MongogateError) -> Outcome:
    """The outcome a failed call reports (a policy walk's refusal is marked: its event logs the
    argument the walk read)."""
    return Outcome.of(err, policy=isinstance(err, PolicyViolation))


def render(outcome: Outcome, request_id: str | None = None) -> str:
    """The one text of a failure: ``[code] (retryable)? message``, citing the request id when the
    detail is in the server log."""
    hint = " (retryable)" if outcome.retryable else ""
    text = f"[{outcome.code}]{hint} {outcome.message}"
    if request_id and outcome.logged:
        text += f" (request {request_id})"
    return text


def error_text(err: MongogateError, request_id: str | None = None) -> str:
    return render(outcome_of(err), request_id)


def error_result(err: MongogateError, request_id: str | None = None) -> CallToolResult:
    """The failed call's result; its outcome is recorded in the request being served, if any."""
    outcome = outcome_of(err)
    ids = current_request()
    if ids is not None:
        ids.record(outcome)
    text = render(outcome, request_id)
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


_JSON_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "object": "a JSON object",
    "array": "an array",
}


def _kinds(prop: dict[str, Any]) -> list[str]:
    kind = prop.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [str(k) for k in kind]
    return [k for branch in prop.get("anyOf") or [] for k in _kinds(branch)]


def expected_words(prop: dict[str, Any]) -> str:
    """What a property allows, in words, from the (filled) input schema the model reads."""
    if "enum" in prop:
        return "one of " + ", ".join(str(v) for v in prop["enum"])
    words = " or ".join(dict.fromkeys(_JSON_WORDS.get(k, k) for k in _kinds(prop) if k != "null"))
    bounds = {**prop, **next((b for b in prop.get("anyOf") or [] if b.get("type") != "null"), {})}
    if "maxLength" in bounds:
        words += f" of at most {bounds['maxLength']} characters"
    if "minimum" in bounds and "maximum" in bounds:
        words += f" from {bounds['minimum']} to {bounds['maximum']}"
    return words or "a value as described in the tool's input schema"


def _shown(value: object) -> str:
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int | float):
        return f"the number {shown(value)}"
    if isinstance(value, str):
        return f"the string {shown(value)}"
    return "an array" if isinstance(value, list) else "an object" if isinstance(value, dict) else "a value"


def describe_validation(exc: ValidationError, schema: dict[str, Any] | None = None) -> InvalidInput:
    """One sentence naming each argument, what was wrong and what is allowed, in words made from
    the input schema the model reads (never the library's text, URLs or type names)."""
    props: dict[str, Any] = (schema or {}).get("properties") or {}
    parts: list[str] = []
    for err in exc.errors(include_url=False)[:3]:
        name = str(err["loc"][0]) if err["loc"] else "(arguments)"
        prop = props.get(name, {})
        if err["type"] == "missing":
            parts.append(f"argument {name!r} is required: {expected_words(prop)}")
        elif err["type"] == "extra_forbidden":
            parts.append(f"argument {name!r} is not accepted; this tool takes {', '.join(props) or 'none'}")
        else:
            parts.append(f"argument {name!r} must be {expected_words(prop)}, not {_shown(err.get('input'))}")
    more = len(exc.errors()) - len(parts)
    tail = f" (and {more} more)" if more > 0 else ""
    return InvalidInput("; ".join(parts) + tail)


def _numeric_only(prop: dict[str, Any]) -> bool:
    kinds = set(_kinds(prop)) - {"null"}
    return bool(kinds) and kinds <= {"integer", "number"}


def refuse_booleans_as_numbers(kwargs: Mapping[str, Any], schema: dict[str, Any]) -> None:
    """A JSON `true` is never the integer 1 (pydantic's lax mode would take it): an argument, or
    an element of an array argument, whose schema allows only numbers is refused when boolean,
    in the words `describe_validation` uses. Query tools' own schemas refuse them in their own words."""
    props: dict[str, Any] = schema.get("properties") or {}
    for name, value in kwargs.items():
        prop = props.get(name)
        if not isinstance(prop, dict):
            continue
        if isinstance(value, bool) and _numeric_only(prop):
            raise InvalidInput(f"argument {name!r} must be {expected_words(prop)}, not {_shown(value)}")
        items = prop.get("items")
        if not isinstance(items, dict) or not _numeric_only(items) or not isinstance(value, list):
            continue
        if any(isinstance(v, bool) for v in value):
            raise InvalidInput(
                f"argument {name!r} must hold {expected_words(items)} values, not true or false"
            )


def conversations_of(settings: Settings, principal: Principal) -> MemoryScope:
    """Whose sessions and messages a caller sees (tools, prompts and resources alike): the
    tenant's, or the caller's own when conversations are per subject (`[memory] conversations =
    "scope"`, the default, under `[memory.long_term] scope = "subject"`). A value: the stored form
    is its `stored_tenant` (mongogate/memory_scope.py)."""
    memory = settings.memory
    return conversations_for(
        memory.conversations, memory.long_term.scope, principal.tenant, principal.identity
    )


@dataclass(frozen=True)
class Call:
    """What a tool body gets: the app, the authenticated caller, and the request id."""

    app: AppState
    principal: Principal
    request_id: str
    tool: str

    @property
    def conversations(self) -> MemoryScope:
        """Whose sessions and messages this call sees (`conversations_of`)."""
        return conversations_of(self.app.settings, self.principal)

    def budget(self) -> ByteBudget:
        """A fresh byte cap for this call's result (`limits.max_response_bytes`): hand it to the
        domain call that reads the list, then report its `capped` (see `values.ByteBudget`)."""
        return ByteBudget(self.app.settings.limits.max_response_bytes)


Handler = Callable[[Call, Any], Awaitable[BaseModel | dict[str, Any] | CallToolResult]]

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, destructive_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
IDEMPOTENT_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)


@functools.cache
def _input_schema(input_model: type[ToolInput]) -> str:
    """An input model's JSON schema, once per model (as text: each tool gets its own copy to fill
    in): stored beside the code for mongogate's own tools (tools/stored_schemas.py), else
    generated; pydantic's generation was most of the cost of building a server."""
    text = stored_schemas.stored("input", input_model)
    if text is not None:
        return text
    return stored_schemas.generated(
        "input", input_model, json.dumps(input_model.model_json_schema(by_alias=True))
    )


def clear_schema_cache() -> None:
    """Forget the input schemas made so far (tools/stored_schemas.py `generate`)."""
    _input_schema.cache_clear()


def _failed(
    e: MongogateError, app: AppState | None, principal: Principal | None, request_id: str, name: str
) -> CallToolResult:
    """A tool's refusal or failure as its error result; a storage error classified by what a retry
    can fix (`tools/faults.py`, a write refusal turning readiness off), the driver's detail to the
    log for the operator, never to the model."""
    if isinstance(e, StorageError):
        e = classify(e)
        if isinstance(e, WriteRefused) and app is not None:
            app.writes.refuse(e.why)
    who = f"{principal.tenant}/{principal.subject}" if principal else "unauthenticated"
    cause = e.__cause__
    if cause is not None:
        log.warning(
            "request %s: tool %s failed for %s: [%s] %s: %s",
            request_id,
            name,
            who,
            e.code,
            type(cause).__name__,
            cause,
        )
    else:
        log.info("request %s: tool %s refused for %s: %s", request_id, name, who, e.code)
    return error_result(e, request_id)


def _answered(result: BaseModel | dict[str, Any] | CallToolResult) -> CallToolResult:
    """A handler's answer as the call's result: text and structured content."""
    if isinstance(result, CallToolResult):  # already built (query tools encode their own text)
        return result
    data = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data, ensure_ascii=False))],
        structured_content=data,
    )


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
    limits: Mapping[str, object] | None = None,
) -> Tool:
    if stored_schemas.DECLARED is not None:  # recording (write_schemas): what tools/stored_tools.py lists
        stored_schemas.declare(
            {
                "name": name,
                "title": title,
                "description": description,
                "input": stored_schemas.key(input_model),
                "output": None if output_model is None else stored_schemas.key(output_model),
                "annotations": None if annotations is None else annotations.model_dump(by_alias=True),
                "limits": limits is not None,
                "custom": parameters is not None or output_schema is not None,
            }
        )
    schema = parameters or json.loads(_input_schema(input_model))
    # pydantic's lax mode would take `true` as 1; a tool with its own schema (a query tool) is
    # checked by jsonschema, which refuses booleans in its own words ([limit_invalid], audited)
    lax = parameters is None
    if limits is not None:  # descriptions and limits from the settings the stores enforce
        schema = fill_limits(schema, limits)
    key_caps = key_caps_from_schema(schema)  # once per tool, not per call
    writes = annotations is None or annotations.read_only_hint is not True

    async def fn(ctx: Context[AppState, Any], **kwargs: Any) -> CallToolResult:
        ids = current_request()
        request_id = ids.request_id if ids is not None else new_request_id()
        principal: Principal | None = None
        app: AppState | None = None
        try:
            app = await app_state(ctx.request_context.lifespan_context)
            principal = app.principal(ctx)
            check_arguments(kwargs, app.settings.limits, key_caps=key_caps)  # before schema/policy work
            if required_scopes:
                app.require_scopes(principal, list(required_scopes), name)
            call = Call(app=app, principal=principal, request_id=request_id, tool=name)
            if lax:
                refuse_booleans_as_numbers(kwargs, schema)
            try:
                args = input_model.model_validate(kwargs)
            except ValidationError as e:
                raise describe_validation(e, schema) from None
            result = await handler(call, args)
        except MongogateError as e:
            return _failed(e, app, principal, request_id, name)
        except InvalidDocument as e:  # a value BSON cannot hold (e.g. a NUL in a key), or too large
            log.info("request %s: tool %s refused a value: %s", request_id, name, type(e).__name__)
            bad = InvalidInput(
                "an argument holds a value MongoDB cannot store (e.g. a NUL in a key, or too large)"
            )
            return error_result(bad, request_id)
        except Exception as e:
            log.error("request %s: tool %s failed unexpectedly: %s", request_id, name, type(e).__name__)
            log.debug("request %s: traceback", request_id, exc_info=True)
            return error_result(
                InternalError(f"{name} failed unexpectedly; nothing is known to be written"), request_id
            )
        if writes and app is not None and app.writes.refused is not None:
            app.writes.recovered()  # a write went through: readiness may report ready again
        if ids is not None:
            ids.record(OK)
        return _answered(result)

    meta = tool_metadata(RawArguments, output_model, published(output_model, output_schema))
    return Tool(
        fn=fn,
        name=name,
        title=title,
        description=description,
        parameters=schema,
        fn_metadata=meta,
        is_async=True,
        context_kwarg="ctx",
        annotations=annotations,
    )
