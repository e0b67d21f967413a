"""Agents for the scheduler: what an agent is, what a tick gets, and where agents come from.

An `Agent` pairs a key with an async `tick(ctx)` and an interval; an `AgentRegistry` collects
them, in code (`add`, the `agent` decorator), from ``module:attr`` or ``file.py:attr``
references, or from the ``mongogate.agents`` entry points packages declare.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import logging
import math
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.errors import ConfigError
from mongogate.runs import Runs
from mongogate.scheduler.events import Listener
from mongogate.scheduler.investigations import Investigations
from mongogate.scheduler.kinds import Every, Schedule, make_schedule
from mongogate.values import Doc

TickFn = Callable[["TickContext"], Awaitable[None]]
#: a `blocking=True` agent's tick: a plain function, run on a worker thread
BlockingTickFn = Callable[["TickContext"], None]

ENTRY_POINT_GROUP = "mongogate.agents"
_MAX_KEY = 200


@dataclass(frozen=True)
class Agent:
    """A scheduled agent: `tick(ctx)` runs once per slot fleet-wide.

    The schedule is exactly one of `poll_interval_s` (fixed rate), `cron` with an explicit `tz`
    (five-field cron) or `at` (one-off times). Misfire rules default to `[scheduler]`:
    `misfire_grace_s` (a run later than this past its slot is skipped and counted), `coalesce`
    (several missed slots run once; default from `catch_up`) and `max_running` (ticks of this
    agent in flight at once; 1: a long tick never overlaps its own next slot).

    The deadline cancels the tick at its next `await`. Synchronous code that blocks declares
    `blocking=True`: `tick` is then a plain function run on a worker thread, so it cannot stall
    the loop or other agents' deadlines (a thread cannot be cut: past its deadline the tick is
    reported as timed out and the thread is left to finish).
    """

    key: str
    tick: TickFn | BlockingTickFn
    poll_interval_s: float | None = None
    #: hard deadline of one tick; None: scheduler.tick_timeout_s
    timeout_s: float | None = None
    cron: str | None = None
    tz: str | None = None
    at: datetime | Sequence[datetime] | None = None
    misfire_grace_s: float | None = None
    coalesce: bool | None = None
    max_running: int | None = None
    blocking: bool = False
    on_success: Listener | None = None
    on_failure: Listener | None = None
    on_missed: Listener | None = None
    #: an interval agent's phase: its slots fall at ``epoch + offset_s + k * interval`` (seconds,
    #: 0 <= offset_s < interval). None: a stable offset from a hash of the key (`scheduler.spread`)
    offset_s: float | None = None
    schedule: Schedule = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        k = self.key
        if not isinstance(k, str) or not k or len(k) > _MAX_KEY or any(ord(c) < 32 for c in k):
            raise ConfigError(
                f"agent key {k!r} must be a non-empty string of at most {_MAX_KEY} printable chars"
            )
        self._check_tick()
        object.__setattr__(
            self, "schedule", make_schedule(k, self.poll_interval_s, self.cron, self.tz, self.at)
        )
        self._check_limits()
        for name in ("on_success", "on_failure", "on_missed"):
            fn = getattr(self, name)
            if fn is not None and not inspect.iscoroutinefunction(fn):
                raise ConfigError(f"agent {k!r}: {name} must be an async function taking a TickEvent")

    def _check_tick(self) -> None:
        """The tick is a callable of the kind `blocking` says."""
        k = self.key
        if not callable(self.tick):
            raise ConfigError(f"agent {k!r}: tick must be an async function taking a TickContext")
        is_async = inspect.iscoroutinefunction(self.tick)
        if self.blocking and is_async:
            raise ConfigError(
                f"agent {k!r}: blocking=True takes a plain function (run on a thread), not async"
            )
        if not self.blocking and inspect.isfunction(self.tick) and not is_async:
            raise ConfigError(
                f"agent {k!r}: tick is a plain function: declare blocking=True to run it on a thread"
            )

    def _check_limits(self) -> None:
        """offset_s within the interval; timeouts, grace and max_running in range."""
        k = self.key
        if self.offset_s is not None and not (
            isinstance(self.schedule, Every) and 0 <= self.offset_s < self.schedule.seconds
        ):
            raise ConfigError(
                f"agent {k!r}: offset_s needs poll_interval_s and must be from 0 to below the interval"
            )
        if self.timeout_s is not None and not 0 < self.timeout_s < math.inf:
            raise ConfigError(f"agent {k!r}: timeout_s must be a positive number of seconds")
        if self.misfire_grace_s is not None and not 0 < self.misfire_grace_s < math.inf:
            raise ConfigError(f"agent {k!r}: misfire_grace_s must be a positive number of seconds")
        if self.max_running is not None and (
            isinstance(self.max_running, bool)
            or not isinstance(self.max_running, int)
            or not 1 <= self.max_running <= 64
        ):
            raise ConfigError(f"agent {k!r}: max_running must be an integer from 1 to 64")

    @property
    def nominal_s(self) -> float:
        """About how often it runs (for log thresholds): the interval, else a minute."""
        return self.schedule.seconds if isinstance(self.schedule, Every) else 60.0


@dataclass(frozen=True)
class TickContext:
    """What a tick gets: the database, who runs it, and which due time it answers."""

    agent: Agent
    db: AsyncDatabase[Doc]
    worker_id: str
    #: the due time this tick answers (its identity: one tick per (agent, scheduled_at))
    scheduled_at: datetime
    claimed_at: datetime
    #: when the next tick comes due (set by this claim)
    next_run_at: datetime
    #: how late the tick was claimed (claimed_at - scheduled_at), in seconds
    drift_s: float
    investigations: Investigations
    #: checkpoints, for agents whose work spans ticks or must survive a crash mid-tick
    runs: Runs
    log: logging.Logger
    #: the scheduler's clock: read time from here, so tests can drive it
    clock: Clock = SYSTEM_CLOCK

    @property
    def agent_key(self) -> str:
        return self.agent.key


class AgentRegistry:
    """Agents by key. Add them in code (`add`, the `agent` decorator) or from entry points."""

    def __init__(self, agents: Iterable[Agent] = ()) -> None:
        self._agents: dict[str, Agent] = {}
        for a in agents:
            self.add(a)

    def add(self, agent: Agent) -> Agent:
        if not isinstance(agent, Agent):
            raise ConfigError(f"expected an Agent, got {type(agent).__name__}")
        if agent.key in self._agents and self._agents[agent.key] is not agent:
            raise ConfigError(f"agent key {agent.key!r} is registered twice")
        self._agents[agent.key] = agent
        return agent

    def extend(self, agents: Iterable[Agent]) -> None:
        for a in agents:
            self.add(a)

    def agent(
        self,
        key: str,
        *,
        every: float | None = None,
        cron: str | None = None,
        tz: str | None = None,
        at: datetime | Sequence[datetime] | None = None,
        timeout_s: float | None = None,
        **options: Any,
    ) -> Callable[[TickFn], TickFn]:
        """Decorator: ``@registry.agent("digest", every=60)``, ``cron="0 3 * * *", tz="UTC"`` or
        ``at=datetime(...)`` on ``async def tick(ctx): ...``; `options` are Agent's other fields."""

        def register(fn: TickFn) -> TickFn:
            self.add(Agent(key, fn, every, timeout_s, cron=cron, tz=tz, at=at, **options))
            return fn

        return register

    def get(self, key: str) -> Agent | None:
        return self._agents.get(key)

    def keys(self) -> list[str]:
        return list(self._agents)

    def __iter__(self) -> Iterator[Agent]:
        return iter(list(self._agents.values()))

    def __len__(self) -> int:
        return len(self._agents)

    def __contains__(self, key: object) -> bool:
        return key in self._agents

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> int:
        """Add the agents packages declare under `[project.entry-points."mongogate.agents"]`."""
        n = 0
        for ep in importlib.metadata.entry_points(group=group):
            try:
                obj = ep.load()
            except Exception as e:
                raise ConfigError(
                    f"entry point {ep.name} = {ep.value!r} ({group}) failed to load: {e}"
                ) from e
            for a in agents_from(obj, f"entry point {ep.value!r}"):
                self.add(a)
                n += 1
        return n

    def load_ref(self, ref: str) -> int:
        """Add agents from ``module:attr`` or ``path/to/file.py:attr``."""
        added = list(agents_from(load_object(ref), ref))
        self.extend(added)
        return len(added)


def load_object(ref: str) -> object:
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"agents reference {ref!r} must look like 'package.module:attr' or 'file.py:attr'")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            spec = importlib.util.spec_from_file_location(f"mongogate_agents_{path.stem}", path)
            if spec is None or spec.loader is None or not path.is_file():
                raise ConfigError(f"agents file {path} does not exist")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"could not import {module_name!r} for agents {ref!r}: {e}") from e
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise ConfigError(
                f"{module_name!r} has no attribute {attr!r} (from agents reference {ref!r})"
            ) from e
    return obj


def agents_from(obj: object, origin: str) -> list[Agent]:
    """An Agent, an AgentRegistry, an iterable of Agents, or a no-argument callable returning one."""
    if isinstance(obj, Agent):
        return [obj]
    if isinstance(obj, AgentRegistry):
        return list(obj)
    if callable(obj) and not isinstance(obj, type):
        return agents_from(obj(), origin)
    if isinstance(obj, Iterable) and not isinstance(obj, str | bytes | dict):
        items = list(obj)
        if all(isinstance(a, Agent) for a in items):
            return items
    raise ConfigError(f"{origin} is not an Agent, an AgentRegistry or a list of Agents")
