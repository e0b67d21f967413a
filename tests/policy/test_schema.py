"""Generated input/output schemas, and validate_arguments agreeing with check_filter."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from mongogate.errors import PolicyViolation
from mongogate.policy import schema as schema_mod
from mongogate.policy.execute import QueryResult
from mongogate.policy.filters import check_filter
from mongogate.policy.schema import input_schema, output_schema, validate_arguments
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
    assert sort["additionalProperties"] is False
    assert sort["propertyNames"] == {"enum": ["status", "total", "createdAt", "number"]}
    filt = s["$defs"]["filter"]
    assert filt["additionalProperties"] is False
    assert set(filt["properties"]) == {"status", "total", "createdAt", "number", "$and", "$or"}
    assert "userId" not in json.dumps(s)
    assert filt["properties"]["$or"] == {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/filter"}}
    total = filt["properties"]["total"]
    value, ops = total["anyOf"]
    assert value == {"type": "number"}
    assert ops["additionalProperties"] is False
    assert list(ops["properties"]) == ["$eq", "$ne", "$in", "$gt", "$gte", "$lt", "$lte"]
    assert ops["properties"]["$in"] == {"type": "array", "maxItems": 100, "items": {"type": "number"}}
    created = filt["properties"]["createdAt"]["anyOf"][0]
    assert created["type"] == "string" and created["format"] == "date-time"
    assert filt["properties"]["status"]["anyOf"][0] == {"type": "string", "maxLength": 512}


def test_input_schema_other_types() -> None:
    props = ITEMS_SCHEMA["$defs"]["filter"]["properties"]
    assert props["qty"]["anyOf"][0] == {"type": "integer"}
    assert props["active"]["anyOf"][0] == {"type": "boolean"}
    assert props["ref"]["anyOf"][0]["pattern"] == "^[0-9a-fA-F]{24}$"
    assert props["qty"]["anyOf"][1]["properties"]["$exists"] == {"type": "boolean"}
    assert "$nor" in props and "$gte" not in props["qty"]["anyOf"][1]["properties"]


def test_schema_respects_the_global_allowlist() -> None:
    narrow = LIMITS.model_copy(update={"allowed_operators": ["$eq", "$or"]})
    props = input_schema(ORDERS, narrow)["$defs"]["filter"]["properties"]
    assert "$and" not in props and "$or" in props
    assert list(props["total"]["anyOf"][1]["properties"]) == ["$eq"]


@pytest.mark.parametrize(("case_id", "filter", "expected"), LEGIT, ids=[c[0] for c in LEGIT])
def test_legitimate_arguments_validate(case_id: str, filter: Any, expected: Any) -> None:
    schema = ITEMS_SCHEMA if case_id.startswith("items:") else ORDERS_SCHEMA
    validate_arguments({"filter": filter, "limit": 5, "sort": {}}, schema)


JSON_HOSTILE = [c for c in HOSTILE if _json_safe(c[1])]  # NaN and lone surrogates cannot arrive as JSON


@pytest.mark.parametrize(
    ("case_id", "filter", "reason", "path"), JSON_HOSTILE, ids=[c[0] for c in JSON_HOSTILE]
)
def test_schema_agrees_with_check_filter(case_id: str, filter: Any, reason: str, path: str) -> None:
    """Whichever check refuses a filter, the audit sees the same reason and path."""
    schema = ITEMS_SCHEMA if case_id.startswith("items:") else ORDERS_SCHEMA
    try:
        validate_arguments({"filter": filter}, schema)
    except PolicyViolation as e:
        assert (e.reason, e.path) == (reason, path), str(e)
    else:  # the schema lets a few through (calendar dates, big ints): check_filter is the authority
        assert reason in ("type_mismatch", "out_of_range"), case_id
    with pytest.raises(PolicyViolation):
        check_filter(filter, ITEMS if case_id.startswith("items:") else ORDERS, LIMITS)


@pytest.mark.parametrize(
    ("args", "reason", "path"),
    [
        ({"tenant": "other"}, "unknown_argument", "tenant"),
        ({"filter": {}, "userId": "x"}, "unknown_argument", "userId"),
        ({"limit": 0}, "limit_invalid", "limit"),
        ({"limit": "5"}, "limit_invalid", "limit"),
        ({"limit": True}, "limit_invalid", "limit"),
        ({"sort": {"password": 1}}, "field_not_allowed", "sort.password"),
        ({"sort": {"total": 2}}, "sort_invalid", "sort.total"),
        ({"sort": [["total", 1]]}, "sort_invalid", "sort"),
        ({"filter": {"status": {"$in": ["a"] * 101}}}, "in_too_long", "filter.status.$in"),
        ({"filter": None}, "not_an_object", "filter"),
    ],
)
def test_argument_rejections(args: dict[str, Any], reason: str, path: str) -> None:
    with pytest.raises(PolicyViolation) as info:
        validate_arguments(args, ORDERS_SCHEMA)
    assert (info.value.reason, info.value.path) == (reason, path), str(info.value)


def test_bombs_are_refused_before_jsonschema_reads_them() -> None:
    started = time.perf_counter()
    with pytest.raises(PolicyViolation) as info:
        validate_arguments({"filter": {"status": {"$in": ["a"] * 1_000_000}}}, ORDERS_SCHEMA)
    assert info.value.reason == "too_many_nodes"
    assert time.perf_counter() - started < 0.5


def test_schema_messages_stay_short() -> None:
    with pytest.raises(PolicyViolation) as info:
        validate_arguments({"filter": {"status": "x" * 100_000}}, ORDERS_SCHEMA)
    assert info.value.reason == "string_too_long"
    assert len(str(info.value)) < 600


def test_unknown_schema_falls_back_to_generic_codes() -> None:
    """A schema input_schema did not build (e.g. a JSON round-trip copy) still validates."""
    copy = json.loads(json.dumps(ORDERS_SCHEMA))
    with pytest.raises(PolicyViolation) as info:
        validate_arguments({"filter": {"userId": "x"}}, copy)
    assert (info.value.reason, info.value.path) == ("field_not_allowed", "filter.userId")
    with pytest.raises(PolicyViolation) as info:
        validate_arguments({"filter": {"total": {"$where": "1"}}}, copy)
    assert info.value.reason == "operator_not_allowed"


def test_validator_is_compiled_once_per_schema() -> None:
    schema = input_schema(ORDERS, LIMITS)
    first = schema_mod._compile(schema)
    validate_arguments({"filter": {"status": "a"}}, schema)
    assert schema_mod._compile(schema) is first


def test_output_schema_accepts_results_and_only_projected_fields() -> None:
    out = output_schema(ORDERS)
    Draft202012Validator.check_schema(out)
    v = Draft202012Validator(out)
    doc = {"number": "A-1", "status": "open", "total": 3.5, "createdAt": "2024-05-01T00:00:00Z"}
    result = QueryResult(documents=[doc], returned=1, limit=50, truncated=False).as_dict()
    assert list(v.iter_errors(result)) == []
    result["documents"][0]["userId"] = "acme"
    assert [e.validator for e in v.iter_errors(result)] == ["additionalProperties"]
    assert set(out["required"]) == {"documents", "returned", "limit", "truncated", "notice"}


def test_output_schema_nests_dotted_projection() -> None:
    props = output_schema(ITEMS)["properties"]["documents"]["items"]["properties"]
    assert set(props) == {"_id", "qty", "active", "ref", "meta"}
