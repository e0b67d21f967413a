"""The audit log a server's settings ask for (``audit.sink``), built by the server's lifespan."""

from __future__ import annotations

from typing import Any

from mongogate.audit.log import AuditLog
from mongogate.config import Settings


def audit_from_settings(settings: Settings, uri: str | None, instance: str | None) -> AuditLog:
    """The audit log ``audit.sink`` asks for; ``uri`` is the read-write connection's (MongoDB sink)."""
    a = settings.audit
    common: dict[str, Any] = {
        "redact_values": a.redact_values,
        "max_value_chars": a.max_value_chars,
        "instance": instance,
    }
    if a.sink == "file" or uri is None:
        log = AuditLog(settings.audit_path, **common)
    else:
        log = AuditLog.for_database(
            settings.audit_path,
            uri=uri,
            db_name=settings.database.name,
            sink=a.sink,
            queue_size=a.queue_size,
            timeout_ms=settings.database.timeout_ms,
            retention_days=a.retention_days,
            **common,
        )
    log.check()  # a directory or file other users could redirect stops the server here
    return log
