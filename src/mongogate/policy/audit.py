"""The audit log: one JSON line per rejected filter (and per query if enabled).

Written to a file and to stderr, never to stdout: stdout carries the stdio transport.
A background thread does the writing (policy/audit_writer.py): no event loop waits on disk.
Values in logged filters are truncated (or redacted to their types), so the log stays
small and does not become a copy of what the model tried to smuggle.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any, TextIO

from mongogate.policy.audit_writer import AuditWriter
from mongogate.policy.render import to_json
from mongogate.requests import current as current_request

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
    ) -> None:
        if stream is not None and stream is not STDERR and stream in (sys.stdout, sys.__stdout__):
            raise ValueError("the audit log must never write to stdout (it carries the stdio transport)")
        self.path = Path(path)
        self.redact_values = redact_values
        self.max_value_chars = max_value_chars
        self._stream = stream
        self._writer = AuditWriter(self.path, self._current_stream)

    def _current_stream(self) -> TextIO | None:
        stream = sys.stderr if self._stream is STDERR else self._stream
        return None if stream is None or stream in (sys.stdout, sys.__stdout__) else stream

    async def synced(self) -> None:
        """Wait until every event written so far is in the file, without blocking the loop."""
        await self._writer.synced()

    def flush(self) -> None:
        """Block until every event written so far is in the file (plain code, not the loop)."""
        self._writer.flush()

    def close(self) -> None:
        """Write everything queued and close the file (shutdown); later events reopen it."""
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
        """Append ``event`` to the file and the stream. A failing file is reported on the stream,
        not raised: the caller is usually refusing a request already."""
        line = json.dumps(event, ensure_ascii=True, separators=(",", ":"), default=str) + "\n"
        self._writer.submit(line)
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


# -- reading -----------------------------------------------------------------------------------


def _parse_ts(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts


def matcher(
    *,
    since: datetime | None = None,
    tenant: str | None = None,
    tool: str | None = None,
    reason: str | None = None,
    event: str | None = None,
) -> Callable[[dict[str, Any]], bool]:
    """A predicate for the CLI's filters (``since`` naive means UTC)."""
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)

    def match(e: dict[str, Any]) -> bool:
        if tenant is not None and e.get("tenant") != tenant:
            return False
        if tool is not None and e.get("tool") != tool:
            return False
        if reason is not None and e.get("reason") != reason:
            return False
        if event is not None and e.get("event") != event:
            return False
        if since is not None:
            ts = _parse_ts(e.get("ts"))
            if ts is None or ts < since:
                return False
        return True

    return match


def _parse_line(line: str) -> dict[str, Any] | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def read_events(
    path: Path,
    *,
    since: datetime | None = None,
    tenant: str | None = None,
    tool: str | None = None,
    reason: str | None = None,
    event: str | None = None,
) -> Iterator[dict[str, Any]]:
    """Matching events in file order; malformed lines are skipped, a missing file yields nothing."""
    match = matcher(since=since, tenant=tenant, tool=tool, reason=reason, event=event)
    if not Path(path).exists():
        return
    with Path(path).open(encoding="utf-8", errors="replace") as f:
        for line in f:
            parsed = _parse_line(line)
            if parsed is not None and match(parsed):
                yield parsed


def summarize(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counts for ``mongogate audit``: rejections by reason and by tool, plus totals."""
    total = rejected = queries = 0
    by_reason: Counter[str] = Counter()
    by_tool: Counter[str] = Counter()
    for e in events:
        total += 1
        if e.get("event") == "filter_rejected":
            rejected += 1
            by_reason[str(e.get("reason"))] += 1
            by_tool[str(e.get("tool"))] += 1
        elif e.get("event") == "query":
            queries += 1
    return {
        "events": total,
        "rejected": rejected,
        "queries": queries,
        "by_reason": dict(by_reason.most_common()),
        "by_tool": dict(by_tool.most_common()),
    }


def follow(
    path: Path,
    *,
    since: datetime | None = None,
    tenant: str | None = None,
    tool: str | None = None,
    reason: str | None = None,
    event: str | None = None,
    from_start: bool = True,
    poll_s: float = 0.5,
    stop: Callable[[], bool] | None = None,
) -> Iterator[dict[str, Any]]:
    """Like ``tail -f``: matching events already there (if ``from_start``), then new ones as they
    arrive ("new" counts from this call). Polls; survives the file not existing yet and being
    truncated or replaced. Runs until ``stop()`` is true (or the consumer stops iterating)."""
    match = matcher(since=since, tenant=tenant, tool=tool, reason=reason, event=event)
    path = Path(path)
    st = _stat(path)
    inode = st.st_ino if st else None
    pos = 0 if from_start or st is None else st.st_size
    return _follow(path, match, inode, pos, poll_s, stop)


def _follow(
    path: Path,
    match: Callable[[dict[str, Any]], bool],
    inode: int | None,
    pos: int,
    poll_s: float,
    stop: Callable[[], bool] | None,
) -> Iterator[dict[str, Any]]:
    buf = b""
    while stop is None or not stop():
        st = _stat(path)
        if st is None:
            time.sleep(poll_s)
            continue
        if st.st_ino != inode or st.st_size < pos:  # new, replaced or truncated: read from the start
            inode, pos, buf = st.st_ino, 0, b""
        if st.st_size <= pos:
            time.sleep(poll_s)
            continue
        with path.open("rb") as f:
            f.seek(pos)
            chunk = f.read()
        pos += len(chunk)
        *lines, buf = (buf + chunk).split(b"\n")
        for raw in lines:
            parsed = _parse_line(raw.decode("utf-8", "replace"))
            if parsed is not None and match(parsed):
                yield parsed


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except FileNotFoundError:
        return None
