"""`recall` through the in-process scope index (`cache.py`): the default path, where no search
index serves `$vectorSearch` (the embedded engine, or MongoDB without one).

Memories are ranked by the fused score of `indexing/fusion.py` (`TEXT_WEIGHT * text +
(1 - TEXT_WEIGHT) * max(similarity, 0)`, or a discounted hop from the best match when higher;
`indexing/scope_index.py` says what `text` is). Each memory's `score` is `scoring.shown`: 0.9 x the best
match's fused score + 0.1 x its own, in [0, 1], comparable across queries and in rank order; only
the 0.1 x its own when the best match has neither a cosine nor a share of the query's words that
is evidence (`scoring.evidenced`). Memories under `min_score` are left out, so a question about
something never stored (whose best match is weak) returns none.
A settled scope (no write in flight when its revision was read: `indexing/coherence.py`) answers
from the index, which holds what a result shows; expiry, namespace and metadata are checked there
with the call's `RecallFilter`. While a write is in flight, the ranked ids are read back from the
database by `_id` and checked with `RecallFilter.admits`: the database decides what exists.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Protocol

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError

from mongogate.config import LongTermSettings
from mongogate.errors import EmbeddingUnavailable, StorageError
from mongogate.indexing import Coherence, above_floor, read_by_id
from mongogate.recall import documents as rd
from mongogate.recall.embedding import Embedder
from mongogate.recall.inprocess.cache import Fresh, IndexCache, QueryTerms
from mongogate.recall.inprocess.scope_index import Ranked
from mongogate.recall.model import MemoryItem, Question, Ranking, RecallMethod
from mongogate.recall.pages import ITEM_FIELDS, item_of
from mongogate.recall.scope_filter import RecallFilter
from mongogate.scoring import TEXT_WEIGHT
from mongogate.values import Doc

log = logging.getLogger(__name__)

#: the text side's weight by method (the vector side's is 1 minus it)
WEIGHTS: dict[RecallMethod, float] = {"fused": TEXT_WEIGHT, "text": 1.0, "vector": 0.0}
#: what a read-back reads of a memory (`ns_path` too: `RecallFilter.admits` checks it)
READ_BACK = {k: v for k, v in ITEM_FIELDS.items() if k != rd.NS_PATH}


class Source(Protocol):
    """What this ranker reads of the store (`RecallRepository`), typed here so the repository,
    which builds the index, is not imported by it."""

    memories: AsyncCollection[Doc]
    coherence: Coherence
    index: IndexCache
    embedder: Embedder
    settings: LongTermSettings

    async def embed_one(self, text: str) -> list[float]: ...


async def rank(store: Source, filt: RecallFilter, q: Question) -> Ranking:
    """The best `q.limit` memories scoring at least `q.min_score`, and the vector path ("scan", or
    "unavailable" when the embedder failed)."""
    vector, path = await _question_vector(store, q)
    terms = store.index.query_terms(q.text)
    tokens = list(terms.tokens) if q.method in ("fused", "text") else []
    wt = 1.0 if path == "unavailable" else WEIGHTS[q.method]
    try:
        model = store.embedder
        fresh = await store.index.fresh(
            store.memories, store.coherence, filt.scope, model.model, model.dimensions, filt.now
        )
        ranked = fresh.index.rank(
            vector,
            tokens,
            now=filt.now,
            ns_path=filt.ns_path,
            metadata=filt.metadata,
            depth=q.limit,
            weight_text=wt,
            weight_vector=1.0 - wt,
            filt=filt,
            siblings=store.settings.similar_min_score if wt < 1.0 else None,
        )
        # a match by terms, by a hop or by meaning (however weak, when min_score is 0); nothing else
        scored = above_floor(ranked, q.min_score)
        docs = await _shown(store, fresh, filt, scored)
    except PyMongoError as e:
        raise StorageError("could not recall memories") from e
    # a memory the database no longer holds (forgotten, expired) is never returned
    return Ranking([_item(docs[r.id], r, terms) for r in scored if r.id in docs], path)


async def _question_vector(store: Source, q: Question) -> tuple[list[float] | None, str]:
    """The question's embedding (kept for the next time it is asked) and the vector path."""
    if q.method not in ("fused", "vector"):
        return None, "scan"
    model = store.embedder.model
    try:
        vector = store.index.query_vector(model, q.text)
        if vector is None:
            vector = await store.embed_one(q.text)
            store.index.keep_query_vector(model, q.text, vector)
    except EmbeddingUnavailable:
        if q.method == "vector":
            raise
        log.warning("recall: the embedder failed; exact-term ranking only")
        return None, "unavailable"
    return vector, "scan"  # an exact scan, of the in-process matrix


async def _shown(store: Source, fresh: Fresh, filt: RecallFilter, scored: list[Ranked]) -> dict[str, Doc]:
    """What each ranked memory shows: from the index when settled (read now, before any await:
    the index as of its revision), else read back by `_id` and checked against the filter."""
    if fresh.settled:
        held = ((r.id, fresh.index.item(r.id)) for r in scored)
        return {i: d for i, d in held if d is not None}
    store.index.stats.readbacks += 1
    read = await read_by_id(store.memories, [r.id for r in scored], READ_BACK)
    return {i: d for i, d in read.items() if filt.admits(d)}


def _item(doc: Doc, r: Ranked, terms: QueryTerms) -> MemoryItem:
    item = item_of(doc, round(r.score, 6))
    shown = terms.matched(r.matched)
    return dataclasses.replace(
        item,
        similarity=round(r.similarity, 6),
        matched_terms=shown,
        superseded_by=r.superseded_by,
        newer_similar=r.newer_similar,
    )
