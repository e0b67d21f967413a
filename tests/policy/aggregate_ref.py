"""A pure-Python reference for the pipelines an aggregation tool accepts.

It evaluates the allowed grammar (simple $match, $group with field/$dateTrunc/object keys and
the seven accumulators, $sort, $limit, $skip, $project, $count, $sortByCount, $unwind) over a
list of documents, reading only the fields a pipeline names: the tests run it over the
caller's own documents and compare with what the tool returned from the database.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from mongogate.policy.render import to_json

Doc = dict[str, Any]
_MISSING = object()


def _get(doc: Doc, path: str) -> Any:
    value: Any = doc
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _trunc(d: datetime, unit: str) -> datetime:
    d = d.astimezone(UTC)
    day = datetime(d.year, d.month, d.day, tzinfo=UTC)
    if unit == "day":
        return day
    if unit == "week":  # MongoDB's default: weeks start on Sunday
        return day - timedelta(days=(day.weekday() + 1) % 7)
    if unit == "month":
        return day.replace(day=1)
    if unit == "quarter":
        return day.replace(month=3 * ((d.month - 1) // 3) + 1, day=1)
    return day.replace(month=1, day=1)


def _key(expr: Any, doc: Doc) -> Any:
    if isinstance(expr, str) and expr.startswith("$"):
        v = _get(doc, expr[1:])
        return None if v is _MISSING else v
    if isinstance(expr, dict) and "$dateTrunc" in expr:
        spec = expr["$dateTrunc"]
        v = _get(doc, spec["date"][1:])
        return None if not isinstance(v, datetime) else _trunc(v, spec["unit"])
    if isinstance(expr, dict):
        return {k: _key(v, doc) for k, v in expr.items()}
    return expr


def _cmp_ok(v: Any, op: str, arg: Any) -> bool:
    if v is _MISSING:
        return op == "$ne" or (op == "$nin")
    if op == "$eq":
        return bool(v == arg)
    if op == "$ne":
        return bool(v != arg)
    if op == "$in":
        return v in arg
    if op == "$nin":
        return v not in arg
    if type(v) is not type(arg) and not (isinstance(v, int | float) and isinstance(arg, int | float)):
        return False
    return bool({"$gt": v > arg, "$gte": v >= arg, "$lt": v < arg, "$lte": v <= arg}[op])


def matches(doc: Doc, f: Doc) -> bool:
    """The filter subset the tests use: fields with values or comparison/list operators, $and/$or."""
    for k, cond in f.items():
        if k == "$and":
            ok = all(matches(doc, x) for x in cond)
        elif k == "$or":
            ok = any(matches(doc, x) for x in cond)
        else:
            v = _get(doc, k)  # an array field matches when one element does
            ok = any(_field(x, cond) for x in v) if isinstance(v, list) else _field(v, cond)
        if not ok:
            return False
    return True


def _field(v: Any, cond: Any) -> bool:
    if isinstance(cond, dict):
        return all(_cmp_ok(v, op, arg) for op, arg in cond.items())
    return v is not _MISSING and v == cond


def _accumulate(op: str, operand: Any, docs: list[Doc]) -> Any:
    if op == "$count":
        return len(docs)
    if op == "$sum" and not isinstance(operand, str):
        return operand * len(docs)
    values = [_get(d, operand[1:]) for d in docs]
    if op in ("$first", "$last"):
        v = values[0] if op == "$first" else values[-1]
        return None if v is _MISSING else v
    present = [v for v in values if v is not _MISSING and v is not None]
    nums = [v for v in present if isinstance(v, int | float) and not isinstance(v, bool)]
    if op == "$sum":
        return sum(nums) if nums else 0
    if op == "$avg":
        return sum(nums) / len(nums) if nums else None
    if not present:
        return None
    return min(present) if op == "$min" else max(present)


def _one(acc: Doc) -> tuple[str, Any]:
    ((op, operand),) = acc.items()
    return op, operand


def _sort_key(doc: Doc, spec: dict[str, int]) -> tuple[Any, ...]:
    out = []
    for path, direction in spec.items():
        v = _get(doc, path)
        rank = 0 if v is _MISSING or v is None else 1
        out.append(_Dir((rank, v if rank else 0), direction))
    return tuple(out)


class _Dir:
    def __init__(self, value: Any, direction: int) -> None:
        self.value, self.direction = value, direction

    def __lt__(self, other: _Dir) -> bool:
        return bool(self.value < other.value if self.direction == 1 else other.value < self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Dir) and bool(self.value == other.value)


def run_reference(docs: list[Doc], pipeline: list[Doc]) -> list[Doc]:
    """``pipeline`` over ``docs`` (already the caller's own documents, in the engine's order)."""
    out = [dict(d) for d in docs]
    for stage in pipeline:
        ((name, body),) = stage.items()
        if name == "$match":
            out = [d for d in out if matches(d, body)]
        elif name in ("$group", "$sortByCount"):
            out = _grouped(name, body, out)
        elif name == "$sort":
            out = sorted(out, key=lambda d: _sort_key(d, body))
        elif name == "$limit":
            out = out[:body]
        elif name == "$skip":
            out = out[body:]
        elif name == "$count":
            out = [{body: len(out)}] if out else []
        elif name == "$unwind":
            out = _unwound(body, out)
        elif name == "$project":
            out = _projected(body, out)
        else:  # pragma: no cover - the tests only send allowed stages
            raise AssertionError(name)
    return out


def _grouped(name: str, body: Any, out: list[Doc]) -> list[Doc]:
    """`$group` or `$sortByCount` over ``out``."""
    key_expr = body["_id"] if name == "$group" else body
    groups: dict[str, tuple[Any, list[Doc]]] = {}
    for d in out:
        k = _key(key_expr, d)
        groups.setdefault(json.dumps(to_json(k), sort_keys=True), (k, []))[1].append(d)
    if name == "$group":
        return [
            {
                "_id": k,
                **{n: _accumulate(*_one(a), ds) for n, a in body.items() if n != "_id"},
            }
            for k, ds in groups.values()
        ]
    return sorted(({"_id": k, "count": len(ds)} for k, ds in groups.values()), key=lambda g: -g["count"])


def _unwound(body: Any, out: list[Doc]) -> list[Doc]:
    path = body if isinstance(body, str) else body["path"]
    keep = isinstance(body, dict) and body.get("preserveNullAndEmptyArrays", False)
    field = path[1:]
    unwound: list[Doc] = []
    for d in out:
        v = d.get(field)
        if isinstance(v, list) and v:
            unwound.extend({**d, field: x} for x in v)
        elif isinstance(v, list):
            if keep:
                unwound.append({k: x for k, x in d.items() if k != field})
        elif v is not None or keep:
            unwound.append(d)
    return unwound


def _projected(body: Doc, out: list[Doc]) -> list[Doc]:
    keep = {k for k, v in body.items() if v}
    drop = {k for k, v in body.items() if not v}
    if keep - {"_id"}:
        return [{k: v for k, v in d.items() if k in keep or (k == "_id" and "_id" not in drop)} for d in out]
    return [{k: v for k, v in d.items() if k not in drop} for d in out]


def rendered(docs: list[Doc], output: list[str] | None = None) -> list[Doc]:
    """As the tool shows them: JSON values, only ``output`` fields when given."""
    out = [to_json(d) for d in docs]
    if output is not None:
        out = [{k: v for k, v in d.items() if k in output} for d in out]
    return out


def canonical(docs: list[Doc]) -> list[str]:
    """An order-free form, for pipelines whose output order MongoDB does not fix."""
    return sorted(json.dumps(d, sort_keys=True) for d in docs)
