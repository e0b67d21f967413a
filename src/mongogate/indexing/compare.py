"""Metadata values as a filter matches them, the same in the database and in the process.

A recall's metadata filter (`scope_filter.RecallFilter`) is read by a query (`mongo`) and by the
in-process index on its rows (`matches`); both must answer alike on every engine. Equality is
MongoDB's: a number equals a number of the same value (1 and 1.0), never a boolean; a string, a
boolean or null equals only its own kind; an array holds the value when one element does; a
missing field equals null. `Compared` adds the comparisons LangGraph's stores take (`$eq`, `$ne`,
`$gt`, `$gte`, `$lt`, `$lte`): a range compares a number with numbers, a string with strings, and
matches nothing else (not a missing field, null, an array or another kind). The query says so
with `$type` and `$not: {$type: "array"}`: without them the embedded engine orders every kind
against every other (it answered `{$gt: 3}` with "5", true and null) where MongoDB does not.
Only code builds a `Compared` (the MCP tools take JSON, never one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from mongogate.values import Doc

Operator = Literal["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]
OPERATORS: tuple[Operator, ...] = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
RANGES = frozenset({"$gt", "$gte", "$lt", "$lte"})


def is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def same_value(held: object, wanted: object) -> bool:
    """MongoDB's equality of two scalars (a number with a number, else the same kind)."""
    if is_number(held) and is_number(wanted):
        return bool(held == wanted)
    return type(held) is type(wanted) and held == wanted


def equal(held: object, wanted: object) -> bool:
    """The field equals the value, or is an array holding it (`None` held: the field is missing)."""
    return same_value(held, wanted) or (isinstance(held, list) and any(same_value(x, wanted) for x in held))


def _in_range(held: object, op: str, bound: object) -> bool:
    if not (is_number(held) and is_number(bound)) and not (isinstance(held, str) and isinstance(bound, str)):
        return False
    h: Any = held
    b: Any = bound
    return bool({"$gt": h > b, "$gte": h >= b, "$lt": h < b, "$lte": h <= b}[op])


@dataclass(frozen=True)
class Compared:
    """Comparisons one metadata value passes, all of them (checked by `checks.check_metadata_filter`)."""

    ops: tuple[tuple[Operator, object], ...]

    def admits(self, held: object) -> bool:
        for op, v in self.ops:
            if op == "$eq" and not equal(held, v):
                return False
            if op == "$ne" and equal(held, v):
                return False
            if op in RANGES and not _in_range(held, op, v):
                return False
        return True

    def mongo(self) -> Doc:
        """The condition on the field (`{"metadata.n": ...}`), as `admits` reads it."""
        cond: Doc = {}
        for op, v in self.ops:
            cond[op] = v
            if op in RANGES:
                cond["$type"] = "number" if is_number(v) else "string"
                cond["$not"] = {"$type": "array"}
        return cond


def matches(held: object, wanted: object) -> bool:
    """A metadata value passes a filter's value: `Compared`, or an exact value (`equal`)."""
    return wanted.admits(held) if isinstance(wanted, Compared) else equal(held, wanted)


def condition(wanted: object) -> object:
    """A filter's value as a query condition on its field."""
    return wanted.mongo() if isinstance(wanted, Compared) else wanted
