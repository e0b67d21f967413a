"""The turn tools' arguments and results (begin_turn, renew_turn, end_turn): part of the contract
(docs/tools.md, "Memory tools"), beside `memory_tools.py` whose handlers fill them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mongogate.tools.base import ID_RULES, IdStr, ToolInput, ToolOutput, limit
from mongogate.tools.conversation_io import (
    ADVISED,
    LEASE_ID,
    LEASE_MS,
    SESSION_ID,
    SIZE_CAPPED,
    SUMMARY,
    TEXT,
    TRUNCATED,
    TURN_ID,
    UNSUMMARIZED,
    MessageOut,
    SummaryOut,
)


class BeginTurnIn(ToolInput):
    session_id: IdStr = Field(description=SESSION_ID)
    turn_id: IdStr = Field(description=TURN_ID)
    text: str = Field(description="The user's message. " + TEXT)
    lease_ms: int | None = Field(
        default=None, description=LEASE_MS, json_schema_extra=limit(minimum=100, maximum="max_lease_ms")
    )


class BeginTurnOut(ToolOutput):
    lease_id: str | None
    answered: bool
    answer: str | None = None
    summary: SummaryOut | None = Field(default=None, description=SUMMARY)
    messages: list[MessageOut]
    truncated: bool = Field(default=False, description=TRUNCATED)
    lease_expires_at: str | None = None
    size_capped: bool = Field(default=False, description=SIZE_CAPPED)
    unsummarized_bytes: int = Field(default=0, description=UNSUMMARIZED)
    compaction_advised: bool = Field(default=False, description=ADVISED)


class RenewTurnIn(ToolInput):
    session_id: IdStr = Field(description=SESSION_ID)
    turn_id: IdStr = Field(description="The turn you began; " + ID_RULES + ".")
    lease_id: IdStr = Field(description=LEASE_ID)
    lease_ms: int | None = Field(
        default=None, description=LEASE_MS, json_schema_extra=limit(minimum=100, maximum="max_lease_ms")
    )


class RenewTurnOut(ToolOutput):
    lease_id: str
    lease_expires_at: str


class EndTurnIn(ToolInput):
    session_id: IdStr = Field(description=SESSION_ID)
    turn_id: IdStr = Field(description="The turn you began; " + ID_RULES + ".")
    lease_id: IdStr = Field(description=LEASE_ID)
    reply: str = Field(description="The final answer to the user. " + TEXT)


class EndTurnOut(ToolOutput):
    status: Literal["inserted", "duplicate"]
    seq: int
