"""The authoritative filter check: an allowlist walk that bounds size and converts values.

The JSON schema shown to the model is a guide and a first check; this walk decides alone.
Anything it does not positively recognise is rejected, so nothing unexpected reaches MongoDB.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

from bson import ObjectId

from mongogate.errors import PolicyViolation
from mongogate.policy.paths import Loc, key_path, seg, show, where
from mongogate.specs import QueryToolSpec, names_tenant, usable_name
from mongogate.values import fits_int64, is_storable

if TYPE_CHECKING:
    from mongogate.config import PolicySettings

LOGICAL_OPERATORS = frozenset({"$and", "$or", "$nor"})
COMPARISON_OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})
LIST_OPERATORS = frozenset({"$in", "$nin"})

#: ISO 8601 date or date-time accepted for `date` fields (no offset means UTC); shared with the schema
ISO_DATETIME_PATTERN = r"^\d{4}-\d\d-\d\d([T ]\d\d:\d\d(:\d\d(\.\d{1,6})?)?(Z|[+-]\d\d:\d\d)?)?$"
OBJECT_ID_PATTERN = r"^[0-9a-fA-F]{24}$"
_ISO_RE = re.compile(ISO_DATETIME_PATTERN, re.ASCII)  # \d: ASCII digits only
_OID_RE = re.compile(OBJECT_ID_PATTERN)

TYPE_WORDS: dict[str, str] = {
    "string": "a string",
    "number": "a number",
    "int": "an integer",
    "bool": "true or false",
    "date": "an ISO 8601 date-time string such as 2024-05-01T00:00:00Z",
    "objectId": "a 24-character hex ObjectId string",
}


def _type_name(value: object) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


class _Bounds:
    """Depth and node count, checked before anything else reads the filter.

    Depth counts nested objects (the filter itself is level 1); an array adds a level only
    inside another array, so `$or`/`$in` operands cost nothing but list-in-list bombs do.
    Nodes count every value, in document order; a huge container is never read past the cap.
    """

    def __init__(self, limits: PolicySettings) -> None:
        self.max_depth, self.max_nodes = limits.max_depth, limits.max_nodes
        self.nodes = 1

    def walk(self, value: dict[Any, Any] | list[Any], loc: Loc, depth: int) -> None:
        if depth > self.max_depth:
            raise PolicyViolation(
                "too_deep",
                where(loc),
                f"the filter nests objects more than {self.max_depth} levels deep",
                f"at most {self.max_depth} levels of nested objects",
            )
        in_array = isinstance(value, list)
        items = enumerate(value) if isinstance(value, list) else value.items()
        for key, child in items:
            self.nodes += 1
            if self.nodes > self.max_nodes:
                raise PolicyViolation(
                    "too_many_nodes",
                    where((loc, key)),
                    f"the filter has more than {self.max_nodes} values in total",
                    f"at most {self.max_nodes} values (keys, operands and list items); split the question",
                )
            if isinstance(child, dict):
                self.walk(child, (loc, key), depth + 1)
            elif isinstance(child, list):
                self.walk(child, (loc, key), depth + in_array)


def check_bounds(filter: object, limits: PolicySettings) -> None:
    """Refuse depth and size bombs (``too_deep``, ``too_many_nodes``) cheaply; other values pass.

    Runs first in check_filter, and in validate_arguments before jsonschema reads a bomb."""
    if isinstance(filter, dict):
        _Bounds(limits).walk(filter, None, 1)


class _Walk:
    """One check of one filter against one spec (state: the effective allowlist)."""

    def __init__(self, spec: QueryToolSpec, limits: PolicySettings) -> None:
        self.spec = spec
        self.limits = limits
        self.ops = frozenset(spec.operators) & frozenset(limits.allowed_operators)

    # What is allowed, as told in errors: built only when something is refused.
    @cached_property
    def allowed_ops(self) -> str:
        return "operators " + (", ".join(sorted(self.ops)) or "none")

    @cached_property
    def field_ops(self) -> str:
        return ", ".join(sorted(self.ops - LOGICAL_OPERATORS)) or "none"

    @cached_property
    def allowed_fields(self) -> str:
        return ", ".join(f"{f} ({t})" for f, t in self.spec.fields.items())

    # -- structure ----------------------------------------------------------------------------

    def filter_object(self, obj: dict[Any, Any], loc: Loc) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in obj.items():
            kloc = (loc, key)
            if isinstance(key, str) and key.startswith("$"):
                self.operator_allowed(key, kloc)
                if key not in LOGICAL_OPERATORS:
                    raise PolicyViolation(
                        "operator_misplaced",
                        where(kloc),
                        f'{key} applies to a field; write it inside one, e.g. {{"field": {{"{key}": ...}}}}',
                        f"at this level: fields ({self.allowed_fields}) or "
                        + (", ".join(sorted(self.ops & LOGICAL_OPERATORS)) or "no logical operators"),
                    )
                out[key] = self.logical(key, value, kloc)
            else:
                name = self.field_name(key, kloc)
                out[name] = self.field_value(name, value, kloc)
        return out

    def operator_allowed(self, op: str, loc: Loc) -> None:
        if op not in self.ops:
            raise PolicyViolation(
                "operator_not_allowed",
                where(loc),
                f"operator {seg(op)} is not allowed in this tool",
                self.allowed_ops,
            )

    def logical(self, op: str, value: object, loc: Loc) -> list[dict[str, Any]]:
        if not isinstance(value, list) or not value:
            self.reject(value, loc, "invalid_operand", f"{op} takes a non-empty array of filter objects")
        out = []
        for i, item in enumerate(value):
            iloc = (loc, i)
            if not isinstance(item, dict):
                self.reject(item, iloc, "invalid_operand", f"each {op} item must be a filter object")
            out.append(self.filter_object(item, iloc))
        return out

    def field_name(self, key: object, loc: Loc) -> str:
        if not usable_name(key):
            raise PolicyViolation(
                "invalid_field_name",
                where(loc),
                "field names must be non-empty strings without NUL characters",
                self.allowed_fields,
            )
        if names_tenant(key, self.spec.tenant_field):
            raise PolicyViolation(
                "tenant_field_forbidden",
                where(loc),
                f"{seg(key)} is the tenant field: the server scopes every query to the caller's tenant "
                "itself, it cannot be filtered on",
                self.allowed_fields,
            )
        if key not in self.spec.fields:
            hint = " (dotted paths only when declared verbatim)" if "." in key else ""
            raise PolicyViolation(
                "field_not_allowed",
                where(loc),
                f"field {seg(key)} is not declared in this tool{hint}",
                self.allowed_fields,
            )
        return key

    def field_value(self, name: str, value: object, loc: Loc) -> Any:
        ftype = self.spec.fields[name]
        if isinstance(value, list):
            self.reject(
                value, loc, "type_mismatch", f"{name} expects {TYPE_WORDS[ftype]}, not an array; use $in"
            )
        if not isinstance(value, dict):
            return self.value(ftype, value, loc, name)
        if not value:
            raise PolicyViolation(
                "invalid_operand",
                where(loc),
                f"{name} got an empty object",
                f"a value or operators {self.field_ops}",
            )
        out: dict[str, Any] = {}
        for op, operand in value.items():
            oloc = (loc, op)
            if not (isinstance(op, str) and op.startswith("$")):
                self.reject(
                    operand,
                    oloc,
                    "invalid_operand",
                    f"{name} takes {TYPE_WORDS[ftype]} or an operator object; sub-document matching is "
                    "not allowed",
                    f"operators {self.field_ops}",
                )
            self.operator_allowed(op, oloc)
            if op in LOGICAL_OPERATORS:
                raise PolicyViolation(
                    "operator_misplaced",
                    where(oloc),
                    f"{op} combines filter objects; use it at the filter level, not inside field {name}",
                    f"operators {self.field_ops}",
                )
            out[op] = self.operand(op, ftype, operand, oloc, name)
        return out

    def operand(self, op: str, ftype: str, operand: object, loc: Loc, name: str) -> Any:
        if op in COMPARISON_OPERATORS:
            return self.value(ftype, operand, loc, name)
        if op in LIST_OPERATORS:
            if not isinstance(operand, list):
                self.reject(
                    operand, loc, "invalid_operand", f"{op} takes an array of {TYPE_WORDS[ftype]} values"
                )
            if len(operand) > self.limits.max_in:
                raise PolicyViolation(
                    "in_too_long",
                    where(loc),
                    f"{op} has {len(operand)} values",
                    f"at most {self.limits.max_in} values",
                )
            return [self.value(ftype, v, (loc, i), name) for i, v in enumerate(operand)]
        if op == "$exists":
            if not isinstance(operand, bool):
                self.reject(operand, loc, "invalid_operand", "$exists takes true or false")
            return operand
        # In SUPPORTED_OPERATORS but unknown to this walk: refuse rather than pass through.
        raise PolicyViolation(
            "operator_not_allowed", where(loc), f"operator {op} cannot be checked", self.allowed_ops
        )

    # -- values -------------------------------------------------------------------------------

    def value(self, ftype: str, v: object, loc: Loc, name: str) -> Any:
        """Check one scalar against the field's declared type and convert it for BSON."""
        ok: Any = _MISSING
        if ftype == "string":
            ok = self._string(v, loc, name)
        elif ftype in ("number", "int"):
            ok = _number(ftype, v, loc)
        elif ftype == "bool":
            ok = v if isinstance(v, bool) else _MISSING
        elif ftype == "date":
            ok = _to_datetime(v)
        elif ftype == "objectId":
            ok = _object_id(v)
        if ok is _MISSING:
            self.reject(
                v,
                loc,
                "type_mismatch",
                f"{name} expects {TYPE_WORDS[ftype]}, got {_type_name(v)} {show(v)}",
                TYPE_WORDS[ftype],
            )
        return ok

    def _string(self, v: object, loc: Loc, name: str) -> Any:
        if not isinstance(v, str):
            return _MISSING
        if len(v) > self.limits.max_string:
            raise PolicyViolation(
                "string_too_long",
                where(loc),
                f"{name} got a string of {len(v)} characters",
                f"at most {self.limits.max_string} characters",
            )
        return v if is_storable(v) else _MISSING

    def reject(
        self, value: object, loc: Loc, reason: str, message: str, allowed: str | None = None
    ) -> NoReturn:
        """Refuse ``value``, but name a smuggled `$`-operator inside it first: that is the real story."""
        self.scan(value, loc)
        raise PolicyViolation(reason, where(loc), message, allowed)

    def scan(self, value: object, loc: Loc) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                kloc = (loc, k)
                if isinstance(k, str) and k.startswith("$"):
                    self.operator_allowed(k, kloc)
                self.scan(v, kloc)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self.scan(v, (loc, i))


_MISSING: Any = object()


def _number(ftype: str, v: object, loc: Loc) -> Any:
    """An integer (within 64 bits) for "int" and "number"; a finite float for "number" too."""
    if isinstance(v, int) and not isinstance(v, bool):
        if not fits_int64(v):
            raise PolicyViolation(
                "out_of_range", where(loc), f"{show(v)} does not fit in 64 bits", "64-bit integers"
            )
        return v
    if ftype == "number" and isinstance(v, float) and math.isfinite(v):
        return v
    return _MISSING


def _object_id(v: object) -> Any:
    if isinstance(v, ObjectId):
        return v
    if isinstance(v, str) and _OID_RE.fullmatch(v):
        return ObjectId(v)
    return _MISSING


def _to_datetime(v: object) -> Any:
    """ISO 8601 text (or a datetime from the Python API) -> aware UTC datetime; no offset means UTC.

    The regex fixes the accepted shape (the one the schema shows); ``fromisoformat`` parses it."""
    if isinstance(v, datetime):
        return v.replace(tzinfo=UTC) if v.tzinfo is None else v.astimezone(UTC)
    if not isinstance(v, str) or _ISO_RE.fullmatch(v) is None:
        return _MISSING
    try:
        dt = datetime.fromisoformat(v)
        return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
    except (ValueError, OverflowError):
        return _MISSING


def check_filter(filter: object, spec: QueryToolSpec, limits: PolicySettings) -> dict[str, Any]:
    """Return ``filter`` checked against the tool's allowlist, with values converted for BSON.

    Raises PolicyViolation (stable ``reason``, ``path`` like ``filter.$or[1].total.$where``).
    The input is never modified.
    """
    walk = _Walk(spec, limits)
    if not isinstance(filter, dict):
        raise PolicyViolation(
            "not_an_object",
            "filter",
            f"the filter must be a JSON object, got {_type_name(filter)}",
            f'an object such as {{}} or {{"field": value}}; fields: {walk.allowed_fields}',
        )
    check_bounds(filter, limits)
    return walk.filter_object(filter, None)


def check_sort(sort: object | None, spec: QueryToolSpec) -> list[tuple[str, int]]:
    """Sort keys from declared fields only, directions 1 or -1; absent or {} means the spec's default."""
    if sort is None or sort == {}:
        return list((spec.sort or {}).items())
    fields = ", ".join(spec.fields)
    if not isinstance(sort, dict):
        raise PolicyViolation(
            "sort_invalid",
            "sort",
            f"sort must be an object, got {_type_name(sort)}",
            f'{{"field": 1 or -1}}; {fields}',
        )
    out: list[tuple[str, int]] = []
    for key, direction in sort.items():
        path = key_path("sort", key)
        if not usable_name(key):
            raise PolicyViolation(
                "invalid_field_name", path, "sort keys must be non-empty field names", fields
            )
        if names_tenant(key, spec.tenant_field):
            raise PolicyViolation("tenant_field_forbidden", path, f"{seg(key)} is the tenant field", fields)
        if key not in spec.fields:
            raise PolicyViolation(
                "field_not_allowed", path, f"cannot sort on undeclared field {seg(key)}", fields
            )
        if isinstance(direction, bool) or not isinstance(direction, int) or direction not in (1, -1):
            raise PolicyViolation(
                "sort_invalid",
                path,
                f"sort direction must be 1 or -1, got {show(direction)}",
                "1 (ascending), -1",
            )
        out.append((key, direction))
    return out


def check_limit(limit: object | None, spec: QueryToolSpec) -> tuple[int, bool]:
    """The applied limit and whether it was lowered to ``spec.max_limit``; absent means the max."""
    if limit is None:
        return spec.max_limit, False
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise PolicyViolation(
            "limit_invalid",
            "limit",
            f"limit must be a positive integer, got {show(limit)}",
            f"1 to {spec.max_limit} (larger values are lowered to {spec.max_limit})",
        )
    if limit > spec.max_limit:
        return spec.max_limit, True
    return limit, False
