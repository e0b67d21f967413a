"""The documents memory stores, one `TypedDict` each: their field names and types in one place.

`sessions` (`SessionDoc`, with its lease, its pending answers and its published summary),
`messages` (`MessageDoc`), `summaries` (`SummaryDoc`), and what message search derives from each
message (`message_index`, `MessageIndexDoc`: its terms and its vector) with the scopes' revision
documents (`message_revisions`, written by `indexing/coherence.py`). A writer builds the `TypedDict`, so a
misspelt or mistyped field fails mypy, and hands it to the driver through `values.bson`; a reader
turns a read document into a plain value with that value's `from_doc` (`memory/model.py`,
`sessions.SessionInfo`, `search.Hit`). The projections of memory's reads name fields of these
documents only (`tests/memory/test_documents.py`).
"""

# no `from __future__ import annotations`: `NotRequired` must be evaluated for the runtime
# `__required_keys__` (tests compare stored documents with it)

from datetime import datetime
from typing import Any, Final, NotRequired, TypedDict

from mongogate import leases

__all__ = [
    "ANSWERED_TEXT",
    "ANSWERED_TURN",
    "CHARS",
    "COMMIT_NONCE",
    "EMBEDDING",
    "EMBEDDING_MODEL",
    "LAST_ACTIVITY",
    "LEASE_PREV",
    "LEASE_SEQ",
    "LEASE_TEXT",
    "LEASE_TURN",
    "LOCKED_BY",
    "LOCKED_UNTIL",
    "MESSAGES",
    "MESSAGE_INDEX",
    "MESSAGE_REVISIONS",
    "NEXT_SEQ",
    "PENDING",
    "PLAIN_ANSWERS",
    "SEQ",
    "SESSIONS",
    "SESSION_ID",
    "SESSION_REVISIONS",
    "SUMMARIES",
    "SUMMARY",
    "TENANT",
    "TERMS",
    "TERMS_V",
    "TERM_COUNTS",
    "LeaseState",
    "MessageDoc",
    "MessageIndexDoc",
    "PendingAnswer",
    "PublishedSummary",
    "SessionDoc",
    "SummaryDoc",
]

SESSIONS: Final = "sessions"
MESSAGES: Final = "messages"
SUMMARIES: Final = "summaries"
#: one revision document per conversation scope (`_id` its stored `tenant`): the sessions created
#: and deleted, for the completion index of session ids (tools/session_ids.py, recall.Coherence)
SESSION_REVISIONS: Final = "session_revisions"
#: per message, what search derives from it (`memory/message_fill.py`), `_id` the message's
MESSAGE_INDEX: Final = "message_index"
#: one revision document per conversation scope (`_id` its stored tenant; `indexing/coherence.py`)
MESSAGE_REVISIONS: Final = "message_revisions"

# The field names code writes or queries by (a reader goes through a `from_doc`). `tenant` holds
# whose conversations a document is: the tenant alone, or the tenant and the subject joined by
# U+001F when conversations are per subject (`MemoryScope.conversations`, mongogate/memory_scope.py).
TENANT: Final = "tenant"
SESSION_ID: Final = "session_id"
SEQ: Final = "seq"
#: the session's one counter: the last seq handed out (every message is numbered from it)
NEXT_SEQ: Final = "next_seq"
LAST_ACTIVITY: Final = "last_activity"
#: the lease (`leases.py` writes its first two for sessions and runs alike)
LOCKED_BY: Final = leases.LOCKED_BY
LOCKED_UNTIL: Final = leases.LOCKED_UNTIL
LEASE_TURN: Final = "lease_turn"
LEASE_TEXT: Final = "lease_text"
LEASE_SEQ: Final = "lease_seq"
LEASE_PREV: Final = "lease_prev"
#: answers committed on the session, still to be written as messages
PENDING: Final = "pending"
ANSWERED_TURN: Final = "answered_turn"
ANSWERED_TEXT: Final = "answered_text"
PLAIN_ANSWERS: Final = "plain_answers"
COMMIT_NONCE: Final = "commit_nonce"
#: the newest compaction, published on the session
SUMMARY: Final = "summary"
#: a `message_index` document's terms, their counts, the tokenizer's version, its vector, the
#: vector's model and how many characters of the message it embeds
TERMS: Final = "terms"
TERM_COUNTS: Final = "tf"
TERMS_V: Final = "terms_v"
EMBEDDING: Final = "embedding"
EMBEDDING_MODEL: Final = "embedding_model"
CHARS: Final = "chars"


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


class MessageIndexDoc(TypedDict):
    """A document of `message_index`: what search derives from the message of the same `_id`
    (`memory/message_fill.py`), written after the message, erased with it."""

    _id: str
    session_id: str
    tenant: str
    #: the message's, so the retention TTL erases both together
    created_at: datetime
    #: the message's distinct tokens (`textrank.tokens`) joined by a space, and their counts as
    #: little-endian uint32 (`memory/message_terms.py`), of tokenizer version `terms_v`
    terms: str
    tf: bytes
    terms_v: int
    #: the vector of the first `chars` characters, by `embedding_model`; absent: none (no
    #: embedder, or it failed)
    embedding: NotRequired[bytes]
    embedding_model: NotRequired[str]
    chars: NotRequired[int]
