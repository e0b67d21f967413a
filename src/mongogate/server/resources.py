"""The resources capability: the caller's sessions, a session's context, a memory (JSON).

- ``mongogate://sessions``: the caller's sessions, newest activity first (one page, as
  `list_sessions` returns it).
- ``mongogate://sessions/{id}/context``: the session's context window, as `load_context` returns it.
- ``mongogate://memories/{id}``: one long-term memory, as `list_memories` returns it.

Scoped like the tools: the tenant (and, for memories, the owner) comes from the caller; another
tenant's id reads as not found (``-32602``, the same words as a missing one; its `data` names the
resource, ``{"uri": ...}``, as SEP-2164 asks). Every read is bounded
by `limits.max_response_bytes`. `resources/list` names the session list and one context resource per
session, paged with the sessions' own cursor.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote, unquote

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    ListResourcesResult,
    ListResourceTemplatesResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    TextResourceContents,
)

from mongogate.memory import session_shape, summary_shape
from mongogate.policy import seg
from mongogate.recall import item_json, scope_for
from mongogate.server.caller import answered, caller, invalid
from mongogate.tools.base import conversations_of
from mongogate.tools.state import AppState
from mongogate.values import ByteBudget

log = logging.getLogger(__name__)
SCHEME = "mongogate://"
SESSIONS = SCHEME + "sessions"
CONTEXT_TEMPLATE = SESSIONS + "/{id}/context"
MEMORY_TEMPLATE = SCHEME + "memories/{id}"
JSON = "application/json"

TEMPLATES = (
    ResourceTemplate(
        name="session_context",
        title="Session context",
        uri_template=CONTEXT_TEMPLATE,
        description="A session's context window (messages oldest first, truncated as load_context says).",
        mime_type=JSON,
    ),
    ResourceTemplate(
        name="memory",
        title="Memory",
        uri_template=MEMORY_TEMPLATE,
        description="One long-term memory of the caller (text, key, namespace, metadata, version).",
        mime_type=JSON,
    ),
)
SESSION_LIST = Resource(
    name="sessions",
    title="Sessions",
    uri=SESSIONS,
    description="The caller's sessions, most recent activity first (the first page, as list_sessions).",
    mime_type=JSON,
)


class EmbeddedBudget(ByteBudget):
    """The response cap for a resource's JSON text: the text travels inside the reply's JSON
    string, so each item is measured as it lands there (its JSON escaped once more: a '"' in a
    message is 4 bytes of the reply, not 2)."""

    def take(self, item: object) -> bool:
        if self.capped:
            return False
        text = json.dumps(item, ensure_ascii=False, separators=(",", ":"), default=str)
        nested = json.dumps(text, ensure_ascii=False).encode("utf-8", "replace")
        size = len(nested) - 2 + 1  # less its quotes, plus the comma
        if self.used + size > self.room:
            self.capped = True
            return False
        self.used += size
        return True


def context_uri(session_id: str) -> str:
    return SESSIONS + "/" + quote(session_id, safe="") + "/context"


def memory_uri(memory_id: str) -> str:
    return SCHEME + "memories/" + quote(memory_id, safe="")


def parse(uri: str) -> tuple[str, str]:
    """``("sessions", "")``, ``("context", id)`` or ``("memory", id)``; anything else is invalid params."""
    if uri == SESSIONS:
        return "sessions", ""
    if uri.startswith(SESSIONS + "/") and uri.endswith("/context"):
        sid = uri[len(SESSIONS) + 1 : -len("/context")]
        if sid and "/" not in sid:
            return "context", unquote(sid)
    if uri.startswith(SCHEME + "memories/"):
        mid = uri[len(SCHEME + "memories/") :]
        if mid and "/" not in mid:
            return "memory", unquote(mid)
    log.info("resources/read: no resource %r", seg(uri))
    raise invalid(
        f"[not_found] no resource '{seg(uri)}'; resources: {SESSIONS}, {CONTEXT_TEMPLATE}, {MEMORY_TEMPLATE}"
    )


async def list_resources(
    ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
) -> ListResourcesResult:
    cursor = params.cursor if params is not None else None

    async def body() -> ListResourcesResult:
        state, principal = await caller(ctx)
        page = await state.memory.list_sessions(
            conversations_of(state.settings, principal).stored_tenant,
            None,
            cursor,
            ByteBudget(state.settings.limits.max_response_bytes),
        )
        listed = [] if cursor else [SESSION_LIST]
        listed += [
            Resource(
                name=f"session {s.session_id}",
                title=s.title or None,
                uri=context_uri(s.session_id),
                description=f"Context of session {s.session_id} ({s.last_seq} messages)",
                mime_type=JSON,
            )
            for s in page.sessions
        ]
        return ListResourcesResult(resources=listed, next_cursor=page.next_cursor)

    return await answered("resources/list", body)


async def list_templates(
    ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
) -> ListResourceTemplatesResult:
    return ListResourceTemplatesResult(resource_templates=list(TEMPLATES))


async def _read(
    state: AppState, ctx: ServerRequestContext[Any, Any], kind: str, ident: str
) -> dict[str, Any]:
    principal = state.principal(ctx)
    cap = state.settings.limits.max_response_bytes
    if kind == "sessions":
        page = await state.memory.list_sessions(
            conversations_of(state.settings, principal).stored_tenant, None, None, EmbeddedBudget(cap)
        )
        return {
            "sessions": [session_shape(s) for s in page.sessions],
            "next_cursor": page.next_cursor,
            "truncated": page.truncated,
        }
    if kind == "context":
        budget = EmbeddedBudget(cap)
        c = await state.memory.load_context(
            conversations_of(state.settings, principal).stored_tenant, ident, None, budget
        )
        return {
            "session_id": ident,
            "summary": None if c.summary is None else summary_shape(c.summary),
            "messages": [
                {
                    "role": m.role,
                    "content": m.content,
                    "turn_id": m.turn_id,
                    "seq": m.seq,
                    "call_id": m.call_id,
                }
                for m in c.messages
            ],
            "truncated": c.truncated,
            "size_capped": c.size_capped,
        }
    long_term = state.settings.memory.long_term
    state.require_scopes(principal, list(long_term.required_scopes), "resources/read memory")
    scope = scope_for(long_term.scope, principal.tenant, principal.identity)
    from mongogate.recall import read_memory  # a read's, never a start's (tests/test_lazy.py)

    return item_json(await read_memory(state.recall, scope, ident))


async def read_resource(
    ctx: ServerRequestContext[Any, Any], params: ReadResourceRequestParams
) -> ReadResourceResult:
    uri = str(params.uri)

    async def body() -> ReadResourceResult:
        state, _ = await caller(ctx)
        doc = await _read(state, ctx, kind, ident)
        text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
        return ReadResourceResult(contents=[TextResourceContents(uri=uri, mime_type=JSON, text=text)])

    try:
        kind, ident = parse(uri)
        return await answered(f"resources/read {kind}", body)
    except MCPError as e:  # a missing (or unreadable) resource names itself in `data`
        if e.error.code != INVALID_PARAMS:
            raise
        raise MCPError(code=INVALID_PARAMS, message=e.error.message, data={"uri": uri}) from e
