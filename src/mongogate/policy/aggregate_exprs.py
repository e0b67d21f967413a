"""The pieces of the pipeline walk below the stage level: field paths, group keys, names, shapes.

An expression is a field path (``"$total"``), a literal, or, for a date group key, one
``$dateTrunc`` of a declared date field with a fixed unit and an optional fixed timezone.
Nothing else is an expression here; every refusal is a PipelineViolation with a path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from mongogate.errors import PolicyViolation
from mongogate.policy.paths import key_path, seg, show
from mongogate.specs import MEASURE_TYPES, AggregateToolSpec, names_tenant, usable_name
from mongogate.values import fits_int64

if TYPE_CHECKING:
    from mongogate.config import PolicySettings

#: stages never allowed, whatever the spec says, and why (the model reads the reason)
FORBIDDEN_STAGES: dict[str, str] = {
    "$lookup": "reads another collection, outside the caller's tenant and this tool's fields",
    "$graphLookup": "reads another collection recursively, outside the caller's tenant and fields",
    "$unionWith": "adds the documents of another collection or pipeline, unscoped",
    "$facet": "runs sub-pipelines; send one pipeline per call instead",
    "$out": "writes a collection; query tools are read-only",
    "$merge": "writes a collection; query tools are read-only",
    "$setWindowFields": "computes values across documents with expressions outside the allowlist",
    "$documents": "injects literal documents that did not come from the caller's data",
    "$collStats": "reports on the whole collection, every tenant included",
    "$indexStats": "reports on the whole collection's indexes, every tenant included",
    "$planCacheStats": "reports on the server's query plans, every tenant included",
    "$currentOp": "reports other users' operations on the server",
    "$listSessions": "reports other users' sessions",
    "$listLocalSessions": "reports other users' sessions",
    "$changeStream": "streams every tenant's changes",
    "$sample": "picks documents at random: answers could not be reproduced",
    "$replaceRoot": "builds new documents from expressions (e.g. $$ROOT) and can surface hidden fields",
    "$replaceWith": "builds new documents from expressions (e.g. $$ROOT) and can surface hidden fields",
    "$addFields": "computes new fields from expressions; use $project to keep or drop fields",
    "$set": "computes new fields from expressions; use $project to keep or drop fields",
    "$unset": "is not needed: use $project with 0 to drop fields",
    "$redact": "evaluates expressions over every level of the documents",
    "$geoNear": "must run first, before the tenant scope is applied",
    "$search": "must run first, before the tenant scope is applied, over every tenant's index",
    "$searchMeta": "must run first, before the tenant scope is applied, over every tenant's index",
    "$vectorSearch": "must run first, before the tenant scope is applied, over every tenant's index",
    "$densify": "creates documents that are not in the caller's data",
    "$fill": "computes values from expressions outside the allowlist",
}
#: expression operators refused with their own story (any other operator is refused too)
FORBIDDEN_EXPRESSIONS: dict[str, str] = {
    "$function": "runs server-side JavaScript",
    "$accumulator": "runs server-side JavaScript",
    "$where": "runs server-side JavaScript",
    "$expr": "evaluates arbitrary expressions",
    "$let": "binds variables for arbitrary expressions",
    "$reduce": "evaluates arbitrary expressions over arrays",
    "$map": "evaluates arbitrary expressions over arrays",
    "$filter": "evaluates arbitrary expressions over arrays",
    "$literal": "is not needed: write plain literals",
}
DATE_UNITS = ("day", "week", "month", "quarter", "year")
#: a fixed timezone: "UTC", an Olson name such as "Europe/Paris", or an offset such as "+02:00"
_TZ_RE = re.compile(r"^(?:UTC|[A-Za-z]+(?:/[A-Za-z0-9_+-]+){1,2}|[+-][0-9]{2}(?::?[0-9]{2})?)$")
_NAME_MAX = 64
Need = Literal["group", "measure", "any"]


class PipelineViolation(PolicyViolation):
    """A pipeline broke the tool's policy; nothing reached the database."""

    # The text is PolicyViolation's: `<path>: <what>; allowed: <what is>` (the code is the tag).


def reject(reason: str, path: str, message: str, allowed: str | None) -> NoReturn:
    raise PipelineViolation(reason, path, message, allowed)


@lru_cache(maxsize=4096)
def _cached_path(path: str, key: str) -> str:
    return key_path(path, key)


def stage_path(path: str, key: object) -> str:
    """``path.key`` as the filter walk renders it; built for every key, so cached."""
    return _cached_path(path, key) if isinstance(key, str) and len(key) <= 64 else key_path(path, key)


@dataclass(frozen=True)
class Field:
    """A field that exists at some point of the pipeline, and what it may be used for."""

    type: str | None  # a declared field type, or None (an object, or a literal group key)
    group: bool  # may be a group key
    measure: bool  # may be read by an accumulator


@dataclass(frozen=True)
class Shape:
    """The fields the documents hold at one point of the pipeline (dotted paths for sub-keys)."""

    fields: dict[str, Field]
    grouped: bool = False  # after a stage that replaced the documents ($group, $count...)

    def names(self) -> str:
        return ", ".join(self.fields) or "no fields"

    def outermost(self) -> list[str]:
        """The paths to keep at the end: each field once, not again through its sub-paths."""
        keys = list(self.fields)
        return [k for k in keys if not any(k.startswith(o + ".") for o in keys if o != k)]

    def projected(self, proj: dict[str, int]) -> Shape:
        """The shape after a checked ``$project`` (only keeps or drops)."""
        keep = {k for k, v in proj.items() if v == 1}
        drop = {k for k, v in proj.items() if v == 0}
        inclusion = bool(keep - {"_id"}) or (proj.get("_id") == 1 and len(proj) == 1)

        def under(name: str, roots: set[str]) -> bool:
            return any(name == r or name.startswith(r + ".") for r in roots)

        if inclusion:
            kept = {
                k: f
                for k, f in self.fields.items()
                if under(k, keep) or (under(k, {"_id"}) and "_id" not in drop)
            }
        else:
            kept = {k: f for k, f in self.fields.items() if not under(k, drop)}
        return Shape(kept, self.grouped)


def initial_shape(spec: AggregateToolSpec) -> Shape:
    """Before any stage: the projected fields, with what the spec lets each be used for."""
    group, measure = set(spec.groupable), set(spec.measurable)
    return Shape({p: Field(spec.fields.get(p), p in group, p in measure) for p in spec.projection})


def expression_refused(value: dict[Any, Any], path: str) -> NoReturn:
    op = next((k for k in value if isinstance(k, str) and k.startswith("$")), None)
    if op is None:
        reject("expression_not_allowed", path, f"an object is not an expression here: {show(value)}", _EXPR)
    why = FORBIDDEN_EXPRESSIONS.get(op, "is not on the expression allowlist")
    reject("expression_not_allowed", key_path(path, op), f"{seg(op)} {why}", _EXPR)


_EXPR = 'field paths ("$field"), literals, and {"$dateTrunc": {"date", "unit", "timezone"}} as a group key'


def field_key(key: object, shape: Shape, spec: AggregateToolSpec, path: str) -> str:
    """A key naming a field (``$sort``, ``$project``): it must exist at this point."""
    if not usable_name(key):
        reject("invalid_field_name", path, "field names are non-empty strings without NUL", shape.names())
    if key.startswith("$"):
        reject("invalid_field_name", path, f"{seg(key)} is not a field name", shape.names())
    return field_ref("$" + key, shape, spec, path, need="any")


def field_ref(value: object, shape: Shape, spec: AggregateToolSpec, path: str, *, need: Need) -> str:
    """The field a ``"$path"`` names, checked: it exists here and may be used as ``need`` says."""
    name = _path_name(value, shape, spec, path)
    field = shape.fields.get(name)
    if field is None:
        _unavailable(name, shape, spec, path)
    if need == "group" and not field.group:
        groupable = ", ".join(k for k, f in shape.fields.items() if f.group) or "none"
        reject("field_not_groupable", path, f"{seg(name)} cannot be a group key", groupable)
    if need == "measure" and not field.measure:
        measurable = ", ".join(k for k, f in shape.fields.items() if f.measure) or "none"
        reject("field_not_measurable", path, f"accumulators cannot read {seg(name)}", measurable)
    return name


def _unavailable(name: str, shape: Shape, spec: AggregateToolSpec, path: str) -> NoReturn:
    """Refuse a field this point of the pipeline does not have (or a path inside one)."""
    if any(name.startswith(f + ".") for f in shape.fields):
        reject("dotted_path", path, f"{seg(name)} reaches inside a field; name fields whole", shape.names())
    later = " at this point of the pipeline" if shape.grouped or name in spec.projection else ""
    reject("field_not_allowed", path, f"field {seg(name)} is not available{later}", shape.names())


def _path_name(value: object, shape: Shape, spec: AggregateToolSpec, path: str) -> str:
    """The name a ``"$path"`` gives, checked to be a field path (not an expression, a variable,
    an unusable name or the tenant field)."""
    if isinstance(value, dict):
        expression_refused(value, path)
    if not isinstance(value, str) or not value.startswith("$"):
        reject("field_path_invalid", path, f'expected a field path such as "$total", got {show(value)}', None)
    if value.startswith("$$"):
        reject(
            "system_variable",
            path,
            f"{seg(value)} is a variable; only field paths of this tool's fields are allowed",
            shape.names(),
        )
    name = value[1:]
    if not usable_name(name):
        reject("invalid_field_name", path, "field paths are non-empty, without NUL", shape.names())
    if names_tenant(name, spec.tenant_field):
        reject(
            "tenant_field_forbidden",
            path,
            f"{seg(name)} is the tenant field: the server scopes every pipeline to the caller itself",
            shape.names(),
        )
    return name


def check_name(name: object, spec: AggregateToolSpec, path: str, *, key: bool = True) -> str:
    """An output field name (a $group output, a $count name); returns the path that names it."""
    where = stage_path(path, name) if key else path
    if not usable_name(name) or len(name) > _NAME_MAX or name.startswith("$") or "." in name:
        reject(
            "output_name_invalid",
            where,
            f"output names are 1-{_NAME_MAX} characters without '$' first, '.' or NUL; got {show(name)}",
            None,
        )
    if names_tenant(name, spec.tenant_field):  # no '.' in an output name: the tenant field itself
        reject("tenant_field_forbidden", where, f"{seg(name)} is the tenant field; choose another name", None)
    return where


def check_group_key(
    value: object, shape: Shape, spec: AggregateToolSpec, limits: PolicySettings, path: str
) -> tuple[Any, dict[str, Field]]:
    """A group key and the ``_id`` fields it produces: a literal, a field path, a $dateTrunc,
    or an object of those (one level)."""
    if isinstance(value, dict) and value and all(isinstance(k, str) and not k.startswith("$") for k in value):
        out: dict[str, Any] = {}
        fields: dict[str, Field] = {"_id": Field(None, group=True, measure=False)}
        for k, v in value.items():
            kpath = check_name(k, spec, path)
            if isinstance(v, dict) and not (len(v) == 1 and "$dateTrunc" in v):
                if any(isinstance(x, str) and x.startswith("$") for x in v):
                    expression_refused(v, kpath)
                reject("group_key_invalid", kpath, "group key parts are field paths, not objects", _EXPR)
            out[k], part = _key_part(v, shape, spec, limits, kpath)
            fields[f"_id.{k}"] = part
        return out, fields
    converted, field = _key_part(value, shape, spec, limits, path)
    return converted, {"_id": field}


def _key_part(
    value: object, shape: Shape, spec: AggregateToolSpec, limits: PolicySettings, path: str
) -> tuple[Any, Field]:
    if isinstance(value, int) and not isinstance(value, bool) and not fits_int64(value):
        reject("out_of_range", path, f"{show(value)} does not fit in 64 bits", "64-bit integers")
    if value is None or isinstance(value, bool | int | float):
        return value, Field(None, group=False, measure=False)
    if isinstance(value, str) and not value.startswith("$"):
        if len(value) > limits.max_string:
            reject("string_too_long", path, f"a literal of {len(value)} characters", f"{limits.max_string}")
        return value, Field(None, group=False, measure=False)
    if isinstance(value, str):
        ref = field_ref(value, shape, spec, path, need="group")
        ftype = shape.fields[ref].type
        return "$" + ref, Field(ftype, group=True, measure=ftype in MEASURE_TYPES)
    if isinstance(value, dict):
        if len(value) == 1 and "$dateTrunc" in value:
            return {"$dateTrunc": _date_trunc(value["$dateTrunc"], shape, spec, f"{path}.$dateTrunc")}, Field(
                "date", group=True, measure=True
            )
        expression_refused(value, path)
    reject(
        "group_key_invalid",
        path,
        f"a group key is a field path, a literal or $dateTrunc, got {show(value)}",
        _EXPR,
    )


def _date_trunc(operand: object, shape: Shape, spec: AggregateToolSpec, path: str) -> dict[str, Any]:
    units = ", ".join(DATE_UNITS)
    if not isinstance(operand, dict) or "date" not in operand or "unit" not in operand:
        reject(
            "date_trunc_invalid", path, '$dateTrunc takes {"date": "$field", "unit": ...}', f"units {units}"
        )
    for k in operand:
        if k not in ("date", "unit", "timezone"):
            reject(
                "date_trunc_invalid",
                key_path(path, k),
                f"$dateTrunc option {show(k)} is not allowed",
                "date, unit, timezone",
            )
    ref = field_ref(operand["date"], shape, spec, f"{path}.date", need="group")
    if shape.fields[ref].type != "date":
        reject("type_mismatch", f"{path}.date", f"{seg(ref)} is not a date field", "a declared date field")
    unit = operand["unit"]
    if unit not in DATE_UNITS or not isinstance(unit, str):
        reject("date_trunc_invalid", f"{path}.unit", f"unit {show(unit)} is not allowed", units)
    out: dict[str, Any] = {"date": "$" + ref, "unit": unit}
    if "timezone" in operand:
        tz = operand["timezone"]
        if not isinstance(tz, str) or len(tz) > 40 or not _TZ_RE.fullmatch(tz):
            reject(
                "date_trunc_invalid",
                f"{path}.timezone",
                f"timezone {show(tz)} is not a fixed timezone",
                "UTC, Europe/Paris, +02:00",
            )
        out["timezone"] = tz
    return out
