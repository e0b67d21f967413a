"""A scheduler for periodic agents on MongoDB alone: no broker, no leader, any number of workers.

Each agent has one schedule document. Claiming a tick is one atomic find_one_and_update
(filter ``{"agent_key": k, "next_run_at": {"$lte": now}}``, update
``{"$set": {"next_run_at": now + interval}}``), so of all the workers that see a tick due
exactly one wins it; the others match nothing.
A tick is claimed before it runs, so a worker that dies mid-tick loses that tick (at most
once per due time) rather than running it twice; the next one comes due one interval later.
"""

from __future__ import annotations

import logging
import math
import os
import random
import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import anyio
from pymongo import ASCENDING, ReturnDocument, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError, PyMongoError

from mongogate.clock import SYSTEM_CLOCK, as_utc
from mongogate.config import MemorySettings, SchedulerSettings
from mongogate.errors import ConfigError, StorageError
from mongogate.memory.agents import (
    ENTRY_POINT_GROUP,
    Agent,
    AgentRegistry,
    Doc,
    TickContext,
    TickFn,
    agents_from,
    load_object,
)
from mongogate.memory.investigations import Investigations
from mongogate.memory.runs import Runs

__all__ = [
    "DEFAULT_CONCURRENCY",
    "ENTRY_POINT_GROUP",
    "SCHEDULE_COLLECTION",
    "Agent",
    "AgentRegistry",
    "AgentStatus",
    "Claim",
    "Doc",
    "Scheduler",
    "SchedulerStats",
    "TickContext",
    "TickFn",
    "agents_from",
    "default_worker_id",
    "load_object",
]

SCHEDULE_COLLECTION = "agent_schedule"
DEFAULT_CONCURRENCY = 8
#: schedule documents written per bulk request (register, jitter)
_BULK = 500

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claim:
    scheduled_at: datetime
    claimed_at: datetime
    next_run_at: datetime

    @property
    def drift_s(self) -> float:
        return (self.claimed_at - self.scheduled_at).total_seconds()


@dataclass(frozen=True)
class AgentStatus:
    agent_key: str
    interval_s: float | None
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_finished_at: datetime | None
    last_status: str | None
    last_error: str | None
    last_duration_s: float | None
    #: how late the last tick was claimed (seconds after it was due)
    drift_s: float | None
    #: how far next_run_at lags wall time now (0 when not yet due)
    lag_s: float
    ticks: int
    last_worker: str | None


@dataclass
class SchedulerStats:
    claimed: int = 0
    #: claims lost to another worker (or no longer due): the cost of racing
    missed: int = 0
    ok: int = 0
    failed: int = 0
    timed_out: int = 0
    max_drift_s: float = 0.0
    by_agent: dict[str, int] = field(default_factory=dict)


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _dt(value: object) -> datetime | None:
    return as_utc(value) if isinstance(value, datetime) else None


class Scheduler:
    def __init__(
        self,
        db: AsyncDatabase[Doc],
        agents: Iterable[Agent] | AgentRegistry,
        settings: SchedulerSettings,
        worker_id: str | None = None,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        rng: random.Random | None = None,
        memory: MemorySettings | None = None,
    ) -> None:
        self.db = db
        self.agents = agents if isinstance(agents, AgentRegistry) else AgentRegistry(agents)
        self.settings = settings
        self.worker_id = worker_id or default_worker_id()
        if concurrency < 1:
            raise ConfigError("scheduler concurrency must be at least 1")
        self.concurrency = concurrency
        self.rng = rng or random.Random()
        self.coll: AsyncCollection[Doc] = db[SCHEDULE_COLLECTION]
        self.investigations = Investigations(db)
        self.runs = Runs(db, memory or MemorySettings())

    async def ensure_indexes(self) -> None:
        try:
            # Serves the claim: one agent's document, only when due.
            await self.coll.create_index(
                [("agent_key", ASCENDING), ("next_run_at", ASCENDING)], name="agent_next_run"
            )
            # Serves the loop's "what comes due next" scan, in due order.
            await self.coll.create_index([("next_run_at", ASCENDING)], name="next_run")
        except PyMongoError as e:
            raise StorageError(f"could not create scheduler indexes: {e}") from e
        await self.investigations.ensure_indexes()
        await self.runs.ensure_indexes()

    async def register(self, now: datetime | None = None) -> int:
        """One schedule document per agent (`_id` = key); a new agent is due at once.

        Writes only what is missing or changed, so restarting a fleet costs one read per worker.
        Returns the number of documents written.
        """
        now = now or SYSTEM_CLOCK.now()
        try:
            stored = {d["_id"]: d.get("interval_s") async for d in self.coll.find({}, {"interval_s": 1})}
        except PyMongoError as e:
            raise StorageError(f"could not read the schedule: {e}") from e
        ops = [
            UpdateOne(
                {"_id": a.key},
                {
                    "$setOnInsert": {"agent_key": a.key, "next_run_at": now, "created_at": now, "ticks": 0},
                    "$set": {"interval_s": float(a.poll_interval_s)},
                },
                upsert=True,
            )
            for a in self.agents
            if a.key not in stored or stored[a.key] != float(a.poll_interval_s)
        ]
        await self._bulk(ops, "register agents")
        return len(ops)

    async def _bulk(self, ops: list[UpdateOne], what: str) -> None:
        for i in range(0, len(ops), _BULK):
            chunk = ops[i : i + _BULK]
            for attempt in (1, 2):
                try:
                    await self.coll.bulk_write(chunk, ordered=False)
                    break
                except BulkWriteError as e:
                    # Workers registering the same new agent at once collide on _id; the upserts
                    # are idempotent, so a second pass matches the document the other one made.
                    errors = e.details.get("writeErrors", [])
                    if attempt == 1 and errors and all(err.get("code") == 11000 for err in errors):
                        continue
                    raise StorageError(f"could not {what}: {e}") from e
                except PyMongoError as e:
                    raise StorageError(f"could not {what}: {e}") from e

    async def jitter_overdue(self, now: datetime | None = None) -> int:
        """Spread overdue ticks over 0..jitter_max_s, so a restart does not fire the whole backlog at once.

        Each move is conditional (still overdue), so workers starting together do not stack jitter.
        """
        jitter = self.settings.jitter_max_s
        if jitter <= 0 or not len(self.agents):
            return 0
        now = now or SYSTEM_CLOCK.now()
        ops: list[UpdateOne] = []
        try:
            async for d in self.coll.find({"next_run_at": {"$lte": now}}, {"_id": 1}):
                if d["_id"] in self.agents:
                    at = now + timedelta(seconds=self.rng.uniform(0, jitter))
                    at = at.replace(microsecond=at.microsecond // 1000 * 1000)
                    ops.append(
                        UpdateOne(
                            {"_id": d["_id"], "next_run_at": {"$lte": now}}, {"$set": {"next_run_at": at}}
                        )
                    )
        except PyMongoError as e:
            raise StorageError(f"could not read the schedule: {e}") from e
        await self._bulk(ops, "spread overdue ticks")
        if ops:
            log.info("worker %s: spread %d overdue agents over %g s", self.worker_id, len(ops), jitter)
        return len(ops)

    async def claim(self, agent: Agent, now: datetime | None = None) -> Claim | None:
        """Take the agent's due tick with one atomic update; None if it is not due or another worker won."""
        now = now or SYSTEM_CLOCK.now()
        nxt = now + timedelta(seconds=agent.poll_interval_s)
        nxt = nxt.replace(microsecond=nxt.microsecond // 1000 * 1000)
        before = await self.coll.find_one_and_update(
            {"agent_key": agent.key, "next_run_at": {"$lte": now}},
            {
                "$set": {"next_run_at": nxt, "last_run_at": now, "last_worker": self.worker_id},
                "$inc": {"ticks": 1},
            },
            projection={"next_run_at": 1},
            return_document=ReturnDocument.BEFORE,
        )
        if before is None:
            return None
        return Claim(scheduled_at=as_utc(before["next_run_at"]), claimed_at=now, next_run_at=nxt)

    async def run_tick(self, agent: Agent, claim: Claim, stats: SchedulerStats | None = None) -> str:
        """Run one claimed tick under its hard deadline; returns "ok", "error" or "timeout". Never raises."""
        timeout = agent.timeout_s or self.settings.tick_timeout_s
        drift = claim.drift_s
        ctx = TickContext(
            agent=agent,
            db=self.db,
            worker_id=self.worker_id,
            scheduled_at=claim.scheduled_at,
            claimed_at=claim.claimed_at,
            next_run_at=claim.next_run_at,
            drift_s=drift,
            investigations=self.investigations,
            runs=self.runs,
            log=logging.getLogger(f"{__name__}.{agent.key}"),
        )
        if drift > max(agent.poll_interval_s, 1.0):
            log.info("agent %s is lagging: tick claimed %.3f s after it was due", agent.key, drift)
        else:
            log.debug("agent %s tick claimed %.3f s after it was due", agent.key, drift)
        started = anyio.current_time()
        status, error = "ok", None
        try:
            with anyio.move_on_after(timeout) as scope:
                await agent.tick(ctx)
            if scope.cancel_called:
                status = "timeout"
                error = f"tick exceeded its {timeout:g} s deadline and was cancelled"
                log.warning("agent %s: %s (due %s)", agent.key, error, claim.scheduled_at.isoformat())
        except Exception as e:
            status, error = "error", f"{type(e).__name__}: {e}"[:1000]
            log.error(
                "agent %s tick failed (due %s)", agent.key, claim.scheduled_at.isoformat(), exc_info=True
            )
        duration = anyio.current_time() - started
        if stats is not None:
            stats.ok += status == "ok"
            stats.failed += status == "error"
            stats.timed_out += status == "timeout"
        await self._report(agent, claim, status, error, duration)
        return status

    async def _report(
        self, agent: Agent, claim: Claim, status: str, error: str | None, duration: float
    ) -> None:
        try:
            with anyio.CancelScope(shield=True):
                await self.coll.update_one(
                    {"_id": agent.key},
                    {
                        "$set": {
                            "last_status": status,
                            "last_error": error,
                            "last_duration_s": round(duration, 6),
                            "last_finished_at": SYSTEM_CLOCK.now(),
                            "drift_s": round(claim.drift_s, 6),
                            "last_scheduled_at": claim.scheduled_at,
                        }
                    },
                )
        except PyMongoError as e:
            log.warning("agent %s: could not record the tick outcome: %s", agent.key, e)

    async def _upcoming(self, now: datetime, batch: int) -> tuple[list[Agent], datetime | None]:
        """Known agents due now (earliest first, at most `batch`), and the next due time after them."""
        due: list[Agent] = []
        cursor = self.coll.find({}, {"agent_key": 1, "next_run_at": 1}, sort=[("next_run_at", ASCENDING)])
        async with cursor:
            async for d in cursor:
                agent = self.agents.get(d.get("agent_key", ""))
                at = _dt(d.get("next_run_at"))
                if agent is None or at is None:
                    continue  # another deployment's agent, or a broken document: not ours to run
                if at > now:
                    return due, at
                due.append(agent)
                if len(due) >= batch:
                    break
        return due, None

    async def run(self, stop: anyio.Event | None = None, duration_s: float | None = None) -> SchedulerStats:
        """Claim and run due ticks until `stop` is set or `duration_s` passes; running ticks then finish.

        Stopping is cooperative, between claims, so a claimed tick is never abandoned by the loop.
        """
        stop = stop or anyio.Event()
        end = math.inf if duration_s is None else anyio.current_time() + duration_s
        stats = SchedulerStats()
        await self.ensure_indexes()
        await self.register()
        await self.jitter_overdue()
        log.info("worker %s: running %d agents", self.worker_id, len(self.agents))
        slots = anyio.Semaphore(self.concurrency)
        idle = self.settings.idle_sleep_s
        stale_after = max(2, self.concurrency // 2)

        def done() -> bool:
            return stop.is_set() or anyio.current_time() >= end

        async def tick(agent: Agent, claim: Claim) -> None:
            try:
                await self.run_tick(agent, claim, stats)
            finally:
                slots.release()

        async with anyio.create_task_group() as tg:
            while not done():
                wait = idle
                try:
                    now = SYSTEM_CLOCK.now()
                    due, next_at = await self._upcoming(now, batch=max(4 * self.concurrency, 64))
                    self.rng.shuffle(due)  # workers racing over the same backlog collide less
                    claimed = missed = 0
                    for agent in due:
                        if missed >= stale_after:
                            break  # other workers are draining this snapshot: look again
                        await slots.acquire()
                        if done():
                            slots.release()
                            break
                        try:
                            claim = await self.claim(agent)
                        except BaseException:
                            slots.release()
                            raise
                        if claim is None:
                            slots.release()
                            missed += 1
                            stats.missed += 1
                            continue
                        claimed += 1
                        missed = 0
                        stats.claimed += 1
                        stats.by_agent[agent.key] = stats.by_agent.get(agent.key, 0) + 1
                        stats.max_drift_s = max(stats.max_drift_s, claim.drift_s)
                        tg.start_soon(tick, agent, claim)
                    if due:
                        # More may be due already; if others won everything, yield briefly.
                        wait = 0.0 if claimed else 0.01
                    elif next_at is not None:
                        wait = min(idle, max((next_at - SYSTEM_CLOCK.now()).total_seconds(), 0.0))
                except PyMongoError as e:
                    log.warning(
                        "worker %s: schedule unreachable (%s); retrying in %g s", self.worker_id, e, idle
                    )
                wait = min(wait, end - anyio.current_time())
                if wait > 0:
                    with anyio.move_on_after(wait):
                        await stop.wait()
                else:
                    await anyio.sleep(0)
        log.info(
            "worker %s: stopped after %d ticks (%d failed, %d timed out)",
            self.worker_id,
            stats.claimed,
            stats.failed,
            stats.timed_out,
        )
        return stats

    async def status(self, now: datetime | None = None) -> list[AgentStatus]:
        """Every scheduled agent (all deployments), with its next and last run and drift."""
        now = now or SYSTEM_CLOCK.now()
        try:
            docs = await self.coll.find({}, sort=[("_id", ASCENDING)]).to_list()
        except PyMongoError as e:
            raise StorageError(f"could not read the schedule: {e}") from e
        out: list[AgentStatus] = []
        for d in docs:
            nxt = _dt(d.get("next_run_at"))
            out.append(
                AgentStatus(
                    agent_key=str(d.get("agent_key", d["_id"])),
                    interval_s=d.get("interval_s"),
                    next_run_at=nxt,
                    last_run_at=_dt(d.get("last_run_at")),
                    last_finished_at=_dt(d.get("last_finished_at")),
                    last_status=d.get("last_status"),
                    last_error=d.get("last_error"),
                    last_duration_s=d.get("last_duration_s"),
                    drift_s=d.get("drift_s"),
                    lag_s=max((now - nxt).total_seconds(), 0.0) if nxt else 0.0,
                    ticks=int(d.get("ticks", 0)),
                    last_worker=d.get("last_worker"),
                )
            )
        return out
