"""The run (checkpoint) tools: thin MCP adapters over `mongogate.runs.Runs`.

Registered with ``registry.add_tools(run_tools)``; the server's lifespan builds the ``Runs``
service and, when these tools are registered, its indexes.
The tenant is always the caller's; a run id of another tenant behaves like a missing one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from mcp.server.mcpserver.tools import Tool
from pydantic import Field

from mongogate.config import MemorySettings, Settings
from mongogate.runs import RUN_STATUSES, RunStatus
from mongogate.tools.base import (
    ID_RULES,
    IDEMPOTENT_WRITE,
    READ_ONLY,
    WRITE,
    Call,
    IdStr,
    ToolInput,
    ToolOutput,
    limit,
    make_tool,
)
from mongogate.tools.limits import run_limits
from mongogate.values import MAX_INT64


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


RUN_ID = "Your id for the run, chosen once and reused to resume it; " + ID_RULES + "."
LEASE_ID = "The lease_id returned by acquire_run; " + ID_RULES + "."
STATUS = f"One of {', '.join(RUN_STATUSES)}."


class AcquireRunIn(ToolInput):
    run_id: IdStr = Field(description=RUN_ID)
    lease_ms: int | None = Field(
        default=None,
        description="Lease length in milliseconds, from 100 to {max_lease_ms}; default {lease_ms}.",
        json_schema_extra=limit(minimum=100, maximum="max_lease_ms"),
    )
    lease_id: IdStr | None = Field(
        default=None,
        description="Your current lease on this run, to renew it (a heartbeat) instead of taking a new "
        "one; " + ID_RULES + ".",
    )


class AcquireRunOut(ToolOutput):
    run_id: str
    lease_id: str
    lease_expires_at: str
    version: int
    status: str
    created: bool


class ReleaseRunIn(ToolInput):
    run_id: IdStr = Field(description=RUN_ID)
    lease_id: IdStr = Field(description=LEASE_ID)


class ReleaseRunOut(ToolOutput):
    released: bool


class SaveCheckpointIn(ToolInput):
    run_id: IdStr = Field(description=RUN_ID)
    lease_id: IdStr = Field(description=LEASE_ID)
    version: int = Field(
        description="Must be higher than the stored version (start at 1); at most 2**63-1.",
        json_schema_extra=limit(minimum=1, maximum=MAX_INT64),
    )
    state: dict[str, Any] = Field(
        description="The whole state to resume from: a JSON object of at most {max_state_bytes} bytes, as "
        "BSON and as JSON (memory.max_state_bytes); keys may not start with '$'; finite numbers only."
    )
    status: RunStatus = Field(default="running", description=STATUS + " completed/failed end the run.")


class SaveCheckpointOut(ToolOutput):
    applied: bool
    stale: bool
    version: int
    seq: int | None


class LoadCheckpointIn(ToolInput):
    run_id: IdStr = Field(description=RUN_ID)


class LoadCheckpointOut(ToolOutput):
    run_id: str
    version: int
    status: str
    state: dict[str, Any] | None
    updated_at: str | None
    lease_expires_at: str | None
    truncated: bool = Field(
        default=False,
        description="the state is larger than the response byte cap (limits.max_response_bytes) and was "
        "left out (state is null); state_bytes is its size as JSON",
    )
    state_bytes: int | None = None


class RunEventsIn(ToolInput):
    run_id: IdStr = Field(description=RUN_ID)
    after_seq: int | None = Field(
        default=None,
        description="Return events after this seq (the last seq you saw); omit for the first page.",
        json_schema_extra=limit(minimum=0, maximum=MAX_INT64),
    )
    limit: int | None = Field(
        default=None,
        description="Events to return, from 1 to {max_events}; default {default_events}.",
        json_schema_extra=limit(minimum=1, maximum="max_events"),
    )
    include_state: bool = Field(default=False, description="Include each checkpoint's state (larger).")


class RunEventOut(ToolOutput):
    seq: int
    version: int
    status: str
    at: str
    state: dict[str, Any] | None = None


class RunEventsOut(ToolOutput):
    events: list[RunEventOut]
    more: bool
    truncated: bool = Field(
        default=False,
        description="the response byte cap (limits.max_response_bytes) ended this page before limit events "
        "(more is true: page on with after_seq), or left out the state of its only event",
    )


async def _acquire_run(call: Call, a: AcquireRunIn) -> AcquireRunOut:
    runs = call.app.runs
    tenant = call.principal.tenant
    if a.lease_id is not None:
        until = await runs.heartbeat(tenant, a.run_id, a.lease_id, a.lease_ms)
        cp = await runs.load_checkpoint(tenant, a.run_id)
        return AcquireRunOut(
            run_id=a.run_id,
            lease_id=a.lease_id,
            lease_expires_at=until.isoformat(),
            version=cp.version,
            status=cp.status,
            created=False,
        )
    lease = await runs.acquire(tenant, a.run_id, a.lease_ms)
    return AcquireRunOut(
        run_id=lease.run_id,
        lease_id=lease.lease_id,
        lease_expires_at=lease.lease_expires_at.isoformat(),
        version=lease.version,
        status=lease.status,
        created=lease.created,
    )


async def _release_run(call: Call, a: ReleaseRunIn) -> ReleaseRunOut:
    runs = call.app.runs
    return ReleaseRunOut(released=await runs.release(call.principal.tenant, a.run_id, a.lease_id))


async def _save_checkpoint(call: Call, a: SaveCheckpointIn) -> SaveCheckpointOut:
    runs = call.app.runs
    r = await runs.save_checkpoint(call.principal.tenant, a.run_id, a.lease_id, a.version, a.state, a.status)
    return SaveCheckpointOut(applied=r.applied, stale=r.stale, version=r.version, seq=r.seq)


async def _load_checkpoint(call: Call, a: LoadCheckpointIn) -> LoadCheckpointOut:
    runs = call.app.runs
    cp = await runs.load_checkpoint(
        call.principal.tenant, a.run_id, call.app.settings.limits.max_response_bytes
    )
    return LoadCheckpointOut(
        run_id=cp.run_id,
        version=cp.version,
        status=cp.status,
        state=cp.state,
        updated_at=_iso(cp.updated_at),
        lease_expires_at=_iso(cp.lease_expires_at),
        truncated=cp.truncated,
        state_bytes=cp.state_bytes,
    )


async def _run_events(call: Call, a: RunEventsIn) -> RunEventsOut:
    runs = call.app.runs
    page = await runs.run_events(
        call.principal.tenant,
        a.run_id,
        a.after_seq,
        a.limit,
        include_state=a.include_state,
        max_bytes=call.app.settings.limits.max_response_bytes,
    )
    return RunEventsOut(
        events=[
            RunEventOut(seq=e.seq, version=e.version, status=e.status, at=e.at.isoformat(), state=e.state)
            for e in page.events
        ],
        more=page.more,
        truncated=page.truncated,
    )


def run_tools(settings: Settings | None = None) -> list[Tool]:
    """The five run tools (`config.RUN_TOOL_NAMES`); takes the registry's factory argument."""
    limits = run_limits(settings.memory if settings is not None else MemorySettings())
    return [
        make_tool(
            name="acquire_run",
            title="Acquire run lease",
            description=(
                "Take the lease of a long run (created on first use at version 0) before working on it; "
                "returns lease_id and the stored version and status to resume from (then load_checkpoint). "
                "Pass your current lease_id to renew the lease while you work. A run leased by another "
                "worker is a retryable error that says when its lease expires."
            ),
            input_model=AcquireRunIn,
            output_model=AcquireRunOut,
            handler=_acquire_run,
            annotations=WRITE,
            limits=limits,
        ),
        make_tool(
            name="save_checkpoint",
            title="Save checkpoint",
            description=(
                "Save the run's whole state with a version higher than the stored one. applied=true: "
                "written (seq is its event number). stale=true: a version at least as new is stored; "
                "nothing was written. A lease that no longer owns the run is an error: stop working on it."
            ),
            input_model=SaveCheckpointIn,
            output_model=SaveCheckpointOut,
            handler=_save_checkpoint,
            annotations=IDEMPOTENT_WRITE,
            limits=limits,
        ),
        make_tool(
            name="load_checkpoint",
            title="Load checkpoint",
            description="Read a run's latest saved state, version and status, to resume from.",
            input_model=LoadCheckpointIn,
            output_model=LoadCheckpointOut,
            handler=_load_checkpoint,
            annotations=READ_ONLY,
            limits=limits,
        ),
        make_tool(
            name="run_events",
            title="Run events",
            description=(
                "Read a run's checkpoint log in order (one event per applied checkpoint). Page with "
                "after_seq = the last seq you saw; more=true says another page exists."
            ),
            input_model=RunEventsIn,
            output_model=RunEventsOut,
            handler=_run_events,
            annotations=READ_ONLY,
            limits=limits,
        ),
        make_tool(
            name="release_run",
            title="Release run lease",
            description=(
                "Release a run's lease when you stop working on it; released=false means your lease "
                "no longer owned the run (nothing changed)."
            ),
            input_model=ReleaseRunIn,
            output_model=ReleaseRunOut,
            handler=_release_run,
            annotations=IDEMPOTENT_WRITE,
            limits=limits,
        ),
    ]
