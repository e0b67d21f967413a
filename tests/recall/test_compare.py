"""A metadata filter answers the same in the database (`condition`, the query recall and a
listing send) as in the process (`matches`, what recall's in-process index applies to its rows):
every operator LangGraph's stores take, over values of every kind a metadata field holds. Before
(issue 40) there were no operators; a range without `$type` on the embedded engine matched
"5", true and null for `{$gt: 3}`, which `matches` (and MongoDB) never do.
"""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongogate.indexing.compare import Compared, condition, matches

pytestmark = pytest.mark.anyio

HELD: list[Any] = [
    0,
    1,
    1.0,
    2.5,
    3,
    4,
    10,
    -1,
    True,
    False,
    None,
    "3",
    "5",
    "apple",
    "kiwi",
    "",
    [1, 7],
    [],
    ["a"],
]
MISSING = "missing"  # a document without the field

FILTERS: list[Any] = [
    Compared((("$gt", 3),)),
    Compared((("$gte", 3),)),
    Compared((("$lt", 3),)),
    Compared((("$lte", 1),)),
    Compared((("$gt", 1), ("$lte", 4))),
    Compared((("$gte", 2.5), ("$ne", 4))),
    Compared((("$eq", 1),)),
    Compared((("$ne", 1),)),
    Compared((("$eq", None),)),
    Compared((("$ne", None),)),
    Compared((("$eq", True),)),
    Compared((("$ne", "apple"),)),
    Compared((("$gt", "b"),)),
    Compared((("$lte", "apple"),)),
    Compared((("$gte", ""),)),
    1,
    3.0,
    True,
    None,
    "apple",
    "a",
]


@pytest.fixture
async def held(mongo: AsyncMongoClient[dict[str, object]], db_name: str) -> Any:
    coll = mongo[db_name]["compare_values"]
    await coll.delete_many({})
    await coll.insert_many([{"_id": i, "metadata": {"v": v}} for i, v in enumerate(HELD)])
    await coll.insert_one({"_id": MISSING, "metadata": {}})
    return coll


@pytest.mark.parametrize("wanted", FILTERS, ids=repr)
async def test_the_query_and_the_process_select_the_same_values(held: Any, wanted: Any) -> None:
    found = {d["_id"] async for d in held.find({"metadata.v": condition(wanted)}, {"_id": 1})}
    expected: set[int | str] = {i for i, v in enumerate(HELD) if matches(v, wanted)}
    if matches(None, wanted):
        expected.add(MISSING)
    assert found == expected, [HELD[i] if isinstance(i, int) else i for i in found ^ expected]
