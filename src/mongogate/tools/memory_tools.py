"""The memory tools. Names, arguments and results are part of the contract (README, "Memory tools")."""

from __future__ import annotations

from typing import Any, Literal

from mcp.server.mcpserver.tools import Tool
from pydantic import Field

from mongogate.memory.keys import Role
from mongogate.memory.store import Message
from mongogate.tools.base import (
    IDEMPOTENT_WRITE,
    READ_ONLY,
    WRITE,
    Call,
    IdStr,
    ToolInput,
    ToolOutput,
    make_tool,
)


class MessageOut(ToolOutput):
    role: str
    content: str
    turn_id: str
    seq: int
    call_id: str | None = None


def _messages(msgs: list[Message]) -> list[MessageOut]:
    return [
        MessageOut(role=m.role, content=m.content, turn_id=m.turn_id, seq=m.seq, call_id=m.call_id)
        for m in msgs
    ]


class CreateSessionIn(ToolInput):
    title: str | None = Field(default=None, max_length=1024)
    metadata: dict[str, Any] | None = None


class CreateSessionOut(ToolOutput):
    session_id: str


class AppendIn(ToolInput):
    session_id: IdStr
    turn_id: IdStr
    role: Role
    content: str
    call_id: str | None = Field(default=None, min_length=1, max_length=1000)
    lease_id: str | None = Field(
        default=None,
        description=(
            "inside a turn: the lease from begin_turn, so a write of an attempt that lost the session "
            "is refused (lease_lost) instead of landing"
        ),
    )


class AppendOut(ToolOutput):
    status: Literal["inserted", "duplicate"]
    key: str
    seq: int


class LoadContextIn(ToolInput):
    session_id: IdStr
    limit: int | None = Field(default=None, description="messages to return (default 40, capped)")


class LoadContextOut(ToolOutput):
    messages: list[MessageOut]
    truncated: bool


class BeginTurnIn(ToolInput):
    session_id: IdStr
    turn_id: IdStr
    text: str
    lease_ms: int | None = None


class BeginTurnOut(ToolOutput):
    lease_id: str | None
    answered: bool
    answer: str | None = None
    messages: list[MessageOut]
    truncated: bool = False
    lease_expires_at: str | None = None


class RenewTurnIn(ToolInput):
    session_id: IdStr
    turn_id: IdStr
    lease_id: IdStr
    lease_ms: int | None = Field(
        default=None, description="new lease length from now, in ms (default memory.lease_ms)"
    )


class RenewTurnOut(ToolOutput):
    lease_id: str
    lease_expires_at: str


class EndTurnIn(ToolInput):
    session_id: IdStr
    turn_id: IdStr
    lease_id: IdStr
    reply: str


class EndTurnOut(ToolOutput):
    status: Literal["inserted", "duplicate"]
    seq: int


async def _create_session(call: Call, a: CreateSessionIn) -> CreateSessionOut:
    sid = await call.app.memory.create_session(call.principal.tenant, a.title, a.metadata)
    return CreateSessionOut(session_id=sid)


async def _append(call: Call, a: AppendIn) -> AppendOut:
    r = await call.app.memory.append(
        call.principal.tenant, a.session_id, a.turn_id, a.role, a.content, a.call_id, lease_id=a.lease_id
    )
    return AppendOut(status=r.status, key=r.key, seq=r.seq)  # type: ignore[arg-type]


async def _load_context(call: Call, a: LoadContextIn) -> LoadContextOut:
    ctx = await call.app.memory.load_context(call.principal.tenant, a.session_id, a.limit)
    return LoadContextOut(messages=_messages(ctx.messages), truncated=ctx.truncated)


async def _begin_turn(call: Call, a: BeginTurnIn) -> BeginTurnOut:
    t = await call.app.turns.begin_turn(call.principal.tenant, a.session_id, a.turn_id, a.text, a.lease_ms)
    return BeginTurnOut(
        lease_id=t.lease_id,
        answered=t.answered,
        answer=t.answer,
        messages=_messages(t.messages),
        truncated=t.truncated,
        lease_expires_at=t.lease_expires_at,
    )


async def _renew_turn(call: Call, a: RenewTurnIn) -> RenewTurnOut:
    r = await call.app.turns.renew_turn(
        call.principal.tenant, a.session_id, a.turn_id, a.lease_id, a.lease_ms
    )
    return RenewTurnOut(lease_id=r.lease_id, lease_expires_at=r.lease_expires_at)


async def _end_turn(call: Call, a: EndTurnIn) -> EndTurnOut:
    r = await call.app.turns.end_turn(call.principal.tenant, a.session_id, a.turn_id, a.lease_id, a.reply)
    return EndTurnOut(status=r.status, seq=r.seq)  # type: ignore[arg-type]


def memory_tools() -> list[Tool]:
    return [
        make_tool(
            name="create_session",
            description="Create a conversation session for the caller's tenant; returns its session_id.",
            input_model=CreateSessionIn,
            output_model=CreateSessionOut,
            handler=_create_session,
            annotations=WRITE,
        ),
        make_tool(
            name="append",
            description=(
                "Append one message to a session. The key is derived from turn_id, role and call_id, so "
                "sending the same message twice stores it once (status 'duplicate'). Tool messages need "
                "the call_id they answer; assistant messages that request a tool call carry its call_id."
            ),
            input_model=AppendIn,
            output_model=AppendOut,
            handler=_append,
            annotations=IDEMPOTENT_WRITE,
        ),
        make_tool(
            name="load_context",
            description=(
                "Read the last `limit` messages of a session (default 40), oldest first. The window "
                "always starts at a user message, never mid-turn; `truncated` says older messages exist."
            ),
            input_model=LoadContextIn,
            output_model=LoadContextOut,
            handler=_load_context,
            annotations=READ_ONLY,
        ),
        make_tool(
            name="begin_turn",
            description=(
                "Start a turn: take the session lease, store the user's text, and return the context. "
                "If this turn was already answered, returns answered=true with the stored answer "
                "(do not call a model again; no lease is held). Retrying with the same turn_id and text "
                "(e.g. after a lost reply) takes the lease over at once. A session busy with another "
                "turn is a retryable error."
            ),
            input_model=BeginTurnIn,
            output_model=BeginTurnOut,
            handler=_begin_turn,
            annotations=WRITE,
        ),
        make_tool(
            name="renew_turn",
            description=(
                "Heartbeat for a long turn: extend the session lease you hold (from begin_turn) so it does "
                "not expire while the model is still working. Call it well before lease_expires_at; "
                "lease_lost means another attempt owns the session now: stop this turn."
            ),
            input_model=RenewTurnIn,
            output_model=RenewTurnOut,
            handler=_renew_turn,
            annotations=IDEMPOTENT_WRITE,
        ),
        make_tool(
            name="end_turn",
            description=(
                "Finish a turn: store the final reply and release the lease, in one atomic step. "
                "Refused, writing nothing, if the lease no longer owns the session (lease_lost)."
            ),
            input_model=EndTurnIn,
            output_model=EndTurnOut,
            handler=_end_turn,
            annotations=IDEMPOTENT_WRITE,
        ),
    ]
