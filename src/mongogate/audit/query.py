"""One query over audit events, for the file reader, the ``audit_events`` reader and the CLI.

``since`` <= ts < ``until`` (a naive time means UTC) and one value per field filter; the file
reader asks ``matches``, the collection reader sends ``mongo_filter()``: the same question, so
``mongogate audit`` answers the same from either sink.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mongogate.clock import as_utc

#: the filters that pick events by one field's value (``since``/``until`` are the time window)
FIELD_FILTERS = ("tenant", "principal", "tool", "reason", "event", "instance")


def parse_ts(value: object) -> datetime | None:
    """An event's ``ts`` (ISO text from the file, a BSON date from MongoDB) as an aware time."""
    if isinstance(value, datetime):
        return as_utc(value)
    if not isinstance(value, str):
        return None
    try:
        return as_utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError:
        return None


@dataclass(frozen=True, kw_only=True)
class AuditQuery:
    """Which events to read; every field left None matches everything."""

    since: datetime | None = None
    until: datetime | None = None
    tenant: str | None = None
    principal: str | None = None
    tool: str | None = None
    reason: str | None = None
    event: str | None = None
    instance: str | None = None

    def __post_init__(self) -> None:
        for name in ("since", "until"):
            ts = getattr(self, name)
            if ts is not None:
                object.__setattr__(self, name, as_utc(ts))

    def fields(self) -> dict[str, str]:
        """The field filters that are set."""
        return {k: v for k in FIELD_FILTERS if (v := getattr(self, k)) is not None}

    def without(self, *names: str) -> AuditQuery:
        """The same query with ``names`` no longer filtered (``mongogate audit`` explains an empty answer)."""
        return dataclasses.replace(self, **dict.fromkeys(names))

    def matches(self, event: dict[str, Any]) -> bool:
        if any(event.get(k) != v for k, v in self.fields().items()):
            return False
        if self.since is None and self.until is None:
            return True
        ts = parse_ts(event.get("ts"))
        return not (
            ts is None
            or (self.since is not None and ts < self.since)
            or (self.until is not None and ts >= self.until)
        )

    def mongo_filter(self, *, since: datetime | None = None) -> dict[str, Any]:
        """The same question as ``matches`` for ``audit_events`` (``since`` narrows the window:
        ``--follow`` re-reads only a window behind the newest event seen)."""
        q: dict[str, Any] = dict(self.fields())
        low = self.since if since is None else since if self.since is None else max(self.since, as_utc(since))
        window: dict[str, Any] = {}
        if low is not None:
            window["$gte"] = low
        if self.until is not None:
            window["$lt"] = self.until
        if window:
            q["ts"] = window
        return q
