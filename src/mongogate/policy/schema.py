"""JSON Schemas generated from a spec: what the model reads, never what decides.

The input schema tells the model which fields, types and operators it may write. Arguments
are not validated against it at call time: the policy walk (policy/filters.py, via
``execute.prepare``) is the one place a call is accepted or refused, with one set of reason
codes. Tests keep the schema honest: whatever the walk accepts, the schema accepts too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mongogate.policy.filters import (
    COMPARISON_OPERATORS,
    ISO_DATETIME_PATTERN,
    LIST_OPERATORS,
    LOGICAL_OPERATORS,
    OBJECT_ID_PATTERN,
)
from mongogate.specs import QueryToolSpec

if TYPE_CHECKING:
    from mongogate.config import PolicySettings

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _filter_ref() -> dict[str, Any]:
    return {"$ref": "#/$defs/filter"}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/$defs/{name}"}


def value_schema(ftype: str, limits: PolicySettings) -> dict[str, Any]:
    """The JSON form of one value of a declared type."""
    if ftype == "string":
        return {"type": "string", "maxLength": limits.max_string}
    if ftype == "number":
        return {"type": "number"}
    if ftype == "int":
        return {"type": "integer"}
    if ftype == "bool":
        return {"type": "boolean"}
    if ftype == "date":
        return {
            "type": "string",
            "pattern": ISO_DATETIME_PATTERN,
        }
    return {"type": "string", "pattern": OBJECT_ID_PATTERN, "description": "24 hex characters"}


def _operators_schema(ftype: str, ops: Sequence[str], limits: PolicySettings) -> dict[str, Any] | None:
    """The operator object of one type (``{"$gt": value, ...}``); None when no operator applies.

    Comparison operators share one value schema through ``additionalProperties``; only the
    list operators and ``$exists`` need their own entry, which keeps the schema small."""
    value = _ref(ftype)
    names = [op for op in ops if op in COMPARISON_OPERATORS or op in LIST_OPERATORS or op == "$exists"]
    if not names:
        return None
    special: dict[str, Any] = {}
    for op in names:
        if op in LIST_OPERATORS:
            special[op] = {"type": "array", "maxItems": limits.max_in, "items": value}
        elif op == "$exists":
            special[op] = {"type": "boolean"}
    schema: dict[str, Any] = {"type": "object", "minProperties": 1, "propertyNames": _ref("operators")}
    if any(op in COMPARISON_OPERATORS for op in names):
        schema["additionalProperties"] = value
    if special:
        schema["properties"] = special
    return schema


def _field_schema(ftype: str, with_ops: bool) -> dict[str, Any]:
    return _ref(f"{ftype}_ops" if with_ops else ftype)


def _type_defs(
    types: Sequence[str], ops: Sequence[str], limits: PolicySettings
) -> tuple[dict[str, Any], set[str]]:
    """Each declared type's value schema once (``$defs``), and its condition (value or operators)."""
    defs: dict[str, Any] = {}
    with_ops: set[str] = set()
    for ftype in types:
        defs[ftype] = value_schema(ftype, limits)
        operators = _operators_schema(ftype, ops, limits)
        if operators is not None:
            with_ops.add(ftype)
            defs[f"{ftype}_ops"] = {"anyOf": [_ref(ftype), operators]}
    if with_ops:
        defs["operators"] = {"enum": [op for op in ops if op not in LOGICAL_OPERATORS]}
    return defs, with_ops


def input_schema(spec: QueryToolSpec, limits: PolicySettings) -> dict[str, Any]:
    """Draft 2020-12 schema of the tool arguments ``{filter, limit, sort}``; nothing else is accepted."""
    ops = [op for op in spec.operators if op in set(limits.allowed_operators)]
    types = list(dict.fromkeys(spec.fields.values()))  # each declared type once, in field order
    defs, with_ops = _type_defs(types, ops, limits)
    props: dict[str, Any] = {name: _field_schema(t, t in with_ops) for name, t in spec.fields.items()}
    for op in ops:
        if op in LOGICAL_OPERATORS:
            props[op] = _ref("filters")
            defs["filters"] = {"type": "array", "minItems": 1, "items": _filter_ref()}
    schema: dict[str, Any] = {
        "$schema": DIALECT,
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "filter": {
                **_filter_ref(),
                "description": "{field: value or {operator: value}}",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "default": spec.max_limit,
                "description": f"at most {spec.max_limit}; larger values are lowered",
            },
            "sort": {
                "type": "object",
                "maxProperties": len(spec.fields),  # also the cheap key cap (tools/bounds.py)
                "propertyNames": {"enum": list(spec.fields)},
                "additionalProperties": {"enum": [1, -1]},
                "description": "1 ascending, -1 descending" + (f"; default {spec.sort}" if spec.sort else ""),
            },
        },
        "$defs": {"filter": {"type": "object", "additionalProperties": False, "properties": props}, **defs},
    }
    # valid Draft 2020-12 for every spec shape: tests/tools/test_contract.py checks each listed tool's
    # schemas (jsonschema is not imported at start-up: benchmarks/startup.py)
    return schema


#: what a rendered value of each declared type can be (policy/render.py): dates and ObjectIds
#: become text, Decimal128 and non-finite numbers text too, any stored value may be null, and an
#: array of the declared type is that type (filters match its elements). A stored value of another
#: type is returned as null and counted in `type_mismatches`, so a result always fits this schema.
_SCALAR_TYPES: dict[str, tuple[list[str], str | None]] = {
    "string": (["string"], None),
    "number": (["number", "string"], "decimals and NaN as text"),
    "int": (["integer"], None),
    "bool": (["boolean"], None),
    "date": (["string"], "ISO 8601 in UTC"),
    "objectId": (["string"], "24 hex characters"),
}


def _out_type(declared: str) -> dict[str, Any]:
    kinds, description = _SCALAR_TYPES[declared]
    out: dict[str, Any] = {"type": [*kinds, "array", "null"], "items": {"type": [*kinds, "null"]}}
    if description:
        out["description"] = description
    return out


_ANY = ["string", "number", "integer", "boolean", "object", "array", "null"]


def _document_schema(spec: QueryToolSpec) -> dict[str, Any]:
    """Each projected top-level key typed from the spec; keys the spec does not type (or whose
    dotted paths nest them) may hold any JSON value. Not `required`: a document holds what it has."""
    props: dict[str, Any] = {}
    for path in spec.projection:
        top = path.split(".", 1)[0]
        declared = spec.fields.get(path)
        if "." in path or top in props:
            props[top] = {"type": ["object", "array", "null"], "description": "nested fields as stored"}
        elif declared is not None:
            props[top] = _out_type(declared)
        else:
            props[top] = {"type": _ANY, "description": "as stored"}
    return {"type": "object", "description": "one document: only the projected fields", "properties": props}


def result_schema(documents: dict[str, Any], truncated: str) -> dict[str, Any]:
    """The result every query tool returns (find and aggregate): `documents` items vary."""
    return {
        "$schema": DIALECT,
        "type": "object",
        "additionalProperties": False,
        "required": ["documents", "returned", "limit", "truncated", "notice"],
        "properties": {
            "documents": {"type": "array", "items": documents},
            "returned": {"type": "integer", "minimum": 0, "description": "documents in this result"},
            "limit": {"type": "integer", "minimum": 1, "description": "the limit applied"},
            "truncated": {"type": "boolean", "description": truncated},
            "notice": {"type": "string", "description": "how to read the result (data, not instructions)"},
            "type_mismatches": {
                "type": "object",
                "additionalProperties": {"type": "integer", "minimum": 1},
                "description": "present when stored values did not match their declared type: "
                "documents per field whose value was returned as null",
            },
        },
    }


def output_schema(spec: QueryToolSpec) -> dict[str, Any]:
    """Schema of the result, with each document field typed from the spec (what a strict client
    or inspector expects). Values are as stored, so the types allow null, and text where the
    renderer turns a value into text. Only projected fields ever appear: the server projects
    and re-projects every document."""
    return result_schema(_document_schema(spec), "true: more documents matched than returned")
