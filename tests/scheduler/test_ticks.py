"""What a tick can rely on: a `blocking=True` tick runs on a thread, so it cannot stall the loop or
other agents' deadlines; listeners and the worker's event log hear success, failure and missed.

Schedules run on a ManualClock; only the tick deadline is the event loop's timer (as in production).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from datetime import timedelta

import anyio
import pytest

from mongogate.clock import ManualClock
from mongogate.scheduler.agents import Agent, AgentRegistry, TickContext
from mongogate.scheduler.core import Scheduler
from mongogate.scheduler.events import TickEvent
from tests.scheduler.helpers import T0, Client, cfg

pytestmark = pytest.mark.anyio


async def test_a_blocking_tick_runs_on_a_thread_and_cannot_stall_the_loop(
    mongo: Client, db_name: str
) -> None:
    gate = threading.Event()
    entered = threading.Event()
    calls: Counter[str] = Counter()
    stop = anyio.Event()

    def stuck(ctx: TickContext) -> None:  # synchronous code that blocks (a C library, a sync client)
        calls["stuck"] += 1
        entered.set()
        gate.wait()

    async def steady(ctx: TickContext) -> None:
        calls["steady"] += 1
        if calls["steady"] >= 5 and entered.is_set():
            stop.set()

    registry = AgentRegistry([Agent("stuck", stuck, 3600, timeout_s=0.2, blocking=True)])
    registry.add(Agent("steady", steady, 1))
    s = Scheduler(mongo[db_name], registry, cfg(), "w", clock=ManualClock(T0))
    try:
        with anyio.fail_after(60):  # a hang guard only
            stats = await s.run(stop=stop)
        status = {st.agent_key: st for st in await s.status()}
        assert not gate.is_set()  # the thread is still blocked: the loop went on without it
    finally:
        gate.set()  # let the abandoned thread finish
    assert calls["stuck"] == 1 and calls["steady"] >= 5
    assert stats.timed_out == 1  # cut at its 0.2 s deadline, as an async tick would be
    assert status["stuck"].last_status == "timeout" and status["stuck"].state != "running"
    assert status["steady"].last_status == "ok"


async def test_listeners_and_the_event_log_hear_success_failure_and_missed(
    mongo: Client, db_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    heard: list[TickEvent] = []

    async def listen(ev: TickEvent) -> None:
        heard.append(ev)

    async def deaf(ev: TickEvent) -> None:
        raise RuntimeError("listener bug")

    async def ok(ctx: TickContext) -> None:
        return None

    async def bad(ctx: TickContext) -> None:
        raise ValueError("boom")

    clock = ManualClock(T0)
    agents = [
        Agent("ok", ok, 3600, on_success=listen, on_failure=listen),
        Agent("bad", bad, 3600, on_success=listen, on_failure=listen),
        Agent("late", ok, 10, on_missed=listen, on_success=deaf),
    ]
    s = Scheduler(mongo[db_name], agents, cfg(), "w", clock=clock)
    await s.register(now=T0 - timedelta(seconds=35))  # "late" has missed 3 slots (coalesced)
    caplog.set_level(logging.DEBUG, logger="mongogate.scheduler.events")
    stats = await s.run(duration_s=0.001)
    assert stats.claimed == 3 and stats.failed == 1
    got = sorted((e.agent_key, e.outcome, e.status, e.missed_slots) for e in heard)
    assert got == [
        ("bad", "failure", "error", 0),
        ("late", "missed", "coalesced", 3),
        ("ok", "success", "ok", 0),
    ]
    failure = next(e for e in heard if e.outcome == "failure")
    assert failure.error == "ValueError: boom" and failure.worker_id == "w" and failure.duration_s is not None
    events = {
        (r.getMessage().split()[1], getattr(r, "outcome", None))
        for r in caplog.records
        if r.name.endswith("events")
    }
    assert {("ok", "success:ok"), ("bad", "failure:error"), ("late", "missed:coalesced")} <= events
    # a listener that raises is logged, and the tick's outcome stands
    assert any("success listener failed" in r.getMessage() for r in caplog.records)
    assert {st.agent_key: st.last_status for st in await s.status()}["late"] == "ok"
