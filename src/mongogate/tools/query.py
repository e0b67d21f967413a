"""Query tools: one MCP tool per registered spec, read-only, scoped to the caller's tenant.

The input schema is generated from the spec so the model sees what it may write; arguments
are validated against it with jsonschema, then the policy walk (the authority) runs. Every
rejection, whichever check made it, writes exactly one audit event.
"""

from __future__ import annotations

import time
from typing import Any

from mcp.server.mcpserver.tools import Tool
from pydantic import ConfigDict

from mongogate.config import Settings
from mongogate.errors import PolicyViolation
from mongogate.policy.execute import run_query
from mongogate.policy.schema import input_schema, output_schema, validate_arguments
from mongogate.policy.spec import QueryToolSpec
from mongogate.tools.base import READ_ONLY, Call, ToolInput, make_tool


class QueryArgs(ToolInput):
    """Accepts any keys so that unknown arguments reach the policy checks and get audited too."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return dict(self.__pydantic_extra__ or {})


def query_tool(spec: QueryToolSpec, settings: Settings) -> Tool:
    schema = input_schema(spec, settings.policy)
    limits = settings.policy

    async def handler(call: Call, args: QueryArgs) -> dict[str, Any]:
        raw = args.model_dump_one_level()
        audit = call.app.audit
        try:
            validate_arguments(raw, schema)
            started = time.perf_counter()
            result = await run_query(
                call.app.db.query[spec.collection], spec, raw, call.principal.tenant, limits
            )
        except PolicyViolation as e:
            if audit is not None:
                audit.filter_rejected(
                    tool=spec.name,
                    tenant=call.principal.tenant,
                    principal=call.principal.subject,
                    reason=e.reason,
                    path=e.path,
                    filter=raw.get("filter", raw),
                    request_id=call.request_id,
                )
            raise
        if audit is not None and settings.audit.log_queries:
            audit.query(
                tool=spec.name,
                tenant=call.principal.tenant,
                principal=call.principal.subject,
                returned=result.returned,
                truncated=result.truncated,
                ms=(time.perf_counter() - started) * 1000,
                request_id=call.request_id,
            )
        return result.as_dict()

    fields = ", ".join(f"{k} ({v})" for k, v in spec.fields.items())
    return make_tool(
        name=spec.name,
        description=(
            f"{spec.description}\nRead-only; results are limited to the caller's own data. Filter fields: "
            f"{fields}. Operators: {', '.join(spec.operators)}. At most {spec.max_limit} documents."
        ),
        input_model=QueryArgs,
        handler=handler,
        output_schema=output_schema(spec),
        parameters=schema,
        annotations=READ_ONLY,
        required_scopes=spec.required_scopes,
    )
