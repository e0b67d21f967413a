"""run_pipeline over the wire on the demo orders, against a pure-Python reference.

Real pymongo against the embedded engine, with a CommandListener recording what reaches it:
every legitimate pipeline returns exactly what the reference computes over the caller's own
documents, and the command carries the tenant $match first, the hint, maxTimeMS, no disk and
the final limit + 1.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient
from pymongo.monitoring import CommandListener, CommandStartedEvent, CommandSucceededEvent

from mongogate.clock import ManualClock
from mongogate.config import PolicySettings
from mongogate.demo import DEMO_TENANTS, ORDER_STATS, ORDERS_INDEX, demo_orders
from mongogate.errors import StorageError
from mongogate.policy.aggregate_run import run_pipeline
from mongogate.policy.aggregate_walk import check_pipeline
from tests.policy.aggregate_ref import canonical, rendered, run_reference

pytestmark = pytest.mark.anyio
LIMITS = PolicySettings()
SEED = demo_orders()
Doc = dict[str, Any]


class Commands(CommandListener):
    def __init__(self) -> None:
        self.seen: list[Doc] = []

    def started(self, event: CommandStartedEvent) -> None:
        if event.command_name in ("aggregate", "find", "count", "getMore"):
            self.seen.append(dict(event.command))

    def succeeded(self, event: CommandSucceededEvent) -> None:
        pass

    def failed(self, event: Any) -> None:
        pass


@pytest.fixture(scope="module")
def seeded(engine_uri: str) -> Iterator[str]:
    name = f"agg_{uuid.uuid4().hex[:10]}"
    client: MongoClient[Doc] = MongoClient(engine_uri)
    try:
        client[name]["orders"].insert_many([dict(d) for d in SEED])
        client[name]["orders"].create_index(list(ORDERS_INDEX), name="tenant_created")
        yield name
        client.drop_database(name)
    finally:
        client.close()


@pytest.fixture
async def wire(engine_uri: str, seeded: str) -> AsyncIterator[tuple[Any, Commands]]:
    commands = Commands()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(engine_uri, tz_aware=True, event_listeners=[commands])
    try:
        yield client[seeded]["orders"], commands
    finally:
        await client.close()


def own(tenant: str) -> list[Doc]:
    return [d for d in SEED if d["userId"] == tenant]


D = {"$dateTrunc": {"date": "$createdAt", "unit": "month"}}
# (id, pipeline, ordered): unordered results are compared as multisets
LEGIT: list[tuple[str, list[Doc], bool]] = [
    (
        "per-status",
        [
            {
                "$group": {
                    "_id": "$status",
                    "n": {"$count": {}},
                    "total": {"$sum": "$total"},
                    "avg": {"$avg": "$total"},
                }
            }
        ],
        False,
    ),
    (
        "per-month",
        [{"$group": {"_id": D, "n": {"$sum": 1}, "total": {"$sum": "$total"}}}, {"$sort": {"_id": 1}}],
        True,
    ),
    (
        "per-week",
        [
            {"$group": {"_id": {"$dateTrunc": {"date": "$createdAt", "unit": "week"}}, "n": {"$sum": 1}}},
            {"$sort": {"_id": -1}},
        ],
        True,
    ),
    (
        "per-day",
        [
            {
                "$group": {
                    "_id": {"$dateTrunc": {"date": "$createdAt", "unit": "day", "timezone": "UTC"}},
                    "n": {"$sum": 1},
                }
            },
            {"$sort": {"_id": 1}},
            {"$limit": 3},
        ],
        True,
    ),
    (
        "per-quarter-year",
        [
            {
                "$group": {
                    "_id": {
                        "q": {"$dateTrunc": {"date": "$createdAt", "unit": "quarter"}},
                        "y": {"$dateTrunc": {"date": "$createdAt", "unit": "year"}},
                    },
                    "n": {"$count": {}},
                }
            }
        ],
        False,
    ),
    (
        "status-month",
        [
            {
                "$group": {
                    "_id": {"s": "$status", "m": D},
                    "n": {"$count": {}},
                    "first": {"$min": "$createdAt"},
                    "last": {"$max": "$createdAt"},
                }
            }
        ],
        False,
    ),
    (
        "top-2-by-total",
        [
            {"$group": {"_id": "$status", "total": {"$sum": "$total"}}},
            {"$sort": {"total": -1}},
            {"$limit": 2},
        ],
        True,
    ),
    (
        "skip-limit",
        [
            {"$group": {"_id": "$status", "total": {"$sum": "$total"}}},
            {"$sort": {"_id": 1}},
            {"$skip": 1},
            {"$limit": 2},
        ],
        True,
    ),
    ("sortByCount", [{"$sortByCount": "$status"}], False),
    ("unwind-tags", [{"$unwind": "$tags"}, {"$sortByCount": "$tags"}], False),
    (
        "unwind-preserve",
        [
            {"$unwind": {"path": "$tags", "preserveNullAndEmptyArrays": True}},
            {"$group": {"_id": "$tags", "n": {"$count": {}}}},
        ],
        False,
    ),
    (
        "unwind-sum",
        [
            {"$unwind": "$tags"},
            {"$group": {"_id": "$tags", "total": {"$sum": "$total"}, "max": {"$max": "$total"}}},
        ],
        False,
    ),
    ("count-this-year", [{"$match": {"createdAt": {"$gte": "2026-02-01T00:00:00Z"}}}, {"$count": "n"}], True),
    ("count-none", [{"$match": {"status": "nope"}}, {"$count": "n"}], True),
    (
        "all-null-key",
        [
            {
                "$group": {
                    "_id": None,
                    "n": {"$count": {}},
                    "total": {"$sum": "$total"},
                    "min": {"$min": "$total"},
                }
            }
        ],
        True,
    ),
    ("literal-key", [{"$group": {"_id": "all", "n": {"$sum": 2}}}], True),
    (
        "first-last",
        [
            {"$sort": {"createdAt": 1}},
            {"$group": {"_id": "$status", "first": {"$first": "$total"}, "last": {"$last": "$createdAt"}}},
        ],
        False,
    ),
    (
        "match-after-group",
        [
            {"$match": {"status": {"$in": ["paid", "shipped", "pending"]}}},
            {"$group": {"_id": "$status", "n": {"$count": {}}, "total": {"$sum": "$total"}}},
            {"$match": {"total": {"$gt": 500}}},
            {"$project": {"total": 1}},
        ],
        False,
    ),
    (
        "match-group-id",
        [{"$group": {"_id": {"s": "$status"}, "n": {"$count": {}}}}, {"$match": {"_id.s": "paid"}}],
        True,
    ),
    (
        "project-drop",
        [
            {"$group": {"_id": "$status", "n": {"$count": {}}, "total": {"$sum": "$total"}}},
            {"$project": {"_id": 0, "n": 0}},
            {"$sort": {"total": 1}},
        ],
        True,
    ),
    (
        "group-of-groups",
        [
            {"$group": {"_id": "$status", "total": {"$sum": "$total"}}},
            {"$group": {"_id": None, "best": {"$max": "$total"}, "groups": {"$count": {}}}},
        ],
        True,
    ),
    ("docs-drop-id", [{"$project": {"_id": 0, "total": 1, "status": 1}}, {"$sort": {"total": 1}}], True),
    ("docs-no-group", [{"$match": {"status": "paid"}}, {"$sort": {"total": -1}}, {"$limit": 2}], True),
    (
        "docs-projected",
        [{"$sort": {"createdAt": 1}}, {"$project": {"number": 1, "total": 1}}, {"$limit": 3}],
        True,
    ),
]


@pytest.mark.parametrize(("case_id", "pipeline", "ordered"), LEGIT, ids=[c[0] for c in LEGIT])
@pytest.mark.parametrize("tenant", ["acme", "initech"])
async def test_legit_pipeline_equals_reference(
    wire: tuple[Any, Commands], case_id: str, pipeline: list[Doc], ordered: bool, tenant: str
) -> None:
    coll, _ = wire
    result = await run_pipeline(coll, ORDER_STATS, {"pipeline": pipeline}, tenant, LIMITS)
    checked = check_pipeline(pipeline, ORDER_STATS, LIMITS)  # values converted (ISO text -> dates)
    # the engine feeds documents in the hinted index's order: newest first
    docs = sorted(own(tenant), key=lambda d: d["createdAt"], reverse=True)
    expected = rendered(run_reference(docs, checked.stages), checked.output)
    got = result.documents
    if expected == [] and "$count" in pipeline[-1]:  # MongoDB: no document; the embedded engine: 0
        assert got in ([], [{pipeline[-1]["$count"]: 0}])
        return
    assert result.truncated is False and result.returned == len(expected)
    if ordered:
        assert got == expected, case_id
    else:
        assert canonical(got) == canonical(expected), case_id
    for doc in got:  # never the tenant, never a hidden field
        assert not {"userId", "internalNote"} & set(doc)
        assert set(doc) <= set(checked.output)


async def test_command_is_scoped_hinted_bounded(wire: tuple[Any, Commands]) -> None:
    coll, commands = wire
    pipeline = [{"$group": {"_id": "$status", "n": {"$count": {}}}}, {"$sort": {"n": -1}}]
    result = await run_pipeline(coll, ORDER_STATS, {"pipeline": pipeline, "limit": 2}, "acme", LIMITS)
    assert result.returned == 2 and result.truncated is True and result.limit == 2
    (cmd,) = commands.seen  # truncated by the limit already: no max_groups probe was needed
    assert cmd["pipeline"][0] == {"$match": {"$and": [{"userId": "acme"}]}}
    assert cmd["pipeline"][1] == pipeline[0]
    assert cmd["pipeline"][2] == {"$limit": ORDER_STATS.max_groups + 1}
    assert cmd["pipeline"][-2] == {"$project": {"_id": 1, "n": 1}}
    assert cmd["pipeline"][-1] == {"$limit": 3}
    assert dict(cmd["hint"]) == {"userId": 1, "createdAt": -1}
    assert cmd["maxTimeMS"] == ORDER_STATS.max_time_ms and cmd["allowDiskUse"] is False


async def test_more_groups_than_max_groups_is_truncated_not_an_error(wire: tuple[Any, Commands]) -> None:
    coll, commands = wire
    spec = ORDER_STATS.model_copy(update={"max_groups": 3})
    per_day = {"$dateTrunc": {"date": "$createdAt", "unit": "day"}}  # 12 days per tenant
    pipeline = [{"$group": {"_id": per_day, "n": {"$count": {}}}}, {"$count": "groups"}]
    result = await run_pipeline(coll, spec, {"pipeline": pipeline}, "acme", LIMITS)
    # the groups after the first max_groups + 1 never reach the later stages
    assert result.documents == [{"groups": 4}] and result.truncated is True
    assert len(commands.seen) == 2  # the answer, then the probe that found more than 3 groups
    probe = commands.seen[1]["pipeline"]
    assert probe[-3:] == [{"$skip": 3}, {"$limit": 1}, {"$count": "over"}]
    exact = await run_pipeline(coll, spec, {"pipeline": [{"$sortByCount": "$status"}]}, "acme", LIMITS)
    assert exact.returned == 3 and exact.truncated is True  # 4 statuses > 3 groups: 3 returned
    few = spec.model_copy(update={"max_groups": 4})
    ok = await run_pipeline(coll, few, {"pipeline": [{"$sortByCount": "$status"}]}, "acme", LIMITS)
    assert ok.returned == 4 and ok.truncated is False


async def test_other_tenants_and_hidden_fields_never_leave(wire: tuple[Any, Commands]) -> None:
    coll, _ = wire
    pipeline: list[Doc] = [{"$group": {"_id": None, "total": {"$sum": "$total"}, "n": {"$count": {}}}}]
    for tenant in DEMO_TENANTS:
        result = await run_pipeline(coll, ORDER_STATS, {"pipeline": pipeline}, tenant, LIMITS)
        mine = own(tenant)
        assert result.documents == [{"_id": None, "total": sum(d["total"] for d in mine), "n": len(mine)}]
    nobody = await run_pipeline(coll, ORDER_STATS, {"pipeline": pipeline}, "umbrella", LIMITS)
    assert nobody.documents == [] and nobody.truncated is False


class _Elapses(Commands):
    """Moves a ManualClock by ``ms`` when each aggregate reply arrives: the command "took" that long."""

    def __init__(self, clock: ManualClock, ms: int) -> None:
        super().__init__()
        self.clock, self.ms = clock, ms

    def succeeded(self, event: CommandSucceededEvent) -> None:
        if event.command_name == "aggregate":
            self.clock.advance(ms=self.ms)


@pytest.mark.parametrize("took_ms", [700, 1000, 1500])
async def test_the_max_groups_probe_gets_what_is_left_of_max_time_ms(
    engine_uri: str, seeded: str, took_ms: int
) -> None:
    """Issue 19: the group-count probe had a fresh max_time_ms, so a call took about twice it.
    The answer "takes" took_ms of a 1000 ms budget (a ManualClock moved by the reply): the probe
    gets the rest as its maxTimeMS, and nothing is left, none runs and the budget error says so."""
    clock = ManualClock()
    commands = _Elapses(clock, took_ms)
    client: AsyncMongoClient[Doc] = AsyncMongoClient(engine_uri, tz_aware=True, event_listeners=[commands])
    spec = ORDER_STATS.model_copy(update={"max_groups": 100, "max_time_ms": 1000})
    per_day = {"$dateTrunc": {"date": "$createdAt", "unit": "day"}}
    pipeline = [{"$group": {"_id": per_day, "n": {"$count": {}}}}, {"$count": "groups"}]
    try:
        coll = client[seeded]["orders"]
        if took_ms >= 1000:
            with pytest.raises(StorageError, match="exceeded its time budget of 1000 ms"):
                await run_pipeline(coll, spec, {"pipeline": pipeline}, "acme", LIMITS, clock)
            assert len(commands.seen) == 1  # the answer only: no probe past the budget
        else:
            result = await run_pipeline(coll, spec, {"pipeline": pipeline}, "acme", LIMITS, clock)
            assert result.truncated is False
            answer, probe = commands.seen
            assert answer["maxTimeMS"] == 1000 and probe["maxTimeMS"] == 1000 - took_ms
    finally:
        await client.close()
