"""What `worker --status` reports, read from the schedule documents alone (no worker needed).

Each agent is in one state: `running` (a claimed tick has not reported; shown with its
deadline), `abandoned` (a claimed tick's deadline and grace passed without an outcome: its
worker died), `late` (its slot has passed and nobody has claimed it) or `waiting`. Lag is
measured from the slot (`due_at`), not from a jittered start, so a restart cannot hide it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Literal, TextIO

from pymongo import ASCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError

from mongogate.clock import as_utc
from mongogate.errors import StorageError
from mongogate.scheduler.slots import is_finished
from mongogate.values import Doc

State = Literal["running", "abandoned", "late", "waiting"]


@dataclass(frozen=True)
class AgentStatus:
    agent_key: str
    interval_s: float | None
    state: State
    #: the slot the next tick answers (before any start-up jitter)
    due_at: datetime | None
    #: when the next tick may be claimed (the slot, or later after jitter)
    next_run_at: datetime | None
    #: how far the schedule is behind now, from the original slot (0 when not yet due)
    lag_s: float
    #: slots passed over by catch-up (policy "skip"), in total
    missed_slots: int
    #: ticks whose worker died mid-run (claims that expired without an outcome), in total
    abandoned: int
    #: the claimed tick not yet reported: who runs it, since when, cancelled at `running_deadline`
    running_worker: str | None
    running_since: datetime | None
    running_deadline: datetime | None
    last_run_at: datetime | None
    last_finished_at: datetime | None
    last_status: str | None
    last_error: str | None
    last_duration_s: float | None
    #: how late the last finished tick was claimed, from its slot
    drift_s: float | None
    ticks: int
    last_worker: str | None


def _dt(value: object) -> datetime | None:
    return as_utc(value) if isinstance(value, datetime) else None


def agent_status(d: Doc, now: datetime) -> AgentStatus:
    nxt = _dt(d.get("next_run_at"))
    due = _dt(d.get("due_at")) or nxt
    running = d.get("running") if isinstance(d.get("running"), dict) else None
    if running is not None and is_finished(running, d.get("finished_claim")):
        running = None  # the claimed tick reported its outcome
    expires = _dt(running.get("expires_at")) if running else None
    state: State
    if running is not None and expires is not None:
        state = "running" if now < expires else "abandoned"
    else:
        state = "late" if due is not None and due < now else "waiting"
    return AgentStatus(
        agent_key=str(d.get("agent_key", d["_id"])),
        interval_s=d.get("interval_s"),
        state=state,
        due_at=due,
        next_run_at=nxt,
        lag_s=max((now - due).total_seconds(), 0.0) if due else 0.0,
        missed_slots=int(d.get("missed_slots") or 0),
        abandoned=int(d.get("abandoned") or 0) + (state == "abandoned"),
        running_worker=running.get("worker") if running else None,
        running_since=_dt(running.get("claimed_at")) if running else None,
        running_deadline=_dt(running.get("deadline")) if running else None,
        last_run_at=_dt(d.get("last_run_at")),
        last_finished_at=_dt(d.get("last_finished_at")),
        last_status=d.get("last_status"),
        last_error=d.get("last_error"),
        last_duration_s=d.get("last_duration_s"),
        drift_s=d.get("drift_s"),
        ticks=int(d.get("ticks") or 0),
        last_worker=d.get("last_worker"),
    )


async def read_status(coll: AsyncCollection[Doc], now: datetime) -> list[AgentStatus]:
    try:
        docs = await coll.find({}, sort=[("_id", ASCENDING)]).to_list()
    except PyMongoError as e:
        raise StorageError(f"could not read the schedule: {e}") from e
    return [agent_status(d, now) for d in docs]


def _fmt_time(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else "-"


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def print_status(statuses: Sequence[AgentStatus], out: TextIO, *, as_json: bool = False) -> None:
    if as_json:
        for st in statuses:
            out.write(json.dumps(asdict(st), default=lambda v: v.isoformat()) + "\n")
        return
    if not statuses:
        out.write("no agents are scheduled in this database\n")
        return
    header: tuple[str, ...] = ("agent", "state", "due", "next run", "lag s", "missed", "abandoned")
    header += ("drift s", "ticks", "last", "deadline", "worker", "last error")
    rows: list[tuple[str, ...]] = [
        (
            st.agent_key,
            st.state,
            _fmt_time(st.due_at),
            _fmt_time(st.next_run_at),
            _fmt_s(st.lag_s),
            str(st.missed_slots),
            str(st.abandoned),
            _fmt_s(st.drift_s),
            str(st.ticks),
            st.last_status or "-",
            _fmt_time(st.running_deadline),
            st.running_worker or "-",
            (st.last_error or "")[:80],
        )
        for st in statuses
    ]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    for r in (header, *rows):
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")
