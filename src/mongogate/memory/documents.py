"""The documents memory stores, one `TypedDict` each: their field names and types in one place.

`sessions` (`SessionDoc`, with its lease, its pending answers and its published summary),
`messages` (`MessageDoc`) and `summaries` (`SummaryDoc`). A writer builds the `TypedDict`, so a
misspelt or mistyped field fails mypy, and hands it to the driver through `values.bson`; a reader
turns a read document into a plain value with that value's `from_doc` (`memory/model.py`,
`sessions.SessionInfo`, `search.Hit`). The projections of memory's reads name fields of these
documents only (`tests/memory/test_documents.py`).
"""

# no `from __future__ import annotations`: `NotRequired` must be evaluated for the runtime
# `__required_keys__` (tests compare stored documents with it)

from datetime import datetime
from typing import Any, NotRequired, TypedDict

__all__ = ["LeaseState", "MessageDoc", "PendingAnswer", "PublishedSummary", "SessionDoc", "SummaryDoc"]


class PendingAnswer(TypedDict):
    """An answer of `session.pending`: committed with the lease given back, stored as a message
    by the next writer (`memory/fenced.py`, `repository.answer_doc`)."""

    key: str
    seq: int
    turn_id: str
    content: str
    at: NotRequired[datetime]
    lease_id: NotRequired[str | None]


class LeaseState(TypedDict):
    """`session.lease_prev`: the lease as a take found it, given back when the take had nothing to do."""

    locked_by: str | None
    locked_until: datetime | None
    lease_turn: str | None
    lease_text: str | None


class PublishedSummary(TypedDict):
    """`session.summary`: the newest compaction, published on the session (`memory/compaction.py`)."""

    text: str
    through_seq: int
    created_at: datetime
    #: the authenticated subject whose compact_context stored it (absent: stored before issue 36)
    author: NotRequired[str | None]


class SessionDoc(TypedDict):
    """A document of `sessions`, `_id` the session id (a uuid4 hex)."""

    _id: str
    tenant: str
    title: str | None
    metadata: dict[str, Any]
    #: the last seq handed out (0: none); only grows
    next_seq: int
    #: the lease (`memory/gate.py` SESSION_LEASE): its id, expiry, turn and the digest of its text
    locked_by: str | None
    locked_until: datetime | None
    lease_turn: str | None
    lease_text: NotRequired[str | None]
    #: the seq of the leased turn's user message, and the lease the take replaced
    lease_seq: NotRequired[int | None]
    lease_prev: NotRequired[LeaseState]
    #: the last answered turn and the digest of its text (a repeat of the turn answers at once)
    answered_turn: NotRequired[str | None]
    answered_text: NotRequired[str | None]
    plain_answers: NotRequired[bool]
    pending: NotRequired[list[PendingAnswer]]
    commit_nonce: NotRequired[str]
    summary: NotRequired[PublishedSummary | None]
    created_at: datetime
    last_activity: datetime


class MessageDoc(TypedDict):
    """A document of `messages`, `_id` `<session>:<key>` (`memory/keys.py` message_id)."""

    _id: str
    session_id: str
    tenant: str
    key: str
    seq: int
    turn_id: str
    role: str
    call_id: str | None
    content: str
    created_at: datetime
    #: the lease whose commit stored a final answer (`repository.answer_doc`)
    lease_id: NotRequired[str | None]


class SummaryDoc(TypedDict):
    """A document of `summaries`, `_id` from the session and the summary's key (`compaction.py`)."""

    _id: str
    session_id: str
    tenant: str
    key: str
    through_seq: int
    text: str
    lease_id: str | None
    created_at: datetime
    #: the authenticated subject whose compact_context stored it (absent: stored before issue 36)
    author: NotRequired[str | None]
