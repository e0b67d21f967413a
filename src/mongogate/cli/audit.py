"""`mongogate audit`: read the audit trail, filtered, with a summary."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mongogate.cli.common import settings_from
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


def cmd_audit(args: argparse.Namespace) -> int:
    from mongogate.policy.audit import follow, read_events, summarize

    settings = settings_from(args)
    path = Path(args.path) if args.path else settings.audit_path
    filters = {"since": _since(args.since), "tenant": args.tenant, "tool": args.tool, "reason": args.reason}
    if args.follow:
        try:
            for event in follow(path, **filters):
                print(json.dumps(event), flush=True)
        except KeyboardInterrupt:
            return 0
        return 0
    events = list(read_events(path, **filters))
    for event in events:
        print(json.dumps(event))
    s = summarize(events)
    print(f"\n{s['rejected']} rejected filter(s), {s['queries']} query event(s) in {path}")
    for title, key in (("by reason", "by_reason"), ("by tool", "by_tool")):
        if s[key]:
            print(f"  {title}: " + ", ".join(f"{k} {v}" for k, v in s[key].items()))
    return 0


def register(sub: Any, with_config: Any) -> None:
    a = with_config(sub.add_parser("audit", help="show rejected filters from the audit log"))
    a.add_argument("--since", help="ISO 8601 time or a duration (1h, 30m, 2d)")
    a.add_argument("--tenant")
    a.add_argument("--tool")
    a.add_argument("--reason")
    a.add_argument("--path", help="audit log file (default: audit.path or <data dir>/audit.jsonl)")
    a.add_argument("--follow", action="store_true", help="keep printing new events")
    a.set_defaults(func=cmd_audit)
