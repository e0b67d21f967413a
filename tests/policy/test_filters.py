"""Legitimate filters pass with converted values; tenant scoping, sort and limit."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from bson import ObjectId

from mongogate.errors import AuthError, PolicyViolation
from mongogate.policy.filters import check_filter, check_limit, check_sort
from mongogate.policy.scope import QueryScope
from tests.policy.specs import ITEMS, LIMITS, ORDERS

MAY1 = datetime(2024, 5, 1, tzinfo=UTC)
OID = "65f1a2b3c4d5e6f708192a3b"

LEGIT: list[tuple[str, Any, dict[str, Any]]] = [
    ("empty", {}, {}),
    ("equality", {"status": "open"}, {"status": "open"}),
    ("dollar-string-is-literal", {"status": "$where"}, {"status": "$where"}),
    ("range", {"total": {"$gte": 10, "$lt": 99.5}}, {"total": {"$gte": 10, "$lt": 99.5}}),
    ("date-z", {"createdAt": "2024-05-01T00:00:00Z"}, {"createdAt": MAY1}),
    ("date-only", {"createdAt": {"$gte": "2024-05-01"}}, {"createdAt": {"$gte": MAY1}}),
    ("date-no-offset-is-utc", {"createdAt": "2024-05-01T00:00"}, {"createdAt": MAY1}),
    ("date-offset", {"createdAt": {"$lt": "2024-05-01T02:00:00+02:00"}}, {"createdAt": {"$lt": MAY1}}),
    (
        "date-fraction",
        {"createdAt": "2024-05-01T00:00:00.25Z"},
        {"createdAt": datetime(2024, 5, 1, 0, 0, 0, 250_000, tzinfo=UTC)},
    ),
    ("in", {"status": {"$in": ["open", "paid"]}}, {"status": {"$in": ["open", "paid"]}}),
    ("in-empty", {"status": {"$in": []}}, {"status": {"$in": []}}),
    (
        "in-dates",
        {"createdAt": {"$in": ["2024-05-01", "2024-05-01T00:00:00Z"]}},
        {"createdAt": {"$in": [MAY1, MAY1]}},
    ),
    (
        "nested-or",
        {"$or": [{"status": "open"}, {"$and": [{"total": {"$gt": 5}}, {"number": {"$ne": "A-1"}}]}]},
        {"$or": [{"status": "open"}, {"$and": [{"total": {"$gt": 5}}, {"number": {"$ne": "A-1"}}]}]},
    ),
    ("or-empty-branch", {"$or": [{}, {"status": "x"}]}, {"$or": [{}, {"status": "x"}]}),
    ("max-string", {"status": "s" * 512}, {"status": "s" * 512}),
    ("max-in", {"total": {"$in": list(range(100))}}, {"total": {"$in": list(range(100))}}),
    ("items:int", {"qty": {"$gt": -3, "$lt": 2**62}}, {"qty": {"$gt": -3, "$lt": 2**62}}),
    ("items:bool", {"active": False}, {"active": False}),
    ("items:oid", {"ref": OID}, {"ref": ObjectId(OID)}),
    ("items:oid-upper", {"_id": {"$in": [OID.upper()]}}, {"_id": {"$in": [ObjectId(OID)]}}),
    ("items:dotted-declared", {"meta.color": "red"}, {"meta.color": "red"}),
    ("items:exists", {"ref": {"$exists": False}}, {"ref": {"$exists": False}}),
    ("items:nin-nor", {"$nor": [{"qty": {"$nin": [1, 2]}}]}, {"$nor": [{"qty": {"$nin": [1, 2]}}]}),
]


@pytest.mark.parametrize(("case_id", "filter", "expected"), LEGIT, ids=[c[0] for c in LEGIT])
def test_legitimate_filter_is_converted(case_id: str, filter: Any, expected: dict[str, Any]) -> None:
    spec = ITEMS if case_id.startswith("items:") else ORDERS
    out = check_filter(filter, spec, LIMITS)
    assert out == expected
    assert out is not filter


def test_python_api_values_are_accepted() -> None:
    naive = datetime(2024, 5, 1)
    assert check_filter({"createdAt": naive}, ORDERS, LIMITS) == {"createdAt": MAY1}
    oid = ObjectId(OID)
    assert check_filter({"ref": oid}, ITEMS, LIMITS) == {"ref": oid}


def test_converted_dates_are_aware_utc() -> None:
    out = check_filter({"createdAt": "2024-05-01T09:30:00-04:00"}, ORDERS, LIMITS)
    assert out["createdAt"] == datetime(2024, 5, 1, 13, 30, tzinfo=UTC)
    assert out["createdAt"].utcoffset().total_seconds() == 0


def test_scoped_filter_shape() -> None:
    checked = check_filter({"status": "open"}, ORDERS, LIMITS)
    scope = QueryScope.of(ORDERS, "acme")
    assert scope.filter(checked) == {"$and": [{"status": "open"}, {"userId": "acme"}]}
    assert scope.filter({}) == {"$and": [{}, {"userId": "acme"}]}


@pytest.mark.parametrize("tenant", ["", None, 7])
def test_scoped_filter_needs_a_tenant(tenant: Any) -> None:
    with pytest.raises(AuthError):
        QueryScope.of(ORDERS, tenant)


def test_sort() -> None:
    assert check_sort(None, ORDERS) == [("createdAt", -1)]
    assert check_sort({}, ORDERS) == [("createdAt", -1)]
    assert check_sort(None, ITEMS) == []
    assert check_sort({"total": 1, "number": -1}, ORDERS) == [("total", 1), ("number", -1)]


@pytest.mark.parametrize(
    ("sort", "reason", "path"),
    [
        ({"password": 1}, "field_not_allowed", "sort.password"),
        ({"userId": 1}, "tenant_field_forbidden", "sort.userId"),
        ({"": 1}, "invalid_field_name", 'sort[""]'),
        ({"total": 2}, "sort_invalid", "sort.total"),
        ({"total": True}, "sort_invalid", "sort.total"),
        ({"total": 1.0}, "sort_invalid", "sort.total"),
        ({"total": "asc"}, "sort_invalid", "sort.total"),
        ([["total", 1]], "sort_invalid", "sort"),
        ("total", "sort_invalid", "sort"),
    ],
)
def test_sort_rejections(sort: Any, reason: str, path: str) -> None:
    with pytest.raises(PolicyViolation) as info:
        check_sort(sort, ORDERS)
    assert (info.value.reason, info.value.path) == (reason, path)


def test_limit() -> None:
    assert check_limit(None, ORDERS) == (50, False)
    assert check_limit(1, ORDERS) == (1, False)
    assert check_limit(50, ORDERS) == (50, False)
    assert check_limit(51, ORDERS) == (50, True)
    assert check_limit(10**9, ORDERS) == (50, True)


@pytest.mark.parametrize("limit", [0, -1, 2.0, "5", True, False, [5]])
def test_limit_rejections(limit: Any) -> None:
    with pytest.raises(PolicyViolation) as info:
        check_limit(limit, ORDERS)
    assert (info.value.reason, info.value.path) == ("limit_invalid", "limit")
    assert "50" in str(info.value)
