"""Per-agent misfire rules: max_running (a long tick never overlaps its own next slot), the misfire
grace (too-late ticks are skipped and counted), coalescing, and start-up jitter that never costs a slot.

Time is a ManualClock throughout; overlaps are observed on real concurrent ticks of the real loop.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import anyio
import pytest

from mongogate.clock import ManualClock
from mongogate.scheduler.agents import Agent, TickContext
from mongogate.scheduler.core import Scheduler
from tests.scheduler.helpers import T0, Client, cfg, noop

if TYPE_CHECKING:
    from mongogate.scheduler.events import TickEvent

pytestmark = pytest.mark.anyio


async def test_a_claimed_tick_in_flight_blocks_the_next_claim_of_its_agent(
    mongo: Client, db_name: str
) -> None:
    clock = ManualClock(T0)
    agent = Agent("slow", noop, 1)
    s = Scheduler(mongo[db_name], [agent], cfg(), "w", clock=clock)
    await s.register()
    first = await s.claim(agent)
    assert first is not None
    clock.advance(1.5)
    assert await s.claim(agent) is None  # the first tick has not finished: no overlap
    [st] = await s.status()
    assert st.state == "running" and st.lag_s == 0.5  # the waiting slot shows as lag
    assert await s.run_tick(agent, first) == "ok"
    second = await s.claim(agent)
    assert second is not None and second.scheduled_at == T0 + timedelta(seconds=1)


async def test_a_long_tick_never_overlaps_its_own_next_slot_in_the_loop(mongo: Client, db_name: str) -> None:
    clock = ManualClock(T0)
    release, stop = anyio.Event(), anyio.Event()
    in_flight = peak = runs = 0

    async def slow(ctx: TickContext) -> None:
        nonlocal in_flight, peak, runs
        in_flight += 1
        runs += 1
        peak = max(peak, in_flight)
        if runs == 1:
            await release.wait()  # outlasts several of its 1 s slots
        in_flight -= 1
        if runs >= 3:
            stop.set()

    s = Scheduler(mongo[db_name], [Agent("slow", slow, 1)], cfg(concurrency=4), "w", clock=clock)
    with anyio.fail_after(60):  # a hang guard only
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: s.run(stop=stop))
            # the loop's naps move the clock; an overlapping tick would end the run early
            while clock.now() < T0 + timedelta(seconds=6) and not stop.is_set():
                await anyio.sleep(0.001)
            assert in_flight == 1 and runs == 1
            release.set()
    assert peak == 1 and runs >= 3


async def test_ticks_later_than_the_misfire_grace_are_skipped_counted_and_reported(
    mongo: Client, db_name: str
) -> None:
    clock = ManualClock(T0)
    ran: list[datetime] = []
    missed: list[TickEvent] = []

    async def tick(ctx: TickContext) -> None:
        ran.append(ctx.scheduled_at)

    async def on_missed(ev: TickEvent) -> None:
        missed.append(ev)

    agent = Agent("report", tick, 10, misfire_grace_s=2, on_missed=on_missed)
    s = Scheduler(mongo[db_name], [agent], cfg(), "w", clock=clock)
    await s.register(now=T0 - timedelta(seconds=65))  # slots -65 ... -5: the newest is 5 s late
    stats = await s.run(duration_s=0.001)  # one pass
    assert ran == [] and stats.misfired == 1 and stats.missed_slots == 7 and stats.claimed == 0
    assert [(e.outcome, e.status, e.missed_slots) for e in missed] == [("missed", "misfired", 7)]
    [st] = await s.status()
    assert st.misfired == 1 and st.missed_slots == 7 and st.due_at == T0 + timedelta(seconds=5)
    assert st.ticks == 0 and st.state == "waiting"
    # within the grace it runs
    clock.set(T0 + timedelta(seconds=6))
    await s.run(duration_s=0.001)
    assert ran == [T0 + timedelta(seconds=5)]


async def test_without_coalescing_missed_slots_run_one_by_one_within_the_grace(
    mongo: Client, db_name: str
) -> None:
    clock = ManualClock(T0 + timedelta(seconds=7.5))
    agent = Agent("each", noop, 2, coalesce=False, misfire_grace_s=3, max_running=64)  # claims only
    s = Scheduler(mongo[db_name], [agent], cfg(), "w", clock=clock)
    await s.register(now=T0)
    answered = []
    while (claim := await s.claim(agent)) is not None:
        answered.append(((claim.scheduled_at - T0).total_seconds(), claim.missed_slots))
    assert answered == [(6.0, 3)]  # slots 0, 2 and 4 are past the 3 s grace; 6 runs
    settings_default = Agent("all", noop, 2, max_running=64)
    s2 = Scheduler(mongo[db_name], [settings_default], cfg(catch_up="all"), "w", clock=clock)
    await s2.register(now=T0)
    runs = []
    while (claim := await s2.claim(settings_default)) is not None:
        runs.append((claim.scheduled_at - T0).total_seconds())
    assert runs == [0, 2, 4, 6]  # catch_up = "all" is the fleet default of coalesce=False


async def test_start_up_jitter_never_crosses_an_agents_next_slot(mongo: Client, db_name: str) -> None:
    clock = ManualClock(T0)
    agents = [Agent(f"a{i}", noop, 2) for i in range(30)]
    db = mongo[db_name]
    await Scheduler(db, agents, cfg(), "old", clock=clock).register(now=T0 - timedelta(seconds=1.5))
    s = Scheduler(db, agents, cfg(jitter_max_s=60), "new", rng=random.Random(7), clock=clock)
    assert await s.jitter_overdue() == 30
    nxt = T0 + timedelta(seconds=0.5)  # every agent's next slot
    for st in await s.status():
        assert st.next_run_at is not None and T0 <= st.next_run_at < nxt, st
        clock.set(st.next_run_at)
        claim = await s.claim(next(a for a in agents if a.key == st.agent_key))
        assert claim is not None and claim.missed_slots == 0 and claim.next_run_at == nxt
