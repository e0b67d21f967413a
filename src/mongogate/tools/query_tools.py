"""Query tools: one MCP tool per registered spec, read-only, scoped to the caller's tenant.

The input schema is generated from the spec so the model sees what it may write; the call
itself is decided by the policy walk alone (``run_query`` -> ``prepare``), so every refusal
has one reason code; its one audit event is written by the call middleware (server/observe.py).
The hot path does the walk, the ``find`` and one JSON encoding of the result, nothing more
(benchmarks/query_overhead.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, TextContent
from pydantic import ConfigDict

from mongogate import policy
from mongogate.config import Settings
from mongogate.policy import (
    Renderer,
    aggregate_input_schema,
    aggregate_output_schema,
    encode,
    input_schema,
    output_schema,
)
from mongogate.requests import current as current_request
from mongogate.specs import AggregateToolSpec, QueryToolSpec
from mongogate.tools.base import READ_ONLY, Call, ToolInput, make_tool

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

    from mongogate.db import Database
    from mongogate.policy import QueryResult


log = logging.getLogger("mongogate.query")


class QueryArgs(ToolInput):
    """Accepts any keys so that unknown arguments reach the policy walk and get audited too."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return dict(self.__pydantic_extra__ or {})


#: the policy walk a call runs (`policy.run_query`, `policy.run_pipeline`): read at the call, so
#: `serve` imports it at the first query, not at start (tests/test_lazy.py)
Runner = Callable[["AsyncCollection[Any]", dict[str, Any], str], Awaitable["QueryResult"]]


def _handler(
    spec: QueryToolSpec, settings: Settings, run: Runner
) -> Callable[[Call, QueryArgs], Awaitable[CallToolResult]]:
    """The body every query tool shares: run, audit the query (if enabled), encode."""
    log_queries = settings.audit.log_queries
    # The collection handle of the last database seen (one per server lifespan), not one per call.
    cached: list[tuple[Database, AsyncCollection[Any]]] = []

    def collection(db: Database) -> AsyncCollection[Any]:
        if not cached or cached[0][0] is not db:
            cached[:] = [(db, db.query[spec.collection])]
        return cached[0][1]

    async def handler(call: Call, args: QueryArgs) -> CallToolResult:
        raw = args.model_dump_one_level()
        audit = call.app.audit
        principal = call.principal
        # A refusal (PolicyViolation) ends the call in make_tool: its one audit event is written by
        # the call middleware from the outcome (server/observe.py), whichever check refused.
        started = time.perf_counter()
        result = await run(collection(call.app.db), raw, principal.tenant)
        if audit is not None and log_queries:
            audit.query(  # queued for the audit thread; never waits here
                tool=spec.name,
                tenant=principal.tenant,
                principal=principal.subject,
                principal_id=principal.identity,
                returned=result.returned,
                truncated=result.truncated,
                ms=(time.perf_counter() - started) * 1000,
                request_id=call.request_id,
            )
        if result.type_mismatches:
            _log_drift(spec, result.type_mismatches)
        data = result.as_dict()
        return CallToolResult(content=[TextContent(type="text", text=encode(data))], structured_content=data)

    return handler


#: (tool, field) pairs already reported at WARNING by this process
_drift_seen: set[tuple[str, str]] = set()


def _log_drift(spec: QueryToolSpec, mismatches: dict[str, int]) -> None:
    """One line per call (the request id is on it), at WARNING the first time this process sees a
    field of a tool drift, at INFO after that: a drifted collection does not flood the log, and
    ``mongogate_type_mismatches_total`` keeps counting."""
    new = [f for f in mismatches if (spec.name, f) not in _drift_seen]
    _drift_seen.update((spec.name, f) for f in new)
    shown = ", ".join(
        f"{f} ({spec.fields[f]}): {n}" if f in spec.fields else f"{f}: {n}" for f, n in mismatches.items()
    )
    log.log(
        logging.WARNING if new else logging.INFO,
        "query tool %s: stored values did not match their declared type and were returned as null "
        "(documents per field: %s); run `mongogate check` to see the drift in collection %r",
        spec.name,
        shown,
        spec.collection,
        extra={"request_id": ids.request_id if (ids := current_request()) else None},
    )


def with_count(input_schema: dict[str, Any], output_schema: dict[str, Any]) -> None:
    """Add `count` (argument) and `matched`/`matched_capped` (result) to a find tool's schemas."""
    input_schema.setdefault("properties", {})["count"] = {
        "type": "boolean",
        "description": "also return `matched` (capped)",
    }
    output_schema.setdefault("properties", {}).update(
        {"matched": {"type": "integer", "minimum": 0}, "matched_capped": {"type": "boolean"}}
    )


def query_tool(spec: QueryToolSpec, settings: Settings) -> Tool:
    """A find tool (``kind = "find"``) or an aggregation tool (``kind = "aggregate"``)."""
    if isinstance(spec, AggregateToolSpec):
        return aggregate_tool(spec, settings)
    limits = settings.policy
    render = Renderer(spec)

    async def run(coll: AsyncCollection[Any], raw: dict[str, Any], tenant: str) -> QueryResult:
        return await policy.run_query(coll, spec, raw, tenant, limits, render)

    fields = ", ".join(f"{k} ({v})" for k, v in spec.fields.items())
    params, out = input_schema(spec, limits), output_schema(spec)
    with_count(params, out)
    return make_tool(
        name=spec.name,
        description=(
            f"{spec.description}\nRead-only; results are limited to the caller's own data. Filter fields: "
            f"{fields}. Operators: {', '.join(spec.operators)}. At most {spec.max_limit} documents; "
            f"count: true also returns how many match (up to {limits.max_count})."
            + (
                " Dates are ISO 8601 text, UTC when no offset is given."
                if "date" in spec.fields.values()
                else ""
            )
        ),
        title=spec.name.replace("_", " ").capitalize(),
        input_model=QueryArgs,
        handler=_handler(spec, settings, run),
        output_schema=out,
        parameters=params,
        annotations=READ_ONLY,
        required_scopes=spec.required_scopes,
    )


def aggregate_tool(spec: AggregateToolSpec, settings: Settings) -> Tool:
    """One aggregation tool: the model writes the pipeline, the walk keeps it in its lane."""
    limits = settings.policy

    async def run(coll: AsyncCollection[Any], raw: dict[str, Any], tenant: str) -> QueryResult:
        return await policy.run_pipeline(coll, spec, raw, tenant, limits)

    return make_tool(
        name=spec.name,
        description=(
            f"{spec.description}\nRead-only aggregation over the caller's own data: "
            f'{{"pipeline": [...], "limit": n}}. At most {spec.max_limit} results.'
        ),
        title=spec.name.replace("_", " ").capitalize(),
        input_model=QueryArgs,
        handler=_handler(spec, settings, run),
        output_schema=aggregate_output_schema(spec),
        parameters=aggregate_input_schema(spec),
        annotations=READ_ONLY,
        required_scopes=spec.required_scopes,
    )
