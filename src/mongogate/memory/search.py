"""`search_messages`: term search over the caller's conversation messages, best first.

Ranked in mongogate with the same term ranking as recall (`textrank`: folded, stemmed, stop words
dropped, identifiers whole, query syntax as plain words, BM25 scores in [0, 1]) over every message
of the caller's scope (up to `SCAN_MAX`, the newest first not guaranteed): the best matches are
never cut before ranking, on every engine.

Messages are the tenant's, like sessions: every query filters on `tenant`, so another tenant's
session id finds nothing and is `not_found`, exactly like one that never existed. Only messages of
a session that still exists are returned: a deleted conversation is not found again. The result is
ranked by score, then newest first, and cut to a byte cap (`truncated`): the same cap as recall's
(`values.within`: each hit measured as the JSON the tool returns, the best one always kept).

By meaning too, when `vectors` is given (`[memory.search] embed_messages`, `message_vectors.py`):
each message's score is `scoring.blend(bm25, cosine)`, the same score long-term recall's index
ranks by; every term match is kept, and a message sharing no term with the query is kept when its
score reaches `min_score`. An embedder that fails leaves the term ranking alone (a warning in the
log, no error): the call answers exactly as without `vectors`. The text index on
`content` is still created (older deployments' queries; `check` lists it) but no longer read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from pymongo.errors import PyMongoError

from mongogate.clock import as_utc
from mongogate.errors import EmbeddingUnavailable, StorageError
from mongogate.memory.message_vectors import MessageVectors
from mongogate.memory.model import session_not_found
from mongogate.memory.repository import SessionRepository
from mongogate.scoring import blend_many
from mongogate.textrank import bm25, query_tokens, tokens
from mongogate.values import Doc, check_int, check_query_text, items_budget, within

log = logging.getLogger(__name__)

MESSAGE_TEXT_INDEX = "message_content_text"
SEARCH_DEFAULT = 10
SEARCH_MAX = 50
MAX_QUERY_CHARS = 1000
#: the most messages one search reads and ranks
SCAN_MAX = 20_000


@dataclass(frozen=True)
class Hit:
    session_id: str
    seq: int
    role: str
    content: str
    created_at: datetime
    score: float

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], score: float) -> Hit:
        """A message as read from `messages` (`documents.MessageDoc`), with its score."""
        return cls(
            str(doc["session_id"]),
            int(doc["seq"]),
            str(doc["role"]),
            str(doc["content"]),
            as_utc(doc["created_at"]),
            score,
        )


@dataclass(frozen=True)
class Hits:
    messages: list[Hit]
    truncated: int = 0
    #: the scope holds more messages than one search reads (`SCAN_MAX`): only that many were ranked
    partial: bool = False


async def ensure_search_index(store: SessionRepository) -> None:
    """The text index on messages.content (idempotent; `serve` and `check` create it)."""
    try:
        await store.messages.create_index(
            [("content", "text")], name=MESSAGE_TEXT_INDEX, default_language="none"
        )
    except PyMongoError as e:
        raise StorageError("could not create the message search index") from e


async def search_messages(
    store: SessionRepository,
    tenant: str,
    query: object,
    *,
    session_id: object = None,
    limit: object = None,
    max_bytes: int = 256 * 1024,
    scan_max: int = SCAN_MAX,
    vectors: MessageVectors | None = None,
    min_score: float = 0.15,
) -> Hits:
    query = check_query_text(query, MAX_QUERY_CHARS)
    n = check_int(limit, "limit", 1, SEARCH_MAX, default=SEARCH_DEFAULT, hint="messages")
    words = query_tokens(query)
    if not words:  # only stop words, negations or punctuation: nothing to rank by
        return Hits([])
    filt: Doc = {"tenant": tenant}
    sid = None if session_id is None else store.check_id(session_id, "session_id")
    if sid is not None:
        filt["session_id"] = sid
    try:
        rows, partial = await _scope_rows(store, filt, scan_max)
        ranked = await _rank(words, query, rows, vectors, min_score)
        docs: dict[object, Doc] = {d["_id"]: d for d in rows}
        ranked, alive = await _in_live_sessions(store, tenant, ranked, docs)
        if sid is not None and sid not in alive and not await _exists(store, tenant, sid):
            raise session_not_found(sid)
    except PyMongoError as e:
        raise StorageError("could not search the messages") from e
    hits = [Hit.from_doc(d, s) for i, s in ranked if (d := docs.get(i)) is not None]
    hits.sort(key=lambda h: (-h.score, -h.created_at.timestamp(), h.session_id, -h.seq))
    hits = hits[:n]
    # the best hit always, even alone larger than the cap (`values.within`, as recall's items)
    kept = within(items_budget(max_bytes), hits, hit_json)
    return Hits(kept, len(hits) - len(kept), partial)


async def _scope_rows(store: SessionRepository, filt: Doc, scan_max: int) -> tuple[list[Doc], bool]:
    """Every message of the scope (up to `scan_max`) with text content, and whether there were
    more: ranked here, never cut before ranking (the embedded engine ignores a textScore sort, so
    an engine-side limit kept arbitrary matches)."""
    fields = {"session_id": 1, "seq": 1, "role": 1, "content": 1, "created_at": 1}
    found = store.messages.find(filt, fields, limit=scan_max + 1)  # one more: is there more?
    read = [d async for d in found]
    return [d for d in read[:scan_max] if isinstance(d.get("content"), str)], len(read) > scan_max


async def _rank(
    words: list[str], query: str, rows: list[Doc], vectors: MessageVectors | None, min_score: float
) -> list[tuple[object, float]]:
    """(id, score) of the messages that match: by BM25 over their terms, or fused with their
    meaning (`_by_meaning`) when message vectors are on and the embedder answers."""
    scores = bm25(words, [tokens(d["content"]) for d in rows])
    ranked = [(d["_id"], sc) for d, sc in zip(rows, scores, strict=True) if sc > 0]
    if vectors is not None and rows:
        fused = await _by_meaning(vectors, query, rows, scores, min_score)
        ranked = ranked if fused is None else fused
    return ranked


async def _in_live_sessions(
    store: SessionRepository, tenant: str, ranked: list[tuple[object, float]], docs: dict[object, Doc]
) -> tuple[list[tuple[object, float]], set[object]]:
    """The ranked messages whose session still exists (a deleted session's leftovers: a delete
    stopped halfway, a message landing after it), and the live sessions among theirs."""
    if not ranked:
        return ranked, set()
    sessions = list({docs[i]["session_id"] for i, _ in ranked})
    live = store.sessions.find({"tenant": tenant, "_id": {"$in": sessions}}, {"_id": 1})
    alive: set[object] = {d["_id"] async for d in live}
    return [(i, sc) for i, sc in ranked if docs[i]["session_id"] in alive], alive


async def _exists(store: SessionRepository, tenant: str, sid: str) -> bool:
    return await store.sessions.find_one({"_id": sid, "tenant": tenant}, {"_id": 1}) is not None


def hit_json(hit: Hit) -> Doc:
    """A hit as search_messages returns it: what the response byte cap measures."""
    return {
        "session_id": hit.session_id,
        "seq": hit.seq,
        "role": hit.role,
        "content": hit.content,
        "created_at": hit.created_at.isoformat(),
        "score": round(hit.score, 6),
    }


async def _by_meaning(
    vectors: MessageVectors, query: str, rows: list[Doc], scores: list[float], min_score: float
) -> list[tuple[object, float]] | None:
    """(id, fused score) of every term match and every message scoring at least `min_score`;
    None when the embedder failed (the caller keeps the term ranking)."""
    try:
        sims = await vectors.similarities(query, [(d["_id"], str(d["content"])) for d in rows])
    except EmbeddingUnavailable as e:
        log.warning("search_messages: the embedder failed (%s); term ranking only", e)
        return None
    text = np.asarray(scores, dtype=np.float64)
    fused = np.clip(blend_many(text, sims), 0.0, 1.0)
    keep = np.flatnonzero((text > 0) | (fused >= min_score))
    return [(rows[i]["_id"], float(fused[i])) for i in keep.tolist()]
