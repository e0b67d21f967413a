"""Hostile filters: each is refused by check_filter alone, with a stable reason and an exact path."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mongogate.errors import PolicyViolation
from mongogate.policy.filters import check_filter
from mongogate.specs import QueryToolSpec
from tests.policy.specs import ITEMS, LIMITS, ORDERS


def _nested_or(levels: int) -> dict[str, Any]:
    f: dict[str, Any] = {"status": "open"}
    for _ in range(levels):
        f = {"$or": [f]}
    return f


def _nested_list(levels: int) -> list[Any]:
    v: list[Any] = ["open"]
    for _ in range(levels - 1):
        v = [v]
    return v


OP_NA = "operator_not_allowed"
# (id, filter, reason, path); spec is find_orders unless the id starts with "items:"
HOSTILE: list[tuple[str, Any, str, str]] = [
    # forbidden operators at the top
    ("top-where", {"$where": "this.total > 0"}, OP_NA, "filter.$where"),
    ("top-expr", {"$expr": {"$gt": ["$total", 0]}}, OP_NA, "filter.$expr"),
    (
        "top-function",
        {"$function": {"body": "return 1", "args": [], "lang": "js"}},
        OP_NA,
        "filter.$function",
    ),
    ("top-regex", {"$regex": ".*"}, OP_NA, "filter.$regex"),
    ("top-elemMatch", {"$elemMatch": {"total": 1}}, OP_NA, "filter.$elemMatch"),
    ("top-lookup", {"$lookup": {"from": "users", "as": "u"}}, OP_NA, "filter.$lookup"),
    ("top-text", {"$text": {"$search": "x"}}, OP_NA, "filter.$text"),
    ("top-jsonSchema", {"$jsonSchema": {}}, OP_NA, "filter.$jsonSchema"),
    ("top-after-good-key", {"status": "open", "$where": "1"}, OP_NA, "filter.$where"),
    ("top-nor-not-enabled", {"$nor": [{"status": "open"}]}, OP_NA, "filter.$nor"),
    # nested under fields
    ("field-regex", {"status": {"$regex": "^o"}}, OP_NA, "filter.status.$regex"),
    ("field-where", {"status": {"$where": "1"}}, OP_NA, "filter.status.$where"),
    ("field-expr", {"total": {"$expr": 1}}, OP_NA, "filter.total.$expr"),
    ("field-elemMatch", {"number": {"$elemMatch": {"$gt": "1"}}}, OP_NA, "filter.number.$elemMatch"),
    ("field-not", {"status": {"$not": {"$eq": "x"}}}, OP_NA, "filter.status.$not"),
    ("field-function-after-ok", {"total": {"$gt": 1, "$function": {}}}, OP_NA, "filter.total.$function"),
    ("field-regex-options", {"status": {"$eq": "a", "$options": "i"}}, OP_NA, "filter.status.$options"),
    ("field-nin-not-enabled", {"status": {"$nin": ["a"]}}, OP_NA, "filter.status.$nin"),
    # inside $or / $and arrays
    (
        "or-field-where",
        {"$or": [{"status": "a"}, {"total": {"$where": "1"}}]},
        OP_NA,
        "filter.$or[1].total.$where",
    ),
    ("or-top-where", {"$or": [{"$where": "1"}]}, OP_NA, "filter.$or[0].$where"),
    ("and-expr", {"$and": [{"total": {"$gt": 1}}, {"$expr": {}}]}, OP_NA, "filter.$and[1].$expr"),
    (
        "and-or-regex",
        {"$and": [{"$or": [{"status": {"$regex": "x"}}]}]},
        OP_NA,
        "filter.$and[0].$or[0].status.$regex",
    ),
    ("or-lookup", {"$or": [{"status": "a"}, {"$lookup": {}}]}, OP_NA, "filter.$or[1].$lookup"),
    # inside $in values and other values
    ("in-where", {"status": {"$in": [{"$where": "1"}]}}, OP_NA, "filter.status.$in[0].$where"),
    ("in-function", {"total": {"$in": [1, {"$function": {}}]}}, OP_NA, "filter.total.$in[1].$function"),
    ("in-regex", {"status": {"$in": ["a", {"$regex": "b"}]}}, OP_NA, "filter.status.$in[1].$regex"),
    ("gt-where", {"total": {"$gt": {"$where": "1"}}}, OP_NA, "filter.total.$gt.$where"),
    ("eq-expr", {"status": {"$eq": {"$expr": {}}}}, OP_NA, "filter.status.$eq.$expr"),
    ("subdoc-where", {"status": {"x": {"$where": "1"}}}, OP_NA, "filter.status.x.$where"),
    ("array-value-where", {"status": [{"$where": "1"}]}, OP_NA, "filter.status[0].$where"),
    ("or-item-array-where", {"$or": [[{"$where": "1"}]]}, OP_NA, "filter.$or[0][0].$where"),
    (
        "deep-value-where",
        {"total": {"$lt": {"a": [{"b": {"$where": "1"}}]}}},
        OP_NA,
        "filter.total.$lt.a[0].b.$where",
    ),
    # undeclared and dotted fields
    ("undeclared", {"password": "x"}, "field_not_allowed", "filter.password"),
    ("dotted-undeclared", {"status.code": "x"}, "field_not_allowed", 'filter["status.code"]'),
    (
        "dotted-in-or",
        {"$or": [{"internal.flag": True}]},
        "field_not_allowed",
        'filter.$or[0]["internal.flag"]',
    ),
    ("id-undeclared", {"_id": "65f000000000000000000000"}, "field_not_allowed", "filter._id"),
    ("case", {"Status": "open"}, "field_not_allowed", "filter.Status"),
    ("fullwidth-dollar", {"＄where": "1"}, "field_not_allowed", "filter.＄where"),
    # NUL and empty names
    ("nul", {"status\x00": "open"}, "invalid_field_name", 'filter["status\\u0000"]'),
    ("nul-inner", {"sta\x00tus": "open"}, "invalid_field_name", 'filter["sta\\u0000tus"]'),
    ("empty", {"": "open"}, "invalid_field_name", 'filter[""]'),
    ("nul-in-or", {"$or": [{"\x00": 1}]}, "invalid_field_name", 'filter.$or[0]["\\u0000"]'),
    # type confusion
    ("str-for-number", {"total": "100"}, "type_mismatch", "filter.total"),
    ("bool-for-number", {"total": True}, "type_mismatch", "filter.total"),
    ("str-in-gt", {"total": {"$gt": "5"}}, "type_mismatch", "filter.total.$gt"),
    ("int-for-string", {"status": 5}, "type_mismatch", "filter.status"),
    ("null-for-string", {"status": None}, "type_mismatch", "filter.status"),
    ("bad-date-word", {"createdAt": "yesterday"}, "type_mismatch", "filter.createdAt"),
    ("bad-date-day", {"createdAt": {"$gte": "2024-02-30"}}, "type_mismatch", "filter.createdAt.$gte"),
    ("bad-date-offset", {"createdAt": "2024-05-01T00:00:00+25:00"}, "type_mismatch", "filter.createdAt"),
    ("date-trailing-newline", {"createdAt": "2024-05-01\n"}, "type_mismatch", "filter.createdAt"),
    ("epoch-for-date", {"createdAt": 1714521600}, "type_mismatch", "filter.createdAt"),
    ("mixed-in", {"total": {"$in": [1, "2"]}}, "type_mismatch", "filter.total.$in[1]"),
    ("array-for-number", {"total": [1, 2]}, "type_mismatch", "filter.total"),
    ("nan", {"total": float("nan")}, "type_mismatch", "filter.total"),
    ("inf", {"total": {"$lt": float("inf")}}, "type_mismatch", "filter.total.$lt"),
    ("int-overflow", {"total": 2**70}, "out_of_range", "filter.total"),
    ("lone-surrogate", {"status": "\ud800"}, "type_mismatch", "filter.status"),
    ("items:float-for-int", {"qty": 1.5}, "type_mismatch", "filter.qty"),
    ("items:whole-float-for-int", {"qty": {"$gt": 2.0}}, "type_mismatch", "filter.qty.$gt"),
    ("items:bool-for-int", {"qty": True}, "type_mismatch", "filter.qty"),
    ("items:int-for-bool", {"active": 1}, "type_mismatch", "filter.active"),
    ("items:str-for-bool", {"active": "true"}, "type_mismatch", "filter.active"),
    ("items:short-oid", {"ref": "abc123"}, "type_mismatch", "filter.ref"),
    ("items:non-hex-oid", {"ref": {"$in": ["zz" * 12]}}, "type_mismatch", "filter.ref.$in[0]"),
    ("items:exists-not-bool", {"qty": {"$exists": "yes"}}, "invalid_operand", "filter.qty.$exists"),
    ("items:nor-non-list", {"$nor": {"qty": 1}}, "invalid_operand", "filter.$nor"),
    # malformed structure
    ("in-not-list", {"status": {"$in": "open"}}, "invalid_operand", "filter.status.$in"),
    ("empty-operator-object", {"status": {}}, "invalid_operand", "filter.status"),
    ("subdocument-equality", {"status": {"x": 1}}, "invalid_operand", "filter.status.x"),
    ("mixed-operator-object", {"total": {"$gt": 1, "lt": 5}}, "invalid_operand", "filter.total.lt"),
    ("or-empty", {"$or": []}, "invalid_operand", "filter.$or"),
    ("or-object", {"$or": {"status": "a"}}, "invalid_operand", "filter.$or"),
    ("or-string-item", {"$or": ["status"]}, "invalid_operand", "filter.$or[0]"),
    ("and-null", {"$and": None}, "invalid_operand", "filter.$and"),
    ("comparison-at-top", {"$gt": 5}, "operator_misplaced", "filter.$gt"),
    ("in-at-top", {"$in": ["a"]}, "operator_misplaced", "filter.$in"),
    ("or-under-field", {"status": {"$or": [{"status": "a"}]}}, "operator_misplaced", "filter.status.$or"),
    # bombs
    ("depth-or", _nested_or(10), "too_deep", "filter" + ".$or[0]" * 6),
    ("depth-list-in-in", {"status": {"$in": _nested_list(8)}}, "too_deep", "filter.status.$in" + "[0]" * 5),
    (
        "depth-subdocs",
        {"status": {"$eq": {"a": {"b": {"c": {"d": {"e": 1}}}}}}},
        "too_deep",
        "filter.status.$eq.a.b.c.d",
    ),
    ("nodes-wide-or", {"$or": [{"status": "a"}] * 150}, "too_many_nodes", "filter.$or[99]"),
    ("nodes-wide-object", {f"f{i}": 1 for i in range(1000)}, "too_many_nodes", "filter.f199"),
    ("in-bomb", {"status": {"$in": ["a"] * 101}}, "in_too_long", "filter.status.$in"),
    ("string-bomb", {"status": "a" * 513}, "string_too_long", "filter.status"),
    ("string-bomb-in-in", {"number": {"$in": ["x" * 10_000]}}, "string_too_long", "filter.number.$in[0]"),
    (
        "string-bomb-in-or",
        {"$or": [{"status": {"$ne": "y" * 600}}]},
        "string_too_long",
        "filter.$or[0].status.$ne",
    ),
    # the tenant field, however it is named
    ("tenant-top", {"userId": "someone-else"}, "tenant_field_forbidden", "filter.userId"),
    ("tenant-ne", {"userId": {"$ne": "me"}}, "tenant_field_forbidden", "filter.userId"),
    (
        "tenant-in-or",
        {"$or": [{"status": "a"}, {"userId": "b"}]},
        "tenant_field_forbidden",
        "filter.$or[1].userId",
    ),
    ("tenant-subpath", {"userId.x": 1}, "tenant_field_forbidden", 'filter["userId.x"]'),
    (
        "tenant-deep",
        {"$and": [{"status": "a"}, {"$or": [{"userId": {"$in": ["a", "b"]}}]}]},
        "tenant_field_forbidden",
        "filter.$and[1].$or[0].userId",
    ),
    ("items:tenant", {"$nor": [{"org": "x"}]}, "tenant_field_forbidden", "filter.$nor[0].org"),
    # not an object at all
    ("list", [], "not_an_object", "filter"),
    ("list-of-filter", [{"status": "open"}], "not_an_object", "filter"),
    ("string", "status == 'open'", "not_an_object", "filter"),
    ("null", None, "not_an_object", "filter"),
    ("number", 42, "not_an_object", "filter"),
    ("bool", True, "not_an_object", "filter"),
]


def _spec(case_id: str) -> QueryToolSpec:
    return ITEMS if case_id.startswith("items:") else ORDERS


def test_table_is_big_enough() -> None:
    assert len(HOSTILE) >= 40
    assert len({c[0] for c in HOSTILE}) == len(HOSTILE)


@pytest.mark.parametrize(("case_id", "filter", "reason", "path"), HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_filter_is_rejected(case_id: str, filter: Any, reason: str, path: str) -> None:
    before = copy.deepcopy(filter)
    with pytest.raises(PolicyViolation) as info:
        check_filter(filter, _spec(case_id), LIMITS)
    assert (info.value.reason, info.value.path) == (reason, path), str(info.value)
    assert info.value.code == reason
    assert path in str(info.value)
    if filter == filter:  # NaN never equals itself
        assert filter == before, "check_filter must not modify its input"


def test_message_names_what_is_allowed() -> None:
    with pytest.raises(PolicyViolation) as info:
        check_filter({"$or": [{"total": {"$where": "1"}}]}, ORDERS, LIMITS)
    text = str(info.value)
    assert "$where" in text and "filter.$or[0].total.$where" in text
    assert "$gte" in text and "$in" in text  # the allowed operators
    with pytest.raises(PolicyViolation) as info:
        check_filter({"password": "x"}, ORDERS, LIMITS)
    assert "status (string)" in str(info.value) and "createdAt (date)" in str(info.value)
    assert info.value.allowed is not None


def test_global_allowlist_narrows_a_spec() -> None:
    """An operator the spec lists but policy.allowed_operators does not is still refused."""
    narrow = LIMITS.model_copy(update={"allowed_operators": ["$eq", "$and"]})
    with pytest.raises(PolicyViolation) as info:
        check_filter({"total": {"$gt": 1}}, ORDERS, narrow)
    assert (info.value.reason, info.value.path) == ("operator_not_allowed", "filter.total.$gt")


def test_bounds_follow_the_settings() -> None:
    tight = LIMITS.model_copy(update={"max_depth": 2, "max_nodes": 6, "max_in": 2, "max_string": 3})
    for f, reason, path in [
        ({"$or": [{"status": {"$gt": "a"}}]}, "too_deep", "filter.$or[0].status"),
        (
            {"number": "a", "status": "b", "total": 1, "createdAt": "2024-01-01", "y": 1, "x": 1},
            "too_many_nodes",
            "filter.x",
        ),
        ({"status": {"$in": ["a", "b", "c"]}}, "in_too_long", "filter.status.$in"),
        ({"status": "abcd"}, "string_too_long", "filter.status"),
    ]:
        with pytest.raises(PolicyViolation) as info:
            check_filter(f, ORDERS, tight)
        assert (info.value.reason, info.value.path) == (reason, path)
    assert check_filter({"status": {"$in": ["a", "b"]}}, ORDERS, tight) == {"status": {"$in": ["a", "b"]}}


def test_huge_bomb_is_refused_quickly() -> None:
    """A million-item array or 10k-deep nesting never recurses or materialises everything."""
    wide = {"status": {"$in": ["a"] * 1_000_000}}
    with pytest.raises(PolicyViolation) as info:
        check_filter(wide, ORDERS, LIMITS)
    assert info.value.reason == "too_many_nodes"
    deep: Any = "x"
    for _ in range(10_000):
        deep = {"status": deep}
    with pytest.raises(PolicyViolation) as info:
        check_filter(deep, ORDERS, LIMITS)
    assert info.value.reason == "too_deep"


def test_long_hostile_key_is_shortened_in_the_path() -> None:
    with pytest.raises(PolicyViolation) as info:
        check_filter({"$" + "w" * 100_000: 1}, ORDERS, LIMITS)
    assert info.value.reason == "operator_not_allowed"
    assert len(info.value.path) < 100 and len(str(info.value)) < 1000
