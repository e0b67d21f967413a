"""The ids of the request being served, shared by tool errors, logs and audit events.

`request_id` is random (JSON-RPC ids repeat across connections and servers), so one grep
finds a call in the server log, the audit log and the error text the model saw; `rpc_id`
is the JSON-RPC id the client chose, kept beside it for client-side correlation.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestIds:
    request_id: str
    rpc_id: str | None = None


_current: ContextVar[RequestIds | None] = ContextVar("mongogate_request", default=None)


def new_request_id() -> str:
    return uuid.uuid4().hex[:16]


def current() -> RequestIds | None:
    return _current.get()


@contextmanager
def serving(rpc_id: object = None) -> Iterator[RequestIds]:
    """Everything awaited inside (the tool, its audit events, its log lines) shares these ids."""
    ids = RequestIds(new_request_id(), None if rpc_id is None else str(rpc_id))
    token = _current.set(ids)
    try:
        yield ids
    finally:
        _current.reset(token)
