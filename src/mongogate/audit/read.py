"""Reading the audit file: filters, a summary, and ``tail -f`` (``mongogate audit``).

The MongoDB sink is read by audit/store.py with the same filters and summary.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def parse_ts(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value
    if not isinstance(value, str):
        return None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts


#: the filters that pick events by one field's value (``since``/``until`` are the time window)
FIELD_FILTERS = ("tenant", "principal", "tool", "reason", "event", "instance")


def field_filters(fields: dict[str, str | None]) -> dict[str, str]:
    """The field filters that are set; an unknown name is a programming error."""
    unknown = sorted(set(fields) - set(FIELD_FILTERS))
    if unknown:
        raise TypeError(f"unknown audit filter(s) {unknown}; known: {', '.join(FIELD_FILTERS)}")
    return {k: v for k, v in fields.items() if v is not None}


def matcher(
    *, since: datetime | None = None, until: datetime | None = None, **fields: str | None
) -> Callable[[dict[str, Any]], bool]:
    """A predicate for the CLI's filters (``since`` <= ts < ``until``; naive means UTC)."""
    since, until = _aware(since), _aware(until)
    checks = list(field_filters(fields).items())

    def match(e: dict[str, Any]) -> bool:
        if any(e.get(k) != v for k, v in checks):
            return False
        if since is not None or until is not None:
            ts = parse_ts(e.get("ts"))
            if ts is None or (since is not None and ts < since) or (until is not None and ts >= until):
                return False
        return True

    return match


def _aware(ts: datetime | None) -> datetime | None:
    return ts.replace(tzinfo=UTC) if ts is not None and ts.tzinfo is None else ts


def _parse_line(line: str) -> dict[str, Any] | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def read_events(path: Path, **filters: Any) -> Iterator[dict[str, Any]]:
    """Matching events in file order (``filters``: those of ``matcher``); malformed lines are
    skipped, a missing file yields nothing."""
    match = matcher(**filters)
    if not Path(path).exists():
        return
    with Path(path).open(encoding="utf-8", errors="replace") as f:
        for line in f:
            parsed = _parse_line(line)
            if parsed is not None and match(parsed):
                yield parsed


def summarize(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counts for ``mongogate audit``: rejections by reason, by tool and by tenant, plus totals."""
    total = rejected = queries = storage_errors = 0
    by_reason: Counter[str] = Counter()
    by_tool: Counter[str] = Counter()
    by_tenant: Counter[str] = Counter()
    for e in events:
        total += 1
        if e.get("event") == "filter_rejected":
            rejected += 1
            by_reason[str(e.get("reason"))] += 1
            by_tool[str(e.get("tool"))] += 1
            by_tenant[str(e.get("tenant"))] += 1
        elif e.get("event") == "query":
            queries += 1
        elif e.get("event") == "storage_error":  # the database failed an allowed call: not a rejection
            storage_errors += 1
    return {
        "events": total,
        "rejected": rejected,
        "storage_errors": storage_errors,
        "queries": queries,
        "by_reason": dict(by_reason.most_common()),
        "by_tool": dict(by_tool.most_common()),
        "by_tenant": dict(by_tenant.most_common()),
    }


def follow(
    path: Path,
    *,
    from_start: bool = True,
    poll_s: float = 0.5,
    stop: Callable[[], bool] | None = None,
    **filters: Any,
) -> Iterator[dict[str, Any]]:
    """Like ``tail -f``: matching events already there (if ``from_start``), then new ones as they
    arrive ("new" counts from this call). Polls; survives the file not existing yet and being
    truncated or replaced. Runs until ``stop()`` is true (or the consumer stops iterating)."""
    match = matcher(**filters)
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
