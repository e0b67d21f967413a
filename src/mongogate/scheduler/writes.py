"""Schedule writes in the shape the embedded engine serves flat: by `_id` alone.

A conditional write ("only if `next_run_at` and `due_at` are still what I read") is an update
filtered by `_id` alone whose one pipeline stage is the document with the new fields merged in
when the condition holds:
`{$replaceWith: {$cond: [ok, {$mergeObjects: [$$ROOT minus removed fields, new fields]}, ELSE]}}`
(the shape of `leases.keep_unless`, with removals by `$unsetField`). On the embedded engine an
update whose filter has anything beside `_id` scans the collection (11.7 -> 36.5 ms from 1,000 to
4,000 schedule documents), while one by `_id` alone stays at about 3 ms; on MongoDB both are one
index lookup.

ELSE is `$$ROOT` for a write nobody waits on (registration, start-up jitter): refused, it leaves
the document byte for byte as it was. For a claim ELSE is a string, which `$replaceWith` refuses
(error 40228 on MongoDB and on the embedded engine): a claim that lost fails its statement, so the
reply of a batch of claims names each lost one by its index and every other one won, in the one
command, on a retried command too (a statement that failed ran nothing and fails again; one that
applied is not run twice). Nothing is read back. (The earlier shape, a `$cond` per field, set a
missing field to null on the engine when the condition failed.)
"""

from __future__ import annotations

from typing import Final

from mongogate.leases import literal, same
from mongogate.scheduler.documents import OPEN, OutcomeDoc
from mongogate.values import Doc


def unchanged(read: Doc, *names: str) -> Doc:
    """An aggregation test: each named field still holds the value in `read` (missing as None)."""
    return {"$and": [same(n, read.get(n)) for n in names]}


#: what a lost claim's pipeline evaluates to: not a document, so its statement fails (40228)
LOST: Final = "claim lost: the schedule moved since it was read"


def when(ok: Doc, fields: Doc, unset: tuple[str, ...] = (), *, fail: bool = False) -> list[Doc]:
    """A one-stage update pipeline: `fields` (expressions) merged into the document and `unset`
    removed from it when `ok`; else the document unchanged, or with `fail` (a claim) a statement
    that fails. Names are top-level field names."""
    base: Doc | str = "$$ROOT"
    for name in unset:
        base = {"$unsetField": {"field": name, "input": base}}
    return [{"$replaceWith": {"$cond": [ok, {"$mergeObjects": [base, fields]}, LOST if fail else "$$ROOT"]}}]


def literals(sets: Doc) -> Doc:
    """New values, taken literally (a caller's string is never read as a field path)."""
    return {k: literal(v) for k, v in sets.items()}


def claim_fields(
    sets: Doc,
    inc: dict[str, int],
    open_add: tuple[str, Doc] | None,
    open_remove: list[str],
) -> Doc:
    """A claim's effect as pipeline expressions: the schedule's new values, counters moved, this
    claim added to `open` and expired ones removed from it."""
    fields = literals(sets)
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


def outcome(claim_id: str, doc: OutcomeDoc) -> Doc:
    """A tick's outcome write (by `_id` alone): the `last_*` fields set and its own open claim
    removed (overlapping ticks' claims are left alone). It always changes a document that exists."""
    return {"$set": dict(doc), "$unset": {f"{OPEN}.{claim_id}": ""}}


__all__ = ["LOST", "claim_fields", "literals", "outcome", "unchanged", "when"]
