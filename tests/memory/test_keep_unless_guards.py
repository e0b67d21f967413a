"""Red team of `leases.keep_unless` (one `$replaceWith` of `$cond(ok, $mergeObjects($$ROOT,
fields), $$ROOT)`): what its fields may not be, refused where the update is built.

Inside `$mergeObjects` a field whose value is `$$REMOVE` is left out of the merged object, so on
MongoDB the field is silently KEPT (not removed, as the per-field `$set` shape did), and the
embedded engine fails the whole update with an internal error ("Object of type object is not
JSON serializable"); a field named with a dot is a top-level dotted field on the engine and an
error on MongoDB; a name starting with `$` is read as an operator. None of today's callers pass
one (their names are constants, their values `literal`), so the rule is kept by a refusal at
build time rather than by a surprise on one engine only."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import AsyncMongoClient, ReturnDocument
from pymongo.errors import OperationFailure

from mongogate.leases import keep_unless, literal, same
from tests.conftest import EXTERNAL_URI

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "fields",
    [{"locked_by": "$$REMOVE"}, {"a.b": literal(1)}, {"$set": literal(1)}, {"": literal(1)}],
    ids=["remove", "dotted", "dollar", "empty"],
)
def test_keep_unless_refuses_fields_whose_meaning_differs_by_engine(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="keep_unless"):
        keep_unless(same("tenant", "acme"), fields)


def test_keep_unless_still_takes_null_expressions_and_literals() -> None:
    stage = keep_unless(same("tenant", "acme"), {"locked_by": None, "v": literal("$$REMOVE")})
    assert stage["$replaceWith"]["$cond"][1]["$mergeObjects"][1] == {
        "locked_by": None,
        "v": {"$literal": "$$REMOVE"},
    }


async def test_a_literal_value_holding_operators_is_stored_as_written(engine_uri: str, db_name: str) -> None:
    """A caller's value (a run's state, a memory's metadata) wrapped in `literal` reaches the
    document as data: `$`-keys, dotted keys and `$path` strings included (HELD on the engine)."""
    async with AsyncMongoClient[dict[str, Any]](engine_uri, tz_aware=True) as c:
        coll = c[db_name]["shape"]
        await coll.insert_one({"_id": "s1", "tenant": "acme", "keep": 2})
        value = {"$where": "1", "a.b": 2, "s": "$tenant", "r": "$$ROOT", "l": [{"$gt": ""}]}
        done = await coll.find_one_and_update(
            {"_id": "s1"},
            [keep_unless(same("tenant", "acme"), {"v": literal(value)})],
            return_document=ReturnDocument.AFTER,
        )
        assert done == {"_id": "s1", "tenant": "acme", "keep": 2, "v": value}


@pytest.mark.skipif(EXTERNAL_URI, reason="the embedded engine's behaviour (MongoDB keeps the field)")
async def test_remove_inside_the_merge_is_not_a_removal_on_the_engine(engine_uri: str, db_name: str) -> None:
    """Why the refusal: the stage built by hand (as keep_unless built it on the old code) fails
    the update on the embedded engine instead of removing the field."""
    stage = {"$replaceWith": {"$cond": [True, {"$mergeObjects": ["$$ROOT", {"keep": "$$REMOVE"}]}, "$$ROOT"]}}
    async with AsyncMongoClient[dict[str, Any]](engine_uri, tz_aware=True) as c:
        coll = c[db_name]["shape"]
        await coll.insert_one({"_id": "s1", "keep": 2})
        with pytest.raises(OperationFailure):
            await coll.find_one_and_update({"_id": "s1"}, [stage])
        assert await coll.find_one({"_id": "s1"}) == {"_id": "s1", "keep": 2}
