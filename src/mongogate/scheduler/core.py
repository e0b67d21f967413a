"""A scheduler for agents on MongoDB alone: no broker, no leader, any number of workers.

`Scheduler` is the public face of three lower pieces it composes: the claim store
(`store.ClaimStore`: registration, claims and outcomes over the schedule collection, and the
per-agent rules), the tick runner (`ticks.TickRunner`: one claimed tick under its deadline) and
the worker loop (`loop.WorkerLoop`, built by `run`). The loop and the ticks depend on the store,
never on this class. A tick is claimed before it runs, so a worker that dies mid-tick loses that
tick (at most once per slot) rather than running it twice, and every such tick is counted: its
claim stays in the schedule document's `open` until it expires (`store.py`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from datetime import datetime

import anyio
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase

from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.config import MemorySettings, SchedulerSettings
from mongogate.errors import ConfigError
from mongogate.logs import default_instance_id
from mongogate.runs import Runs
from mongogate.scheduler import fleet
from mongogate.scheduler.agents import Agent, AgentRegistry
from mongogate.scheduler.capacity import Capacity, assess
from mongogate.scheduler.documents import SCHEDULE_COLLECTION
from mongogate.scheduler.investigations import Investigations
from mongogate.scheduler.loop import LoopObserver, WorkerLoop
from mongogate.scheduler.slots import Claim
from mongogate.scheduler.stats import SchedulerStats
from mongogate.scheduler.status import AgentStatus, read_status
from mongogate.scheduler.store import ClaimStore
from mongogate.scheduler.ticks import TickRunner
from mongogate.values import Doc

__all__ = ["SCHEDULE_COLLECTION", "Scheduler", "default_worker_id"]

#: host:pid:random, the server's instance id shape (`logs.default_instance_id`): one per process
default_worker_id = default_instance_id


class Scheduler:
    """A worker's scheduler: its agents over one database (`store`), how it runs ticks (`ticks`),
    and `run`, the loop that claims them."""

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
        registry = agents if isinstance(agents, AgentRegistry) else AgentRegistry(agents)
        #: `scheduler.concurrency`, unless the caller (--concurrency) overrides it
        self.concurrency = settings.concurrency if concurrency is None else concurrency
        if self.concurrency < 1:
            raise ConfigError("scheduler concurrency must be at least 1")
        self.store = ClaimStore(
            db, registry, settings, worker_id or default_worker_id(), rng=rng or random.Random(), clock=clock
        )
        investigations = Investigations(db, clock=clock)
        self.ticks = TickRunner(self.store, investigations, Runs(db, memory or MemorySettings(), clock=clock))
        #: what the loop reports lag, claims and ticks to (`mongogate worker --metrics-port`)
        self.observer: LoopObserver | None = None

    # ---------------------------------------------------------------- what it runs on

    @property
    def db(self) -> AsyncDatabase[Doc]:
        return self.store.db

    @property
    def coll(self) -> AsyncCollection[Doc]:
        return self.store.coll

    @property
    def agents(self) -> AgentRegistry:
        return self.store.agents

    @property
    def settings(self) -> SchedulerSettings:
        return self.store.settings

    @property
    def worker_id(self) -> str:
        return self.store.worker_id

    @property
    def clock(self) -> Clock:
        return self.store.clock

    @property
    def rng(self) -> random.Random:
        return self.store.rng

    @property
    def investigations(self) -> Investigations:
        return self.ticks.investigations

    @property
    def runs(self) -> Runs:
        return self.ticks.runs

    # ---------------------------------------------------------------- per-agent rules (the store's)

    def timeout_s(self, agent: Agent) -> float:
        return self.store.timeout_s(agent)

    def grace_s(self, agent: Agent) -> float | None:
        return self.store.grace_s(agent)

    def coalesce(self, agent: Agent) -> bool:
        return self.store.coalesce(agent)

    def max_running(self, agent: Agent) -> int:
        return self.store.max_running(agent)

    def busy(self, agent: Agent, doc: Doc, now: datetime) -> bool:
        """Whether `max_running` ticks of this agent are in flight (by the document as read)."""
        return self.store.busy(agent, doc, now)

    def first_slot(self, a: Agent, now: datetime) -> datetime:
        return self.store.first_slot(a, now)

    # ---------------------------------------------------------------- set-up, claims, ticks

    async def ensure_indexes(self) -> None:
        """The schedule's indexes, and those of what ticks write (investigations, runs)."""
        await self.store.ensure_indexes()
        await self.ticks.ensure_indexes()

    async def register(self, now: datetime | None = None) -> int:
        """Record this worker's agents and their schedule documents (`ClaimStore.register`)."""
        return await self.store.register(now)

    async def jitter_overdue(self, now: datetime | None = None) -> int:
        """Spread overdue ticks over a random delay (`ClaimStore.jitter_overdue`)."""
        return await self.store.jitter_overdue(now)

    async def claim(self, agent: Agent, now: datetime | None = None, seen: Doc | None = None) -> Claim | None:
        """Take the agent's due tick; None if it is not due, `max_running` ticks are in flight,
        or another worker won (`ClaimStore.claim`)."""
        return await self.store.claim(agent, now, seen)

    async def run_tick(self, agent: Agent, claim: Claim, stats: SchedulerStats | None = None) -> str:
        """Run one claimed tick under its hard deadline; returns "ok", "error" or "timeout". Never raises."""
        return await self.ticks.run(agent, claim, stats)

    async def run(self, stop: anyio.Event | None = None, duration_s: float | None = None) -> SchedulerStats:
        """Claim and run due ticks until `stop` is set or `duration_s` passes; running ticks then finish."""
        loop = WorkerLoop(self.store, self.ticks, concurrency=self.concurrency, observer=self.observer)
        return await loop.run(stop or anyio.Event(), duration_s)

    # ---------------------------------------------------------------- reading

    async def capacity(self, statuses: list[AgentStatus], now: datetime | None = None) -> Capacity:
        """Ticks due/s (from the schedule) against ticks run/s (the live workers' heartbeats)."""
        known = await fleet.read_fleet(self.db, now or self.clock.now(), self.settings.worker_ttl_s)
        return assess(statuses, known.run_per_s, known.live_workers)

    async def status(self, now: datetime | None = None) -> list[AgentStatus]:
        """Every scheduled agent: state (orphaned when no worker registers it), lag from its slot,
        missed, misfired and abandoned ticks."""
        now = now or self.clock.now()
        known = await fleet.read_fleet(self.db, now, self.settings.worker_ttl_s)
        return await read_status(self.coll, now, known)
