"""The documents long-term memory stores, one `TypedDict` each: their field names in one place.

`memories` (`MemoryDoc`), `memory_versions` (`VersionDoc`, one replaced text each) and
`memory_revisions` (`RevisionDoc`, one per scope: its revision, recent changes, writes in flight
and quota counter). A writer builds the `TypedDict` (a misspelt or mistyped field fails mypy)
and hands it to the driver through `values.bson`; a reader turns a read document into a plain
value with `MemoryItem.from_doc` or `Version.from_doc` (`recall/model.py`). The projections of
recall's reads name fields of these documents only (`tests/recall/test_documents.py`).
"""

# no `from __future__ import annotations`: `NotRequired` must be evaluated for the runtime
# `__required_keys__` (tests compare stored documents with it)

from datetime import datetime
from typing import Any, Final, NotRequired, TypedDict

from bson.binary import Binary

from mongogate.memory_scope import ScopeFields

__all__ = [
    "COUNT",
    "COUNTED",
    "CREATED_AT",
    "EMBEDDING_MODEL",
    "EXPIRES_AT",
    "HELD",
    "MEMORIES",
    "MEMORY_ID",
    "MOVES",
    "NS_PATH",
    "OCCURRED_AT",
    "OWNER",
    "REVISIONS",
    "SOURCE",
    "STATED_AT",
    "SUPERSEDED_BY",
    "SUPERSEDES",
    "TENANT",
    "TEXT_HASH",
    "UPDATED_AT",
    "VERSION",
    "VERSIONS",
    "CountDoc",
    "MemoryDoc",
    "RevisionDoc",
    "ScopeFields",
    "SourceDoc",
    "VectorFields",
    "VersionDoc",
]

# The field names code queries, updates or indexes by (a writer builds the TypedDict below; a
# reader goes through `MemoryItem.from_doc`, `Version.from_doc`)
TENANT: Final = "tenant"
#: the subject owning a memory, or "*" for the tenant's (`MemoryScope.owner`)
OWNER: Final = "owner"
NS_PATH: Final = "ns_path"
TEXT_HASH: Final = "text_hash"
VERSION: Final = "version"
UPDATED_AT: Final = "updated_at"
EXPIRES_AT: Final = "expires_at"
EMBEDDING_MODEL: Final = "embedding_model"
MEMORY_ID: Final = "memory_id"
CREATED_AT: Final = "created_at"
#: supersession (`recall/chain.py`): the newer memory's map of what it replaces, the older one's
#: map of what replaces it, and when a memory was last stated current
SUPERSEDES: Final = "supersedes"
SUPERSEDED_BY: Final = "superseded_by"
STATED_AT: Final = "stated_at"
#: where a fact came from (a message of the caller's conversation) and when it happened
SOURCE: Final = "source"
OCCURRED_AT: Final = "occurred_at"
#: `memory_revisions`: the quota counter and whether the scope was counted once (`quota.py`)
HELD: Final = "held"
COUNTED: Final = "counted"
#: what the last count of a scope found, and the moves it was counted at (`recall/quota.py`)
COUNT: Final = "count"
MOVES: Final = "moves"

MEMORIES: Final = "memories"
VERSIONS: Final = "memory_versions"
#: one revision document per scope (`indexing/coherence.py`, `recall/quota.py`)
REVISIONS: Final = "memory_revisions"


class VectorFields(TypedDict):
    """A memory's vector (float32, packed; a list of floats in older documents), its model and size."""

    embedding: Binary | list[float]
    embedding_model: str
    embedding_dims: int


class SourceDoc(TypedDict):
    """The message a fact came from: one of the caller's own conversation (checked by the tool)."""

    session_id: str
    seq: int


class MemoryDoc(ScopeFields, VectorFields):
    """A document of `memories`, `_id` its identity hashed (`recall/ids.py` memory_id), or a uuid
    for one stored by the previous version."""

    _id: str
    namespace: str
    #: the namespace and every prefix of it ("a", "a/b"): a prefix filter is one equality
    ns_path: list[str]
    #: with a key, one memory per (namespace, key); without, one per (namespace, text)
    keyed: bool
    key: str | None
    text: str
    text_hash: str
    metadata: dict[str, Any]
    #: 1 when created, +1 each time a keyed memory's text changes
    version: int
    #: the subject whose remember last wrote the text (absent: stored before authors were recorded)
    author: NotRequired[str | None]
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    #: the message this text came from, and when what it says happened (absent: stored before
    #: they existed, or not given); both belong to the version, like the text
    source: NotRequired[SourceDoc | None]
    occurred_at: NotRequired[datetime | None]
    #: the older memories this one replaces: memory id -> when it was stated (`recall/chain.py`:
    #: the truth of a link, written first)
    supersedes: NotRequired[dict[str, datetime]]
    #: the newer memories stated to replace this one: memory id -> when (the other half of each
    #: link, written second; a link holds only while both halves do)
    superseded_by: NotRequired[dict[str, datetime]]
    #: the last time this memory was stated current (a new version of its text, or a remember that
    #: named what it replaces): links stated before it no longer replace it
    stated_at: NotRequired[datetime | None]


class VersionDoc(ScopeFields):
    """A document of `memory_versions`: a text memory `memory_id` had at `version`, `_id`
    `{memory id}:{version}` (`recall/ids.py` version_id); it expires with the memory."""

    _id: str
    memory_id: str
    version: int
    text: str
    metadata: dict[str, Any]
    author: str | None
    updated_at: datetime
    expires_at: datetime | None
    source: NotRequired[SourceDoc | None]
    occurred_at: NotRequired[datetime | None]


class CountDoc(TypedDict):
    """What a count of a scope's memories found (`recall/quota.py`)."""

    moves: int
    alive: int
    until: datetime


class RevisionDoc(TypedDict, total=False):
    """A document of `memory_revisions`, `_id` the scope's key (`recall/model.py` scope_key):
    written only by `$inc`, `$set`, `$unset` and `bump`'s pipeline (`coherence.Coherence.begin`,
    `bump`, `quota.py`), so every field may be missing."""

    _id: str
    #: the document's incarnation, new each time it is created (`coherence.born`; an erasure deletes it)
    born: str
    #: +1 per memory changed; an index built at an older revision is patched or rebuilt
    rev: int
    #: the memory ids changed lately, oldest first, as text (`coherence.named`: each JSON-encoded
    #: and followed by ","), how many `recent` names, and the text before it
    recent: str
    recent_n: int
    earlier: str
    #: the previous version's list of the last 256 ids (read; unset by the next bump)
    changes: list[str]
    #: writes in flight: token -> when it began (`coherence.Coherence.begin`)
    pending: dict[str, datetime]
    #: memories held against `max_per_scope` (`recall/quota.py`), and whether it was counted once
    held: int
    counted: bool
    #: +1 per change of the scope's live memories in number or expiry (a create, a delete, an
    #: expiry set): a `count` taken at another value no longer holds
    moves: int
    #: the last count: `moves` when counted, the live memories then, and until when it holds
    count: CountDoc
