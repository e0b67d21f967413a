"""`recall` through a search index: where the deployment has one (`vector_search` "atlas", or
"auto" and the probe finds it; `recall/search.py` `vector_path` chooses), the two rankings run
in the database.

- Exact terms: `find` with `$text` (textScore), with the call's filter (`RecallFilter.mongo`). It
  works on every MongoDB and on the embedded engine (which refuses `$text` inside an aggregate).
- Meaning: `$vectorSearch` on the query's embedding against the stored ones of the SAME model
  only (`embedding_model` is one of the index's filter fields), then the rest of the filter.
- Order: reciprocal rank fusion over both candidate lists, a text hit weighted by the share of the
  query's terms it holds (`rank.py`, `fuse_recall`; tuned on benchmarks/recall.py).
- Replaced memories (`recall/chain.py`) are left out as on the in-process index, unless asked
  for: the ranked candidates are read `limit` at a time and each one's `superseded_by` checked
  against the memories it names (`supersession.replacers`).
- A returned memory with a newer one very close in meaning among the ranked candidates is marked
  (`newer_similar`).
- Score: the meaning the in-process index's has (`mongogate/scoring.py`): each memory's own score
  is `scoring.blend` of its text side (the share of the query's words its text holds,
  `terms.coverage`: 1.0 holds every one) and its meaning side (the cosine, from
  `vectorSearchScore` = (1 + cosine) / 2 for a cosine index; 0 for a memory `$vectorSearch` did
  not return), weighted by the method as the index weighs them; the shown score is
  `scoring.shown(own, best)`, `best` the highest own score of the candidates, and a memory under
  `min_score` is left out. The order stays the fusion's, so a later memory may show up to a tenth
  of a point more than an earlier one (the own share; docs/decisions/recall-ranking.md).

An embedder that fails at recall time does not fail the call: the exact-term ranking still
answers and `vector_path` says "unavailable" (the tool's notice tells the model).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from pymongo import DESCENDING
from pymongo.errors import OperationFailure, PyMongoError

from mongogate import scoring
from mongogate.clock import utc_or_none
from mongogate.errors import EmbeddingUnavailable, StorageError
from mongogate.lazy import lazy
from mongogate.recall import documents as rd
from mongogate.recall.model import Link, Question, Ranking, Similar
from mongogate.recall.pages import ITEM_FIELDS, item_of, live
from mongogate.recall.repository import RecallRepository
from mongogate.recall.scope_filter import RecallFilter
from mongogate.recall.searchindex.rank import fuse_recall
from mongogate.recall.searchindex.terms import coverage, terms, text_search
from mongogate.recall.searchindex.vectors import scan_top, vector_search_stage
from mongogate.recall.supersession import replacers
from mongogate.recall.vectors import FIELD, unpack
from mongogate.values import Doc

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    np = lazy("numpy")

log = logging.getLogger(__name__)

#: candidates each ranking contributes to the fusion, per memory asked for
CANDIDATES_PER_RESULT = 4
MIN_CANDIDATES = 20
MAX_CANDIDATES = 200
#: the text side's weight of a memory's own score, by method (`scoring.blend`; as the index's)
WEIGHTS = {"fused": scoring.TEXT_WEIGHT, "text": 1.0, "vector": 0.0}
_POST = ("metadata", rd.EXPIRES_AT)
_logged: set[str] = set()


def candidates(limit: int) -> int:
    return max(MIN_CANDIDATES, min(MAX_CANDIDATES, limit * CANDIDATES_PER_RESULT))


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


async def rank(store: RecallRepository, filt: RecallFilter, q: Question) -> Ranking:
    """The best `q.limit` memories by the fusion, each scoring at least `q.min_score`, and the
    vector path ("vectorSearch", "unavailable" when the embedder failed, "none" for text alone)."""
    base = filt.mongo()
    try:  # one after the other: at once measured no faster on the embedded engine
        path, ranked, similarity = await _ranked(store, filt, base, q)
        listed, chained = await _current(store, filt, base, [i for i, _ in ranked], q.limit)
    except PyMongoError as e:
        raise StorageError("could not recall memories") from e
    weight = 1.0 if path == "unavailable" else WEIGHTS[q.method]
    both = q.method == "fused" and path == "vectorSearch"
    gate = scoring.calibration(store.embedder.model)
    scores = shown_scores(q.text, listed, similarity, weight, both=both, gate=gate)
    kept = [
        (i, d, round(sc, 6)) for (i, d), sc in zip(listed, scores, strict=True) if round(sc, 6) >= q.min_score
    ]
    try:
        near = await newer_similar(store, filt, [i for i, _, _ in kept], [i for i, _ in ranked])
    except PyMongoError as e:
        raise StorageError("could not recall memories") from e
    items = [
        dataclasses.replace(item_of(d, sc), superseded_by=chained.get(i, ()), newer_similar=near.get(i))
        for i, d, sc in kept
    ]
    return Ranking(items, path)


async def _current(
    store: RecallRepository, filt: RecallFilter, base: Doc, ids: list[str], limit: int
) -> tuple[list[tuple[str, Doc]], dict[str, tuple[Link, ...]]]:
    """The first `limit` of the ranked `ids` the filter admits, in order, read `limit` at a time:
    replaced memories left out (`recall/chain.py`) unless the filter includes them; and the links
    that replace each one read."""
    listed: list[tuple[str, Doc]] = []
    chained: dict[str, tuple[Link, ...]] = {}
    for start in range(0, len(ids), limit):
        batch = ids[start : start + limit]
        docs = {
            str(d["_id"]): d async for d in store.memories.find({**base, "_id": {"$in": batch}}, ITEM_FIELDS)
        }
        chained |= await replacers(store, filt.scope, list(docs.values()), filt.as_of)
        listed += [(i, docs[i]) for i in batch if i in docs and (filt.include_superseded or i not in chained)]
        if len(listed) >= limit:
            break
    return listed[:limit], chained


async def _ranked(
    store: RecallRepository, filt: RecallFilter, base: Doc, q: Question
) -> tuple[str, list[tuple[str, float]], dict[str, float]]:
    """The vector path, the fused (or single) ranking cut to `q.limit`, and `vectorSearchScore` by id."""
    depth = candidates(q.limit)
    text_ranked: list[tuple[str, float]] = []
    vector_ranked: list[tuple[str, float]] = []
    path = "none"
    if q.method in ("fused", "text"):
        text_ranked = await by_text(store, base, q.text, depth)
    if q.method in ("fused", "vector"):
        required = q.method == "vector"
        path, vector_ranked = await by_meaning(store, filt, base, q.text, depth, required=required)
    if q.method == "fused":  # cut to the depth: `_current` leaves replaced memories out
        ranked = await fused(store, base, q.text, text_ranked, vector_ranked, depth)
    else:
        ranked = (text_ranked or vector_ranked)[:depth]
    return path, ranked, dict(vector_ranked)


def shown_scores(
    query: str,
    listed: list[tuple[str, Doc]],
    similarity: dict[str, float],
    weight: float,
    *,
    both: bool,
    gate: scoring.Calibration = scoring.WORDLLAMA,
) -> list[float]:
    """Each listed memory's shown score (`scoring.shown`), in the order given: its own score is
    `scoring.blend(share of the query's words its text holds, cosine, weight)`; the best is the
    highest own score, evidenced (`scoring.evidenced` with the embedder's `gate`: the listed
    memories' highest cosine, the best one's share) when `both` sides ranked.
    `similarity`: `vectorSearchScore` by id ((1 + cosine) / 2)."""
    asked = terms(query)
    sides = [
        (coverage(asked, str(d.get("text", ""))), 2.0 * similarity[i] - 1.0 if i in similarity else 0.0)
        for i, d in listed
    ]
    own = [scoring.blend(share, cos, weight) for share, cos in sides]
    if not own:
        return []
    top = max(range(len(own)), key=lambda k: own[k])
    evidenced = scoring.evidenced(max(cos for _, cos in sides), sides[top][0], gate) if both else True
    return [scoring.shown(o, own[top], evidenced) for o in own]


async def by_meaning(
    store: RecallRepository, filt: RecallFilter, base: Doc, text: str, depth: int, *, required: bool
) -> tuple[str, list[tuple[str, float]]]:
    """The vector path that ran and its ranking; "unavailable" when the embedder failed (unless required)."""
    try:
        vector = await store.embed_one(text)
    except EmbeddingUnavailable:
        if required:
            raise
        log.warning("recall: the embedder failed; exact-term ranking only")
        return "unavailable", []
    log_path("vectorSearch", store)
    return "vectorSearch", await by_vector_search(store, filt, base, vector, depth)


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
    """Exact cosine over the scope's vectors of this model (the newest `max_scan` of them): the
    stand-in for `$vectorSearch` that benchmarks/recall.py tunes the fusion with where no search
    index answers (the embedded engine).

    When the quota (`max_per_scope`) keeps every scope within `max_scan`, nothing can be cut,
    so the find is not sorted: on the embedded engine the sorted find took about 1.6x as long
    at 1,000 and at 10,000 memories (benchmarks/RESULTS.md, "recall")."""
    s = store.settings
    cut: dict[str, Any] = {}
    if s.max_per_scope > s.max_scan:
        cut = {"sort": [(rd.UPDATED_AT, DESCENDING), ("_id", DESCENDING)], "limit": s.max_scan}
    found = store.memories.find({**base, rd.EMBEDDING_MODEL: store.embedder.model}, {"embedding": 1}, **cut)
    docs = [(str(d["_id"]), d["embedding"]) async for d in found if d.get("embedding") is not None]
    return scan_top(vector, docs, depth)


async def by_vector_search(
    store: RecallRepository, filt: RecallFilter, base: Doc, vector: list[float], depth: int
) -> list[tuple[str, float]]:
    """`$vectorSearch` filtered on the index's filter fields, then the rest of the filter."""
    pre: Doc = {**filt.scope.match(), rd.EMBEDDING_MODEL: store.embedder.model}
    if filt.ns_path is not None:
        pre[rd.NS_PATH] = filt.ns_path
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


#: what the newer-sibling marks read of the candidates
_SIBLING_FIELDS = {
    FIELD: 1,
    rd.EMBEDDING_MODEL: 1,
    rd.UPDATED_AT: 1,
    rd.SUPERSEDED_BY: 1,
    rd.STATED_AT: 1,
    rd.TENANT: 1,
    rd.OWNER: 1,
}


def _unit(doc: Doc, model: str) -> npt.NDArray[np.float32] | None:
    raw = doc.get(FIELD)
    if doc.get(rd.EMBEDDING_MODEL) != model or raw is None:
        return None
    try:
        v = unpack(raw) if not isinstance(raw, list) else np.asarray(raw, dtype=np.float32)
    except ValueError:
        return None
    norm = float(np.linalg.norm(v))
    return v / norm if np.isfinite(norm) and norm > 0 else None


async def newer_similar(
    store: RecallRepository, filt: RecallFilter, shown: list[str], candidates: list[str]
) -> dict[str, Similar]:
    """Shown id -> the current memory among `candidates` (the fusion's ranked ids) closest to it
    in meaning, written after it and at least `similar_min_score` close (the in-process index's
    rule, `recall/inprocess/chains.py`; a memory very close to a returned one is close to the
    question too). The candidates' vectors are read by `_id` (one `find`) and compared only when
    embedded by the recall's model; one replaced now, or expired, is no sibling."""
    threshold = store.settings.similar_min_score
    if not shown or len(candidates) < 2 or threshold >= 1.0:
        return {}
    query = {**filt.scope.match(), **live(filt.now), "_id": {"$in": sorted(set(candidates) | set(shown))}}
    docs = {str(d["_id"]): d async for d in store.memories.find(query, _SIBLING_FIELDS)}
    replaced = await replacers(store, filt.scope, list(docs.values()))
    model = store.embedder.model
    vecs = {i: v for i, d in docs.items() if (v := _unit(d, model)) is not None}
    out: dict[str, Similar] = {}
    for mid in shown:
        found = _closest_newer(mid, docs, vecs, set(replaced), threshold)
        if found is not None:
            out[mid] = found
    return out


def _closest_newer(
    mid: str,
    docs: dict[str, Doc],
    vecs: dict[str, npt.NDArray[np.float32]],
    replaced: set[str],
    threshold: float,
) -> Similar | None:
    """The memory of `vecs` closest to `mid`, written after it, not replaced, `threshold` close."""
    mine, when = vecs.get(mid), utc_or_none(docs.get(mid, {}).get(rd.UPDATED_AT))
    if mine is None or when is None:
        return None
    best: tuple[float, str] | None = None
    for other, v in vecs.items():
        newer = utc_or_none(docs[other].get(rd.UPDATED_AT))
        if other == mid or other in replaced or newer is None or newer <= when:
            continue
        score = float(mine @ v)
        if score >= threshold and (best is None or (score, other) > best):
            best = (score, other)
    return None if best is None else Similar(best[1], round(best[0], 6))
