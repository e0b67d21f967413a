"""The ids of the request being served, shared by tool errors, logs and audit events.

`request_id` is random (JSON-RPC ids repeat across connections and servers), so one grep
finds a call in the server log, the audit log and the error text the model saw; `rpc_id`
is the JSON-RPC id the client chose, kept beside it for client-side correlation. The call's
`Outcome` is recorded here where it is decided (tools/base.py) and read, as a value, by the one
middleware that counts it and audits a refusal (server/observe.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from mongogate.errors import InternalError, MongogateError, StorageError


@dataclass(frozen=True)
class Outcome:
    """How a tool call ended: what the model is told, the metric counts and the audit records.

    Made once from the error that ended the call (`of`); the `[code] (retryable)? message` text is
    rendered from it (tools/base.py ``error_text``), never parsed back."""

    code: str
    retryable: bool = False
    #: what went wrong and what would work, for the model
    message: str = ""
    #: the argument the refusal names (``filter.$where``, ``sort``), else ``arguments``
    path: str = "arguments"
    #: refused by the tool's own policy walk (its audit event logs the argument the walk read)
    policy: bool = False
    #: the failure's detail is in the server log: the text cites the request id
    logged: bool = False

    @property
    def ok(self) -> bool:
        return self.code == "ok"

    @classmethod
    def of(cls, err: MongogateError, *, policy: bool = False, logged: bool | None = None) -> Outcome:
        return cls(
            code=err.code,
            retryable=err.retryable,
            message=str(err),
            path=err.path or "arguments",
            policy=policy,
            logged=isinstance(err, StorageError | InternalError) if logged is None else logged,
        )


OK = Outcome("ok")


@dataclass(frozen=True)
class RequestIds:
    request_id: str
    rpc_id: str | None = None
    _outcomes: list[Outcome] = field(default_factory=list, compare=False, repr=False)

    def record(self, outcome: Outcome) -> None:
        """The call's outcome, where it is decided (the last one recorded wins)."""
        self._outcomes[:] = [outcome]

    @property
    def outcome(self) -> Outcome | None:
        return self._outcomes[0] if self._outcomes else None


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
