"""What one read of long-term memory may see, as one value built once per call.

`RecallFilter` is the caller's scope, the namespace (and every namespace below it), the exact
metadata values asked for, and the time that decides what has expired (the injectable clock's).
Every reader takes it as it is: a query gets `mongo()` (the scope first, then the namespace's
`ns_path`, liveness and `metadata.<key>`), the in-process index checks the same on its rows, and a
document read by `_id` alone (the flat read on the embedded engine) is checked with `admits`.
The scope never travels as a filter dict to be rebuilt from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from mongogate.clock import as_utc
from mongogate.indexing import matches, matches_all
from mongogate.recall import checks
from mongogate.recall import documents as rd
from mongogate.recall.model import MemoryScope
from mongogate.recall.pages import live
from mongogate.values import Doc

__all__ = ["RecallFilter", "matches", "matches_all"]


@dataclass(frozen=True)
class RecallFilter:
    """The caller's scope, namespace, metadata values and time: what a read may return."""

    scope: MemoryScope
    now: datetime
    #: the namespace asked for (memories in it and below it), checked; None: every namespace
    ns_path: str | None = None
    #: exact top-level metadata values (`checks.check_metadata_filter`)
    metadata: Doc = field(default_factory=dict)

    @classmethod
    def of(
        cls, scope: MemoryScope, now: datetime, namespace: object = None, metadata: Doc | None = None
    ) -> RecallFilter:
        """The filter of a call: `namespace` as the caller gave it (checked here), `metadata`
        already checked."""
        ns = None if namespace is None else checks.check_namespace(namespace)
        return cls(scope, now, ns, dict(metadata or {}))

    def mongo(self) -> Doc:
        """The query: the scope (`MemoryScope.match`), the namespace, live (`pages.live`), the
        metadata values."""
        query: Doc = dict(self.scope.match())
        if self.ns_path is not None:
            query[rd.NS_PATH] = self.ns_path
        query |= live(self.now)
        query |= {f"metadata.{k}": v for k, v in self.metadata.items()}
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
        meta = doc.get("metadata") or {}
        return matches_all(meta if isinstance(meta, dict) else {}, self.metadata)
