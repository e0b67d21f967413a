"""Reading the audit file: filters, a summary, and ``tail -f`` (``mongogate audit``).

The MongoDB sink is read by audit/store.py with the same query (audit/query.py) and summary.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from mongogate.audit.query import AuditQuery


def _parse_line(line: str) -> dict[str, Any] | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def read_events(path: Path, query: AuditQuery | None = None) -> Iterator[dict[str, Any]]:
    """Events ``query`` matches (all by default) in file order; malformed lines are skipped,
    a missing file yields nothing."""
    match = (query or AuditQuery()).matches
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
    query: AuditQuery | None = None,
    *,
    from_start: bool = True,
    poll_s: float = 0.5,
    stop: Callable[[], bool] | None = None,
) -> Iterator[dict[str, Any]]:
    """Like ``tail -f``: matching events already there (if ``from_start``), then new ones as they
    arrive ("new" counts from this call). Polls; survives the file not existing yet and being
    truncated or replaced. Runs until ``stop()`` is true (or the consumer stops iterating)."""
    match = (query or AuditQuery()).matches
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
