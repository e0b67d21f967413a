"""Plain values of long-term memory: what a call asks and returns. Who owns a memory is
`MemoryScope` (`mongogate/memory_scope.py`, the one scope value of conversations and memories)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from mongogate.clock import as_utc
from mongogate.memory_scope import TENANT_OWNER, MemoryScope, scope_for

__all__ = [
    "TENANT_OWNER",
    "History",
    "MemoryItem",
    "MemoryPage",
    "MemoryScope",
    "Question",
    "Ranking",
    "RecallMethod",
    "Recalled",
    "RememberStatus",
    "Remembered",
    "Version",
    "author_of",
    "scope_for",
    "scope_key",
]

#: how `recall` ranks: both rankings fused (the default), or one of them alone (benchmarks)
RecallMethod = Literal["fused", "text", "vector"]
RememberStatus = Literal["created", "updated", "unchanged"]


def scope_key(scope: MemoryScope) -> str:
    """The scope as its revision document's `_id` and its write-signal key (`indexing/coherence.py`)."""
    return f"{len(scope.tenant)}:{scope.tenant}:{scope.owner}"


@dataclass(frozen=True)
class Remembered:
    id: str
    namespace: str
    key: str | None
    version: int
    status: RememberStatus


@dataclass(frozen=True)
class MemoryItem:
    id: str
    namespace: str
    key: str | None
    text: str
    metadata: dict[str, Any]
    version: int
    created_at: datetime
    updated_at: datetime
    #: the fused (or single-method) relevance; None in listings
    score: float | None = None
    #: the subject whose remember last wrote this text (None: stored before authors were recorded)
    author: str | None = None
    #: the model's cosine of query and memory (index path only)
    similarity: float | None = None
    #: query words the memory holds (index path only)
    matched_terms: list[str] | None = None

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], score: float | None = None) -> MemoryItem:
        """A memory as read from `memories` (`documents.MemoryDoc`, without its vector)."""
        return cls(
            id=str(doc["_id"]),
            namespace=str(doc["namespace"]),
            key=doc.get("key"),
            text=str(doc["text"]),
            metadata=dict(doc.get("metadata") or {}),
            version=int(doc["version"]),
            created_at=as_utc(doc["created_at"]),
            updated_at=as_utc(doc["updated_at"]),
            score=score,
            author=author_of(doc),
        )


@dataclass(frozen=True)
class Recalled:
    memories: list[MemoryItem]
    #: which vector path ran: "vectorSearch" (a search index), "scan" (exact, in mongogate's index),
    #: "unavailable" (the embedder failed) or "none" (text alone)
    vector_path: str
    #: memories left out to keep the response under its byte cap
    truncated: int = 0
    #: which ranker ran: "index" (in-process, `recall/inprocess/`) or "text" (the search index's
    #: `$text` and `$vectorSearch`, `recall/searchindex/`)
    index_path: str = "text"


@dataclass(frozen=True)
class Question:
    """A recall's checked arguments besides its filter (`scope_filter.RecallFilter`)."""

    text: str
    limit: int
    min_score: float
    method: RecallMethod = "fused"


@dataclass(frozen=True)
class Ranking:
    """What either ranker of `recall` answers (`recall/search.py`): the memories, best first, each
    scoring at least the question's `min_score` (`mongogate/scoring.py`), and the vector path."""

    memories: list[MemoryItem]
    vector_path: str


@dataclass(frozen=True)
class MemoryPage:
    memories: list[MemoryItem]
    next_cursor: str | None
    truncated: int = 0


@dataclass(frozen=True)
class Version:
    version: int
    text: str
    updated_at: datetime
    #: the subject that wrote this version (None: written before authors were recorded)
    author: str | None = None

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Version:
        """A version as read from `memory_versions` (`documents.VersionDoc`) or `memories`."""
        return cls(int(doc["version"]), str(doc["text"]), as_utc(doc["updated_at"]), author_of(doc))


@dataclass(frozen=True)
class History:
    id: str
    versions: list[Version] = field(default_factory=list)
    #: older versions left out (at most `recall.history.MAX_HISTORY` are returned, the newest ones)
    truncated: int = 0
    #: when the memory was first stored (its version 1)
    created_at: datetime | None = None


def author_of(doc: Mapping[str, Any]) -> str | None:
    """The stored `author`; None on a document written before authors were recorded."""
    value = doc.get("author")
    return value if isinstance(value, str) else None
