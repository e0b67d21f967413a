"""Generated input/output schemas: what the model reads. The walk decides; the schema must not lie.

Arguments are not validated against the schema at call time (execute.prepare and the policy
walk are the one authority); these tests keep the schema an honest guide to the walk.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from mongogate.config import PolicySettings
from mongogate.demo import FIND_ORDERS
from mongogate.errors import PolicyViolation
from mongogate.policy.execute import QueryResult, prepare
from mongogate.policy.filters import ISO_DATETIME_PATTERN, check_filter
from mongogate.policy.schema import input_schema, output_schema
from tests.policy.specs import ITEMS, LIMITS, ORDERS
from tests.policy.test_filters import LEGIT
from tests.policy.test_hostile_filters import HOSTILE

ORDERS_SCHEMA = input_schema(ORDERS, LIMITS)
ITEMS_SCHEMA = input_schema(ITEMS, LIMITS)


def _json_safe(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False).encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        return False
    return True


def _def(schema: dict[str, Any], ref: dict[str, Any]) -> Any:
    return schema["$defs"][ref["$ref"].removeprefix("#/$defs/")]


def test_input_schema_shape() -> None:
    s = ORDERS_SCHEMA
    Draft202012Validator.check_schema(s)
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert s["additionalProperties"] is False
    assert set(s["properties"]) == {"filter", "limit", "sort"}
    assert s["properties"]["limit"] == {
        "type": "integer",
        "minimum": 1,
        "default": 50,
        "description": "at most 50; larger values are lowered",
    }
    sort = s["properties"]["sort"]
    assert sort["additionalProperties"] == {"enum": [1, -1]}
    assert sort["propertyNames"] == {"enum": ["status", "total", "createdAt", "number"]}
    filt = s["$defs"]["filter"]
    assert filt["additionalProperties"] is False
    assert set(filt["properties"]) == {"status", "total", "createdAt", "number", "$and", "$or"}
    assert "userId" not in json.dumps(s)
    assert _def(s, filt["properties"]["$or"]) == {
        "type": "array",
        "minItems": 1,
        "items": {"$ref": "#/$defs/filter"},
    }
    value, ops = _def(s, filt["properties"]["total"])["anyOf"]
    assert _def(s, value) == {"type": "number"}
    assert _def(s, ops["propertyNames"]) == {"enum": ["$eq", "$ne", "$in", "$gt", "$gte", "$lt", "$lte"]}
    assert ops["additionalProperties"] == {"$ref": "#/$defs/number"}
    assert ops["properties"]["$in"] == {"type": "array", "maxItems": 100, "items": {"$ref": "#/$defs/number"}}
    created = _def(s, _def(s, filt["properties"]["createdAt"])["anyOf"][0])
    assert created["type"] == "string" and created["pattern"] == ISO_DATETIME_PATTERN
    assert _def(s, filt["properties"]["status"]) is _def(s, filt["properties"]["number"])  # one per type
    assert s["$defs"]["string"] == {"type": "string", "maxLength": 512}


def test_date_pattern_is_defined_once_and_the_demo_schema_is_under_2kb() -> None:
    """Issue 14.1: the find_orders schema was 5.3 KB with the date pattern repeated 8 times."""
    schema = input_schema(FIND_ORDERS, PolicySettings())
    text = json.dumps(schema, separators=(",", ":"))
    assert text.count(json.dumps(ISO_DATETIME_PATTERN)[1:-1]) == 1
    assert len(text.encode("utf-8")) < 2048, len(text)
    Draft202012Validator.check_schema(schema)


def test_input_schema_other_types() -> None:
    s = ITEMS_SCHEMA
    props = s["$defs"]["filter"]["properties"]
    assert _def(s, _def(s, props["qty"])["anyOf"][0]) == {"type": "integer"}
    assert _def(s, _def(s, props["active"])["anyOf"][0]) == {"type": "boolean"}
    assert _def(s, _def(s, props["ref"])["anyOf"][0])["pattern"] == "^[0-9a-fA-F]{24}$"
    qty_ops = _def(s, props["qty"])["anyOf"][1]
    assert qty_ops["properties"]["$exists"] == {"type": "boolean"}
    assert "$nor" in props and "$gte" not in _def(s, qty_ops["propertyNames"])["enum"]


def test_schema_respects_the_global_allowlist() -> None:
    narrow = LIMITS.model_copy(update={"allowed_operators": ["$eq", "$or"]})
    s = input_schema(ORDERS, narrow)
    props = s["$defs"]["filter"]["properties"]
    assert "$and" not in props and "$or" in props
    assert s["$defs"]["operators"] == {"enum": ["$eq"]}


@pytest.mark.parametrize(("case_id", "filter", "expected"), LEGIT, ids=[c[0] for c in LEGIT])
def test_legitimate_filters_pass_the_schema_and_the_walk(case_id: str, filter: Any, expected: Any) -> None:
    items = case_id.startswith("items:")
    args = {"filter": filter, "limit": 5, "sort": {}}
    assert Draft202012Validator(ITEMS_SCHEMA if items else ORDERS_SCHEMA).is_valid(args)
    prepare(ITEMS if items else ORDERS, args, "acme", LIMITS)


JSON_HOSTILE = [c for c in HOSTILE if _json_safe(c[1])]  # NaN and lone surrogates cannot arrive as JSON
ORDERS_V, ITEMS_V = Draft202012Validator(ORDERS_SCHEMA), Draft202012Validator(ITEMS_SCHEMA)


@pytest.mark.parametrize(
    ("case_id", "filter", "reason", "path"), JSON_HOSTILE, ids=[c[0] for c in JSON_HOSTILE]
)
def test_the_schema_warns_of_what_the_walk_refuses(case_id: str, filter: Any, reason: str, path: str) -> None:
    """The schema shows the model the same limits; the few it cannot express are the walk's alone."""
    items = case_id.startswith("items:")
    if (ITEMS_V if items else ORDERS_V).is_valid({"filter": filter}):
        # calendar dates, 64-bit ints, depth and size: the walk's limits alone
        assert reason in ("type_mismatch", "out_of_range", "too_deep", "too_many_nodes"), case_id
    with pytest.raises(PolicyViolation) as info:
        check_filter(filter, ITEMS if items else ORDERS, LIMITS)
    assert (info.value.reason, info.value.path) == (reason, path)


@pytest.mark.parametrize(
    ("args", "reason", "path"),
    [
        ({"tenant": "other"}, "unknown_argument", "tenant"),
        ({"filter": {}, "userId": "x"}, "unknown_argument", "userId"),
        ({"limit": 0}, "limit_invalid", "limit"),
        ({"limit": "5"}, "limit_invalid", "limit"),
        ({"limit": True}, "limit_invalid", "limit"),
        ({"sort": {"password": 1}}, "field_not_allowed", "sort.password"),
        ({"sort": {"userId": 1}}, "tenant_field_forbidden", "sort.userId"),
        ({"sort": {"total": 2}}, "sort_invalid", "sort.total"),
        ({"sort": {"total": 1.0}}, "sort_invalid", "sort.total"),
        ({"sort": [["total", 1]]}, "sort_invalid", "sort"),
        ({"filter": {"status": {"$in": ["a"] * 101}}}, "in_too_long", "filter.status.$in"),
        ({"filter": {"status": "x" * 600}, "limit": 0}, "string_too_long", "filter.status"),
        ({"filter": {"createdAt": "2024-13-45"}}, "type_mismatch", "filter.createdAt"),
        ({"filter": None}, "not_an_object", "filter"),
        ({"filter": {"status": {"$in": ["a"] * 1_000_000}}}, "too_many_nodes", "filter.status.$in[197]"),
    ],
)
def test_argument_rejections_come_from_the_walk(args: dict[str, Any], reason: str, path: str) -> None:
    with pytest.raises(PolicyViolation) as info:
        prepare(ORDERS, args, "acme", LIMITS)
    assert (info.value.reason, info.value.path) == (reason, path), str(info.value)
    assert "; allowed: " in str(info.value) and len(str(info.value)) < 600


def test_output_schema_accepts_results_and_types_the_projected_fields() -> None:
    out = output_schema(ORDERS)
    Draft202012Validator.check_schema(out)
    v = Draft202012Validator(out)
    doc = {"number": "A-1", "status": "open", "total": 3.5, "createdAt": "2024-05-01T00:00:00Z"}
    result = QueryResult(documents=[doc], returned=1, limit=50, truncated=False).as_dict()
    assert list(v.iter_errors(result)) == []
    assert [e.validator for e in v.iter_errors({**result, "extra": 1})] == ["additionalProperties"]
    assert set(out["required"]) == {"documents", "returned", "limit", "truncated", "notice"}
    props = out["properties"]["documents"]["items"]["properties"]
    # Issue 14.1: document fields are typed from the spec (a strict inspector warned 4 times).
    # an array of the declared type is that type (filters match its elements): issue 20.2
    assert props["total"]["type"] == ["number", "string", "array", "null"]
    assert props["total"]["items"] == {"type": ["number", "string", "null"]}
    assert props["status"]["type"] == ["string", "array", "null"]
    assert props["createdAt"]["type"] == ["string", "array", "null"]
    assert not v.is_valid({**result, "documents": [{"total": True}]})
    assert not v.is_valid({**result, "documents": [{"total": [1, True]}]})
    assert v.is_valid({**result, "documents": [{"status": ["a", "b"]}], "type_mismatches": {"total": 1}})
    assert not v.is_valid({**result, "type_mismatches": {"total": 0}})
    assert v.is_valid({**result, "documents": [{"total": None, "status": "x"}]})


def test_output_schema_types_dotted_and_undeclared_projection() -> None:
    props = output_schema(ITEMS)["properties"]["documents"]["items"]["properties"]
    assert props["_id"]["type"] == ["string", "array", "null"]
    assert props["qty"]["type"] == ["integer", "array", "null"]
    assert "object" in props["meta"]["type"]
