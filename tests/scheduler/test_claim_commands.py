"""What claiming costs in commands, counted on the wire with a command listener (issue 38): a claim
is one `update` by `_id` alone; a pass sends one scan and one write for all the ticks it claims
and the outcomes finished since; a batch learns which of its claims won from its reply alone,
whatever won or lost (nothing is read back); heartbeats are per worker, not per tick; in steady
state at most 1.5 commands per tick run.

Time is a ManualClock; nothing is timed.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.monitoring import CommandFailedEvent, CommandListener, CommandStartedEvent, CommandSucceededEvent

from mongogate.clock import ManualClock
from mongogate.scheduler.agents import Agent
from mongogate.scheduler.core import SCHEDULE_COLLECTION, Scheduler
from mongogate.scheduler.documents import CLAIM_FIELDS, WORKERS_COLLECTION
from tests.scheduler.helpers import T0, Client, cfg, noop

pytestmark = pytest.mark.anyio

SCHEDULE, WORKERS = SCHEDULE_COLLECTION, WORKERS_COLLECTION


class Commands(CommandListener):
    """Every command a client sends: (name, collection, its statements when it writes)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, object, list[dict[str, Any]]]] = []

    def started(self, event: CommandStartedEvent) -> None:
        name, cmd = event.command_name, event.command
        self.seen.append((name, cmd.get(name), list(cmd.get("updates", cmd.get("documents", [])))))

    def succeeded(self, event: CommandSucceededEvent) -> None:
        pass

    def failed(self, event: CommandFailedEvent) -> None:
        pass

    def on(self, coll: str, *names: str) -> list[tuple[str, list[dict[str, Any]]]]:
        return [(n, st) for n, c, st in self.seen if c == coll and (not names or n in names)]


def _claims(statements: list[dict[str, Any]]) -> list[str]:
    """The agents a write claims (pipeline statements), not the outcomes it records."""
    return [st["q"]["_id"] for st in statements if isinstance(st["u"], list)]


async def test_a_claim_is_one_update_by_id_alone_and_a_lost_one_reads_nothing_back(
    engine_uri: str, db_name: str
) -> None:
    """One `update` of one statement filtered by `_id` alone, whose one pipeline stage moves the
    document only if it still holds what was read, and otherwise fails the statement: won or lost,
    nothing else is sent."""
    clock = ManualClock(T0)
    listener = Commands()
    client: Client = AsyncMongoClient(engine_uri, tz_aware=True, event_listeners=[listener])
    try:
        agent = Agent("a", noop, 60)
        s = Scheduler(client[db_name], [agent], cfg(), "w", clock=clock)
        await s.register()
        seen = await s.coll.find_one({"_id": "a"}, CLAIM_FIELDS)
        listener.seen.clear()
        assert await s.claim(agent, clock.now(), seen) is not None
        assert await s.claim(agent, clock.now(), seen) is None  # the same read again: lost
        assert [n for n, _, _ in listener.seen] == ["update", "update"]
    finally:
        await client.close()
    [(_, won), (_, lost)] = listener.on(SCHEDULE)
    for [statement] in (won, lost):
        assert statement["q"] == {"_id": "a"} and not statement.get("upsert")
        [stage] = statement["u"]
        assert list(stage) == ["$replaceWith"]
        _, merged, refused = stage["$replaceWith"]["$cond"]
        assert isinstance(refused, str) and not refused.startswith("$")  # not a document: an error
        fields = merged["$mergeObjects"][1]
        assert sorted(fields) == ["due_at", "next_run_at", "open", "ticks"]


async def test_a_pass_claims_its_due_ticks_and_records_the_finished_ones_in_one_write(
    engine_uri: str, db_name: str
) -> None:
    """Six agents due at T0 and six at T0 + 0.3 s: the first pass is one scan and one write of six
    claims; the second (at T0 + 0.3 s: no sooner than a quarter of a second after the first) one scan
    and one write of the other six claims with the first six outcomes; the run ends with one write
    of the last outcomes. Nothing else touches the schedule."""
    clock = ManualClock(T0)
    first = [Agent(f"a{i}", noop, 3600) for i in range(6)]
    second = [Agent(f"b{i}", noop, 3600) for i in range(6)]
    db_client: Client = AsyncMongoClient(engine_uri, tz_aware=True)
    listener = Commands()
    client: Client = AsyncMongoClient(engine_uri, tz_aware=True, event_listeners=[listener])
    try:
        db = db_client[db_name]
        await Scheduler(db, first, cfg(), "r1", clock=clock).register(now=T0)
        await Scheduler(db, second, cfg(), "r2", clock=clock).register(now=T0 + timedelta(seconds=0.3))
        s = Scheduler(client[db_name], first + second, cfg(), "w", clock=clock)
        stats = await s.run(duration_s=0.6)
        ran = list(listener.seen)
        statuses = await s.status()
    finally:
        await client.close()
        await db_client.close()
    assert stats.claimed == 12 and stats.lost == 0
    listener.seen = ran
    writes = listener.on(SCHEDULE, "update", "insert", "delete", "findAndModify")
    assert [n for n, _ in listener.on(SCHEDULE, "find")] == ["find"] * 3  # register, two scans
    assert len(writes) == 3, writes
    assert sorted(_claims(writes[0][1])) == [a.key for a in first]
    assert sorted(_claims(writes[1][1])) == [a.key for a in second]
    assert sum(len(st) for _, st in writes) == 24  # 12 claims and 12 outcomes, each written once
    assert all(st.last_status == "ok" and st.running == 0 and st.ticks == 1 for st in statuses)


async def test_a_batch_learns_which_claims_won_from_its_reply_alone(engine_uri: str, db_name: str) -> None:
    """Two workers read the same four due documents; the other claims two of them first. This
    worker's one write of four claims wins the other two (the two lost ones are write errors in
    its reply); a write that won none and one that won all are one command each too."""
    clock = ManualClock(T0)
    agents = [Agent(f"a{i}", noop, 3600) for i in range(4)]
    listener = Commands()
    client: Client = AsyncMongoClient(engine_uri, tz_aware=True, event_listeners=[listener])
    other_client: Client = AsyncMongoClient(engine_uri, tz_aware=True)
    try:
        me = Scheduler(client[db_name], agents, cfg(), "me", clock=clock)
        other = Scheduler(other_client[db_name], agents, cfg(), "other", clock=clock)
        await other.register()
        seen = {d["_id"]: d async for d in other.coll.find({}, CLAIM_FIELDS)}
        for agent in agents[:2]:
            assert await other.claim(agent, clock.now(), seen[agent.key]) is not None
        now = clock.now()
        listener.seen.clear()
        planned = [p for a in agents if (p := me.store.plan(a, seen[a.key], now)) is not None]
        won = await me.store.claim_batch(planned, [])
        assert sorted(p.key for p in planned if p.claim.claim_id in won) == ["a2", "a3"]
        assert [n for n, _, _ in listener.seen] == ["update"]

        listener.seen.clear()  # the same stale read again: every claim lost
        planned = [p for a in agents if (p := me.store.plan(a, seen[a.key], now)) is not None]
        assert await me.store.claim_batch(planned, []) == frozenset()
        assert [n for n, _, _ in listener.seen] == ["update"]

        clock.advance(3600)  # the next slots, read fresh: every claim won
        fresh = {d["_id"]: d async for d in me.coll.find({}, CLAIM_FIELDS)}
        listener.seen.clear()
        planned = [p for a in agents if (p := me.store.plan(a, fresh[a.key], clock.now())) is not None]
        assert len(await me.store.claim_batch(planned, [])) == 4
        assert [n for n, _, _ in listener.seen] == ["update"]
    finally:
        await client.close()
        await other_client.close()


async def test_in_steady_state_a_worker_sends_at_most_one_and_a_half_commands_per_tick(
    engine_uri: str, db_name: str
) -> None:
    """120 agents every 12 s on their own phases (10 ticks due per second, the rate of 600 agents
    every 60 s), 40 s of a worker's run: claims, outcomes, scans, heartbeats and reads of the fleet
    together stay within 1.5 commands per tick run; the heartbeat is one write per interval."""
    clock = ManualClock(T0)
    agents = [Agent(f"agent-{i:03d}", noop, 12) for i in range(120)]
    db_client: Client = AsyncMongoClient(engine_uri, tz_aware=True)
    listener = Commands()
    client: Client = AsyncMongoClient(engine_uri, tz_aware=True, event_listeners=[listener])
    try:
        await Scheduler(db_client[db_name], agents, cfg(spread=True), "r", clock=clock).register()
        s = Scheduler(client[db_name], agents, cfg(spread=True), "w", clock=clock)
        stats = await s.run(duration_s=40)
        ran = list(listener.seen)
    finally:
        await client.close()
        await db_client.close()
    listener.seen = ran
    names = Counter((n, str(c)) for n, c, _ in listener.seen)
    ticks = stats.claimed
    assert ticks >= 300 and stats.lost == 0  # every slot in the window (40 s x 10/s, less the first)
    total = len(listener.seen)
    print(f"{total} commands for {ticks} ticks: {total / ticks:.2f} per tick; {dict(names)}")
    assert total <= 1.5 * ticks
    beats = names[("update", WORKERS)]  # the first, one per 10 s heartbeat, and the leave
    assert beats <= 2 + math.ceil(40 / 10)
    # claims and outcomes: one write per round of claims (a pass holds one round, more when more
    # ticks are due than slots are free), never one per tick: passes a quarter of a second apart
    # claim two and a half ticks each on average at 10 due/s
    assert names[("update", SCHEDULE)] <= ticks / 2
