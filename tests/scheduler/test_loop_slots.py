"""The worker loop's concurrency slots: never more ticks at once than `concurrency` (a batch claims
no more ticks than there are free slots), and a slot comes back on every path (a tick that
finishes, a claim write that fails), so the loop never stalls on one; a failed write loses no
tick outcome.

Time is a ManualClock; the only waits are the hang guards.
"""

from __future__ import annotations

import anyio
import pytest

from mongogate.clock import ManualClock
from mongogate.errors import StorageError
from mongogate.scheduler.agents import Agent, TickContext
from mongogate.scheduler.claims import Outcome, Planned
from mongogate.scheduler.core import Scheduler
from tests.scheduler.helpers import T0, Client, cfg

pytestmark = pytest.mark.anyio


async def test_no_more_ticks_run_at_once_than_the_concurrency(mongo: Client, db_name: str) -> None:
    """Two slots: the first tick waits for a second to run beside it (a loop that allowed only one
    would hang here), and no claim write asks for more ticks than the slots the running ones leave."""
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
    real = s.store.claim_batch

    async def counted(planned: list[Planned], outcomes: list[Outcome]) -> frozenset[str]:
        nonlocal claims_over
        claims_over += running + len(planned) > 2  # more ticks than slots
        return await real(planned, outcomes)

    s.store.claim_batch = counted  # type: ignore[method-assign]
    with anyio.fail_after(60):  # a hang guard only
        stats = await s.run(stop=stop)

    assert done == {f"a{i}" for i in range(6)}
    assert peak == 2 and claims_over == 0, (peak, claims_over)
    assert stats.claimed == 6 and stats.ok == 6


async def test_a_claim_write_that_fails_gives_its_slot_back_and_keeps_the_outcomes(
    mongo: Client, db_name: str
) -> None:
    """With one slot, a claim write that raises must not keep it (the loop retries and runs every
    agent), and a failed write that carried finished ticks' outcomes puts them back: every outcome
    is recorded in the end."""
    stop = anyio.Event()
    ran: set[str] = set()

    async def tick(ctx: TickContext) -> None:
        ran.add(ctx.agent_key)
        if len(ran) == 3:
            stop.set()

    agents = [Agent(f"a{i}", tick, 60) for i in range(3)]
    s = Scheduler(mongo[db_name], agents, cfg(concurrency=1), "w", clock=ManualClock(T0))
    real = s.store.claim_batch
    failed: list[int] = []  # outcomes carried by each failed write

    async def failing(planned: list[Planned], outcomes: list[Outcome]) -> frozenset[str]:
        # the database fails mid-write (a failpoint, not a mock: the rest is real): the first
        # write, and the first that carries an outcome
        if not failed or (outcomes and len(failed) == 1):
            failed.append(len(outcomes))
            raise StorageError("claim failed")
        return await real(planned, outcomes)

    s.store.claim_batch = failing  # type: ignore[method-assign]
    with anyio.fail_after(60):  # a hang guard only: a kept slot stalls the loop here
        stats = await s.run(stop=stop)

    assert failed == [0, 1]
    assert ran == {"a0", "a1", "a2"}
    assert stats.claimed == 3
    statuses = await s.status()
    assert [(st.last_status, st.running, st.ticks) for st in statuses] == [("ok", 0, 1)] * 3
