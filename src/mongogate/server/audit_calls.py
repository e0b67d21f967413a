"""Every refused call to a query tool leaves exactly one audit event, written here.

A call can be refused by the tool's policy walk, by make_tool before the handler runs (bounds,
scopes), or by the SDK before any mongogate code runs (arguments that are not an object:
-32602). The one call middleware (server/observe.py) hands each such ending to
``audit_refusal`` once, with the call's outcome as a value (mongogate.requests); nothing here
reads the text the model saw.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server.context import ServerRequestContext

from mongogate.audit import Rejection, allowed_names
from mongogate.errors import MongogateError
from mongogate.requests import Outcome
from mongogate.requests import current as current_request
from mongogate.specs import QueryToolSpec
from mongogate.tools.state import AppState, PendingState, app_state

#: failures that are not a refusal of what the model sent: their own event type, counted apart
NOT_REFUSALS = frozenset({"storage_error"})
#: outcomes that say nothing of the call's arguments (the server was at its tenant limit): no event
NOT_AUDITED = frozenset({"busy"})


@dataclass(frozen=True)
class AuditedTool:
    """What the audit knows of one query tool."""

    #: its allowed ``$`` names (policy/audit_forbidden.py): the event lists every other one sent
    allowed: frozenset[str]
    #: a find tool: a refusal of its walk logs the ``filter`` argument (the whole call is scanned)
    find: bool


def audited_tools(specs: Iterable[QueryToolSpec]) -> dict[str, AuditedTool]:
    return {s.name: AuditedTool(allowed_names(s), s.kind == "find") for s in specs}


async def audit_refusal(
    ctx: ServerRequestContext[Any, Any], name: str, tool: AuditedTool, outcome: Outcome, arguments: object
) -> None:
    """The one event of a query-tool call that did not run; on file before the client hears of it
    (the writer thread; the loop never blocks)."""
    if outcome.code in NOT_AUDITED:
        return
    value = ctx.lifespan_context
    if not isinstance(value, AppState | PendingState):
        return
    try:
        app = await app_state(value)
    except MongogateError:
        return  # the database never opened (tools/state.py): no audit log exists; the call was refused
    tenant: str | None = None
    subject: str | None = None
    identity: str | None = None
    try:
        principal = app.principal(ctx)
        tenant, subject, identity = principal.tenant, principal.subject, principal.identity
    except MongogateError:
        pass  # unauthenticated: still audited, without a tenant
    fields: Rejection = {
        "tool": name,
        "tenant": tenant,
        "principal": subject,
        "principal_id": identity,
        "reason": outcome.code,
        "path": outcome.path,
        "filter": arguments,
        "request_id": ids.request_id if (ids := current_request()) is not None else None,
        "root": "" if isinstance(arguments, Mapping) else "arguments",
    }
    if outcome.policy:  # the walk read an object: log what it read, scan every argument
        raw = dict(arguments) if isinstance(arguments, Mapping) else {}
        fields["filter"] = raw["filter"] if tool.find and "filter" in raw else raw
        fields["scan"], fields["root"] = raw, ""
    if outcome.code in NOT_REFUSALS:
        app.audit.call_failed(**fields)
    else:
        fields["allowed"] = tool.allowed
        app.audit.filter_rejected(**fields)
    await app.audit.synced()
