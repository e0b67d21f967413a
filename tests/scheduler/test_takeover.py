"""Takeover after a worker dies, through the batched loop (issue 38).

A real worker process claims the first ticks of six agents in one batch and is killed mid-tick
(its first tick stops the process; then SIGKILL: no outcome, no leave). Another worker's loop
carries on, driven by a ManualClock from the moment of the kill: it runs its own share of the
agents on their next slot, takes the dead worker's share once that worker has been silent for
the split's takeover time, and counts each of the dead worker's claims as abandoned exactly once.
No slot runs twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
from pymongo import AsyncMongoClient

from mongogate.clock import SYSTEM_CLOCK, ManualClock, as_utc
from mongogate.config import SchedulerSettings
from mongogate.scheduler.agents import Agent, TickContext
from mongogate.scheduler.core import Scheduler
from mongogate.scheduler.documents import WORKERS_COLLECTION
from mongogate.scheduler.partition import partition
from tests.scheduler.helpers import Client, kill_once_frozen, spawn_worker

ROOT = Path(__file__).parents[2]
INTERVAL_S = 20
KEYS = [f"agent-{i}" for i in range(6)]

AGENTS = f"""
import os, signal
from mongogate.scheduler import Agent

async def frozen(ctx):
    await ctx.db["started"].insert_one({{"agent": ctx.agent_key, "slot": ctx.scheduled_at}})
    os.kill(os.getpid(), signal.SIGSTOP)  # frozen mid-tick until the test kills it

agents = [Agent(k, frozen, {INTERVAL_S}, timeout_s=4) for k in {KEYS!r}]
"""


def test_a_killed_workers_agents_are_taken_over_and_its_claims_counted_once(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = "jitter_max_s = 0\nspread = false\nidle_sleep_s = 0.1\n"
    kill_once_frozen(spawn_worker(tmp_path, engine_uri, db_name, AGENTS, "doomed", settings))
    ran: list[tuple[str, datetime, datetime]] = []

    async def tick(ctx: TickContext) -> None:
        ran.append((ctx.agent_key, ctx.scheduled_at, ctx.claimed_at))

    async def carry_on() -> tuple[Any, list[Any], dict[str, Any]]:
        client: Client = AsyncMongoClient(engine_uri, tz_aware=True)
        try:
            db = client[db_name]
            clock = ManualClock(SYSTEM_CLOCK.now())
            agents = [Agent(k, tick, INTERVAL_S, timeout_s=4) for k in KEYS]
            settings = SchedulerSettings(jitter_max_s=0, spread=False)
            s = Scheduler(db, agents, settings, "survivor", clock=clock)
            first = {d["agent"]: as_utc(d["slot"]) async for d in db["started"].find({})}
            doomed = await db[WORKERS_COLLECTION].find_one({"_id": "doomed"})
            assert doomed is not None and "ticks_per_s" in doomed  # it was in the split
            with anyio.fail_after(120):  # a hang guard only
                stats = await s.run(duration_s=35)
            return stats, await s.status(), {"first": first, "seen": as_utc(doomed["seen_at"])}
        finally:
            await client.close()

    stats, statuses, doomed = anyio.run(carry_on)
    assert len(doomed["first"]) >= 1  # the frozen tick had started
    # every agent's first slot was claimed by the dead worker (one batch) and is abandoned, once
    assert stats.abandoned == len(KEYS)
    assert all(st.abandoned == 1 and st.running == 0 for st in statuses)
    # the survivor ran each agent's next slot exactly once, never the dead worker's slot
    slots = [(key, slot) for key, slot, _ in ran]
    assert len(set(slots)) == len(slots)
    [dead_slot] = set(doomed["first"].values())  # one batch: every agent due at registration
    nxt = {key: min(slot for k, slot in slots if k == key) for key, _ in slots}
    assert nxt == {k: dead_slot + timedelta(seconds=INTERVAL_S) for k in KEYS}
    # its own share on time; the dead worker's once that worker had been silent for the takeover
    split = partition("survivor", ["doomed", "survivor"], takeover_s=30)
    late = {key: claimed for key, slot, claimed in ran if slot == nxt[key]}
    own = [k for k in KEYS if split.owns(k)]
    assert own and len(own) < len(KEYS)
    for key, claimed in late.items():
        if key in own:
            assert (claimed - nxt[key]).total_seconds() < 1, (key, claimed)
        else:
            assert (claimed - doomed["seen"]).total_seconds() >= 30, (key, claimed, doomed["seen"])
