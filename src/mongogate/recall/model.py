"""Plain values of long-term memory: what a call asks and returns. Who owns a memory is
`MemoryScope` (`mongogate/memory_scope.py`, the one scope value of conversations and memories)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from mongogate.clock import as_utc, utc_or_none
from mongogate.memory_scope import TENANT_OWNER, MemoryScope, scope_for

__all__ = [
    "TENANT_OWNER",
    "History",
    "Link",
    "MemoryItem",
    "MemoryPage",
    "MemoryScope",
    "Question",
    "Ranking",
    "RecallMethod",
    "Recalled",
    "RememberStatus",
    "Remembered",
    "Similar",
    "Source",
    "Version",
    "author_of",
    "links_of",
    "scope_for",
    "scope_key",
    "source_of",
]

#: how `recall` ranks: both rankings fused (the default), or one of them alone (benchmarks)
RecallMethod = Literal["fused", "text", "vector"]
RememberStatus = Literal["created", "updated", "unchanged"]


def scope_key(scope: MemoryScope) -> str:
    """The scope as its revision document's `_id` and its write-signal key (`indexing/coherence.py`)."""
    return f"{len(scope.tenant)}:{scope.tenant}:{scope.owner}"


@dataclass(frozen=True)
class Link:
    """One half of a supersession (`recall/chain.py`): the other memory's id, and when it was stated."""

    id: str
    at: datetime


@dataclass(frozen=True)
class Source:
    """The message a fact came from: `seq` of session `session_id` of the caller's conversations."""

    session_id: str
    seq: int


@dataclass(frozen=True)
class Similar:
    """A memory whose meaning is very close to another's (`similar_min_score`): it may be an older
    value of the same fact. `text` is clipped (`chain.SIMILAR_TEXT_CHARS`) where a reply shows it."""

    id: str
    score: float
    text: str = ""


@dataclass(frozen=True)
class Remembered:
    id: str
    namespace: str
    key: str | None
    version: int
    status: RememberStatus
    #: the memories this call stated the new one replaces (`supersedes`), oldest statement first
    supersedes: tuple[Link, ...] = ()
    #: older memories of the scope very close in meaning, not replaced by this call; None: not
    #: checked (the scope's index is not held by this server process)
    similar: tuple[Similar, ...] | None = None


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
    #: the older memories this one was stated to replace (as stored, oldest statement first)
    supersedes: tuple[Link, ...] = ()
    #: the newer memories that replace this one (each link whose two halves hold, `chain.holds`);
    #: empty: it is current (as of the recall's `as_of`)
    superseded_by: tuple[Link, ...] = ()
    #: the message the fact came from, and when what it says happened (None: not given)
    source: Source | None = None
    occurred_at: datetime | None = None
    #: a newer memory of the scope very close in meaning (recall only, both rankers): this one
    #: may be an older value of the same fact
    newer_similar: Similar | None = None

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], score: float | None = None) -> MemoryItem:
        """A memory as read from `memories` (`documents.MemoryDoc`, without its vector); a
        document stored before supersession, sources and event time reads as none of them."""
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
            supersedes=links_of(doc.get("supersedes")),
            source=source_of(doc.get("source")),
            occurred_at=utc_or_none(doc.get("occurred_at")),
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
    source: Source | None = None
    occurred_at: datetime | None = None

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Version:
        """A version as read from `memory_versions` (`documents.VersionDoc`) or `memories`."""
        return cls(
            int(doc["version"]),
            str(doc["text"]),
            as_utc(doc["updated_at"]),
            author_of(doc),
            source_of(doc.get("source")),
            utc_or_none(doc.get("occurred_at")),
        )


@dataclass(frozen=True)
class History:
    id: str
    versions: list[Version] = field(default_factory=list)
    #: older versions left out (at most `recall.history.MAX_HISTORY` are returned, the newest ones)
    truncated: int = 0
    #: when the memory was first stored (its version 1)
    created_at: datetime | None = None
    #: what it was stated to replace, and the newer memories that replace it now (`MemoryItem`)
    supersedes: tuple[Link, ...] = ()
    superseded_by: tuple[Link, ...] = ()


def author_of(doc: Mapping[str, Any]) -> str | None:
    """The stored `author`; None on a document written before authors were recorded."""
    value = doc.get("author")
    return value if isinstance(value, str) else None


def links_of(value: object) -> tuple[Link, ...]:
    """A stored link map (`supersedes`, `superseded_by`: id -> when) as links, oldest first (ties
    by id); anything else (absent, another shape) as none."""
    if not isinstance(value, Mapping):
        return ()
    found = [Link(str(k), as_utc(v)) for k, v in value.items() if isinstance(v, datetime)]
    return tuple(sorted(found, key=lambda link: (link.at, link.id)))


def source_of(value: object) -> Source | None:
    """A stored `source` (`documents.SourceDoc`); None when absent or not of that shape."""
    if not isinstance(value, Mapping):
        return None
    sid, seq = value.get("session_id"), value.get("seq")
    if not isinstance(sid, str) or isinstance(seq, bool) or not isinstance(seq, int):
        return None
    return Source(sid, seq)
