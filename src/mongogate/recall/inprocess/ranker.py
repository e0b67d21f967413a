"""`recall` through the in-process scope index (`recall/index.py`): where no search index serves
`$vectorSearch` (the embedded engine, or MongoDB without one).

Memories are ranked by the fused score of `recall/fusion.py` (`TEXT_WEIGHT * text +
(1 - TEXT_WEIGHT) * max(similarity, 0)`, or a discounted hop from the best match when higher;
`scope_index.py` says what `text` is). Each memory's `score` is `fusion.shown`: 0.9 x the best
match's fused score + 0.1 x its own, in [0, 1], comparable across queries and in rank order; only
the 0.1 x its own when the best match has neither a cosine nor a share of the query's words that
is evidence (`fusion.evidenced`). Memories under `min_score` are left out, so a question about
something never stored (whose best match is weak) returns none.
A settled scope (no write in flight when its revision was read:
`recall/index.py`) answers from the index, which holds what a result shows; expiry, namespace
and metadata are checked there with the injectable clock. While a write is in flight, the ranked
ids are read back from the database by `_id` and checked against the full scope filter
(`visible`): the database decides what exists.
"""

from __future__ import annotations

import logging
from datetime import datetime

from pymongo.errors import PyMongoError

from mongogate.clock import as_utc
from mongogate.errors import EmbeddingUnavailable, StorageError
from mongogate.recall.index import read_by_id
from mongogate.recall.model import MemoryItem, MemoryScope, RecallMethod
from mongogate.recall.pages import ITEM_FIELDS, item_of
from mongogate.recall.repository import RecallRepository
from mongogate.recall.scope_index import matches
from mongogate.scoring import TEXT_WEIGHT
from mongogate.values import Doc

log = logging.getLogger(__name__)


async def recall_indexed(
    store: RecallRepository,
    scope_filter: Doc,
    text: str,
    *,
    ns_path: str | None,
    metadata: Doc,
    n: int,
    min_score: float,
    method: RecallMethod,
) -> tuple[list[MemoryItem], str]:
    """The best `n` memories scoring at least `min_score`, and the vector path ("scan" or
    "unavailable" when the embedder failed)."""
    scope = MemoryScope(scope_filter["tenant"], scope_filter["owner"])
    vector: list[float] | None = None
    path = "scan"  # an exact scan, of the in-process matrix
    if method in ("fused", "vector"):
        try:
            vector = store.index.query_vector(store.embedder.model, text)
            if vector is None:
                vector = await store.embed_one(text)
                store.index.keep_query_vector(store.embedder.model, text, vector)
        except EmbeddingUnavailable:
            if method == "vector":
                raise
            log.warning("recall: the embedder failed; exact-term ranking only")
            path = "unavailable"
    terms = store.index.query_terms(text)
    qt = list(terms.tokens) if method in ("fused", "text") else []
    wt = {"fused": TEXT_WEIGHT, "text": 1.0, "vector": 0.0}[method]
    if path == "unavailable":
        wt = 1.0
    try:
        now = store.clock.now()
        fresh = await store.index.fresh(
            store.memories, store.revisions, scope, store.embedder.model, store.embedder.dimensions, now
        )
        idx = fresh.index
        ranked = idx.rank(
            vector,
            qt,
            now=now,
            ns_path=ns_path,
            metadata=metadata,
            depth=n,
            weight_text=wt,
            weight_vector=1.0 - wt,
        )
        scored = [(r, r.score) for r in ranked]
        # a match by terms, by a hop or by meaning (however weak, when min_score is 0); nothing else
        scored = [(r, s) for r, s in scored if (r.fused > 0 or r.has_vector) and s >= min_score]
        if fresh.settled:  # read now, before any await: the index as of its revision
            held = ((r.id, idx.item(r.id)) for r, _ in scored)
            docs = {i: d for i, d in held if d is not None}
        else:
            store.index.stats.readbacks += 1
            fields = {k: v for k, v in ITEM_FIELDS.items() if k != "ns_path"}  # ns_path: for `visible`
            read = await read_by_id(store.memories, [r.id for r, _ in scored], fields)
            docs = {i: d for i, d in read.items() if visible(d, scope, now, ns_path, metadata)}
    except PyMongoError as e:
        raise StorageError("could not recall memories") from e
    items: list[MemoryItem] = []
    for r, s in scored:
        d = docs.get(r.id)
        if d is None:  # the database no longer holds it (forgotten, expired): never returned
            continue
        item = item_of(d, round(s, 6))
        shown = {"similarity": round(r.similarity, 6), "matched_terms": terms.matched(r.matched)}
        items.append(MemoryItem(**{**item.__dict__, **shown}))
    return items, path


def visible(doc: Doc, scope: MemoryScope, now: datetime, ns_path: str | None, metadata: Doc) -> bool:
    """What the scope filter of every read says (`RecallRepository.scoped` and the metadata filter),
    checked here on a document read by `_id` alone (the flat read on the embedded engine)."""
    if doc.get("tenant") != scope.tenant or doc.get("owner") != scope.owner:
        return False
    expires = doc.get("expires_at")
    if isinstance(expires, datetime) and as_utc(expires) <= now:
        return False
    held = doc.get("ns_path") or []
    if ns_path is not None and ns_path not in (held if isinstance(held, list) else [held]):
        return False
    meta = doc.get("metadata") or {}
    return all(matches(meta.get(k) if isinstance(meta, dict) else None, v) for k, v in metadata.items())
