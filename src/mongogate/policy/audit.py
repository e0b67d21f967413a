"""The audit log: one event per rejected filter (and per query if enabled).

``audit.sink``: "file" writes JSON Lines to a file and to stderr, never to stdout (stdout
carries the stdio transport), on a background thread (policy/audit_writer.py): no event loop
waits on disk. "mongodb" inserts into the shared ``audit_events`` collection from a bounded
queue (policy/audit_sink.py); the file is its fallback. "both" does both. Every event names
the server instance that wrote it. Reading is in policy/audit_read.py and audit_store.py.
Values in logged filters are truncated (or redacted to their types), so the log stays
small and does not become a copy of what the model tried to smuggle.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import math
import re
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any, Literal, TextIO

from mongogate.policy.audit_read import follow, matcher, read_events, summarize
from mongogate.policy.audit_sink import MongoSink
from mongogate.policy.audit_writer import AuditWriter
from mongogate.policy.render import to_json
from mongogate.requests import current as current_request

__all__ = [
    "STDERR",
    "AuditLog",
    "count_events",
    "follow",
    "matcher",
    "read_events",
    "summarize",
]

Sink = Literal["file", "mongodb", "both"]
log = logging.getLogger(__name__)

_MAX_ITEMS = 50  # per object/array in a logged filter
_MAX_DEPTH = 12
_MAX_PATH = 512
_MAX_VALUES = 500  # per logged filter


class _Stderr:
    """Default stream marker: resolve ``sys.stderr`` at write time (it may be replaced)."""


STDERR: Any = _Stderr()


def rpc_id() -> str | None:
    """The client's JSON-RPC id of the call being served, if any (see mongogate.requests)."""
    ids = current_request()
    return ids.rpc_id if ids is not None else None


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AuditLog:
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
            lambda lines: holder[0]._writer.submit("".join(lines)),
            queue_size=queue_size,
            timeout_ms=timeout_ms,
            retention_days=retention_days,
        )
        holder.append(cls(path, sink=sink, mongo=mongo, **kwargs))
        return holder[0]

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

    def filter_rejected(
        self,
        *,
        tool: str,
        tenant: str | None,
        principal: str | None,
        reason: str,
        path: str,
        filter: object,
        request_id: str | None,
    ) -> dict[str, Any]:
        """One event per refused call. Whatever is trimmed from the logged filter, the offending
        node itself is kept (path, operator, bounded value) and ``trimmed`` says what was cut."""
        copied, trimmed = self._bounded(filter, _MAX_VALUES)
        _note_event()
        return self.write(
            {
                "event": "filter_rejected",
                "ts": now_iso(),
                "tool": tool,
                "tenant": tenant,
                "principal": principal,
                "reason": reason,
                "path": _clip(str(path), _MAX_PATH),
                "offending": self.offending(filter, str(path)),
                "filter": copied,
                "trimmed": trimmed,
                "request_id": request_id,
                "rpc_id": rpc_id(),
            }
        )

    def offending(self, filter: object, path: str) -> dict[str, Any]:
        """The node at ``path`` (as PolicyViolation renders it) with a small bounded copy of its value."""
        found, node, operator = _resolve(filter, path)
        out: dict[str, Any] = {"path": _clip(path, _MAX_PATH), "operator": operator}
        if found:
            out["value"] = self._bounded(node, _OFFENDING_VALUES)[0]
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
    ) -> dict[str, Any]:
        return self.write(
            {
                "event": "query",
                "ts": now_iso(),
                "tool": tool,
                "tenant": tenant,
                "principal": principal,
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

    def safe(self, value: object) -> Any:
        """A JSON-safe, bounded copy of ``value``: strings clipped (or scalars redacted to their
        types), at most 50 entries per object or array, 12 levels and 500 values in all."""
        return self._bounded(value, _MAX_VALUES)[0]

    def _bounded(self, value: object, max_values: int) -> tuple[Any, dict[str, int]]:
        """``safe``'s copy, and what it left out: keys, items, subtrees cut by depth, values over budget."""
        budget = [max_values]
        cut = {"keys": 0, "items": 0, "deep": 0, "values": 0}

        def copy(v: object, depth: int) -> Any:
            budget[0] -= 1
            if budget[0] < 0:
                cut["values"] += 1
                return "…"
            if isinstance(v, dict | list | tuple):
                if depth >= _MAX_DEPTH:
                    cut["deep"] += 1
                    return "<object>" if isinstance(v, dict) else "<array>"
                if isinstance(v, dict):
                    out = {self.key(k): copy(x, depth + 1) for k, x in islice(v.items(), _MAX_ITEMS)}
                    if len(v) > _MAX_ITEMS:
                        out["…"] = f"{len(v) - _MAX_ITEMS} more keys"
                        cut["keys"] += len(v) - _MAX_ITEMS
                    return out
                items = [copy(x, depth + 1) for x in islice(v, _MAX_ITEMS)]
                if len(v) > _MAX_ITEMS:
                    items.append(f"… {len(v) - _MAX_ITEMS} more items")
                    cut["items"] += len(v) - _MAX_ITEMS
                return items
            return self.scalar(v)

        copied = copy(value, 0)
        return copied, {k: n for k, n in cut.items() if n}

    def key(self, k: object) -> str:
        return _clip(k if isinstance(k, str) else repr(k), self.max_value_chars)

    def scalar(self, v: object) -> Any:
        if self.redact_values:
            return f"<{_scalar_type(v)}>"
        if v is None or isinstance(v, bool) or (isinstance(v, int) and abs(v) < 2**63):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else str(v)
        text = v if isinstance(v, str) else _render(v)
        return _clip(text, self.max_value_chars)


_OFFENDING_VALUES = 50  # the offending node's own copy is small: it is there to be read
_PATH_PART = re.compile(r'\.([^.\[\]"\s]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def _resolve(root: object, path: str) -> tuple[bool, Any, str | None]:
    """Follow a rendered path (``filter.$or[1].total["a.b"]``) into ``root``, the logged filter.

    Returns (found, node, operator): the operator is the last ``$`` key on the path. Keys that
    the path shortened ("…") match by prefix; a path outside the filter (``sort.x``) is not found.
    """
    head, _, rest = path.partition(".") if not path.startswith("filter[") else ("filter", "", path[6:])
    if "[" in head:
        head, bracket, tail = head.partition("[")
        rest = bracket + tail + ("." + rest if rest else "")
    else:
        rest = "." + rest if rest else ""
    keys: list[str | int] = []
    for m in _PATH_PART.finditer(rest):
        if m.group(2) is not None:
            keys.append(int(m.group(2)))
        else:
            keys.append(json.loads(m.group(3)) if m.group(3) is not None else m.group(1))
    operator = next((k for k in reversed(keys) if isinstance(k, str) and k.startswith("$")), None)
    node: Any = root
    if head != "filter":  # the caller logged the whole arguments (no filter argument)
        keys.insert(0, head)
    for key in keys:
        if isinstance(key, int) and isinstance(node, list) and 0 <= key < len(node):
            node = node[key]
        elif isinstance(key, str) and isinstance(node, dict):
            if key in node:
                node = node[key]
            elif key.endswith("…") and (hit := next((k for k in node if str(k).startswith(key[:-1])), None)):
                node = node[hit]
            else:
                return False, None, operator
        else:
            return False, None, operator
    return True, node, operator


# Counts the audit events of the current tool call (see ``count_events``).
_events: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "mongogate_audit_events", default=None
)


def _note_event() -> None:
    counter = _events.get()
    if counter is not None:
        counter[0] += 1


@contextlib.contextmanager
def count_events() -> Iterator[list[int]]:
    """Count the events built inside this block (and the tasks it starts): ``counter[0]``.

    The server wraps each query-tool call in it, to write one event for a call refused
    before the tool's own audit (unparsable arguments, bounds, scopes) and never two."""
    counter = [0]
    token = _events.set(counter)
    try:
        yield counter
    finally:
        _events.reset(token)


def _scalar_type(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "number", str: "string"}.get(type(value), type(value).__name__)


def _render(value: object) -> str:
    """bson types (and anything else) as text, never an error."""
    rendered = to_json(value)
    return rendered if isinstance(rendered, str) else json.dumps(rendered, default=str)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…(+{len(text) - limit} chars)"
