"""What runs return and the checks on what they are given: plain values, no database access."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from mongogate.clock import as_utc
from mongogate.errors import InvalidInput, NotFound
from mongogate.runs import documents as rd
from mongogate.values import MAX_INT64, Doc, check_finite, check_int

RunStatus = Literal["running", "paused", "completed", "failed"]
RUN_STATUSES: tuple[str, ...] = ("running", "paused", "completed", "failed")

DEFAULT_EVENTS_LIMIT = 50
MAX_EVENTS_LIMIT = 500


@dataclass(frozen=True)
class RunLease:
    run_id: str
    lease_id: str
    lease_expires_at: datetime
    version: int
    status: str
    created: bool = False


@dataclass(frozen=True)
class SaveResult:
    """`applied`: this call wrote the checkpoint. `stale`: a version at least as new stands.

    Neither (applied=False, stale=False): this lease had already written this version (the
    acknowledgement was lost); the stored checkpoint is the caller's own.
    """

    applied: bool
    stale: bool
    version: int
    seq: int | None


@dataclass(frozen=True)
class Checkpoint:
    run_id: str
    version: int
    status: str
    state: Doc | None
    updated_at: datetime | None
    lease_expires_at: datetime | None = None
    #: the state was left out: larger than the response byte cap (`state_bytes` as JSON)
    truncated: bool = False
    state_bytes: int | None = None


@dataclass(frozen=True)
class RunEvent:
    seq: int
    version: int
    status: str
    at: datetime
    state: Doc | None = None

    @classmethod
    def from_doc(cls, d: Doc) -> RunEvent:
        """An event from its stored document (`documents.RunEventDoc`; `state` when projected)."""
        return cls(int(d[rd.SEQ]), int(d[rd.VERSION]), d[rd.STATUS], as_utc(d[rd.AT]), d.get(rd.STATE))


@dataclass(frozen=True)
class EventPage:
    events: list[RunEvent] = field(default_factory=list)
    more: bool = False
    #: the response byte cap ended the page early (or left out the state of its only event)
    truncated: bool = False


def event_shape(event: RunEvent) -> dict[str, object]:
    """An event as run_events returns it: what the response byte cap measures."""
    return {
        "seq": event.seq,
        "version": event.version,
        "status": event.status,
        "at": event.at.isoformat(),
        "state": event.state,
    }


def run_not_found(run_id: str) -> NotFound:
    # The same words whether the run is missing or another tenant's.
    return NotFound(f"run {run_id!r} not found; acquire_run creates a run on first use")


def run_key(tenant: str, run_id: str) -> str:
    # run ids may not contain ':', so the last ':' separates them and keys never collide.
    return f"{tenant}:{run_id}"


def check_state_keys(value: object, path: str = "") -> None:
    """Keys a document can store and a query cannot mistake for operators; finite numbers only."""
    if not path:
        check_finite(value, "state")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str) or not k or k.startswith("$") or "\x00" in k:
                raise InvalidInput(
                    f"state key {k!r} at {path or 'state'} is not allowed: keys must be non-empty strings "
                    "that do not start with '$' or contain NUL"
                )
            check_state_keys(v, f"{path}.{k}" if path else f"state.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            check_state_keys(v, f"{path or 'state'}[{i}]")


def check_version(version: object) -> int:
    # Versions are stored as BSON int64.
    return check_int(version, "version", 1, MAX_INT64, hint="2**63-1 at most")


def check_status(status: object) -> str:
    if not isinstance(status, str) or status not in RUN_STATUSES:
        raise InvalidInput(f"status must be one of {', '.join(RUN_STATUSES)}; got {status!r}")
    return status


def check_limit(limit: object) -> int:
    return check_int(limit, "limit", 1, MAX_EVENTS_LIMIT, default=DEFAULT_EVENTS_LIMIT)


def check_after_seq(after_seq: object) -> int | None:
    """None (from the start), or a seq: a larger value than int64 cannot be compared by the server."""
    if after_seq is None:
        return None
    return check_int(after_seq, "after_seq", 0, MAX_INT64)
