"""What one read of long-term memory may see, as one value built once per call.

`RecallFilter` is the caller's scope, the namespace (and every namespace below it), the exact
metadata values asked for, the time that decides what has expired (the injectable clock's), when
what a memory says happened (`occurred_after` <= `occurred_at` < `occurred_before`), the time
asked about (`as_of`: memories created by then), and whether replaced memories are shown.
Every reader takes it as it is: a query gets `mongo()` (the scope first, then the namespace's
`ns_path`, liveness and `metadata.<key>`), the in-process index checks the same on its rows, and a
document read by `_id` alone (the flat read on the embedded engine) is checked with `admits`.
The scope never travels as a filter dict to be rebuilt from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from mongogate.clock import as_utc, utc_or_none
from mongogate.indexing import condition, matches
from mongogate.recall import checks
from mongogate.recall import documents as rd
from mongogate.recall.model import MemoryScope
from mongogate.recall.pages import live
from mongogate.values import Doc

__all__ = ["RecallFilter", "matches"]


@dataclass(frozen=True)
class RecallFilter:
    """The caller's scope, namespace, metadata values and time: what a read may return."""

    scope: MemoryScope
    now: datetime
    #: the namespace asked for (memories in it and below it), checked; None: every namespace
    ns_path: str | None = None
    #: top-level metadata values, exact or `compare.Compared` (`checks.check_metadata_filter`)
    metadata: Doc = field(default_factory=dict)
    #: `occurred_after` <= occurred_at < `occurred_before` (a memory without occurred_at is left
    #: out when either is given)
    occurred_after: datetime | None = None
    occurred_before: datetime | None = None
    #: what was current then (`recall/chain.py`): memories created by then, links stated by then
    as_of: datetime | None = None
    #: replaced memories too (marked with what replaces them), not only current ones
    include_superseded: bool = False

    @classmethod
    def of(
        cls,
        scope: MemoryScope,
        now: datetime,
        namespace: object = None,
        metadata: Doc | None = None,
        *,
        occurred_after: object = None,
        occurred_before: object = None,
        as_of: object = None,
        include_superseded: object = None,
    ) -> RecallFilter:
        """The filter of a call: `namespace` and the times as the caller gave them (checked here),
        `metadata` already checked."""
        ns = None if namespace is None else checks.check_namespace(namespace)
        after = checks.check_time(occurred_after, "occurred_after")
        before = checks.check_time(occurred_before, "occurred_before")
        checks.check_time_range(after, before)
        return cls(
            scope,
            now,
            ns,
            dict(metadata or {}),
            after,
            before,
            checks.check_time(as_of, "as_of"),
            checks.check_flag(include_superseded, "include_superseded"),
        )

    def occurred(self, at: datetime | None) -> bool:
        """A memory's `occurred_at` is in the range asked for (always, when none is)."""
        if self.occurred_after is None and self.occurred_before is None:
            return True
        if at is None:
            return False
        after, before = self.occurred_after, self.occurred_before
        return (after is None or at >= after) and (before is None or at < before)

    def mongo(self) -> Doc:
        """The query: the scope (`MemoryScope.match`), the namespace, live (`pages.live`), the
        metadata values."""
        query: Doc = dict(self.scope.match())
        if self.ns_path is not None:
            query[rd.NS_PATH] = self.ns_path
        query |= live(self.now)
        query |= {f"metadata.{k}": condition(v) for k, v in self.metadata.items()}
        when: Doc = {}
        if self.occurred_after is not None:
            when["$gte"] = self.occurred_after
        if self.occurred_before is not None:
            when["$lt"] = self.occurred_before
        if when:
            # a stored null is no time (the database orders null before every date: `$lt` alone
            # matched a memory without one)
            query[rd.OCCURRED_AT] = when | {"$type": "date"}
        if self.as_of is not None:
            query[rd.CREATED_AT] = {"$lte": self.as_of}
        return query

    def admits(self, doc: Doc) -> bool:
        """What `mongo()` says, checked on a document read by `_id` alone."""
        if doc.get(rd.TENANT) != self.scope.tenant or doc.get(rd.OWNER) != self.scope.owner:
            return False
        expires = doc.get(rd.EXPIRES_AT)
        if isinstance(expires, datetime) and as_utc(expires) <= self.now:
            return False
        held = doc.get(rd.NS_PATH) or []
        if self.ns_path is not None and self.ns_path not in (held if isinstance(held, list) else [held]):
            return False
        if not self.occurred(utc_or_none(doc.get(rd.OCCURRED_AT))):
            return False
        created = utc_or_none(doc.get(rd.CREATED_AT))
        if self.as_of is not None and (created is None or created > self.as_of):
            return False
        from mongogate.indexing import matches_all  # a read's, never a start's

        meta = doc.get("metadata") or {}
        return matches_all(meta if isinstance(meta, dict) else {}, self.metadata)
