"""JSON Schemas generated from a spec: what the model reads, never what decides.

The input schema tells the model which fields, types and operators it may write. Arguments
are not validated against it at call time: the policy walk (policy/filters.py, via
``execute.prepare``) is the one place a call is accepted or refused, with one set of reason
codes. Tests keep the schema honest: whatever the walk accepts, the schema accepts too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator

from mongogate.policy.filters import (
    COMPARISON_OPERATORS,
    ISO_DATETIME_PATTERN,
    LIST_OPERATORS,
    LOGICAL_OPERATORS,
    OBJECT_ID_PATTERN,
    TYPE_WORDS,
)
from mongogate.specs import QueryToolSpec

if TYPE_CHECKING:
    from mongogate.config import PolicySettings

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _filter_ref() -> dict[str, Any]:
    return {"$ref": "#/$defs/filter"}


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
            "format": "date-time",
            "pattern": ISO_DATETIME_PATTERN,
            "description": "ISO 8601, e.g. 2024-05-01T00:00:00Z; a date alone or no offset means UTC",
        }
    return {"type": "string", "pattern": OBJECT_ID_PATTERN, "description": "24 hex characters"}


def _field_schema(name: str, ftype: str, ops: Sequence[str], limits: PolicySettings) -> dict[str, Any]:
    value = value_schema(ftype, limits)
    op_props: dict[str, Any] = {}
    for op in ops:
        if op in COMPARISON_OPERATORS:
            op_props[op] = value
        elif op in LIST_OPERATORS:
            op_props[op] = {"type": "array", "maxItems": limits.max_in, "items": value}
        elif op == "$exists":
            op_props[op] = {"type": "boolean"}
    words = TYPE_WORDS[ftype]
    if not op_props:
        return {**value, "description": f"{name}: {words}"}
    return {
        "description": f"{name}: {words}, or an object of operators {', '.join(op_props)}",
        "anyOf": [
            value,
            {"type": "object", "minProperties": 1, "additionalProperties": False, "properties": op_props},
        ],
    }


def input_schema(spec: QueryToolSpec, limits: PolicySettings) -> dict[str, Any]:
    """Draft 2020-12 schema of the tool arguments ``{filter, limit, sort}``; nothing else is accepted."""
    ops = [op for op in spec.operators if op in set(limits.allowed_operators)]
    props: dict[str, Any] = {name: _field_schema(name, t, ops, limits) for name, t in spec.fields.items()}
    for op in ops:
        if op in LOGICAL_OPERATORS:
            props[op] = {"type": "array", "minItems": 1, "items": _filter_ref()}
    fields = ", ".join(spec.fields)
    schema: dict[str, Any] = {
        "$schema": DIALECT,
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "filter": {
                **_filter_ref(),
                "default": {},
                "description": (
                    f"MongoDB-style filter on fields {fields}; operators {', '.join(ops)}. "
                    "Results are always limited to the caller's own data."
                ),
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "default": spec.max_limit,
                "description": f"at most {spec.max_limit}; larger values are lowered",
            },
            "sort": {
                "type": "object",
                "additionalProperties": False,
                "propertyNames": {"enum": list(spec.fields)},
                "properties": {f: {"enum": [1, -1]} for f in spec.fields},
                "description": "{field: 1 ascending | -1 descending}"
                + (f"; default {spec.sort}" if spec.sort else ""),
            },
        },
        "$defs": {"filter": {"type": "object", "additionalProperties": False, "properties": props}},
    }
    Draft202012Validator.check_schema(schema)  # once, when the tool is built
    return schema


def output_schema(spec: QueryToolSpec) -> dict[str, Any]:
    """Schema of the result. The documents' fields are named in a description, not as
    ``properties``: SDK clients validate every result against this schema, and per-field
    subschemas made that check cost more than the whole policy walk (see DECISIONS.md).
    Only projected fields ever appear: the server projects and re-projects every document."""
    fields = []
    for path in spec.projection:
        declared = spec.fields.get(path)
        fields.append(f"{path} ({declared})" if declared else path)
    return {
        "$schema": DIALECT,
        "type": "object",
        "additionalProperties": False,
        "required": ["documents", "returned", "limit", "truncated", "notice"],
        "properties": {
            "documents": {
                "type": "array",
                "items": {
                    "type": "object",
                    "description": f"a document holding only (some of) {', '.join(fields)}; dates are "
                    "ISO 8601 text in UTC, ObjectIds hex text; values are as stored",
                },
            },
            "returned": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1},
            "truncated": {"type": "boolean"},
            "notice": {"type": "string"},
        },
    }
