"""`mongogate audit`: read the audit trail of whichever sink is configured, filtered, with a summary.

`audit.sink = "file"` reads the file (`--path` to name another); "mongodb" and "both" read the
shared `audit_events` collection, where every server's events are (`--source` overrides).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mongogate.audit import AuditQuery
from mongogate.cli.audit_format import (
    EVENT_COLUMNS,
    SUMMARY_COLUMNS,
    cell,
    event_row,
    summary_rows,
    summary_text,
    table,
    to_csv,
)
from mongogate.cli.common import settings_from
from mongogate.clock import as_utc
from mongogate.config import Settings
from mongogate.errors import MongogateError


def _when(flag: str, text: str | None) -> datetime | None:
    """``--since``/``--until``: an ISO 8601 time (naive is UTC) or a duration ago."""
    if not text:
        return None
    from mongogate.server.auth.tokens import parse_ttl

    try:
        return datetime.now(UTC) - timedelta(seconds=parse_ttl(text))
    except ValueError:
        pass
    try:
        ts = datetime.fromisoformat(text)
    except ValueError as e:
        raise MongogateError(f"{flag} {text!r}: give an ISO 8601 time or a duration like 1h, 30m, 2d") from e
    return as_utc(ts)


@contextlib.contextmanager
def _collection(settings: Settings) -> Iterator[Any]:
    """`audit_events` through the read-write user: database.uri, else the data dir's engine."""
    from mongogate.audit import COLLECTION
    from mongogate.connect import mongo_client
    from mongogate.engine import client as engine_client

    uri = settings.database.uri
    if uri is None:  # the data dir's shared engine (started if needed), with its credentials
        lease = engine_client.lease(settings.server.data_dir, settings.database.engine_idle_stop_s)
        uri = lease.uri
        lease.release()
    client = mongo_client(uri, settings.database.timeout_ms)
    try:
        yield client[settings.database.name][COLLECTION]
    finally:
        client.close()


def _print(event: dict[str, Any]) -> None:
    print(json.dumps(event), flush=True)


def _format(args: argparse.Namespace) -> str:
    """``--format``, else ``--json`` (jsonl), else a table on a terminal and JSON Lines elsewhere."""
    if args.format:
        return str(args.format)
    if args.json:
        return "jsonl"
    return "table" if sys.stdout.isatty() else "jsonl"


def cmd_audit(args: argparse.Namespace) -> int:
    from mongogate.audit import follow

    settings = settings_from(args)
    source = args.source or ("file" if args.path or settings.audit.sink == "file" else "mongodb")
    path = Path(args.path) if args.path else settings.audit_path
    query = AuditQuery(
        since=_when("--since", args.since),
        until=_when("--until", args.until),
        tenant=args.tenant,
        principal=args.principal,
        tool=args.tool,
        reason=args.reason,
        instance=args.instance,
    )
    fmt = _format(args)
    where = str(path) if source == "file" else f"{settings.database.name}.audit_events"
    with contextlib.ExitStack() as stack:
        coll = stack.enter_context(_collection(settings)) if source == "mongodb" else None
        if args.follow:
            from mongogate.audit import follow_db

            stream = follow(path, query) if coll is None else follow_db(coll, query)
            with contextlib.suppress(KeyboardInterrupt):
                for event in stream:  # table: one row each (no header); csv and jsonl: JSON Lines
                    if fmt == "table":
                        print(table([event_row(event)], EVENT_COLUMNS).splitlines()[1], flush=True)
                    else:
                        _print(event)
            return 0
        read = _reader(path, coll)
        events = read(query)
        if not events:
            for line in explain_empty(read, query, settings, source, path):
                print(f"mongogate audit: {line}", file=sys.stderr)
    _output(events, fmt, args.summary, where)
    return 0


def _reader(path: Path, coll: Any) -> Callable[[AuditQuery], list[dict[str, Any]]]:
    from mongogate.audit import read_events, read_events_db

    def read(query: AuditQuery) -> list[dict[str, Any]]:
        return list(read_events(path, query) if coll is None else read_events_db(coll, query))

    return read


def _output(events: list[dict[str, Any]], fmt: str, summary: bool, where: str) -> None:
    from mongogate.audit import summarize

    s = summarize(events)
    if summary:
        rows = summary_rows(events)
        if fmt == "jsonl":
            for row in rows:
                _print(row)
            _print({"summary": {**s, "source": where}})
        elif fmt == "csv":
            sys.stdout.write(to_csv(rows, SUMMARY_COLUMNS))
        else:
            print(table(rows, SUMMARY_COLUMNS) if rows else "(no refusals or failures)")
            print("\n" + summary_text(s, where))
        return
    if fmt == "jsonl":
        for event in events:
            _print(event)
        _print({"summary": {**s, "source": where}})
    elif fmt == "csv":
        sys.stdout.write(to_csv([event_row(e) for e in events], EVENT_COLUMNS))
    else:
        if events:
            print(table([event_row(e) for e in events], EVENT_COLUMNS))
        print("\n" + summary_text(s, where))


#: filters whose values can be listed from the events when they match none
_LISTABLE = ("reason", "tenant", "principal", "tool", "instance")


def _unmatched_values(read: Callable[[AuditQuery], list[dict[str, Any]]], query: AuditQuery) -> list[str]:
    """For each listable filter given: the values the events have, when they match without it."""
    lines = []
    for name in _LISTABLE:
        value = getattr(query, name)
        if value is None:
            continue
        others = read(query.without(name))
        if others:
            seen = Counter(str(e.get(name)) for e in others).most_common(8)
            listed = ", ".join(f"{cell(v)} ({n})" for v, n in seen)
            lines.append(
                f"no event has {name} {cell(value)!r} here; {len(others)} match without "
                f"--{name}, with: {listed}"
            )
    return lines


def explain_empty(
    read: Callable[[AuditQuery], list[dict[str, Any]]],
    query: AuditQuery,
    settings: Settings,
    source: str,
    path: Path,
) -> list[str]:
    """Why nothing matched, when the cause is likely: the wrong source, or a filter value no event has."""
    sink = settings.audit.sink
    if source == "mongodb" and sink == "file":
        return [
            f"nothing in the audit_events collection: audit.sink is 'file', so servers write to "
            f"{settings.audit_path}; drop --source mongodb"
        ]
    if source == "file" and not path.exists():
        hint = (
            f"audit.sink is {sink!r}: read the collection (drop --source file)"
            if sink != "file"
            else "no refused call was written yet, or the servers use another audit.path (--config?)"
        )
        return [f"no audit file at {path}: {hint}"]
    lines = _unmatched_values(read, query)
    if not lines and (query.since or query.until):
        outside = read(query.without("since", "until"))
        if outside:
            lines.append(
                f"{len(outside)} event(s) match outside --since/--until (from {outside[0].get('ts')} "
                f"to {outside[-1].get('ts')})"
            )
    if not lines and source == "file" and sink == "mongodb":
        lines.append("audit.sink is 'mongodb': this file holds only the events the collection could not take")
    return lines


def register(sub: Any, with_config: Any) -> None:
    a = with_config(sub.add_parser("audit", help="show refused calls from the audit trail"))
    a.add_argument("--since", help="from this time: ISO 8601 or a duration ago (1h, 30m, 2d)")
    a.add_argument("--until", help="before this time: ISO 8601 or a duration ago (1h, 30m, 2d)")
    a.add_argument("--tenant")
    a.add_argument("--principal", help="only events of this caller (the token's subject)")
    a.add_argument("--tool")
    a.add_argument("--reason")
    a.add_argument("--instance", help="only events written by this server instance (server.instance_id)")
    a.add_argument("--path", help="audit log file (default: audit.path or <data dir>/audit.jsonl)")
    a.add_argument(
        "--source",
        choices=("file", "mongodb"),
        help="where to read (default: the file for audit.sink = 'file', else the audit_events collection)",
    )
    a.add_argument(
        "--summary",
        action="store_true",
        help="a table of tenant x reason: count, first and last seen, the most frequent paths",
    )
    a.add_argument(
        "--format",
        choices=("table", "jsonl", "csv"),
        help="output (default: table on a terminal, else jsonl: one event per line, the summary last)",
    )
    a.add_argument("--json", action="store_true", help="the same as --format jsonl")
    a.add_argument("--follow", action="store_true", help="keep printing new events (both sources)")
    a.set_defaults(func=cmd_audit)
