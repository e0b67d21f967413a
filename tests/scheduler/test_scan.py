"""The loop's scan is bounded: every read of the schedule asks for at most a batch, in due order, so
its cost follows the batch, not the fleet (nor the orphaned documents of agents nobody runs).

Observed on the wire (a command listener on a real client), not timed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.monitoring import CommandFailedEvent, CommandListener, CommandStartedEvent, CommandSucceededEvent

from mongogate.clock import ManualClock
from mongogate.scheduler.agents import Agent
from mongogate.scheduler.core import Scheduler
from tests.scheduler.helpers import T0, Client, cfg, noop

pytestmark = pytest.mark.anyio


class Finds(CommandListener):
    """Records every `find` on the schedule collection and how many documents it returned."""

    def __init__(self) -> None:
        self.pending: dict[int, dict[str, Any]] = {}
        self.finds: list[tuple[dict[str, Any], int]] = []

    def started(self, event: CommandStartedEvent) -> None:
        if event.command_name == "find" and event.command.get("find") == "agent_schedule":
            self.pending[event.request_id] = dict(event.command)

    def succeeded(self, event: CommandSucceededEvent) -> None:
        cmd = self.pending.pop(event.request_id, None)
        if cmd is not None:
            self.finds.append((cmd, len(event.reply.get("cursor", {}).get("firstBatch", []))))

    def failed(self, event: CommandFailedEvent) -> None:
        self.pending.pop(event.request_id, None)


async def test_every_scan_asks_for_a_bounded_batch_even_when_nothing_is_due(
    engine_uri: str, db_name: str
) -> None:
    clock = ManualClock(T0)
    finds = Finds()
    client: Client = AsyncMongoClient(engine_uri, tz_aware=True, event_listeners=[finds])
    try:
        # more agents than one batch (64): the first pass pages through them
        agents = [Agent(f"a{i:03d}", noop, 3600) for i in range(100)]
        s = Scheduler(client[db_name], agents, cfg(concurrency=2), "w", clock=clock)
        await s.register(now=T0 - timedelta(seconds=1))
        await s.run(duration_s=0.001)  # the first pass runs all 100 (due at once)
        finds.finds.clear()
        stats = await s.run(duration_s=3)  # nothing is due for an hour: only scans
        assert stats.claimed == 0
    finally:
        await client.close()
    scans = [(cmd, n) for cmd, n in finds.finds if "sort" in cmd]
    assert len(scans) >= 2
    for cmd, n in scans:
        assert 0 < cmd.get("limit", 0) <= 64 and n <= 64, (cmd, n)
        assert next(iter(cmd["sort"])) == "next_run_at"


async def test_status_reports_schedules_no_worker_registers_as_orphaned(mongo: Client, db_name: str) -> None:
    clock = ManualClock(T0)
    db = mongo[db_name]
    old = [Agent("keep", noop, 2)] + [Agent(f"gone-{i}", noop, 2) for i in range(5)]
    await Scheduler(db, old, cfg(), "old", clock=clock).register(now=T0 - timedelta(hours=1))
    new = Scheduler(db, [Agent("keep", noop, 2)], cfg(), "new", clock=clock)
    await new.register()
    status = {st.agent_key: st for st in await new.status()}
    assert status["keep"].state == "late"
    assert {k: st.state for k, st in status.items() if k != "keep"} == {
        f"gone-{i}": "orphaned" for i in range(5)
    }
    assert all(st.lag_s == 0 for k, st in status.items() if k != "keep")  # orphans do not count as lag
