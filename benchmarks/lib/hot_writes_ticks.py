"""The scheduler's hot writes for `hot_writes.py --only ticks`: a tick claim and a tick's outcome.

Each through the scheduler's own code, this tree's (`Scheduler.claim`, `Scheduler.run_tick` with a
no-op tick) and bc6dfd9's (its `scheduler` package loaded from git by `scheduler_fleet.load_previous`),
on one agent of a schedule collection holding 1,000, then 10,000 registered agents (one database
per version; both seeded by this tree's `register`: the documents are the same shape).

- tick claim: the claim as the loop makes it, with the schedule document its scan read (the read
  is untimed), `now` just past the slot. It advances `due_at` / `next_run_at` by the interval and
  adds the open claim: the schedule advance. bc6dfd9 filters it by `_id`, `next_run_at` and
  `due_at`; this tree by `_id` alone, the condition in an update pipeline.
- tick outcome: the finishing write of that tick (`last_*` fields set, its open claim removed),
  by `_id` in both.
"""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from lib.scheduler_fleet import load_previous

from mongogate.config import SchedulerSettings
from mongogate.scheduler import Agent, Scheduler
from mongogate.scheduler.documents import CLAIM_FIELDS, NEXT_RUN_AT

PREVIOUS = "bc6dfd9"
INTERVAL_S = 60.0
SETTINGS: dict[str, Any] = {"jitter_max_s": 0.0, "spread": True}


async def noop(ctx: object) -> None:
    return None


def agent_key(i: int) -> str:
    return f"agent-{i:05d}"


async def seed_schedule(db: Any, have: int, size: int) -> None:
    """Register agents `have`..`size` (this tree's `register`; the caller skips uniqueness scans)."""
    agents = [Agent(agent_key(i), noop, INTERVAL_S) for i in range(have, size)]
    s = Scheduler(db, agents, SchedulerSettings(**SETTINGS), f"seed-{size}")
    if have == 0:
        await s.ensure_indexes()
    await s.register()


def previous_module() -> Any:
    """bc6dfd9's `scheduler.core` (with its `agents` beside it as `prev_scheduler.agents`)."""
    return load_previous(PREVIOUS, Path(tempfile.mkdtemp()))


def tick_writes(db: Any, key: str, core: Any = None) -> list[tuple[str, Any, Any]]:
    """A claim (its untimed set-up reads the document, as the loop's scan does) and the tick's
    outcome, on agent `key`, through this tree's scheduler or bc6dfd9's (`core`)."""
    if core is None:
        sched: Any = Scheduler(db, [Agent(key, noop, INTERVAL_S)], SchedulerSettings(**SETTINGS), "bench")
    else:
        import prev_scheduler.agents as prev_agents  # type: ignore[import-not-found]

        agent = prev_agents.Agent(key, noop, INTERVAL_S)
        sched = core.Scheduler(db, [agent], SchedulerSettings(**SETTINGS), "bench")
    agent = next(iter(sched.agents))
    state: dict[str, Any] = {}

    async def read() -> object:
        state["seen"] = await sched.coll.find_one({"_id": key}, CLAIM_FIELDS)
        return state["seen"]

    async def claim() -> object:
        seen = state["seen"]
        now = seen[NEXT_RUN_AT] + timedelta(milliseconds=1)
        state["claim"] = await sched.claim(agent, now=now, seen=seen)
        assert state["claim"] is not None, f"{key}: claim not won"
        return state["claim"]

    async def outcome() -> object:
        status = await sched.run_tick(agent, state["claim"])
        assert status == "ok"
        return status

    return [("tick claim (advances the schedule)", claim, read), ("tick outcome", outcome, None)]
