"""One error hierarchy. Messages are written for the model: what went wrong, what would work."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from datetime import datetime


class MongogateError(Exception):
    """Base of every error mongogate raises on purpose."""

    #: stable machine-readable code (used by the audit log and in tool errors)
    code: str = "error"
    #: whether retrying the same call later may succeed
    retryable: bool = False
    #: the CLI's exit status when this error stops a command (docs/operations.md, "Exit statuses")
    exit_status: int = 2
    #: the argument a refusal names (``filter.$where``, ``sort``), when it names one
    path: str | None = None


class ConfigError(MongogateError):
    """The configuration is invalid; raised at startup, never mid-request."""

    code = "config_invalid"


class InUse(ConfigError):
    """A port or data directory another process holds; raised at startup before anything is served."""

    code = "in_use"
    exit_status = 4


class InvalidInput(MongogateError):
    """A tool argument is wrong (unknown role, empty id, oversized content, bad limit...)."""

    code = "invalid_input"

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)


class NotFound(MongogateError):
    """The thing does not exist for this tenant (another tenant's id looks exactly the same)."""

    code = "not_found"


class PolicyViolation(MongogateError):
    """A query filter (or sort/limit) broke the tool's policy; nothing reached the database."""

    path: str

    def __init__(self, reason: str, path: str, message: str, allowed: str | None = None) -> None:
        self.reason = reason
        self.path = path
        self.allowed = allowed
        # The reason is the tool error's [code] already: the text names where and what is allowed.
        text = f"{path}: {message}"
        if allowed:
            text += f"; allowed: {allowed}"
        super().__init__(text)

    @property
    def code(self) -> str:  # type: ignore[override]
        return self.reason


class AuthError(MongogateError):
    """The caller could not be authenticated or lacks a required scope."""

    code = "unauthorized"


class StorageError(MongogateError):
    """The database failed or is unreachable; wraps the driver error with `from`.

    The message says what failed and when to retry, in one sentence; the driver's own text
    (topology dumps, hosts) goes to the server log with the request id, never to the model.
    """

    code = "storage_error"
    retryable = True
    exit_status = 3

    def __init__(self, what: str, retry_after_s: int = 5, *, advice: str | None = None) -> None:
        self.what = what
        self.retry_after_s = retry_after_s
        tail = advice or f"the database failed or did not answer; retry in about {retry_after_s} s"
        super().__init__(f"{what}: {tail}")


class WriteRefused(StorageError):
    """The database refuses writes for a reason a prompt retry cannot fix (its disk is full, its
    storage is read-only): not retryable, and readiness reports it until a write succeeds again."""

    retryable = False

    def __init__(self, what: str, why: str) -> None:
        self.why = why
        super().__init__(
            what,
            advice=f"the database refused the write: {why}. Retrying soon will not help until an operator "
            "frees space or makes it writable (reads still work)",
        )


class ReplyTooLarge(StorageError):
    """The database's reply is larger than the wire protocol's message limit: the same call always
    fails the same way, so it is not retryable; the message names the limit."""

    retryable = False

    def __init__(self, what: str, limit_bytes: int | None) -> None:
        self.limit_bytes = limit_bytes
        limit = f"{limit_bytes} bytes" if limit_bytes is not None else "its size limit"
        super().__init__(
            what,
            advice=f"the database's reply is larger than the wire limit of {limit} (the server's "
            "maxMessageSizeBytes); the same call fails again: ask for less (a smaller limit or window)",
        )


class LeaseBusy(MongogateError):
    """Someone else holds the lease; retry after it expires."""

    code = "lease_busy"
    retryable = True

    def __init__(self, what: str, expires_at: datetime, ms_left: int, holder: str = "another turn") -> None:
        self.expires_at = expires_at
        self.ms_left = ms_left
        super().__init__(
            f"{what} is busy: {holder} holds its lease until {expires_at.isoformat()} "
            f"({ms_left} ms from now). Retry after that; nothing was written."
        )


class LeaseLost(MongogateError):
    """The caller's lease no longer owns the session or run; it must stop, nothing was written."""

    code = "lease_lost"


class Conflict(MongogateError):
    """An idempotency key was reused with different content, or the write belongs to a lease holder."""

    code = "conflict"


class EmbeddingUnavailable(MongogateError):
    """The embedding model failed or timed out; nothing was stored, the same call may succeed later."""

    code = "embedding_unavailable"
    retryable = True


class QuotaExceeded(MongogateError):
    """A scope holds as many items as its configured quota allows; nothing was written."""

    code = "quota_exceeded"


class InternalError(MongogateError):
    """An unexpected failure; its detail is in the server log under the request id, never shown."""

    code = "internal"
    retryable = True


class CodeUnavailable(InternalError):
    """A tool whose code failed to load in this server (tools/stored_tools.py): every retry fails
    the same way until the server is mended, so it is not retryable."""

    retryable = False


def unknown_key(key: str, known: Iterable[str]) -> str:
    """The message for a key that no setting or spec field has, with the nearest known one."""
    names = sorted(known)
    match = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    if match:
        return f"unknown key {key!r}; did you mean {match[0]!r}?"
    return f"unknown key {key!r}; known keys: {', '.join(names)}"


class Busy(MongogateError):
    """The caller's tenant already runs as many calls as it may (limits.tenant_concurrency) and its
    queue is full or the wait ran out; nothing was run, and a retry soon can succeed."""

    code = "busy"
    retryable = True
