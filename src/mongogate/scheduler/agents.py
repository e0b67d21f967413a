"""Agents for the scheduler: what an agent is, what a tick gets, and where agents come from.

An `Agent` pairs a key with an async `tick(ctx)` and an interval; an `AgentRegistry` collects
them, in code (`add`, the `agent` decorator), from ``module:attr`` or ``file.py:attr``
references, or from the ``mongogate.agents`` entry points packages declare.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import math
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pymongo.asynchronous.database import AsyncDatabase

from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.errors import ConfigError
from mongogate.runs import Runs
from mongogate.scheduler.investigations import Investigations
from mongogate.values import Doc

TickFn = Callable[["TickContext"], Awaitable[None]]

ENTRY_POINT_GROUP = "mongogate.agents"
_MAX_KEY = 200


@dataclass(frozen=True)
class Agent:
    """A periodic agent: `tick(ctx)` runs about every `poll_interval_s`, once per due time fleet-wide.

    The deadline cancels the tick at its next `await`; blocking (synchronous) code cannot be
    cut, so run it with `anyio.to_thread.run_sync`. A tick that outlasts the interval may
    overlap the next one (here or on another worker); work that must not overlap takes a run
    lease (`ctx.runs.acquire`), as examples/agents.py does.
    """

    key: str
    tick: TickFn
    poll_interval_s: float
    #: hard deadline of one tick; None: scheduler.tick_timeout_s
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        k = self.key
        if not isinstance(k, str) or not k or len(k) > _MAX_KEY or any(ord(c) < 32 for c in k):
            raise ConfigError(
                f"agent key {k!r} must be a non-empty string of at most {_MAX_KEY} printable chars"
            )
        if not callable(self.tick):
            raise ConfigError(f"agent {k!r}: tick must be an async function taking a TickContext")
        if not isinstance(self.poll_interval_s, int | float) or not 0 < self.poll_interval_s < math.inf:
            raise ConfigError(f"agent {k!r}: poll_interval_s must be a positive number of seconds")
        if self.timeout_s is not None and not 0 < self.timeout_s < math.inf:
            raise ConfigError(f"agent {k!r}: timeout_s must be a positive number of seconds")


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

    def agent(self, key: str, *, every: float, timeout_s: float | None = None) -> Callable[[TickFn], TickFn]:
        """Decorator: ``@registry.agent("digest", every=60)`` on ``async def tick(ctx): ...``."""

        def register(fn: TickFn) -> TickFn:
            self.add(Agent(key, fn, every, timeout_s))
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
