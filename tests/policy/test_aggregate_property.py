"""Property: random allowed pipelines over random documents of several tenants return exactly
what the reference computes over the caller's own documents, reading only projected fields.

Each example writes its own documents (three tenants, a hidden `secret` field, arrays of tags)
to a fresh collection, then runs one generated pipeline as each tenant.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymongo import AsyncMongoClient

from mongogate.config import PolicySettings
from mongogate.demo import ORDER_STATS
from mongogate.policy.aggregate_run import run_pipeline
from mongogate.policy.aggregate_walk import check_pipeline
from tests.policy.aggregate_ref import canonical, rendered, run_reference

pytestmark = pytest.mark.anyio
Doc = dict[str, Any]
LIMITS = PolicySettings()
SPEC = ORDER_STATS.model_copy(update={"index": None})  # fresh collections carry no index
TENANTS = ("t1", "t2", "t3")
STATUSES = ("paid", "open", "void")
BASE = datetime(2025, 11, 20, tzinfo=UTC)


@st.composite
def orders(draw: st.DrawFn) -> list[Doc]:
    n = draw(st.integers(0, 14))
    docs = []
    for i in range(n):
        doc: Doc = {
            "userId": draw(st.sampled_from(TENANTS)),
            "number": f"N-{i}",
            "status": draw(st.sampled_from(STATUSES)),
            "total": draw(st.integers(0, 400)) / 4,  # exact in binary: sums do not depend on order
            "createdAt": BASE + timedelta(hours=draw(st.integers(0, 24 * 120))),
            "tags": draw(st.lists(st.sampled_from(["a", "b", "c"]), max_size=3)),
            "secret": 10**9 + i,  # never projected: must never show up
        }
        docs.append(doc)
    return docs


UNIT = st.sampled_from(["day", "week", "month", "quarter", "year"])
SCALAR_KEY = st.one_of(
    st.just("$status"),
    st.just(None),
    UNIT.map(lambda u: {"$dateTrunc": {"date": "$createdAt", "unit": u}}),
)
OBJECT_KEY = st.tuples(UNIT, st.booleans()).map(
    lambda t: {
        "m": {"$dateTrunc": {"date": "$createdAt", "unit": t[0]}},
        **({"s": "$status"} if t[1] else {}),
    }
)
ACCS: dict[str, Doc] = {
    "n": {"$count": {}},
    "one": {"$sum": 1},
    "t": {"$sum": "$total"},
    "a": {"$avg": "$total"},
    "lo": {"$min": "$total"},
    "hi": {"$max": "$createdAt"},
}
MATCH = st.one_of(
    st.lists(st.sampled_from(STATUSES), min_size=1, max_size=2).map(lambda s: {"status": {"$in": s}}),
    st.integers(0, 100).map(lambda x: {"total": {"$gte": x}}),
    st.integers(0, 90).map(lambda d: {"createdAt": {"$lt": (BASE + timedelta(days=d)).isoformat()}}),
)


@st.composite
def pipelines(draw: st.DrawFn) -> tuple[list[Doc], bool]:
    """(pipeline, ordered): ordered when the output order is fixed by a $sort on a scalar key."""
    stages: list[Doc] = []
    if draw(st.booleans()):
        stages.append({"$match": draw(MATCH)})
    if draw(st.booleans()):
        stages.append({"$unwind": "$tags"})
        if draw(st.booleans()):
            stages.append({"$sortByCount": "$tags"})
            return stages, False
    scalar = draw(st.booleans())
    key = draw(SCALAR_KEY if scalar else OBJECT_KEY)
    accs = draw(st.lists(st.sampled_from(sorted(ACCS)), min_size=1, max_size=4, unique=True))
    stages.append({"$group": {"_id": key, **{a: ACCS[a] for a in accs}}})
    if "n" in accs and draw(st.booleans()):
        stages.append({"$match": {"n": {"$gte": draw(st.integers(1, 3))}}})
    if scalar and draw(st.booleans()):
        stages.append({"$sort": {"_id": draw(st.sampled_from([1, -1]))}})
        stages.append({"$limit": draw(st.integers(1, 4))})
        return stages, True
    return stages, False


@pytest.fixture
async def db(engine_uri: str) -> AsyncIterator[Any]:
    client: AsyncMongoClient[Doc] = AsyncMongoClient(engine_uri, tz_aware=True)
    name = f"aggprop_{uuid.uuid4().hex[:10]}"
    try:
        yield client[name]
        await client.drop_database(name)
    finally:
        await client.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=orders(), case=pipelines())
async def test_random_pipelines_stay_in_tenant_and_projection(
    db: Any, docs: list[Doc], case: tuple[list[Doc], bool]
) -> None:
    pipeline, ordered = case
    coll = db[f"o_{uuid.uuid4().hex[:8]}"]
    if docs:
        await coll.insert_many([dict(d) for d in docs])
    checked = check_pipeline(pipeline, SPEC, LIMITS)
    secrets = {d["secret"] for d in docs}
    for tenant in TENANTS:
        result = await run_pipeline(coll, SPEC, {"pipeline": pipeline}, tenant, LIMITS)
        mine = [d for d in docs if d["userId"] == tenant]
        expected = rendered(run_reference(mine, checked.stages), checked.output)
        if ordered:
            assert result.documents == expected, (tenant, pipeline)
        else:
            assert canonical(result.documents) == canonical(expected), (tenant, pipeline)
        text = str(result.documents)
        assert not any(str(s) in text for s in secrets) and tenant not in text
    await coll.drop()
