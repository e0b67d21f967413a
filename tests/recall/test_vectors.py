"""Stored vectors and the vector paths (recall/vectors.py, recall/searchindex/vectors.py), with the
real local model and engine."""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from bson.binary import Binary, BinaryVectorDtype
from pymongo import AsyncMongoClient, monitoring

from mongogate.config import LongTermSettings
from mongogate.errors import InvalidInput, StorageError
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.searchindex import vectors
from mongogate.recall.searchindex.vectors import (
    FILTER_FIELDS,
    forget_probes,
    has_vector_search,
    scan_top,
    vector_index_definition,
    vector_search_stage,
    vector_search_status,
)
from mongogate.recall.vectors import pack, unpack

TEXTS = [
    "The user likes dark themes in every editor and terminal.",
    "Order ORD-58213 was shipped by DHL on Monday.",
    "Water the fern twice a week; it dies in direct sun.",
    "Production deploys happen every Tuesday after the change review.",
]


@pytest.fixture(scope="module")
def embedded() -> list[list[float]]:
    return LocalEmbedder().embed_sync(TEXTS)


def test_pack_is_a_float32_binary_vector_the_driver_reads_back(embedded: list[list[float]]) -> None:
    b = pack(embedded[0])
    assert b.subtype == 9 and len(b) == 2 + 4 * 256  # 4 bytes a dimension (a double array: 9)
    assert b.as_vector().dtype == BinaryVectorDtype.FLOAT32
    np.testing.assert_array_equal(unpack(b), np.asarray(embedded[0], dtype=np.float32))
    # and the driver's own encoding is read the same way
    theirs = Binary.from_vector(embedded[1], BinaryVectorDtype.FLOAT32)
    np.testing.assert_array_equal(unpack(theirs), np.asarray(embedded[1], dtype=np.float32))


@pytest.mark.parametrize(
    ("vec", "why"),
    [
        ([], "non-empty"),
        ([1.0, math.nan], "NaN"),
        ([math.inf, 0.0], "NaN or infinity"),
        ([1e300, 1.0], "too large for float32"),
        ([[1.0, 2.0]], "non-empty list"),
    ],
)
def test_pack_refuses_what_cannot_be_a_stored_vector(vec: Any, why: str) -> None:
    with pytest.raises(InvalidInput, match=why):
        pack(vec)


@pytest.mark.parametrize(
    "b",
    [
        Binary(b"\x27\x00" + b"\x00" * 8, 0),  # not subtype 9
        Binary(b"\x03\x00" + b"\x01\x02", 9),  # an int8 vector
        Binary(b"\x27\x00" + b"\x00" * 7, 9),  # not a whole number of floats
    ],
)
def test_unpack_refuses_what_is_not_a_float32_vector(b: Binary) -> None:
    with pytest.raises(ValueError, match="vector"):
        unpack(b)


def test_scan_top_is_exact_cosine_best_first(embedded: list[list[float]]) -> None:
    rng = np.random.default_rng(7)
    noise = rng.normal(size=(200, 256)).astype(np.float32)
    docs = [(f"n{i:03}", pack(v)) for i, v in enumerate(noise)]
    docs += [(f"fact{i}", pack(v)) for i, v in enumerate(embedded)]
    query = LocalEmbedder().embed_sync(["which weekday do we ship to production?"])[0]
    got = scan_top(query, docs, 5)
    # brute force, independently: every cosine, sorted
    q = np.asarray(query, dtype=np.float64)
    ref = sorted(
        ((float(unpack(v) @ q / (np.linalg.norm(unpack(v)) * np.linalg.norm(q))), i) for i, v in docs),
        reverse=True,
    )[:5]
    assert [i for i, _ in got] == [i for _, i in ref]
    assert got[0][0] == "fact3"  # the deploy fact, by meaning
    assert all(a[1] >= b[1] for a, b in itertools.pairwise(got))
    assert got[0][1] == pytest.approx(ref[0][0], abs=1e-5)


def test_scan_top_ties_come_out_in_id_order_even_at_the_cut() -> None:
    same = pack([1.0, 0.0])
    docs = [("c", same), ("a", same), ("d", pack([0.0, 1.0])), ("b", same)]
    assert scan_top([1.0, 0.0], docs, 2) == [("a", 1.0), ("b", 1.0)]
    assert [i for i, _ in scan_top([1.0, 0.0], docs, 10)] == ["a", "b", "c", "d"]


def test_scan_top_skips_vectors_of_another_size_and_zero_vectors() -> None:
    docs = [("other-model", pack([1.0, 0.0, 0.0])), ("zero", pack([0.0, 0.0])), ("ok", pack([0.6, 0.8]))]
    [(only, score)] = scan_top([1.0, 0.0], docs, 5)
    assert only == "ok" and score == pytest.approx(0.6)
    assert scan_top([1.0, 0.0], [], 5) == []
    assert scan_top([1.0, 0.0], docs, 0) == []


@pytest.mark.parametrize("query", [[], [0.0, 0.0], [math.nan, 1.0]])
def test_scan_top_refuses_an_unusable_query(query: list[float]) -> None:
    with pytest.raises(InvalidInput, match="query embedding"):
        scan_top(query, [("a", pack([1.0, 0.0]))], 1)


def test_vector_search_stage_shape() -> None:
    scope = {"tenant": "acme", "owner": "*", "embedding_model": "m"}
    stage = vector_search_stage(index="ix", query=[0.5, 0.25], filter=scope, limit=5, num_candidates=100)
    assert stage == {
        "$vectorSearch": {
            "index": "ix",
            "path": "embedding",
            "queryVector": [0.5, 0.25],
            "numCandidates": 100,
            "limit": 5,
            "filter": scope,
        }
    }


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"limit": 0}, "limit 0"),
        ({"limit": 20, "num_candidates": 10}, "num_candidates 10"),
        ({"num_candidates": 10_001}, "num_candidates 10001"),
        ({"filter": {"tenant": "acme", "metadata.color": "red"}}, "metadata.color"),
        ({"filter": {"$or": [{"tenant": "a"}, {"text": "x"}]}}, "text"),
        ({"filter": {"namespace": "default"}}, "scope"),
        ({"query": [math.inf]}, "not finite"),
    ],
)
def test_vector_search_stage_refuses_what_the_index_cannot_run(kwargs: dict[str, Any], why: str) -> None:
    args: dict[str, Any] = {
        "index": "ix",
        "query": [1.0],
        "filter": {"tenant": "acme", "owner": "*"},
        "limit": 5,
        "num_candidates": 50,
    }
    with pytest.raises(InvalidInput, match=why):
        vector_search_stage(**(args | kwargs))


def test_vector_index_definition_declares_the_scope_as_filter_fields() -> None:
    settings = LongTermSettings(vector_index_name="memvec")
    assert vector_index_definition(settings, 256) == {
        "name": "memvec",
        "type": "vectorSearch",
        "definition": {
            "fields": [
                {"type": "vector", "path": "embedding", "numDimensions": 256, "similarity": "cosine"},
                {"type": "filter", "path": "tenant"},
                {"type": "filter", "path": "owner"},
                {"type": "filter", "path": "namespace"},
                {"type": "filter", "path": "ns_path"},
                {"type": "filter", "path": "embedding_model"},
            ]
        },
    }
    assert FILTER_FIELDS[:2] == ("tenant", "owner")
    with pytest.raises(InvalidInput, match="dimensions 0"):
        vector_index_definition(settings, 0)


class _Aggregates(monitoring.CommandListener):
    def __init__(self) -> None:
        self.count = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "aggregate":
            self.count += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
async def counted(engine_uri: str) -> AsyncIterator[tuple[AsyncMongoClient[dict[str, Any]], _Aggregates]]:
    listener = _Aggregates()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(engine_uri, event_listeners=[listener])
    try:
        yield client, listener
    finally:
        await client.close()


@pytest.mark.anyio
async def test_the_embedded_engine_has_no_vector_search_and_the_answer_is_cached(
    counted: tuple[AsyncMongoClient[dict[str, Any]], _Aggregates], db_name: str
) -> None:
    client, listener = counted
    forget_probes()
    coll = client[db_name]["memories"]
    assert await has_vector_search(coll, "mongogate_memory_vectors") is False
    status = await vector_search_status(coll, "mongogate_memory_vectors")
    assert not status.supported and "$listSearchIndexes" in status.detail
    assert listener.count == 1  # asked once; the second answer came from the cache
    forget_probes()
    assert await has_vector_search(coll, "mongogate_memory_vectors") is False
    assert listener.count == 2


@pytest.mark.anyio
async def test_a_server_that_does_not_answer_is_a_storage_error_not_a_cached_no() -> None:
    forget_probes()
    # a port nothing listens on: connection refused within the selection timeout
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=200"
    )
    try:
        coll = client["x"]["memories"]
        with pytest.raises(StorageError, match="listing search indexes"):
            await has_vector_search(coll, "ix")
        with pytest.raises(StorageError):  # asked again, not answered from a cache
            await has_vector_search(coll, "ix")
    finally:
        await client.close()


class _SearchDeployment:
    """A FAKE collection answering `$listSearchIndexes` like Atlas: no search-capable deployment
    runs on this machine. Only the probe's caching is tested through it."""

    def __init__(self, answers: list[list[dict[str, Any]]]) -> None:
        self.answers = answers
        self.asked = 0
        self.full_name = f"db.{uuid.uuid4().hex}"
        self.database = self  # `collection.database.client`: the cache key

    @property
    def client(self) -> _SearchDeployment:
        return self

    async def aggregate(self, pipeline: list[dict[str, Any]]) -> _SearchDeployment:
        assert pipeline == [{"$listSearchIndexes": {"name": "ix"}}]
        self.asked += 1
        self._next = self.answers.pop(0)
        return self

    async def to_list(self, length: int) -> list[dict[str, Any]]:
        return self._next


@pytest.mark.anyio
async def test_an_index_still_building_is_asked_about_again_after_a_while() -> None:
    now = [0.0]
    fake = _SearchDeployment(
        [
            [],
            [{"name": "ix", "status": "BUILDING", "queryable": False}],
            [{"name": "ix", "status": "READY", "queryable": True}],
        ]
    )
    status = await vector_search_status(fake, "ix", monotonic=lambda: now[0])
    assert status.supported and not status.exists
    now[0] = vectors.RETRY_PROBE_S - 1
    assert not (await vector_search_status(fake, "ix", monotonic=lambda: now[0])).exists  # cached
    now[0] = vectors.RETRY_PROBE_S + 1
    building = await vector_search_status(fake, "ix", monotonic=lambda: now[0])
    assert building.exists and not building.queryable and building.detail == "BUILDING"
    now[0] = 3 * vectors.RETRY_PROBE_S
    assert (await vector_search_status(fake, "ix", monotonic=lambda: now[0])).queryable
    now[0] = 100 * vectors.RETRY_PROBE_S  # a ready index is kept for good
    assert (await vector_search_status(fake, "ix", monotonic=lambda: now[0])).queryable
    assert fake.asked == 3
