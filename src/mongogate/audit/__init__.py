"""The audit trail: one event per refused call, written to a file and/or ``audit_events``.

``log`` builds events (``AuditLog``), ``file`` and ``mongo`` are its sinks on one background
queue (``queue``), ``read``/``store`` read them back with one ``AuditQuery`` (``query``).
Plain Python over pymongo: never MCP, the server or the tools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mongogate.audit.forbidden import allowed_names
from mongogate.audit.log import AuditLog, Rejection
from mongogate.audit.query import AuditQuery
from mongogate.audit.read import follow, read_events, summarize
from mongogate.audit.setup import audit_from_settings
from mongogate.audit.store import COLLECTION, follow_db, read_events_db
from mongogate.lazy import lazy_exports

if TYPE_CHECKING:
    from mongogate.audit.erase import ERASURE
else:  # what `erase` reads, never a started server
    __getattr__ = lazy_exports(__name__, {"ERASURE": "mongogate.audit.erase"})

__all__ = [
    "COLLECTION",
    "ERASURE",
    "AuditLog",
    "AuditQuery",
    "Rejection",
    "allowed_names",
    "audit_from_settings",
    "follow",
    "follow_db",
    "read_events",
    "read_events_db",
    "summarize",
]
