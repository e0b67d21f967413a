"""`recall`: the caller's memories ranked by exact term and by meaning, the two rankings fused.

- Exact terms: `find` with `$text` (textScore), scoped and filtered like every read. It works on
  every MongoDB and on the embedded engine (which refuses `$text` inside an aggregate).
- Meaning: the query's embedding against the stored ones of the SAME model only
  (`embedding_model` is part of the filter): `$vectorSearch` where the deployment has the search
  index (`vector_search` "atlas", or "auto" and the probe finds it), else an exact scan in
  mongogate of the scope's newest `max_scan` vectors.
- Fusion: reciprocal rank fusion over both candidate lists, a text hit weighted by the share of
  the query's terms it holds (`recall/rank.py`, `fuse_recall`; tuned on benchmarks/recall.py).

An embedder that fails at recall time does not fail the call: the exact-term ranking still
answers and `vector_path` says "unavailable" (the tool's notice tells the model).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pymongo import DESCENDING
from pymongo.errors import OperationFailure, PyMongoError

from mongogate.errors import EmbeddingUnavailable, StorageError
from mongogate.recall import checks
from mongogate.recall.indexed import recall_indexed
from mongogate.recall.model import MemoryScope, Recalled, RecallMethod
from mongogate.recall.pages import ITEM_FIELDS, cap_items, item_of
from mongogate.recall.rank import fuse_recall
from mongogate.recall.repository import RecallRepository
from mongogate.recall.terms import text_search
from mongogate.recall.vectors import has_vector_search, scan_top, vector_search_stage
from mongogate.values import Doc

log = logging.getLogger(__name__)

#: candidates each ranking contributes to the fusion, per memory asked for
CANDIDATES_PER_RESULT = 4
MIN_CANDIDATES = 20
MAX_CANDIDATES = 200
_logged: set[str] = set()


def candidates(limit: int) -> int:
    return max(MIN_CANDIDATES, min(MAX_CANDIDATES, limit * CANDIDATES_PER_RESULT))


async def vector_path(store: RecallRepository) -> str:
    """ "vectorSearch" (a search index answers) or "scan" (exact, in mongogate)."""
    mode = store.settings.vector_search
    if mode == "scan":
        return "scan"
    if mode == "atlas":
        return "vectorSearch"
    found = await has_vector_search(store.memories, store.settings.vector_index_name)
    return "vectorSearch" if found else "scan"


def log_path(path: str, store: RecallRepository) -> None:
    """The server log says which vector path ran: once per process and path, then at debug."""
    if path not in _logged:
        _logged.add(path)
        log.info(
            "recall: vector path %s (memory.long_term.vector_search=%s, model %s)",
            path,
            store.settings.vector_search,
            store.embedder.model,
        )
    else:
        log.debug("recall: vector path %s", path)


async def recall(
    store: RecallRepository,
    scope: MemoryScope,
    query: object,
    *,
    namespace: object = None,
    limit: object = None,
    metadata: object = None,
    method: RecallMethod = "fused",
    min_score: object = None,
) -> Recalled:
    text = checks.check_query(query, store.settings)
    n = checks.check_recall_limit(limit, store.settings)
    filt = checks.check_metadata_filter(metadata, store.limits)
    floor = checks.check_min_score(min_score, store.settings)
    base = store.scoped(scope, namespace, store.clock.now())
    base |= {f"metadata.{k}": v for k, v in filt.items()}
    if await vector_path(store) == "scan":  # no search index: the in-process index answers
        log_path("index", store)
        ns = base.get("ns_path")
        items, path = await recall_indexed(
            store, base, text, ns_path=ns, metadata=filt, n=n, min_score=floor, method=method
        )
        kept, truncated = cap_items(items, store.settings.max_response_bytes)
        return Recalled(kept, path, truncated, index_path="index")
    depth = candidates(n)
    text_ranked: list[tuple[str, float]] = []
    vector_ranked: list[tuple[str, float]] = []
    path = "none"
    try:  # one after the other: at once measured no faster on the embedded engine
        if method in ("fused", "text"):
            text_ranked = await by_text(store, base, text, depth)
        if method in ("fused", "vector"):
            path, vector_ranked = await by_meaning(
                store, scope, base, text, depth, required=method == "vector"
            )
        if method == "fused":
            ranked = await fused(store, base, text, text_ranked, vector_ranked, n)
        else:
            ranked = (text_ranked or vector_ranked)[:n]
        ids = [i for i, _ in ranked]
        found = store.memories.find({**base, "_id": {"$in": ids}}, ITEM_FIELDS) if ids else None
        docs = {str(d["_id"]): d async for d in found} if found is not None else {}
    except PyMongoError as e:
        raise StorageError("could not recall memories") from e
    items = [item_of(docs[i], round(score, 6)) for i, score in ranked if i in docs]
    kept, truncated = cap_items(items, store.settings.max_response_bytes)
    return Recalled(kept, path, truncated)


async def by_meaning(
    store: RecallRepository, scope: MemoryScope, base: Doc, text: str, depth: int, *, required: bool
) -> tuple[str, list[tuple[str, float]]]:
    """The vector path that ran and its ranking; "unavailable" when the embedder failed (unless required)."""
    try:
        vector = await store.embed_one(text)
    except EmbeddingUnavailable:
        if required:
            raise
        log.warning("recall: the embedder failed; exact-term ranking only")
        return "unavailable", []
    path = await vector_path(store)
    log_path(path, store)
    if path == "vectorSearch":
        return path, await by_vector_search(store, scope, base, vector, depth)
    return path, await by_scan(store, base, vector, depth)


async def by_text(store: RecallRepository, base: Doc, query: str, depth: int) -> list[tuple[str, float]]:
    """The `$text` ranking, best `depth` first. The search string is the query's words without
    stop words (`terms.text_search`), so `$text` syntax in a query is never interpreted.

    Sorted here, not by the engine: the embedded engine ignores a textScore sort, so a `limit`
    there would cut arbitrary matches (the best one included); matches are read up to
    `max_scan` (ids and scores only)."""
    search = text_search(query)
    if not search:
        return []
    score = {"$meta": "textScore"}
    found = store.memories.find(
        {**base, "$text": {"$search": search}},
        {"score": score},
        sort=[("score", score)],
        limit=store.settings.max_scan,
    )
    rows = [(str(d["_id"]), float(d.get("score") or 0.0)) async for d in found]
    return sorted(rows, key=lambda r: (-r[1], r[0]))[:depth]


async def fused(
    store: RecallRepository,
    base: Doc,
    query: str,
    text_ranked: list[tuple[str, float]],
    vector_ranked: list[tuple[str, float]],
    n: int,
) -> list[tuple[str, float]]:
    """Both rankings fused (`rank.fuse_recall`), which weighs each text hit by how many of the
    query's terms its text holds: one more read, of the text candidates' texts."""
    texts: dict[str, str] = {}
    if text_ranked:
        ids = [i for i, _ in text_ranked]
        found = store.memories.find({**base, "_id": {"$in": ids}}, {"text": 1})
        texts = {str(d["_id"]): str(d.get("text", "")) async for d in found}
    text_hits = [(i, texts[i]) for i, _ in text_ranked if i in texts]
    return fuse_recall(query, text_hits, [i for i, _ in vector_ranked])[:n]


async def by_scan(
    store: RecallRepository, base: Doc, vector: list[float], depth: int
) -> list[tuple[str, float]]:
    """Exact cosine over the scope's vectors of this model (the newest `max_scan` of them).

    When the quota (`max_per_scope`) keeps every scope within `max_scan`, nothing can be cut,
    so the find is not sorted: on the embedded engine the sorted find took about 1.6x as long
    at 1,000 and at 10,000 memories (benchmarks/RESULTS.md, "recall")."""
    s = store.settings
    cut: dict[str, Any] = {}
    if s.max_per_scope > s.max_scan:
        cut = {"sort": [("updated_at", DESCENDING), ("_id", DESCENDING)], "limit": s.max_scan}
    found = store.memories.find({**base, "embedding_model": store.embedder.model}, {"embedding": 1}, **cut)
    docs = [(str(d["_id"]), d["embedding"]) async for d in found if d.get("embedding") is not None]
    return scan_top(vector, docs, depth)


async def by_vector_search(
    store: RecallRepository, scope: MemoryScope, base: Doc, vector: list[float], depth: int
) -> list[tuple[str, float]]:
    """`$vectorSearch` filtered on the index's filter fields, then the rest of the scope filter."""
    pre: Doc = {**scope.match(), "embedding_model": store.embedder.model}
    if "ns_path" in base:
        pre["ns_path"] = base["ns_path"]
    stage = vector_search_stage(
        index=store.settings.vector_index_name,
        query=vector,
        filter=pre,
        limit=depth,
        num_candidates=min(10_000, depth * 10),
    )
    pipeline: list[dict[str, Any]] = [
        stage,
        {"$project": {"_id": 1, "score": {"$meta": "vectorSearchScore"}, **{k: 1 for k in _POST}}},
        {"$match": {k: v for k, v in base.items() if k not in pre}},
        {"$project": {"_id": 1, "score": 1}},
    ]
    try:
        cursor = await store.memories.aggregate(pipeline)
        return [(str(d["_id"]), float(d["score"])) async for d in cursor]
    except OperationFailure as e:
        raise StorageError(
            "could not run $vectorSearch",
            advice=f"create the search index {store.settings.vector_index_name!r} (mongogate check "
            "prints it) or set memory.long_term.vector_search = 'scan'",
        ) from e


_POST = ("metadata", "expires_at")


async def path_report(store: RecallRepository) -> list[str]:
    """What `mongogate check` prints, and the server logs at start: which vector path runs, why,
    and the exact search index to create (it exists, or not)."""
    from mongogate.recall.vectors import vector_index_definition

    s = store.settings
    exists = await has_vector_search(store.memories, s.vector_index_name)
    path = await vector_path(store)
    why = {
        "scan": "the in-process index of each scope (vectors as one matrix, terms scored by BM25), "
        f"kept fresh by the scope's revision; budget {s.index_budget_mb} MB "
        "(memory.long_term.index_budget_mb), default min_score "
        f"{s.min_score} (memory.long_term.min_score)",
        "vectorSearch": f"$vectorSearch on the search index {s.vector_index_name!r}",
    }[path]
    definition = json.dumps(vector_index_definition(s, store.embedder.dimensions), sort_keys=True)
    return [
        f"long-term memory: scope {s.scope}, embedder {store.embedder.model} ({store.embedder.dimensions} "
        f"dimensions), quota {s.max_per_scope} memories per scope",
        f"long-term memory vector path: {'index' if path == 'scan' else path} "
        f"(memory.long_term.vector_search = {s.vector_search}): {why}",
        f"long-term memory vector index {s.vector_index_name!r}: {'exists' if exists else 'missing'}; "
        "the definition to create on Atlas or MongoDB Community 8.2+ (db.memories.createSearchIndex):",
        f"  {definition}",
    ]
