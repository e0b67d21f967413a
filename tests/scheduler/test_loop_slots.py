"""The worker loop's concurrency slots: never more ticks at once than `concurrency`, and a slot comes
back on every path (a tick that finishes, a claim that fails), so the loop never stalls on one.

Time is a ManualClock; the only waits are the hang guards.
"""

from __future__ import annotations

from datetime import datetime

import anyio
import pytest

from mongogate.clock import ManualClock
from mongogate.errors import StorageError
from mongogate.scheduler.agents import Agent, TickContext
from mongogate.scheduler.core import Scheduler
from mongogate.scheduler.slots import Claim
from mongogate.values import Doc
from tests.scheduler.helpers import T0, Client, cfg

pytestmark = pytest.mark.anyio


async def test_no_more_ticks_run_at_once_than_the_concurrency(mongo: Client, db_name: str) -> None:
    """Two slots: the first tick waits for a second to run beside it (a loop that allowed only one
    would hang here), and no claim starts while two ticks hold both slots."""
    stop = anyio.Event()
    both = anyio.Event()
    running = peak = claims_over = 0
    done: set[str] = set()

    async def tick(ctx: TickContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 2:
            both.set()
        await both.wait()
        await anyio.sleep(0)
        running -= 1
        done.add(ctx.agent_key)
        if len(done) == 6:
            stop.set()

    agents = [Agent(f"a{i}", tick, 60) for i in range(6)]
    s = Scheduler(mongo[db_name], agents, cfg(concurrency=2), "w", clock=ManualClock(T0))
    real = s.store.claim

    async def counted(agent: Agent, now: datetime | None = None, seen: Doc | None = None) -> Claim | None:
        nonlocal claims_over
        claims_over += running >= 2  # a third slot: both are held by running ticks
        return await real(agent, now, seen)

    s.store.claim = counted  # type: ignore[method-assign]
    with anyio.fail_after(60):  # a hang guard only
        stats = await s.run(stop=stop)

    assert done == {f"a{i}" for i in range(6)}
    assert peak == 2 and claims_over == 0, (peak, claims_over)
    assert stats.claimed == 6 and stats.ok == 6


async def test_a_claim_that_fails_gives_its_slot_back(mongo: Client, db_name: str) -> None:
    """With one slot, a claim that raises must not keep it: the loop retries and runs every agent."""
    stop = anyio.Event()
    ran: set[str] = set()

    async def tick(ctx: TickContext) -> None:
        ran.add(ctx.agent_key)
        if len(ran) == 3:
            stop.set()

    agents = [Agent(f"a{i}", tick, 60) for i in range(3)]
    s = Scheduler(mongo[db_name], agents, cfg(concurrency=1), "w", clock=ManualClock(T0))
    real = s.store.claim
    failures = 0

    async def failing_twice(
        agent: Agent, now: datetime | None = None, seen: Doc | None = None
    ) -> Claim | None:
        nonlocal failures
        if failures < 2:  # the database fails mid-claim (a failpoint, not a mock: the rest is real)
            failures += 1
            raise StorageError("claim failed")
        return await real(agent, now, seen)

    s.store.claim = failing_twice  # type: ignore[method-assign]
    with anyio.fail_after(60):  # a hang guard only: a kept slot stalls the loop here
        stats = await s.run(stop=stop)

    assert failures == 2
    assert ran == {"a0", "a1", "a2"}
    assert stats.claimed == 3
