"""The stored documents of runs, in one place: their shapes (`TypedDict`) and field names.

Two collections: `runs` (one checkpoint document per run, `_id` = `<tenant>:<run_id>`, guarded by
a lease and a monotonic version) and `run_events` (one event per applied checkpoint, `_id` =
`<tenant>:<run_id>:<seq>`). Code that writes or queries them names their fields through the
constants here; code that reads them goes through `RunEvent.from_doc` and `Checkpoint` built in
`service.py`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, TypedDict

from mongogate import leases
from mongogate.values import Doc

RUNS_COLLECTION: Final = "runs"
EVENTS_COLLECTION: Final = "run_events"

# fields both documents have
ID: Final = "_id"
TENANT: Final = "tenant"
RUN_ID: Final = "run_id"
VERSION: Final = "version"
STATUS: Final = "status"
STATE: Final = "state"
#: set only on completed runs (and their events), when `memory.completed_run_ttl_s` is set: the TTL index
EXPIRE_AT: Final = "expire_at"

# ---------------------------------------------------------------- runs
#: the event number the next applied checkpoint takes
NEXT_SEQ: Final = "next_seq"
#: the lease's fields (`leases.LEASE_FIELDS`: `leases.py` writes them, for sessions too)
LOCKED_BY: Final = leases.LOCKED_BY
LOCKED_UNTIL: Final = leases.LOCKED_UNTIL
CREATED_AT: Final = "created_at"
UPDATED_AT: Final = "updated_at"
#: the lease id that wrote the stored version (a retried save recognises its own write)
WRITTEN_BY: Final = "written_by"
#: the status the last save replaced (a reopened run's events stop expiring)
STATUS_BEFORE: Final = "status_before"
#: a save's own nonce: whether the document returned holds this call's save
SAVE_NONCE: Final = "save_nonce"

# ---------------------------------------------------------------- run_events
SEQ: Final = "seq"
LEASE_ID: Final = "lease_id"
AT: Final = "at"


class RunDoc(TypedDict, total=False):
    """A run's checkpoint document."""

    _id: str
    tenant: str
    run_id: str
    version: int
    status: str
    state: Doc | None
    next_seq: int
    locked_by: str | None
    locked_until: datetime | None
    created_at: datetime
    updated_at: datetime | None
    expire_at: datetime | None
    written_by: str
    status_before: str | None
    save_nonce: str


class RunEventDoc(TypedDict):
    """One applied checkpoint, in the run's append-only log."""

    _id: str
    tenant: str
    run_id: str
    seq: int
    version: int
    status: str
    state: Doc | None
    lease_id: str | None
    at: datetime
    expire_at: datetime | None
