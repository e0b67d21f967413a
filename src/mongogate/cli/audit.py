"""`mongogate audit`: read the audit trail of whichever sink is configured, filtered, with a summary.

`audit.sink = "file"` reads the file (`--path` to name another); "mongodb" and "both" read the
shared `audit_events` collection, where every server's events are (`--source` overrides).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mongogate.cli.common import settings_from
from mongogate.config import Settings
from mongogate.errors import MongogateError


def _since(text: str | None) -> datetime | None:
    if not text:
        return None
    from mongogate.server.tokens import parse_ttl

    try:
        return datetime.now(UTC) - timedelta(seconds=parse_ttl(text))
    except ValueError:
        pass
    try:
        ts = datetime.fromisoformat(text)
    except ValueError as e:
        raise MongogateError(f"--since {text!r}: give an ISO 8601 time or a duration like 1h, 30m, 2d") from e
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


@contextlib.contextmanager
def _collection(settings: Settings) -> Iterator[Any]:
    """`audit_events` through the read-write user: database.uri, else the data dir's engine."""
    from pymongo import MongoClient

    from mongogate.engine import client as engine_client
    from mongogate.policy.audit_store import COLLECTION

    uri = settings.database.uri
    if uri is None:  # the data dir's shared engine (started if needed), with its credentials
        lease = engine_client.lease(settings.server.data_dir, settings.database.engine_idle_stop_s)
        uri = lease.uri
        lease.release()
    client: Any = MongoClient(uri, serverSelectionTimeoutMS=settings.database.timeout_ms, tz_aware=True)
    try:
        yield client[settings.database.name][COLLECTION]
    finally:
        client.close()


def _print(event: dict[str, Any]) -> None:
    print(json.dumps(event), flush=True)


def cmd_audit(args: argparse.Namespace) -> int:
    from mongogate.policy.audit_read import follow, read_events, summarize
    from mongogate.policy.audit_store import follow_db, read_events_db

    settings = settings_from(args)
    source = args.source or ("file" if args.path or settings.audit.sink == "file" else "mongodb")
    path = Path(args.path) if args.path else settings.audit_path
    filters: dict[str, Any] = {
        "since": _since(args.since),
        "tenant": args.tenant,
        "tool": args.tool,
        "reason": args.reason,
        "instance": args.instance,
    }
    where = str(path) if source == "file" else f"{settings.database.name}.audit_events"
    with contextlib.ExitStack() as stack:
        coll = stack.enter_context(_collection(settings)) if source == "mongodb" else None
        if args.follow:
            stream = follow(path, **filters) if coll is None else follow_db(coll, **filters)
            with contextlib.suppress(KeyboardInterrupt):
                for event in stream:
                    _print(event)
            return 0
        events = list(read_events(path, **filters) if coll is None else read_events_db(coll, **filters))
    for event in events:
        _print(event)
    s = summarize(events)
    if args.json:
        print(json.dumps({"summary": {**s, "source": where}}))
        return 0
    print(f"\n{s['rejected']} rejected filter(s), {s['queries']} query event(s) in {where}")
    for title, key in (("by reason", "by_reason"), ("by tool", "by_tool"), ("by tenant", "by_tenant")):
        if s[key]:
            print(f"  {title}: " + ", ".join(f"{k} {v}" for k, v in s[key].items()))
    return 0


def register(sub: Any, with_config: Any) -> None:
    a = with_config(sub.add_parser("audit", help="show rejected filters from the audit trail"))
    a.add_argument("--since", help="ISO 8601 time or a duration (1h, 30m, 2d)")
    a.add_argument("--tenant")
    a.add_argument("--tool")
    a.add_argument("--reason")
    a.add_argument("--instance", help="only events written by this server instance (server.instance_id)")
    a.add_argument("--path", help="audit log file (default: audit.path or <data dir>/audit.jsonl)")
    a.add_argument(
        "--source",
        choices=("file", "mongodb"),
        help="where to read (default: the file for audit.sink = 'file', else the audit_events collection)",
    )
    a.add_argument("--json", action="store_true", help="machine output: the summary as a last JSON line too")
    a.add_argument("--follow", action="store_true", help="keep printing new events (both sources)")
    a.set_defaults(func=cmd_audit)
