"""The session tools besides turns: list the caller's sessions, erase one (memory/sessions.py)."""

from __future__ import annotations

from collections.abc import Mapping

from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import Field

from mongogate.tools.base import ID_RULES, READ_ONLY, Call, IdStr, ToolInput, ToolOutput, limit, make_tool

DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True)


class ListSessionsIn(ToolInput):
    limit: int | None = Field(
        default=None,
        description="Sessions per page, from 1 to {page_max}; default {page_default}.",
        json_schema_extra=limit(minimum=1, maximum="page_max"),
    )
    cursor: str | None = Field(
        default=None,
        description="next_cursor from the previous page, as returned (opaque); omit for the first page.",
    )


class SessionOut(ToolOutput):
    session_id: str
    title: str | None
    created_at: str = Field(description="ISO 8601 UTC")
    last_activity_at: str = Field(description="ISO 8601 UTC: creation or the latest message")
    last_seq: int = Field(description="seq of the latest message; 0 when none")


class ListSessionsOut(ToolOutput):
    sessions: list[SessionOut]
    next_cursor: str | None = Field(description="pass it as cursor for the next page; null on the last page")
    truncated: bool = Field(
        default=False,
        description="the response byte cap (limits.max_response_bytes) ended this page before limit "
        "sessions; next_cursor continues after the last one returned",
    )


class DeleteSessionIn(ToolInput):
    session_id: IdStr = Field(description="The session to erase with all its messages; " + ID_RULES + ".")


class DeleteSessionOut(ToolOutput):
    deleted: bool = Field(description="false: there was no such session (e.g. already erased)")
    messages_deleted: int


async def _list_sessions(call: Call, a: ListSessionsIn) -> ListSessionsOut:
    page = await call.app.memory.list_sessions(
        call.conversations.stored_tenant, a.limit, a.cursor, call.budget()
    )
    return ListSessionsOut(
        sessions=[
            SessionOut(
                session_id=s.session_id,
                title=s.title,
                created_at=s.created_at.isoformat(),
                last_activity_at=s.last_activity_at.isoformat(),
                last_seq=s.last_seq,
            )
            for s in page.sessions
        ],
        next_cursor=page.next_cursor,
        truncated=page.truncated,
    )


async def _delete_session(call: Call, a: DeleteSessionIn) -> DeleteSessionOut:
    r = await call.app.memory.delete_session(call.conversations.stored_tenant, a.session_id)
    return DeleteSessionOut(deleted=r.deleted, messages_deleted=r.messages_deleted)


def session_tools(limits: Mapping[str, object]) -> tuple[Tool, Tool]:
    """`list_sessions` and `delete_session`, their schemas filled from the memory tools' `limits`."""
    return (
        make_tool(
            name="list_sessions",
            title="List sessions",
            description=(
                "List the caller's sessions, most recent activity first, with title, created_at, "
                "last_activity_at and last_seq. Page with cursor = next_cursor until it is null. Use it "
                "to find a conversation to continue."
            ),
            input_model=ListSessionsIn,
            output_model=ListSessionsOut,
            handler=_list_sessions,
            annotations=READ_ONLY,
            limits=limits,
        ),
        make_tool(
            name="delete_session",
            title="Delete session",
            description=(
                "Erase a session and all its messages for good (a right-to-erasure request). Idempotent: "
                "erasing it again returns deleted=false. A turn still running in it then fails with "
                "not_found."
            ),
            input_model=DeleteSessionIn,
            output_model=DeleteSessionOut,
            handler=_delete_session,
            annotations=DESTRUCTIVE,
            limits=limits,
        ),
    )
