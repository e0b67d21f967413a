"""run_query without a database: exactly what reaches `find`, and what never does."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.errors import ExecutionTimeout, ServerSelectionTimeoutError

from mongogate.errors import PolicyViolation, StorageError
from mongogate.policy.execute import NOTICE, projection_of, run_query
from tests.policy.specs import ITEMS, LIMITS, ORDERS

pytestmark = pytest.mark.anyio


class FakeCursor:
    def __init__(self, docs: list[dict[str, Any]], error: Exception | None) -> None:
        self.docs, self.error, self.closed = docs, error, False

    async def to_list(self, length: int | None = None) -> list[dict[str, Any]]:
        if self.error is not None:
            raise self.error
        return self.docs

    async def close(self) -> None:
        self.closed = True


class FakeCollection:
    """Records `find` calls; has no other method, so anything else would fail loudly."""

    def __init__(self, docs: list[dict[str, Any]] | None = None, error: Exception | None = None) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.docs, self.error = docs or [], error
        self.cursor: FakeCursor | None = None

    def find(self, *args: Any, **kwargs: Any) -> FakeCursor:
        self.calls.append((args, kwargs))
        self.cursor = FakeCursor(self.docs[: kwargs["limit"]], self.error)
        return self.cursor


async def test_find_gets_the_scoped_filter_and_fixed_options() -> None:
    coll = FakeCollection()
    args = {"filter": {"createdAt": {"$gte": "2024-05-01"}}, "limit": 7}
    result = await run_query(coll, ORDERS, args, "acme", LIMITS)  # type: ignore[arg-type]
    [(pos, kw)] = coll.calls
    assert pos[0]["$and"][1] == {"userId": "acme"}
    assert list(pos[0]) == ["$and"] and len(pos[0]["$and"]) == 2
    assert kw == {
        "projection": {"number": 1, "status": 1, "total": 1, "createdAt": 1, "_id": 0},
        "sort": [("createdAt", -1)],
        "limit": 8,
        "max_time_ms": 2000,
    }
    assert (result.returned, result.limit, result.truncated, result.notice) == (0, 7, False, NOTICE)
    assert coll.cursor is not None and coll.cursor.closed


async def test_no_sort_means_none() -> None:
    coll = FakeCollection()
    await run_query(coll, ITEMS, {}, "acme", LIMITS)  # type: ignore[arg-type]
    assert coll.calls[0][1]["sort"] is None
    assert projection_of(ITEMS) == {"_id": 1, "qty": 1, "active": 1, "ref": 1, "meta.color": 1}


@pytest.mark.parametrize(
    ("args", "reason", "path"),
    [
        ({"filter": {"$where": "1"}}, "operator_not_allowed", "filter.$where"),
        ({"filter": {"userId": "beta"}}, "tenant_field_forbidden", "filter.userId"),
        ({"filter": None}, "not_an_object", "filter"),
        ({"filter": {}, "tenant": "beta"}, "unknown_argument", "tenant"),
        ({"limit": 0}, "limit_invalid", "limit"),
        ({"sort": {"userId": 1}}, "tenant_field_forbidden", "sort.userId"),
    ],
)
async def test_rejections_never_reach_the_database(args: dict[str, Any], reason: str, path: str) -> None:
    coll = FakeCollection()
    with pytest.raises(PolicyViolation) as info:
        await run_query(coll, ORDERS, args, "acme", LIMITS)  # type: ignore[arg-type]
    assert (info.value.reason, info.value.path) == (reason, path)
    assert coll.calls == []


async def test_limit_plus_one_reports_truncated_and_docs_are_projected() -> None:
    docs = [{"_id": i, "userId": "acme", "number": f"A-{i}", "secret": "x"} for i in range(5)]
    coll = FakeCollection(docs)
    result = await run_query(coll, ORDERS, {"limit": 3}, "acme", LIMITS)  # type: ignore[arg-type]
    assert result.documents == [{"number": "A-0"}, {"number": "A-1"}, {"number": "A-2"}]
    assert (result.returned, result.truncated) == (3, True)
    result = await run_query(coll, ORDERS, {"limit": 5}, "acme", LIMITS)  # type: ignore[arg-type]
    assert (result.returned, result.truncated) == (5, False)
    lowered = await run_query(coll, ORDERS, {"limit": 999}, "acme", LIMITS)  # type: ignore[arg-type]
    assert lowered.limit == 50


async def test_byte_cap_truncates() -> None:
    docs = [{"number": "n" * 300} for _ in range(10)]
    small = LIMITS.model_copy(update={"max_response_bytes": 1024})
    result = await run_query(FakeCollection(docs), ORDERS, {}, "acme", small)  # type: ignore[arg-type]
    assert result.returned == 3 and result.truncated is True
    assert result.as_dict()["returned"] == 3


async def test_timeout_is_a_storage_error_that_says_narrow() -> None:
    cause = ExecutionTimeout("operation exceeded time limit", 50)
    coll = FakeCollection(error=cause)
    with pytest.raises(StorageError) as info:
        await run_query(coll, ORDERS, {}, "acme", LIMITS)  # type: ignore[arg-type]
    assert info.value.__cause__ is cause
    assert "2000 ms" in str(info.value) and "narrow" in str(info.value)
    assert coll.cursor is not None and coll.cursor.closed


async def test_driver_errors_are_wrapped() -> None:
    cause = ServerSelectionTimeoutError("no servers")
    with pytest.raises(StorageError) as info:
        await run_query(FakeCollection(error=cause), ORDERS, {}, "acme", LIMITS)  # type: ignore[arg-type]
    assert info.value.__cause__ is cause and info.value.retryable
