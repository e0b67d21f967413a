"""Schedule writes in the shape the embedded engine serves flat: by `_id` alone.

A conditional write ("only if `next_run_at` and `due_at` are still what I read") is an update
filtered by `_id` alone whose pipeline sets each field to its new value when the condition holds
and to what it holds otherwise (`leases.keep_unless`). On the embedded engine an update whose
filter has anything beside `_id` scans the collection (11.7 -> 36.5 ms from 1,000 to 4,000
schedule documents), while one by `_id` alone stays at about 3 ms; on MongoDB both are one index
lookup. Whether the write took effect is read back from the document it returns: a claim stamps
its own claim id in `last_claim` (docs/decisions/scheduler-fleet.md, "Writes by `_id`").
"""

from __future__ import annotations

from mongogate.leases import literal, same
from mongogate.scheduler.documents import CLAIM_RESULT, LAST_CLAIM, OPEN
from mongogate.values import Doc


def unchanged(read: Doc, *names: str) -> Doc:
    """An aggregation test: each named field still holds the value in `read` (missing as None)."""
    return {"$and": [same(n, read.get(n)) for n in names]}


def when(ok: Doc, fields: Doc) -> list[Doc]:
    """A one-stage update pipeline: each field its new expression when `ok`, else what it holds."""
    return [{"$set": {name: {"$cond": [ok, value, f"${name}"]} for name, value in fields.items()}}]


def moved(sets: Doc, unset: tuple[str, ...] = ()) -> Doc:
    """New values (taken literally) and removed fields, as pipeline expressions for `when`."""
    fields: Doc = {k: literal(v) for k, v in sets.items()}
    fields |= {k: "$$REMOVE" for k in unset}
    return fields


def claim_fields(
    claim_id: str,
    sets: Doc,
    inc: dict[str, int],
    open_add: tuple[str, Doc] | None,
    open_remove: list[str],
    unset: tuple[str, ...],
) -> Doc:
    """A claim's effect as pipeline expressions: the schedule's new values, counters moved, this
    claim added to `open` and expired ones removed from it, and `last_claim` stamped."""
    fields = moved(sets | {LAST_CLAIM: claim_id}, unset)
    for name, n in inc.items():
        fields[name] = {"$add": [{"$ifNull": [f"${name}", 0]}, n]}
    if open_add is not None or open_remove:
        expr: Doc | str = {"$ifNull": [f"${OPEN}", {}]}
        for cid in open_remove:
            expr = {"$unsetField": {"field": cid, "input": expr}}
        if open_add is not None:
            cid, value = open_add
            expr = {"$setField": {"field": cid, "input": expr, "value": literal(value)}}
        fields[OPEN] = expr
    return fields


def won(doc: Doc | None, claim_id: str) -> bool:
    return doc is not None and doc.get(LAST_CLAIM) == claim_id


__all__ = ["CLAIM_RESULT", "claim_fields", "moved", "unchanged", "when", "won"]
