"""What `worker --status` reports, read from the schedule documents alone (no worker needed).

Each agent is in one state, the first that applies: `abandoned` (a claimed tick's deadline and
grace passed without an outcome: its worker died), `running` (a claimed tick has not reported;
shown with its deadline), `orphaned` (no worker registers the agent any more: never claimed,
`schedule prune` removes it), `paused`, `done` (a one-off schedule whose times have all come),
`late` (its slot has passed and nobody has claimed it) or `waiting`. Lag is measured from the
slot (`due_at`), not from a jittered start, so a restart cannot hide it.
"""

from __future__ import annotations

import fnmatch
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Literal, TextIO, get_args

from pymongo import ASCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError

from mongogate.clock import utc_or_none
from mongogate.errors import StorageError
from mongogate.scheduler import documents as sd
from mongogate.scheduler.documents import OpenClaim
from mongogate.scheduler.fleet import Fleet
from mongogate.scheduler.slots import live_and_expired
from mongogate.values import Doc

State = Literal["abandoned", "running", "orphaned", "paused", "done", "late", "waiting"]
STATES: tuple[str, ...] = get_args(State)
#: above this many agents, `worker --status` prints a summary unless --all or a filter is given
SUMMARY_OVER = 20
#: rows of the worst agents a summary lists
SUMMARY_ROWS = 10


@dataclass(frozen=True)
class AgentStatus:
    agent_key: str
    interval_s: float | None
    state: State
    #: the slot the next tick answers (before any start-up jitter); None when done
    due_at: datetime | None
    #: when the next tick may be claimed (the slot, or later after jitter); None when parked
    next_run_at: datetime | None
    #: how far the schedule is behind now, from the original slot (0 when not yet due)
    lag_s: float
    #: slots passed over by coalescing or the misfire grace, in total
    missed_slots: int
    #: ticks whose worker died mid-run (claims that expired without an outcome), in total
    abandoned: int
    #: the newest claimed tick not yet reported (in flight, else abandoned): who runs it, since
    #: when, cancelled at `running_deadline`
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
    #: "every 60s", "cron */5 * * * * UTC", "at 2030-01-01T00:00:00.000+00:00"
    schedule: str | None = None
    #: ticks skipped because they were later than the misfire grace, in total
    misfired: int = 0
    #: claimed ticks in flight now (at most the agent's max_running)
    running: int = 0
    paused: bool = False

    @classmethod
    def from_doc(cls, d: Doc, now: datetime, known: Fleet | None = None) -> AgentStatus:
        """An agent's status from its schedule document (`documents.ScheduleDoc`) as of `now`;
        orphaned also when `known` (the fleet) says no worker registers it."""
        key = sd.agent_key(d)
        nxt = sd.next_run_at(d)
        due = sd.due_at(d)
        live, expired = live_and_expired(d, now)
        newest = _newest_open(live, expired)
        orphan = d.get(sd.ORPHANED_AT) is not None or (known is not None and known.is_orphan(key))
        paused = bool(d.get(sd.PAUSED))
        state = _state(bool(expired), bool(live), orphan, paused, due, nxt, now)
        interval = d.get(sd.INTERVAL_S)
        return cls(
            agent_key=key,
            interval_s=interval,
            state=state,
            due_at=due,
            next_run_at=nxt,
            lag_s=max((now - due).total_seconds(), 0.0) if due and state != "orphaned" else 0.0,
            missed_slots=int(d.get(sd.MISSED_SLOTS) or 0),
            abandoned=int(d.get(sd.ABANDONED) or 0) + len(expired),
            running_worker=newest.worker if newest else None,
            running_since=newest.claimed_at if newest else None,
            running_deadline=newest.deadline if newest else None,
            last_run_at=utc_or_none(d.get(sd.LAST_RUN_AT)),
            last_finished_at=utc_or_none(d.get(sd.LAST_FINISHED_AT)),
            last_status=d.get(sd.LAST_STATUS),
            last_error=d.get(sd.LAST_ERROR),
            last_duration_s=d.get(sd.LAST_DURATION_S),
            drift_s=d.get(sd.DRIFT_S),
            ticks=int(d.get(sd.TICKS) or 0),
            last_worker=d.get(sd.LAST_WORKER),
            schedule=d.get(sd.SCHEDULE) or (f"every {interval:g}s" if interval else None),
            misfired=int(d.get(sd.MISFIRED) or 0),
            running=len(live),
            paused=paused,
        )


def _newest_open(live: dict[str, Doc], expired: dict[str, Doc]) -> OpenClaim | None:
    """The newest claim without an outcome: in flight, else the abandoned one (whose worker died)."""
    found = max(live.items())[1] if live else max(expired.items())[1] if expired else None
    return OpenClaim.from_doc(found) if found is not None else None


def _state(
    expired: bool,
    live: bool,
    orphan: bool,
    paused: bool,
    due: datetime | None,
    nxt: datetime | None,
    now: datetime,
) -> State:
    """The first state that applies (the module's docstring)."""
    if expired:
        return "abandoned"
    if live:
        return "running"
    if orphan:
        return "orphaned"
    if paused:
        return "paused"
    if due is None and nxt is None:
        return "done"
    return "late" if due is not None and due < now else "waiting"


async def read_status(
    coll: AsyncCollection[Doc], now: datetime, known: Fleet | None = None
) -> list[AgentStatus]:
    try:
        docs = await coll.find({}, sort=[(sd.ID, ASCENDING)]).to_list()
    except PyMongoError as e:
        raise StorageError(f"could not read the schedule: {e}") from e
    return [AgentStatus.from_doc(d, now, known) for d in docs]


def select(
    statuses: Sequence[AgentStatus], states: Sequence[str] = (), pattern: str | None = None
) -> list[AgentStatus]:
    """`--state` (any of) and `--agent` (a shell-style pattern such as 'billing-*') filters."""
    return [
        st
        for st in statuses
        if (not states or st.state in states)
        and (pattern is None or fnmatch.fnmatchcase(st.agent_key, pattern))
    ]


def _fmt_time(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else "-"


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _table(statuses: Sequence[AgentStatus], out: TextIO) -> None:
    header: tuple[str, ...] = ("agent", "state", "due", "next run", "lag s", "missed", "abandoned")
    header += ("drift s", "ticks", "last", "deadline", "worker", "schedule", "last error")
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
            st.schedule or "-",
            (st.last_error or "")[:80],
        )
        for st in statuses
    ]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    for r in (header, *rows):
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def _summary(statuses: Sequence[AgentStatus], out: TextIO) -> None:
    """One screen: counts by state, totals, and the agents furthest behind."""
    counts: Counter[str] = Counter(st.state for st in statuses)
    out.write(f"{len(statuses)} agents: " + ", ".join(f"{counts[s]} {s}" for s in STATES if counts[s]) + "\n")
    missed = sum(st.missed_slots for st in statuses)
    abandoned = sum(st.abandoned for st in statuses)
    misfired = sum(st.misfired for st in statuses)
    errors = sum(st.last_status in ("error", "timeout") for st in statuses)
    worst = max((st.lag_s for st in statuses if st.state not in ("orphaned", "paused", "done")), default=0.0)
    out.write(
        f"max lag {worst:.3f} s; {missed} missed slots, {misfired} misfired, {abandoned} abandoned ticks; "
        f"{errors} agents whose last tick failed\n"
    )
    trouble = sorted(
        (
            st
            for st in statuses
            if st.state in ("abandoned", "late") or st.last_status in ("error", "timeout")
        ),
        key=lambda st: (-st.lag_s, st.agent_key),
    )[:SUMMARY_ROWS]
    if trouble:
        out.write(f"\nneeding attention (worst {len(trouble)}):\n")
        _table(trouble, out)
    out.write("\nfilter with --state STATE / --agent PATTERN, or --all for every agent\n")


def print_status(
    statuses: Sequence[AgentStatus], out: TextIO, *, as_json: bool = False, summary: bool | None = None
) -> None:
    """The table (or one JSON object per line); a summary instead when there are many agents
    (`summary=None`: more than SUMMARY_OVER)."""
    if as_json:
        for st in statuses:
            out.write(json.dumps(asdict(st), default=lambda v: v.isoformat()) + "\n")
        return
    if not statuses:
        out.write("no agents are scheduled in this database (or none match)\n")
        return
    if summary if summary is not None else len(statuses) > SUMMARY_OVER:
        _summary(statuses, out)
    else:
        _table(statuses, out)
