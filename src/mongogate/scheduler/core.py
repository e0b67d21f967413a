"""A scheduler for periodic agents on MongoDB alone: no broker, no leader, any number of workers.

Each agent has one schedule document: `due_at` (the slot the next tick answers), `next_run_at`
(when it may be claimed: the slot, or later after start-up jitter) and `running` (the claimed
tick, with its deadline). Claiming is one conditional update on the `next_run_at` and `due_at`
a worker read, so of all the workers that see a tick due exactly one wins it. The next slot is
the previous slot plus the interval (fixed rate; see `slots`). A tick is claimed before it
runs, so a worker that dies mid-tick loses that tick (at most once per slot) rather than
running it twice; its claim stays behind, expires, and is reported as abandoned.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

import anyio
from pymongo import ASCENDING, ReturnDocument, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError, PyMongoError

from mongogate.clock import SYSTEM_CLOCK, Clock, as_utc, truncate_ms
from mongogate.config import MemorySettings, SchedulerSettings
from mongogate.errors import ConfigError, StorageError
from mongogate.runs import Runs
from mongogate.scheduler.agents import Agent, AgentRegistry, TickContext
from mongogate.scheduler.investigations import Investigations
from mongogate.scheduler.loop import CLAIM_FIELDS, SchedulerStats, run_loop
from mongogate.scheduler.slots import Claim, is_finished, jitter_bound, new_claim_id, next_slot
from mongogate.scheduler.status import AgentStatus, read_status
from mongogate.values import Doc

SCHEDULE_COLLECTION = "agent_schedule"
#: schedule documents written per bulk request (register, jitter)
_BULK = 500

log = logging.getLogger(__name__)


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
        concurrency: int | None = None,
        rng: random.Random | None = None,
        memory: MemorySettings | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.db = db
        self.agents = agents if isinstance(agents, AgentRegistry) else AgentRegistry(agents)
        self.settings = settings
        self.worker_id = worker_id or default_worker_id()
        #: `scheduler.concurrency`, unless the caller (--concurrency) overrides it
        self.concurrency = settings.concurrency if concurrency is None else concurrency
        if self.concurrency < 1:
            raise ConfigError("scheduler concurrency must be at least 1")
        self.rng = rng or random.Random()
        self.clock = clock
        self.coll: AsyncCollection[Doc] = db[SCHEDULE_COLLECTION]
        self.investigations = Investigations(db, clock=clock)
        self.runs = Runs(db, memory or MemorySettings(), clock=clock)

    def timeout_s(self, agent: Agent) -> float:
        return agent.timeout_s or self.settings.tick_timeout_s

    async def ensure_indexes(self) -> None:
        try:
            # Serves the claim lookup: one agent's document, only when due.
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
        now = now or self.clock.now()
        try:
            stored = {d["_id"]: d.get("interval_s") async for d in self.coll.find({}, {"interval_s": 1})}
        except PyMongoError as e:
            raise StorageError(f"could not read the schedule: {e}") from e
        ops = [
            UpdateOne(
                {"_id": a.key},
                {
                    "$setOnInsert": {
                        "agent_key": a.key,
                        "next_run_at": now,
                        "due_at": now,
                        "created_at": now,
                        "ticks": 0,
                        "missed_slots": 0,
                        "abandoned": 0,
                    },
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
        """Spread overdue ticks over 0..min(jitter_max_s, interval), so a restart does not fire the
        whole backlog at once and no agent waits more than one extra interval.

        Only `next_run_at` moves: `due_at` keeps the slot, so status shows the real lag. Each
        move is conditional on the value read, so workers starting together do not stack jitter.
        """
        if self.settings.jitter_max_s <= 0 or not len(self.agents):
            return 0
        now = now or self.clock.now()
        ops: list[UpdateOne] = []
        try:
            async for d in self.coll.find({"next_run_at": {"$lte": now}}, CLAIM_FIELDS):
                agent = self.agents.get(d["_id"])
                if agent is None:
                    continue
                bound = jitter_bound(self.settings.jitter_max_s, agent.poll_interval_s)
                at = truncate_ms(now + timedelta(seconds=self.rng.uniform(0, bound)))
                slot = d.get("due_at") or d["next_run_at"]
                ops.append(
                    UpdateOne(
                        {"_id": d["_id"], "next_run_at": d["next_run_at"]},
                        {"$set": {"next_run_at": at, "due_at": slot}},
                    )
                )
        except PyMongoError as e:
            raise StorageError(f"could not read the schedule: {e}") from e
        await self._bulk(ops, "spread overdue ticks")
        if ops:
            log.info(
                "worker %s: spread %d overdue agents over at most %g s (each within its interval)",
                self.worker_id,
                len(ops),
                self.settings.jitter_max_s,
            )
        return len(ops)

    async def claim(self, agent: Agent, now: datetime | None = None, seen: Doc | None = None) -> Claim | None:
        """Take the agent's due tick; None if it is not due or another worker won.

        `seen` is the schedule document as the caller last read it (the loop's scan); without
        it the document is read first. The update matches only that read, so one worker wins.
        """
        now = now or self.clock.now()
        try:
            doc = seen or await self.coll.find_one({"agent_key": agent.key}, CLAIM_FIELDS)
            ready = _dt(doc.get("next_run_at")) if doc else None
            if doc is None or ready is None or ready > now:
                return None
            slot = _dt(doc.get("due_at")) or ready
            nxt, skipped = next_slot(slot, agent.poll_interval_s, now, self.settings.catch_up)
            claim = Claim(
                scheduled_at=slot,
                claimed_at=now,
                next_run_at=nxt,
                deadline=truncate_ms(now + timedelta(seconds=self.timeout_s(agent))),
                claim_id=new_claim_id(slot),
                missed_slots=skipped,
            )
            running = {
                "id": claim.claim_id,
                "worker": self.worker_id,
                "slot": slot,
                "claimed_at": now,
                "deadline": claim.deadline,
                "expires_at": claim.expires_at,
            }
            before = await self.coll.find_one_and_update(
                {"_id": doc["_id"], "next_run_at": doc["next_run_at"], "due_at": doc.get("due_at")},
                {
                    "$set": {
                        "next_run_at": nxt,
                        "due_at": nxt,
                        "last_run_at": now,
                        "last_worker": self.worker_id,
                        "running": running,
                    },
                    "$inc": {"ticks": 1, "missed_slots": skipped},
                },
                projection={"running": 1, "finished_claim": 1},
                return_document=ReturnDocument.BEFORE,
            )
            if before is None:
                return None
            await self._note_abandoned(agent, before, now)
        except PyMongoError as e:
            raise StorageError(f"could not claim a tick of agent {agent.key!r}: {e}") from e
        if skipped:
            log.info("agent %s: skipped %d missed slot(s) to catch up", agent.key, skipped)
        return claim

    async def _note_abandoned(self, agent: Agent, before: Doc, now: datetime) -> None:
        """The claim this one replaced expired unreported: its worker died mid-tick. Count it."""
        previous = before.get("running")
        if not isinstance(previous, dict) or is_finished(previous, before.get("finished_claim")):
            return
        expires = _dt(previous.get("expires_at"))
        if expires is None or expires > now:
            return  # still running (a tick longer than its interval overlaps the next one)
        log.warning(
            "agent %s: the tick due %s claimed by %s was abandoned (no outcome by its deadline)",
            agent.key,
            previous.get("slot"),
            previous.get("worker"),
        )
        await self.coll.update_one(
            {"_id": agent.key}, {"$inc": {"abandoned": 1}, "$set": {"last_abandoned": previous}}
        )

    async def run_tick(self, agent: Agent, claim: Claim, stats: SchedulerStats | None = None) -> str:
        """Run one claimed tick under its hard deadline; returns "ok", "error" or "timeout". Never raises."""
        timeout = self.timeout_s(agent)
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
            clock=self.clock,
        )
        if drift > max(agent.poll_interval_s, 1.0):
            log.info("agent %s is lagging: tick claimed %.3f s after its slot", agent.key, drift)
        else:
            log.debug("agent %s tick claimed %.3f s after its slot", agent.key, drift)
        started = anyio.current_time()
        status, error = "ok", None
        try:
            # The deadline is enforced by the event loop's timer (a cancel scope): it must fire
            # even when nothing else moves, so it is not read from the injected clock.
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
        """Record the outcome and mark this claim finished, in one write by `_id` (the engine's
        fast path). `$max` on the slot-ordered claim id never un-finishes a newer claim."""
        outcome: Doc = {
            "last_status": status,
            "last_error": error,
            "last_duration_s": round(duration, 6),
            "last_finished_at": self.clock.now(),
            "drift_s": round(claim.drift_s, 6),
            "last_scheduled_at": claim.scheduled_at,
        }
        try:
            with anyio.CancelScope(shield=True):
                await self.coll.update_one(
                    {"_id": agent.key}, {"$set": outcome, "$max": {"finished_claim": claim.claim_id}}
                )
        except PyMongoError as e:
            log.warning("agent %s: could not record the tick outcome: %s", agent.key, e)

    async def run(self, stop: anyio.Event | None = None, duration_s: float | None = None) -> SchedulerStats:
        """Claim and run due ticks until `stop` is set or `duration_s` passes; running ticks then finish."""
        return await run_loop(self, stop or anyio.Event(), duration_s)

    async def status(self, now: datetime | None = None) -> list[AgentStatus]:
        """Every scheduled agent (all deployments): state, lag from its slot, missed and abandoned ticks."""
        return await read_status(self.coll, now or self.clock.now())
