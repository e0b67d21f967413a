"""The memory tools. Names, arguments and results are part of the contract (docs/tools.md, "Memory tools").

Argument descriptions name their unit, format and limit; `{name}` placeholders and `x-limits`
markers are filled from the same settings the stores check (`base.fill_limits`).
"""

from __future__ import annotations

from typing import Any, Literal

from mcp.server.mcpserver.tools import Tool
from pydantic import Field

from mongogate.config import LimitsSettings, MemorySettings, Settings
from mongogate.memory import (
    Role,
)
from mongogate.tools.base import (
    ID_RULES,
    IDEMPOTENT_WRITE,
    READ_ONLY,
    WRITE,
    Call,
    IdStr,
    ToolInput,
    ToolOutput,
    limit,
    make_tool,
)
from mongogate.tools.conversation_io import (
    ADVISED,
    SESSION_ID,
    SIZE_CAPPED,
    SUMMARY,
    TEXT,
    TRUNCATED,
    UNSUMMARIZED,
    MessageOut,
    SummaryOut,
    messages_out,
    summary_out,
)
from mongogate.tools.instructions import INSTRUCTIONS as INSTRUCTIONS
from mongogate.tools.limits import memory_limits
from mongogate.tools.recall_common import author_of
from mongogate.tools.session_tools import session_tools
from mongogate.tools.turn_io import (
    BeginTurnIn,
    BeginTurnOut,
    EndTurnIn,
    EndTurnOut,
    RenewTurnIn,
    RenewTurnOut,
)


class CreateSessionIn(ToolInput):
    title: str | None = Field(
        default=None, description="A short title shown by list_sessions; at most {max_title_bytes} bytes."
    )
    metadata: dict[str, Any] | None = Field(
        default=None,
        description="A small JSON object stored with the session: at most {metadata_max_keys} keys, "
        "{metadata_max_depth} levels deep and {metadata_max_chars} characters as JSON; keys without "
        "'$' or '.'; finite numbers only.",
    )


class CreateSessionOut(ToolOutput):
    session_id: str


class AppendIn(ToolInput):
    session_id: IdStr = Field(description=SESSION_ID)
    turn_id: IdStr = Field(
        description="The turn this message belongs to (as in begin_turn); " + ID_RULES + "."
    )
    role: Role = Field(
        description="user, assistant (a tool call when call_id is set), tool (a tool result) or system."
    )
    content: str = Field(description="The message text. " + TEXT)
    call_id: IdStr | None = Field(
        default=None,
        description="The tool call this message requests (assistant) or answers (tool), required for tool; "
        + ID_RULES
        + ".",
    )
    lease_id: IdStr | None = Field(
        default=None,
        description=(
            "Inside a turn: the lease_id from begin_turn, so a write of an attempt that lost the session "
            "is refused (lease_lost) instead of landing; " + ID_RULES + "."
        ),
    )


class AppendOut(ToolOutput):
    status: Literal["inserted", "duplicate"]
    key: str
    seq: int


class LoadContextIn(ToolInput):
    session_id: IdStr = Field(description=SESSION_ID)
    limit: int | None = Field(
        default=None,
        description="Messages to return, from 1 to {max_context_limit}; default {default_context_limit}.",
        json_schema_extra=limit(minimum=1, maximum="max_context_limit"),
    )
    include_summarized: bool = Field(
        default=False, description="Return the raw messages, those a summary covers included."
    )


class LoadContextOut(ToolOutput):
    summary: SummaryOut | None = Field(default=None, description=SUMMARY)
    messages: list[MessageOut]
    truncated: bool = Field(description=TRUNCATED)
    size_capped: bool = Field(default=False, description=SIZE_CAPPED)
    unsummarized_bytes: int = Field(default=0, description=UNSUMMARIZED)
    compaction_advised: bool = Field(default=False, description=ADVISED)


class CompactContextIn(ToolInput):
    session_id: IdStr = Field(description=SESSION_ID)
    through_seq: int = Field(
        description="The seq of the last message the summary covers: a turn's final answer (a turn "
        "boundary), not beyond the newest message.",
        ge=1,
    )
    summary: str = Field(
        description="Your summary of every message up to through_seq (and of the previous summary). " + TEXT
    )
    lease_id: IdStr | None = Field(
        default=None,
        description="Inside a turn: the lease_id from begin_turn (refused with lease_lost once lost); "
        + ID_RULES
        + ".",
    )


class CompactContextOut(ToolOutput):
    status: Literal["inserted", "duplicate"]
    key: str = Field(description="summary:<through_seq>")
    through_seq: int


async def _create_session(call: Call, a: CreateSessionIn) -> CreateSessionOut:
    sid = await call.app.memory.create_session(call.conversations.stored_tenant, a.title, a.metadata)
    return CreateSessionOut(session_id=sid)


async def _append(call: Call, a: AppendIn) -> AppendOut:
    r = await call.app.memory.append(
        call.conversations.stored_tenant,
        a.session_id,
        a.turn_id,
        a.role,
        a.content,
        a.call_id,
        lease_id=a.lease_id,
    )
    return AppendOut(status=r.status, key=r.key, seq=r.seq)  # type: ignore[arg-type]


async def _load_context(call: Call, a: LoadContextIn) -> LoadContextOut:
    ctx = await call.app.memory.load_context(
        call.conversations.stored_tenant,
        a.session_id,
        a.limit,
        call.budget(),
        include_summarized=a.include_summarized,
    )
    return LoadContextOut(
        summary=summary_out(ctx.summary),
        messages=messages_out(ctx.messages),
        truncated=ctx.truncated,
        size_capped=ctx.size_capped,
        unsummarized_bytes=ctx.unsummarized_bytes,
        compaction_advised=ctx.compaction_advised,
    )


async def _compact_context(call: Call, a: CompactContextIn) -> CompactContextOut:
    r = await call.app.memory.compact_context(
        call.conversations.stored_tenant,
        a.session_id,
        a.through_seq,
        a.summary,
        a.lease_id,
        author=author_of(call),
    )
    return CompactContextOut(status=r.status, key=r.key, through_seq=r.through_seq)  # type: ignore[arg-type]


async def _begin_turn(call: Call, a: BeginTurnIn) -> BeginTurnOut:
    t = await call.app.turns.begin_turn(
        call.conversations.stored_tenant,
        a.session_id,
        a.turn_id,
        a.text,
        a.lease_ms,
        max_bytes=call.app.settings.limits.max_response_bytes,
    )
    return BeginTurnOut(
        lease_id=t.lease_id,
        answered=t.answered,
        answer=t.answer,
        summary=summary_out(t.summary),
        messages=messages_out(t.messages),
        truncated=t.truncated,
        lease_expires_at=t.lease_expires_at,
        size_capped=t.size_capped,
        unsummarized_bytes=t.unsummarized_bytes,
        compaction_advised=t.compaction_advised,
    )


async def _renew_turn(call: Call, a: RenewTurnIn) -> RenewTurnOut:
    r = await call.app.turns.renew_turn(
        call.conversations.stored_tenant, a.session_id, a.turn_id, a.lease_id, a.lease_ms
    )
    return RenewTurnOut(lease_id=r.lease_id, lease_expires_at=r.lease_expires_at)


async def _end_turn(call: Call, a: EndTurnIn) -> EndTurnOut:
    r = await call.app.turns.end_turn(
        call.conversations.stored_tenant, a.session_id, a.turn_id, a.lease_id, a.reply
    )
    return EndTurnOut(status=r.status, seq=r.seq)  # type: ignore[arg-type]


def memory_tools(settings: Settings | None = None) -> list[Tool]:
    """The memory tools, their schemas filled from `settings.memory` (defaults if None)."""
    settings = settings or Settings.model_construct(memory=MemorySettings(), limits=LimitsSettings())
    limits = memory_limits(settings.memory, settings.limits)
    list_sessions_tool, delete_session_tool = session_tools(limits)
    return [
        make_tool(
            name="create_session",
            title="Create session",
            description=(
                "Create a conversation session for the caller; returns its session_id. Start of a "
                "conversation: every turn then names this session."
            ),
            input_model=CreateSessionIn,
            output_model=CreateSessionOut,
            handler=_create_session,
            annotations=WRITE,
            limits=limits,
        ),
        list_sessions_tool,
        make_tool(
            name="begin_turn",
            title="Begin turn",
            description=(
                "Step 1 of every user message: take the session lease, store the user's text, and return "
                "the recent context. If this turn was already answered, returns answered=true with the "
                "stored answer (do not call a model again; no lease is held). Retrying with the same "
                "turn_id and text (e.g. after a lost reply) takes the lease over at once; the attempt it "
                "overtook, if still running, gets a retryable lease_lost. A session busy with another turn "
                "is a retryable error."
            ),
            input_model=BeginTurnIn,
            output_model=BeginTurnOut,
            handler=_begin_turn,
            annotations=WRITE,
            limits=limits,
        ),
        make_tool(
            name="append",
            title="Append message",
            description=(
                "Step 2, inside a turn: record a tool call (role assistant with call_id) or a tool result "
                "(role tool with the same call_id), with the turn's turn_id and lease_id. Not for the "
                "final answer: that is end_turn. The key comes from turn_id, role and call_id, so sending "
                "the same message twice stores it once (status 'duplicate')."
            ),
            input_model=AppendIn,
            output_model=AppendOut,
            handler=_append,
            annotations=IDEMPOTENT_WRITE,
            limits=limits,
        ),
        make_tool(
            name="renew_turn",
            title="Renew turn lease",
            description=(
                "Heartbeat during a long turn: extend the session lease you hold (from begin_turn) so it "
                "does not expire while you work. Call it well before lease_expires_at; lease_lost means "
                "another attempt owns the session now: stop this turn."
            ),
            input_model=RenewTurnIn,
            output_model=RenewTurnOut,
            handler=_renew_turn,
            annotations=IDEMPOTENT_WRITE,
            limits=limits,
        ),
        make_tool(
            name="end_turn",
            title="End turn",
            description=(
                "Step 3, last of every turn: store the final answer and release the lease, in one atomic "
                "step. Refused, writing nothing, if the lease no longer owns the session (lease_lost); "
                "not_found if the session was deleted meanwhile."
            ),
            input_model=EndTurnIn,
            output_model=EndTurnOut,
            handler=_end_turn,
            annotations=IDEMPOTENT_WRITE,
            limits=limits,
        ),
        make_tool(
            name="load_context",
            title="Load context",
            description=(
                "Read the last messages of a session, oldest first, outside a turn (begin_turn already "
                "returns them). The window starts at a user message, never mid-turn: when the newest turn "
                "alone is longer than limit, it is returned whole (within the server's caps). truncated says "
                "older messages exist; size_capped says the response byte cap left some of them out."
            ),
            input_model=LoadContextIn,
            output_model=LoadContextOut,
            handler=_load_context,
            annotations=READ_ONLY,
            limits=limits,
        ),
        make_tool(
            name="compact_context",
            title="Compact context",
            description=(
                "Store your summary of every message up to through_seq (a turn's final answer): later "
                "context reads return it as summary plus only the messages after it. Call it when a "
                "context read says compaction_advised. A retry is 'duplicate'; another summary for the "
                "same through_seq is a conflict; a later through_seq supersedes earlier summaries "
                "(nothing is deleted). Inside a turn pass its lease_id (lease_lost once lost)."
            ),
            input_model=CompactContextIn,
            output_model=CompactContextOut,
            handler=_compact_context,
            annotations=IDEMPOTENT_WRITE,
            limits=limits,
        ),
        delete_session_tool,
    ]
