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
from typing import Any, NotRequired, TypedDict

from bson.binary import Binary

__all__ = ["MemoryDoc", "RevisionDoc", "ScopeFields", "VectorFields", "VersionDoc"]


class ScopeFields(TypedDict):
    """The scope every memory and history entry carries, and every query filters on (`MemoryScope.match`)."""

    tenant: str
    owner: str


class VectorFields(TypedDict):
    """A memory's vector (float32, packed; a list of floats in older documents), its model and size."""

    embedding: Binary | list[float]
    embedding_model: str
    embedding_dims: int


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


class RevisionDoc(TypedDict, total=False):
    """A document of `memory_revisions`, `_id` the scope's key (`recall/index.py` scope_key):
    written only by `$inc`, `$push`, `$set` and `$unset` (`index.begin`, `index.bump`,
    `quota.py`), so every field may be missing."""

    _id: str
    #: the document's incarnation, new each time it is created (`index.born`; an erasure deletes it)
    born: str
    #: +1 per memory changed; an index built at an older revision is patched or rebuilt
    rev: int
    #: the last `index.CHANGES` memory ids changed, oldest first
    changes: list[str]
    #: writes in flight: token -> when it began (`index.begin`)
    pending: dict[str, datetime]
    #: memories held against `max_per_scope` (`recall/quota.py`), and whether it was counted once
    held: int
    counted: bool
