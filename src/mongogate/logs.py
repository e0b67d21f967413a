"""Logging set-up: text or one JSON object per line, always on stderr (stdout is the stdio transport).

Every record carries the ids of the call being served (mongogate.requests) and the fields the
server knows about it (tenant, tool, outcome, ms; see ``call_fields``), so one grep for a
request id finds the error text the model saw, the audit event and the log lines.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import uuid
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

from mongogate.clock import iso_z
from mongogate.requests import current as current_request

LogFormat = Literal["text", "json"]

#: the per-call fields a log line may carry besides its request id
FIELDS = ("tenant", "tool", "outcome", "ms")

_fields: ContextVar[dict[str, Any] | None] = ContextVar("mongogate_log_fields", default=None)

_HANDLER_NAME = "mongogate"


@contextlib.contextmanager
def call_fields(**fields: Any) -> Iterator[dict[str, Any]]:
    """Fields added to every log line written inside this block (and the tasks it starts).

    The dict yielded can be updated (``outcome``, ``ms`` once known)."""
    merged = {**(_fields.get() or {}), **{k: v for k, v in fields.items() if v is not None}}
    token = _fields.set(merged)
    try:
        yield merged
    finally:
        _fields.reset(token)


def default_instance_id() -> str:
    """host:pid:random: unique per process, readable in a log (server instances and scheduler workers)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _record_fields(record: logging.LogRecord) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ids = current_request()
    out["request_id"] = getattr(record, "request_id", None) or (ids.request_id if ids else None)
    ctx = _fields.get() or {}
    for key in FIELDS:
        value = getattr(record, key, None)
        out[key] = value if value is not None else ctx.get(key)
    return out


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, request_id, tenant, tool, outcome, ms."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": iso_z(datetime.fromtimestamp(record.created, UTC)),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(_record_fields(record))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=True, default=str)


class TextFormatter(logging.Formatter):
    """The classic line, with ``[request <id>]`` when a call is being served."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        rid = _record_fields(record)["request_id"]
        if rid and rid not in record.getMessage():
            line += f" [request {rid}]"
        return line


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is at each record (tests and the stdio server replace it),
    or to the stream it was given; never to stdout."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(stream or sys.stderr)
        self._fixed = stream

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = self._fixed or sys.stderr
        super().emit(record)


def configure(
    level: str | int = "WARNING", fmt: LogFormat = "text", stream: TextIO | None = None
) -> logging.Handler:
    """(Re)configure the root logger: our one handler (stderr, or ``stream``) replaces an earlier one."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if h.get_name() == _HANDLER_NAME:
            root.removeHandler(h)
    handler = _StderrHandler(stream)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    return handler
