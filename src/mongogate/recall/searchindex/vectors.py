"""The search index's side of vectors: `$vectorSearch` and the index it needs.

- `$vectorSearch` on deployments with a vector search index (Atlas; MongoDB Community 8.2+
  with its search process): `vector_search_stage`, the index from `vector_index_definition`;
  `has_vector_search` says whether a deployment can run it (`recall/search.py` chooses the
  ranker by it);
- `scan_top`, the exact cosine over stored vectors in mongogate: the stand-in for `$vectorSearch`
  that benchmarks/recall.py tunes this path's fusion with (`ranker.by_scan`), where no search
  index answers. The in-process index (`recall/inprocess/`) holds its own matrix.

The stored form of a vector (`pack`, `unpack`) is `recall/vectors.py`.
"""

from __future__ import annotations

import logging
import math
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bson.binary import Binary
from pymongo.errors import OperationFailure, PyMongoError

from mongogate.config import LongTermSettings
from mongogate.errors import InvalidInput, StorageError
from mongogate.indexing import FIELD, FLOAT32_HEADER
from mongogate.lazy import lazy
from mongogate.recall import documents as rd

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    np = lazy("numpy")

log = logging.getLogger(__name__)

__all__ = [
    "FILTER_FIELDS",
    "SCORE",
    "VectorSearchStatus",
    "forget_probes",
    "has_vector_search",
    "scan_top",
    "vector_index_definition",
    "vector_search_stage",
    "vector_search_status",
]

#: fields a `$vectorSearch` filter may use: the scope first, then what recall narrows by
#: (`ns_path`: the namespace and its ancestors, so "a/b" finds memories in "a/b/c" too)
FILTER_FIELDS = (rd.TENANT, rd.OWNER, "namespace", rd.NS_PATH, rd.EMBEDDING_MODEL)
#: the projection that reads a `$vectorSearch` result's similarity
SCORE = {"$meta": "vectorSearchScore"}
#: Atlas's bounds: numCandidates <= 10,000 and limit <= numCandidates
MAX_CANDIDATES = 10_000
#: a "not ready" probe answer is asked again after this many seconds (an index being built)
RETRY_PROBE_S = 60.0


def scan_top(
    query: Sequence[float] | npt.NDArray[np.floating[Any]],
    docs: Iterable[tuple[str, Binary]],
    limit: int,
) -> list[tuple[str, float]]:
    """The `limit` ids whose vectors are nearest `query` by cosine similarity, best first.

    Exact: every vector is compared. Vectors of another size than the query, and zero or
    unreadable ones, are skipped (they came from another model or from damage, and
    comparing them would be meaningless). Equal scores come out in id order.
    """
    if limit <= 0:
        return []
    q = np.asarray(query, dtype=np.float32)
    dims = q.size
    qnorm = float(np.linalg.norm(q))
    if q.ndim != 1 or dims == 0 or not math.isfinite(qnorm) or qnorm == 0.0:
        raise InvalidInput("the query embedding is empty, zero or not finite")
    expected = 2 + 4 * dims
    ids: list[str] = []
    chunks: list[bytes] = []
    for doc_id, vec in docs:
        raw = bytes(vec)
        if len(raw) != expected or raw[:2] != FLOAT32_HEADER:
            continue
        ids.append(doc_id)
        chunks.append(raw[2:])
    if not ids:
        return []
    matrix = np.frombuffer(b"".join(chunks), dtype="<f4").reshape(len(ids), dims)
    norms = np.linalg.norm(matrix, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        scores = (matrix @ q) / (norms * qnorm)
    usable = np.isfinite(scores)
    if not usable.all():
        scores = np.where(usable, scores, -np.inf)
    n = min(limit, len(ids))
    if n < len(ids):
        # the n best, plus every vector tied with the n-th, so the id tie-break is exact
        cut = np.partition(scores, len(ids) - n)[len(ids) - n]
        picked = np.flatnonzero(scores >= cut)
    else:
        picked = np.arange(len(ids))
    ranked = sorted((-float(scores[i]), ids[i]) for i in picked if usable[i])
    return [(doc_id, -neg) for neg, doc_id in ranked[:n]]


def vector_search_stage(
    *, index: str, query: Sequence[float], filter: dict[str, Any], limit: int, num_candidates: int
) -> dict[str, Any]:
    """The `$vectorSearch` stage over memory vectors (path "embedding").

    `filter` may use only `FILTER_FIELDS` (what the index declares); it must hold the scope.
    The similarity is read afterwards with a `$project` of `SCORE`.
    """
    if not 1 <= limit <= MAX_CANDIDATES:
        raise InvalidInput(f"limit {limit}: a vector search returns 1 to {MAX_CANDIDATES} results")
    if not limit <= num_candidates <= MAX_CANDIDATES:
        raise InvalidInput(f"num_candidates {num_candidates}: give {limit} (the limit) to {MAX_CANDIDATES}")
    unknown = sorted(_fields_of(filter) - set(FILTER_FIELDS))
    if unknown:
        names, allowed = ", ".join(unknown), ", ".join(FILTER_FIELDS)
        raise InvalidInput(f"vector search filter on {names}: the index filters only on {allowed}")
    if rd.TENANT not in filter and "$and" not in filter:
        raise InvalidInput("a vector search filter must hold the scope (tenant and owner)")
    vec = [float(x) for x in query]
    if not vec or not all(math.isfinite(x) for x in vec):
        raise InvalidInput("the query embedding is empty or not finite")
    return {
        "$vectorSearch": {
            "index": index,
            "path": FIELD,
            "queryVector": vec,
            "numCandidates": num_candidates,
            "limit": limit,
            "filter": filter,
        }
    }


def _fields_of(filter: dict[str, Any]) -> set[str]:
    """Field names a filter uses, through `$and` / `$or` / `$nor`."""
    fields: set[str] = set()
    for key, value in filter.items():
        if key in ("$and", "$or", "$nor") and isinstance(value, list):
            for clause in value:
                if isinstance(clause, dict):
                    fields |= _fields_of(clause)
        else:
            fields.add(key)
    return fields


def vector_index_definition(settings: LongTermSettings, dimensions: int) -> dict[str, Any]:
    """The search index to create on `memories` (Atlas, or Community 8.2+ with mongot).

    In the shape of `createSearchIndexes` / pymongo's `SearchIndexModel(**definition)`:
    `{name, type: "vectorSearch", definition: {fields}}`; the scope fields are filter
    fields, so a search never ranks another tenant's or subject's vectors.
    """
    if not 1 <= dimensions <= 8192:
        raise InvalidInput(f"dimensions {dimensions}: a vector index takes 1 to 8192")
    fields: list[dict[str, Any]] = [
        {"type": "vector", "path": FIELD, "numDimensions": dimensions, "similarity": "cosine"}
    ]
    fields += [{"type": "filter", "path": f} for f in FILTER_FIELDS]
    return {"name": settings.vector_index_name, "type": "vectorSearch", "definition": {"fields": fields}}


@dataclass(frozen=True)
class VectorSearchStatus:
    """What a deployment can do: list search indexes at all, and whether ours is there."""

    #: the server answers `$listSearchIndexes` (False: the embedded engine, Community without mongot)
    supported: bool
    #: our index exists (any state)
    exists: bool = False
    #: it exists and answers queries (built)
    queryable: bool = False
    #: the index's status as the server reports it ("READY", "BUILDING", ...), or why unsupported
    detail: str = ""


# per client (weakly held: a closed, dropped client takes its answers with it), per index
_Cache = dict[tuple[str, str], tuple[VectorSearchStatus, float]]
_probes: weakref.WeakKeyDictionary[Any, _Cache] = weakref.WeakKeyDictionary()


def forget_probes() -> None:
    """Drop every cached probe answer (tests; `mongogate check` asks afresh)."""
    _probes.clear()


async def vector_search_status(
    collection: Any, index_name: str, *, monotonic: Callable[[], float] = time.monotonic
) -> VectorSearchStatus:
    """Ask the deployment (cached per process): an "unsupported" answer is kept for good, a
    missing or building index is asked again after `RETRY_PROBE_S`, so an index created
    while serving is picked up without a restart."""
    client = collection.database.client
    cache = _probes.setdefault(client, {})
    key = (collection.full_name, index_name)
    hit = cache.get(key)
    now = monotonic()
    if hit is not None and (not hit[0].supported or hit[0].queryable or now - hit[1] < RETRY_PROBE_S):
        return hit[0]
    status = await _probe(collection, index_name)
    cache[key] = (status, now)
    log.info(
        "vector search on %s: %s",
        collection.full_name,
        "$vectorSearch" if status.queryable else f"exact scan ({status.detail})",
    )
    return status


async def has_vector_search(collection: Any, index_name: str) -> bool:
    """True when `$vectorSearch` on `index_name` can answer now; False on the embedded engine."""
    return (await vector_search_status(collection, index_name)).queryable


async def _probe(collection: Any, index_name: str) -> VectorSearchStatus:
    try:
        cursor = await collection.aggregate([{"$listSearchIndexes": {"name": index_name}}])
        found = await cursor.to_list(length=10)
    except OperationFailure as e:  # the server answered: it has no search (or refuses to say)
        reason = (str(e.details.get("errmsg")) if e.details else str(e))[:200]
        return VectorSearchStatus(supported=False, detail=f"no search index support: {reason}")
    except PyMongoError as e:  # it did not answer: not an answer to cache
        log.info("search index probe on %s failed: %s", collection.full_name, e)
        raise StorageError("listing search indexes") from e
    for ix in found:
        if ix.get("name") == index_name:
            status = str(ix.get("status", ""))
            queryable = bool(ix.get("queryable", status == "READY"))
            return VectorSearchStatus(supported=True, exists=True, queryable=queryable, detail=status)
    return VectorSearchStatus(supported=True, detail=f"index {index_name!r} not found")
