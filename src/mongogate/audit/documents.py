"""The audit event, as a line of the file (`AuditEvent`) and as a document of `audit_events`
(`AuditEventDoc`): their field names and types in one place.

Three kinds: `filter_rejected` (a refused call: the reason, the offending node, the bounded filter
and every forbidden name), `storage_error` (the same, without `offending`: the filter was allowed
and the database failed) and `query` (a call that ran: rows returned, time). The stored document
differs from the line only where `audit/store.py` says: `_id` is the event's id, `ts` a BSON
date, `filter` and `offending` JSON text. `tests/audit/test_documents.py` compares what the log
writes, and what the collection holds, with these types.
"""

# no `from __future__ import annotations`: `NotRequired` must be evaluated for the runtime
# `__required_keys__` (the tests compare written events with it)
from datetime import datetime
from typing import Any, Literal, NotRequired, TypedDict

__all__ = ["AuditEvent", "AuditEventDoc", "ForbiddenName", "Offending"]

EventKind = Literal["filter_rejected", "storage_error", "query"]


class ForbiddenName(TypedDict):
    """A `$` name the tool never allows, where it first stood, and how often."""

    name: str
    path: str
    count: int


class Offending(TypedDict):
    """The node a refusal names (`AuditLog.offending`), with a small bounded copy of its value."""

    path: str
    operator: str | None
    value: NotRequired[Any]


class _EventFields(TypedDict):
    """What every kind carries, in the file and in the collection alike."""

    event: EventKind
    tool: str
    tenant: str | None
    principal: str | None
    #: the subject exactly as authenticated (`principal` is its display form, not one-to-one);
    #: absent from events written before it existed
    principal_id: NotRequired[str | None]
    request_id: str | None
    #: the server instance that wrote it (`logs.default_instance_id`), when it has one
    instance: NotRequired[str]
    #: a refused call (filter_rejected, storage_error)
    reason: NotRequired[str]
    path: NotRequired[str]
    forbidden: NotRequired[list[ForbiddenName]]
    forbidden_cut: NotRequired[int]
    forbidden_partial: NotRequired[bool]
    #: what the bounded copy of `filter` left out: keys, items, deep subtrees, values
    trimmed: NotRequired[dict[str, int]]
    #: the JSON-RPC id of the call, when the transport gave one
    rpc_id: NotRequired[str | None]
    #: a query that ran
    returned: NotRequired[int]
    truncated: NotRequired[bool]
    ms: NotRequired[float]


class AuditEvent(_EventFields):
    """A line of the audit file, and what `AuditLog.write` hands to the sinks and observers."""

    #: ISO 8601 UTC with `Z`
    ts: str
    filter: NotRequired[Any]
    offending: NotRequired[Offending]


class AuditEventDoc(_EventFields):
    """A document of `audit_events` (`audit/store.py` to_doc, from_doc)."""

    _id: str
    ts: datetime
    #: `filter` and `offending` as JSON text (`store.JSON_FIELDS`): their keys are the model's
    filter: NotRequired[str]
    offending: NotRequired[str]
