"""Vectors on memories: packing, the exact scan, and the `$vectorSearch` stage and index.

Minimal versions written by the store's helper so the store runs end to end; the ranking
helper's versions (same signatures, see the contract) replace this module at merge.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from bson.binary import Binary, BinaryVectorDtype
from pymongo.errors import PyMongoError

from mongogate.config import LongTermSettings

log = logging.getLogger(__name__)

#: the fields `$vectorSearch` may filter on: the scope, the namespace path and the model
FILTER_FIELDS = ("tenant", "owner", "namespace", "ns_path", "embedding_model")
_probed: dict[tuple[str, str], bool] = {}


def pack(vec: Sequence[float]) -> Binary:
    return Binary.from_vector([float(x) for x in vec], BinaryVectorDtype.FLOAT32)


def unpack(b: Binary) -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.asarray(b.as_vector().data, dtype=np.float32)


def scan_top(
    query: Sequence[float], docs: Iterable[tuple[str, Binary]], limit: int
) -> list[tuple[str, float]]:
    """Exact cosine (the vectors are unit length: a dot product), best first, ties by id."""
    ids: list[str] = []
    rows: list[np.ndarray[Any, np.dtype[np.float32]]] = []
    q = np.asarray(query, dtype=np.float32)
    for doc_id, blob in docs:
        v = unpack(blob)
        if v.shape == q.shape:
            ids.append(doc_id)
            rows.append(v)
    if not rows:
        return []
    scores = np.stack(rows) @ q
    order = sorted(range(len(ids)), key=lambda i: (-float(scores[i]), ids[i]))
    return [(ids[i], float(scores[i])) for i in order[:limit]]


def vector_search_stage(
    *, index: str, query: Sequence[float], filter: dict[str, Any], limit: int, num_candidates: int
) -> dict[str, Any]:
    return {
        "$vectorSearch": {
            "index": index,
            "path": "embedding",
            "queryVector": [float(x) for x in query],
            "filter": filter,
            "limit": limit,
            "numCandidates": num_candidates,
        }
    }


def vector_index_definition(settings: LongTermSettings, dimensions: int) -> dict[str, Any]:
    """What to create on Atlas / Community 8.2+ (`mongogate check` prints it)."""
    fields: list[dict[str, Any]] = [
        {"type": "vector", "path": "embedding", "numDimensions": dimensions, "similarity": "cosine"}
    ]
    fields += [{"type": "filter", "path": p} for p in FILTER_FIELDS]
    return {"name": settings.vector_index_name, "type": "vectorSearch", "definition": {"fields": fields}}


async def has_vector_search(collection: Any, index_name: str) -> bool:
    """Whether the deployment answers `$listSearchIndexes` with a queryable index of that name.

    The embedded engine refuses the stage ("unsupported"): False. Cached per process.
    """
    key = (str(collection.full_name), index_name)
    if key not in _probed:
        try:
            found = await collection.aggregate([{"$listSearchIndexes": {"name": index_name}}])
            docs = [d async for d in found]
            _probed[key] = any(d.get("queryable", d.get("status") == "READY") for d in docs)
        except PyMongoError as e:
            log.debug("no $listSearchIndexes here: %s", type(e).__name__)
            _probed[key] = False
    return _probed[key]
