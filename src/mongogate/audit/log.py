"""The audit log: one event per rejected filter (and per query if enabled).

``audit.sink``: "file" writes JSON Lines to a file and to stderr, never to stdout (stdout
carries the stdio transport), on a background thread (audit/file.py): no event loop
waits on disk. "mongodb" inserts into the shared ``audit_events`` collection from a bounded
queue (audit/mongo.py); the file is its fallback. "both" does both. Every event names
the server instance that wrote it. Reading is in audit/read.py and audit/store.py.
Values in logged filters are truncated (or redacted to their types), so the log stays
small and does not become a copy of what the model tried to smuggle.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NotRequired, TextIO, TypedDict, Unpack

from mongogate.audit.bounded import MAX_PATH, MAX_VALUES, OFFENDING_VALUES, BoundedCopy, clip, resolve
from mongogate.audit.file import AuditWriter
from mongogate.audit.forbidden import EVERYTHING_CHECKABLE, find_forbidden
from mongogate.audit.mongo import MongoSink
from mongogate.clock import iso_z
from mongogate.requests import current as current_request

__all__ = ["STDERR", "AuditLog", "Rejection"]

Sink = Literal["file", "mongodb", "both"]
log = logging.getLogger(__name__)


class _Stderr:
    """Default stream marker: resolve ``sys.stderr`` at write time (it may be replaced)."""


STDERR: Any = _Stderr()


def rpc_id() -> str | None:
    """The client's JSON-RPC id of the call being served, if any (see mongogate.requests)."""
    ids = current_request()
    return ids.rpc_id if ids is not None else None


def now_iso() -> str:
    return iso_z(datetime.now(UTC))


class Rejection(TypedDict):
    """What a refused call's event is made of (``allowed``, ``root``: see ``find_forbidden``)."""

    tool: str
    tenant: str | None
    principal: str | None
    reason: str
    path: str
    filter: object
    request_id: str | None
    allowed: NotRequired[Collection[str] | None]
    #: what the forbidden-name scan reads (default: ``filter``), and its name in paths
    scan: NotRequired[object]
    root: NotRequired[str]
    #: the subject exactly as authenticated (`Principal.identity`): `principal` is its display
    #: form, which is not one-to-one ('x<newline>' and the literal 'x\\n' display alike)
    principal_id: NotRequired[str | None]


class AuditLog(BoundedCopy):
    """Thread-safe JSON Lines log. One call, one event, one line in each sink.

    From a running event loop a call only queues its line (``await synced()`` waits for the
    disk without blocking the loop); from plain code it returns once the line is written.
    ``close()`` writes everything queued; it also runs at interpreter exit."""

    def __init__(
        self,
        path: Path,
        *,
        redact_values: bool,
        max_value_chars: int,
        stream: TextIO | None = STDERR,
        sink: Sink = "file",
        mongo: MongoSink | None = None,
        instance: str | None = None,
    ) -> None:
        if stream is not None and stream is not STDERR and stream in (sys.stdout, sys.__stdout__):
            raise ValueError("the audit log must never write to stdout (it carries the stdio transport)")
        if sink != "file" and mongo is None:
            raise ValueError(f"audit sink {sink!r} needs a MongoSink")
        self.path = Path(path)
        self.redact_values = redact_values
        self.max_value_chars = max_value_chars
        self.sink = sink
        self.instance = instance
        self._stream = stream
        self._writer = AuditWriter(self.path, self._current_stream)
        self._to_file = sink in ("file", "both")
        self.mongo = mongo if sink != "file" else None
        #: called with each event as it is written (the server's metrics count rejections here)
        self.observers: list[Callable[[dict[str, Any]], None]] = []

    @classmethod
    def for_database(
        cls,
        path: Path,
        *,
        uri: str,
        db_name: str,
        sink: Sink,
        queue_size: int,
        timeout_ms: int,
        retention_days: int | None,
        **kwargs: Any,
    ) -> AuditLog:
        """An audit log whose MongoDB sink falls back to this log's file (and stderr)."""
        holder: list[AuditLog] = []
        mongo = MongoSink(
            uri,
            db_name,
            lambda lines: holder[0].write_fallback(lines),
            queue_size=queue_size,
            timeout_ms=timeout_ms,
            retention_days=retention_days,
        )
        holder.append(cls(path, sink=sink, mongo=mongo, **kwargs))
        return holder[0]

    def write_fallback(self, lines: list[str]) -> None:
        """Queue ``lines`` (already serialised events) for this log's file: the MongoDB sink's
        fallback when it cannot write."""
        self._writer.submit("".join(lines))

    def check(self) -> None:
        """At start-up: refuse (ConfigError) an audit file or directory other users could redirect
        or have planted (mongogate/safefs.py); later writes go where this check looked."""
        if self._to_file or self.mongo is not None:  # the file is also the MongoDB sink's fallback
            self._writer.check()

    @property
    def fallbacks(self) -> int:
        """Events the MongoDB sink could not take, written to the file instead."""
        return self.mongo.fallbacks if self.mongo is not None else 0

    @property
    def queue_depth(self) -> int:
        """Events waiting for the MongoDB writer."""
        return self.mongo.depth if self.mongo is not None else 0

    def _current_stream(self) -> TextIO | None:
        stream = sys.stderr if self._stream is STDERR else self._stream
        return None if stream is None or stream in (sys.stdout, sys.__stdout__) else stream

    async def synced(self) -> None:
        """Wait until every event written so far is in the file, without blocking the loop."""
        if self.mongo is not None:  # first: its fallback lines go to the file writer
            await self.mongo.synced()
        await self._writer.synced()

    def flush(self) -> None:
        """Block until every event written so far is in its sink (plain code, not the loop)."""
        if self.mongo is not None:
            self.mongo.flush()
        self._writer.flush()

    def close(self) -> None:
        """Write everything queued and close the file (shutdown); later events reopen it."""
        if self.mongo is not None:
            self.mongo.close()
            if self.mongo.fallbacks:
                log.warning(
                    "audit: %d event(s) could not reach the audit_events collection and are in %s",
                    self.mongo.fallbacks,
                    self.path,
                )
        self._writer.close()

    def filter_rejected(self, **fields: Unpack[Rejection]) -> dict[str, Any]:
        """One event per refused call. Whatever is trimmed from the logged filter, the offending
        node itself is kept (path, operator, bounded value), ``trimmed`` says what was cut, and
        ``forbidden`` lists every ``$`` name the tool never allows (``allowed``: its spec's
        names; by default everything a spec could allow) found anywhere in ``filter``."""
        return self.write(self.rejection_event(**fields))

    def rejection_event(
        self, *, event: str = "filter_rejected", **fields: Unpack[Rejection]
    ) -> dict[str, Any]:
        """The event ``filter_rejected`` writes, built and not written (``mongogate try`` shows it)."""
        filter, path, allowed = fields["filter"], str(fields["path"]), fields.get("allowed")
        copied, trimmed = self._bounded(filter, MAX_VALUES)
        scan, root = fields.get("scan", filter), fields.get("root", "filter")
        found = find_forbidden(scan, EVERYTHING_CHECKABLE if allowed is None else allowed, root=root)
        return {
            "event": event,
            "ts": now_iso(),
            "tool": fields["tool"],
            "tenant": fields["tenant"],
            "principal": fields["principal"],
            "reason": fields["reason"],
            "path": clip(path, MAX_PATH),
            "offending": self.offending(filter, path),
            **found.as_fields(),
            "filter": copied,
            "trimmed": trimmed,
            "request_id": fields["request_id"],
            "rpc_id": rpc_id(),
        } | ({} if (pid := fields.get("principal_id")) is None else {"principal_id": pid})

    def call_failed(self, **fields: Unpack[Rejection]) -> dict[str, Any]:
        """A call the database failed (``storage_error``): its own event type, never counted as a
        rejected filter (the filter was allowed). It still lists forbidden names, should there be any."""
        event = self.rejection_event(event="storage_error", **fields)
        del event["offending"]
        return self.write(event)

    def offending(self, filter: object, path: str) -> dict[str, Any]:
        """The node at ``path`` (as PolicyViolation renders it) with a small bounded copy of its value."""
        found, node, operator = resolve(filter, path)
        out: dict[str, Any] = {"path": clip(path, MAX_PATH), "operator": operator}
        if found:
            out["value"] = self._bounded(node, OFFENDING_VALUES)[0]
        return out

    def query(
        self,
        *,
        tool: str,
        tenant: str | None,
        principal: str | None,
        returned: int,
        truncated: bool,
        ms: float,
        request_id: str | None,
        principal_id: str | None = None,
    ) -> dict[str, Any]:
        return self.write(
            {
                "event": "query",
                "ts": now_iso(),
                "tool": tool,
                "tenant": tenant,
                "principal": principal,
                **({} if principal_id is None else {"principal_id": principal_id}),
                "returned": returned,
                "truncated": truncated,
                "ms": round(ms, 3),
                "request_id": request_id,
            }
        )

    def write(self, event: dict[str, Any]) -> dict[str, Any]:
        """Append ``event`` to the sink(s). A failing file is reported on the stream, a failing
        database falls back to the file; nothing is raised: the caller is usually refusing a request."""
        if self.instance is not None:
            event.setdefault("instance", self.instance)
        line = json.dumps(event, ensure_ascii=True, separators=(",", ":"), default=str) + "\n"
        if self._to_file:
            self._writer.submit(line)
        if self.mongo is not None:
            self.mongo.submit(event, line)
        for observe in self.observers:
            with contextlib.suppress(Exception):  # an observer never fails the caller
                observe(event)
        return event
