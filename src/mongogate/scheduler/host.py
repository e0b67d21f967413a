"""What the tick runner and the worker loop need of a `Scheduler`, as shapes.

`Scheduler` (`core.py`) runs ticks (`ticks.py`) and its loop (`loop.py`); they call back into
it. Typing them against these protocols instead of the class keeps the imports one way
(core -> loop -> ticks -> host), checked by the acyclic contract with `TYPE_CHECKING` imports
counted.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Protocol

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase

from mongogate.clock import Clock
from mongogate.config import SchedulerSettings
from mongogate.runs import Runs
from mongogate.scheduler.agents import Agent, AgentRegistry
from mongogate.scheduler.investigations import Investigations
from mongogate.scheduler.slots import Claim
from mongogate.scheduler.stats import SchedulerStats
from mongogate.values import Doc


class LoopObserver(Protocol):
    """What the loop reports as it goes (`worker_metrics.WorkerMetrics` is one): lag, claims, ticks."""

    def due(self, agent: str, lag_s: float) -> None: ...
    def claimed(self, agent: str, drift_s: float, missed_slots: int) -> None: ...
    def lost_ticks(self, agent: str, misfired: int, abandoned: int) -> None: ...
    def finished(
        self, agent: str, status: str, seconds: float, next_run_at: datetime | None, now: datetime
    ) -> None: ...


class TickHost(Protocol):
    """What running one claimed tick reads: the tick's context and where its outcome goes."""

    @property
    def db(self) -> AsyncDatabase[Doc]: ...
    @property
    def coll(self) -> AsyncCollection[Doc]: ...
    @property
    def worker_id(self) -> str: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def investigations(self) -> Investigations: ...
    @property
    def runs(self) -> Runs: ...
    def timeout_s(self, agent: Agent) -> float: ...


class LoopHost(TickHost, Protocol):
    """What the worker loop drives: set-up, the per-agent rules, claims and ticks."""

    @property
    def agents(self) -> AgentRegistry: ...
    @property
    def settings(self) -> SchedulerSettings: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def rng(self) -> random.Random: ...
    @property
    def observer(self) -> LoopObserver | None: ...
    async def ensure_indexes(self) -> None: ...
    async def register(self, now: datetime | None = None) -> int: ...
    async def jitter_overdue(self, now: datetime | None = None) -> int: ...
    def busy(self, agent: Agent, doc: Doc, now: datetime) -> bool: ...
    def coalesce(self, agent: Agent) -> bool: ...
    async def claim(
        self, agent: Agent, now: datetime | None = None, seen: Doc | None = None
    ) -> Claim | None: ...
    async def run_tick(self, agent: Agent, claim: Claim, stats: SchedulerStats | None = None) -> str: ...
