"""JSON Schemas generated from a spec: what the model sees, and a cheap first check.

The input schema tells the model which fields, types and operators it may write.
It is not the authority: `check_filter` rejects everything on its own.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from mongogate.errors import PolicyViolation
from mongogate.policy.filters import (
    COMPARISON_OPERATORS,
    ISO_DATETIME_PATTERN,
    LIST_OPERATORS,
    LOGICAL_OPERATORS,
    OBJECT_ID_PATTERN,
    TYPE_WORDS,
    check_bounds,
    key_path,
    seg,
    show,
)
from mongogate.policy.spec import QueryToolSpec

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
    _compile(schema, spec.tenant_field, frozenset(ops), limits)
    return schema


def output_schema(spec: QueryToolSpec) -> dict[str, Any]:
    """Schema of the result. Document values are not typed: stored data may differ from the spec."""
    doc_props: dict[str, Any] = {}
    for path in spec.projection:
        top = path.split(".", 1)[0]
        declared = spec.fields.get(path)
        doc_props.setdefault(top, {"description": f"declared as {declared}" if declared else path})
    return {
        "$schema": DIALECT,
        "type": "object",
        "additionalProperties": False,
        "required": ["documents", "returned", "limit", "truncated", "notice"],
        "properties": {
            "documents": {
                "type": "array",
                "items": {"type": "object", "additionalProperties": False, "properties": doc_props},
            },
            "returned": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1},
            "truncated": {"type": "boolean"},
            "notice": {"type": "string"},
        },
    }


class _Compiled(NamedTuple):
    schema: dict[str, Any]  # held, so that its id cannot be reused while cached
    validator: Draft202012Validator
    # Known when input_schema built the schema: tenant probes are named, bombs refused first.
    tenant_field: str | None
    operators: frozenset[str]
    limits: PolicySettings | None


_cache_lock = threading.Lock()
_compiled: dict[int, _Compiled] = {}
_CACHE_MAX = 4096


def _compile(
    schema: dict[str, Any],
    tenant_field: str | None = None,
    operators: frozenset[str] = frozenset(),
    limits: PolicySettings | None = None,
) -> _Compiled:
    entry = _compiled.get(id(schema))
    if entry is not None and entry.schema is schema:
        return entry
    Draft202012Validator.check_schema(schema)
    entry = _Compiled(schema, Draft202012Validator(schema), tenant_field, operators, limits)
    with _cache_lock:
        if len(_compiled) >= _CACHE_MAX:
            _compiled.clear()
        _compiled[id(schema)] = entry
    return entry


def validate_arguments(args: dict[str, Any], schema: dict[str, Any]) -> None:
    """Check tool arguments against ``input_schema``; raise PolicyViolation naming the path.

    The validator is compiled once per schema object; keep and reuse the schema you built.
    """
    compiled = _compile(schema)
    if compiled.limits is not None and isinstance(args, dict):
        check_bounds(args.get("filter"), compiled.limits)  # jsonschema would read a bomb to the end
    error = best_match(compiled.validator.iter_errors(args))
    if error is not None:
        raise _Mapper(compiled).violation(error)


def _path(parts: Sequence[str | int]) -> str:
    out = ""
    for p in parts:
        out = f"{out}[{p}]" if isinstance(p, int) else key_path(out, p)
    return out or "arguments"


_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}


def _got(value: object) -> str:
    kind = "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)
    return f"{kind} {show(value)}"


class _Mapper:
    """Turn one jsonschema error into the reason codes and paths the policy walk uses."""

    def __init__(self, compiled: _Compiled) -> None:
        self.tenant = compiled.tenant_field
        self.ops = compiled.operators

    def violation(self, error: ValidationError) -> PolicyViolation:
        parts: list[str | int] = list(error.absolute_path)
        where = parts[0] if parts else None
        kind = str(error.validator)
        sub: dict[str, Any] = error.schema if isinstance(error.schema, dict) else {}
        inst = error.instance
        if kind == "additionalProperties" and isinstance(inst, dict):
            return self.extra_key(parts, inst, sub)
        if where == "sort" and "propertyNames" in error.relative_schema_path:
            fields = ", ".join(str(x) for x in sub.get("enum", []))
            return PolicyViolation(
                "field_not_allowed", _path([*parts, str(inst)]), f"cannot sort on {seg(inst)}", fields
            )
        path = _path(parts)
        message = _message(kind, inst, sub)
        if where == "limit":
            return PolicyViolation("limit_invalid", path, message, "a positive integer")
        if where == "sort":
            return PolicyViolation("sort_invalid", path, message, '{"field": 1 or -1}')
        if where != "filter":
            return PolicyViolation("schema_invalid", path, message)
        smuggled = self.smuggled(inst, parts)
        if smuggled is not None:
            return smuggled
        if len(parts) == 1 and kind == "type":
            return PolicyViolation("not_an_object", path, message, "a JSON object")
        reason = _FILTER_REASONS.get(kind, "schema_invalid")
        if kind == "type" and (_under_logical(parts) or parts[-1] in _STRUCTURAL_OPERATORS):
            reason = "invalid_operand"  # the operator's own shape is wrong, not the field's type
        return PolicyViolation(reason, path, message, _short(str(sub.get("description", ""))) or None)

    def extra_key(self, parts: list[str | int], inst: dict[Any, Any], sub: dict[str, Any]) -> PolicyViolation:
        known = sub.get("properties", {})
        extra = next(k for k in inst if k not in known)
        allowed = ", ".join(known) or "none"
        path = _path([*parts, extra])
        if not parts:
            return PolicyViolation("unknown_argument", path, f"unknown argument {seg(extra)}", allowed)
        if parts[0] == "sort":
            return PolicyViolation("field_not_allowed", path, f"cannot sort on {seg(extra)}", allowed)
        reason = _extra_key_reason(extra, parts, self.tenant)
        if reason == "operator_not_allowed" and extra in self.ops:
            reason = "operator_misplaced"  # allowed, but not at this level
        if reason == "invalid_operand":
            smuggled = self.smuggled(inst[extra], [*parts, extra])
            if smuggled is not None:
                return smuggled
        what = "operator" if reason.startswith("operator") else "field"
        return PolicyViolation(reason, path, f"{what} {seg(extra)} is not allowed here", allowed)

    def smuggled(self, value: object, parts: list[str | int]) -> PolicyViolation | None:
        """A `$`-key hidden inside a rejected value is the real story: name it, like check_filter."""
        if isinstance(value, dict):
            for k, v in value.items():
                if isinstance(k, str) and k.startswith("$") and k not in self.ops:
                    allowed = "operators " + (", ".join(sorted(self.ops)) or "none")
                    return PolicyViolation(
                        "operator_not_allowed",
                        _path([*parts, k]),
                        f"operator {seg(k)} is not allowed",
                        allowed,
                    )
                found = self.smuggled(v, [*parts, k])
                if found is not None:
                    return found
        elif isinstance(value, list):
            for i, v in enumerate(value):
                found = self.smuggled(v, [*parts, i])
                if found is not None:
                    return found
        return None


_STRUCTURAL_OPERATORS = LOGICAL_OPERATORS | LIST_OPERATORS | {"$exists"}
_FILTER_REASONS = {
    "maxLength": "string_too_long",
    "maxItems": "in_too_long",
    "minItems": "invalid_operand",
    "minProperties": "invalid_operand",
    "type": "type_mismatch",
    "pattern": "type_mismatch",
    "format": "type_mismatch",
    "anyOf": "type_mismatch",
}


def _message(kind: str, inst: object, sub: dict[str, Any]) -> str:
    """Short messages of our own: jsonschema's repeat the (possibly huge) instance."""
    if kind == "type":
        return f"expected {sub.get('type')}, got {_got(inst)}"
    if kind == "maxLength" and isinstance(inst, str):
        return f"a string of {len(inst)} characters, at most {sub.get('maxLength')}"
    if kind == "maxItems" and isinstance(inst, list):
        return f"{len(inst)} values, at most {sub.get('maxItems')}"
    if kind in ("minItems", "minProperties"):
        return f"got an empty {_JSON_TYPES.get(type(inst), 'value')}"
    if kind == "enum":
        return f"got {show(inst)}, expected one of {show(sub.get('enum'))}"
    if kind == "minimum":
        return f"got {show(inst)}, at least {sub.get('minimum')}"
    if kind in ("pattern", "format"):
        return f"{_got(inst)} is not in the expected format"
    if kind == "anyOf":
        return f"got {_got(inst)}"
    return _short(f"got {_got(inst)}: {kind} check failed")


def _extra_key_reason(key: object, parts: list[str | int], tenant: str | None) -> str:
    if isinstance(key, str) and key.startswith("$"):
        return "operator_not_allowed"
    if not isinstance(key, str) or not key or "\x00" in key:
        return "invalid_field_name"
    if len(parts) > 1 and isinstance(parts[-1], str):
        return "invalid_operand"  # a plain key inside a field's operator object: sub-document matching
    if tenant is not None and (key == tenant or key.startswith(tenant + ".")):
        return "tenant_field_forbidden"
    return "field_not_allowed"


def _under_logical(parts: list[str | int]) -> bool:
    return len(parts) >= 2 and isinstance(parts[-1], int) and parts[-2] in LOGICAL_OPERATORS


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
