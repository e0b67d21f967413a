"""Plain values of the memory layer: results, messages, windows, and the two shared errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mongogate.errors import Conflict, NotFound


@dataclass(frozen=True)
class AppendResult:
    status: str  # "inserted" | "duplicate"
    key: str
    seq: int


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    turn_id: str
    seq: int
    call_id: str | None = None
    key: str = ""


@dataclass(frozen=True)
class Context:
    messages: list[Message] = field(default_factory=list)
    #: older messages exist that this window leaves out
    truncated: bool = False
    #: the response byte cap left out some of the newest `limit` messages
    size_capped: bool = False

    def find(self, key: str) -> Message | None:
        return next((m for m in self.messages if m.key == key), None)


def message_shape(doc: dict[str, Any]) -> dict[str, Any]:
    """A stored message as a tool returns it: what the response byte cap measures."""
    return {
        "role": doc.get("role"),
        "content": doc.get("content"),
        "turn_id": doc.get("turn_id"),
        "seq": doc.get("seq"),
        "call_id": doc.get("call_id"),
    }


def session_not_found(session_id: str) -> NotFound:
    # The same words whether the session is missing or another tenant's.
    return NotFound(f"session {session_id!r} not found; create one with create_session")


def key_conflict(key: str) -> Conflict:
    return Conflict(
        f"message key {key!r} is already stored with different content; nothing was written. "
        "A retry must send the same content; a new message needs a new turn_id or call_id"
    )
