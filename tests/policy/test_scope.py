"""The one mapping of database failures to what the model reads, for find, count and aggregate.

Each failure is a real reply of the engine (its `failCommand` failpoint answers the next command
of that name in this test's namespace as a server would: MaxTimeMSExpired, a refusal), read by
the real driver, through `policy/scope.py`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ExecutionTimeout, OperationFailure

from mongogate.demo import ORDER_STATS
from mongogate.errors import StorageError
from mongogate.policy.aggregate_run import run_pipeline
from mongogate.policy.execute import run_query
from mongogate.policy.scope import PipelineRefused
from tests.policy.specs import LIMITS, ORDERS

pytestmark = pytest.mark.anyio
Doc = dict[str, Any]
STATS = ORDER_STATS.model_copy(update={"index": None})  # this test's collection has no index
GROUP = {"pipeline": [{"$group": {"_id": "$status", "n": {"$count": {}}}}]}


@pytest.fixture
async def db(engine_uri: str, db_name: str) -> AsyncIterator[AsyncDatabase[Doc]]:
    client: AsyncMongoClient[Doc] = AsyncMongoClient(engine_uri, tz_aware=True)
    try:
        await client[db_name]["orders"].insert_many(
            [{"userId": "acme", "number": f"A-{i}", "status": "open", "total": i} for i in range(3)]
        )
        yield client[db_name]
    finally:
        await client.drop_database(db_name)
        await client.close()


async def fail_next(db: AsyncDatabase[Doc], command: str, code: int) -> None:
    try:
        await db.client.admin.command(
            {
                "configureFailPoint": "failCommand",
                "mode": {"times": 1},
                "data": {"failCommands": [command], "errorCode": code, "namespace": f"{db.name}.orders"},
            }
        )
    except OperationFailure as e:  # only on an external MONGODB_URI without test commands
        pytest.skip(f"server has no failCommand failpoint: {e}")


@pytest.mark.parametrize(
    ("kind", "args", "command", "code", "text", "retryable"),
    [
        (
            "find",
            {},
            "find",
            50,
            "query tool 'find_orders' exceeded its time budget of 2000 ms: narrow the filter "
            "(for example a shorter date range or fewer $in values) and retry",
            True,
        ),
        (
            "find",
            {"count": True},
            "aggregate",  # count_documents is an aggregation
            50,
            "counting for query tool 'find_orders' exceeded its time budget of 2000 ms: narrow the "
            "filter and retry, or retry without count",
            True,
        ),
        ("find", {}, "find", 2, "query tool 'find_orders' failed in the database", True),
        (
            "aggregate",
            GROUP,
            "aggregate",
            50,
            "aggregation tool 'order_stats' exceeded its time budget of 2000 ms: add a $match first "
            "(for example a shorter date range) and retry",
            True,
        ),
        (
            "aggregate",
            GROUP,
            "aggregate",
            292,  # QueryExceededMemoryLimitNoDiskUseAllowed: the same pipeline fails again
            "aggregation tool 'order_stats': the database refused this pipeline: retrying it will not "
            "help; change it (for example a $match first, fewer groups, or no $dateTrunc timezone)",
            False,
        ),
    ],
)
async def test_a_database_failure_reads_the_same_for_every_step(
    db: AsyncDatabase[Doc], kind: str, args: Doc, command: str, code: int, text: str, retryable: bool
) -> None:
    await fail_next(db, command, code)
    with pytest.raises(StorageError) as info:
        if kind == "find":
            await run_query(db["orders"], ORDERS, args, "acme", LIMITS)
        else:
            await run_pipeline(db["orders"], STATS, args, "acme", LIMITS)
    error = info.value
    assert text in str(error) and error.retryable is retryable
    assert isinstance(error, PipelineRefused) is (not retryable)
    cause = error.__cause__
    assert isinstance(cause, ExecutionTimeout if code == 50 else OperationFailure) and cause.code == code
