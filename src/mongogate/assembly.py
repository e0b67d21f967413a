"""One assembly of a server's services: settings + an open database -> the AppState tools reach;
and of a worker's scheduler: settings + an open database + agents -> the `Scheduler` it runs.

`build_server`'s lifespan (`serve`), `mongogate try --execute --demo` and `mongogate check`
build their stores here, so each service is constructed once and the same way (long-term memory
with the server's limits, the fault hook wired to both stores, one clock). `build_server` keeps
only auth, middleware and the lifespan (server/app.py). `mongogate worker` runs through
`run_worker` here, which builds its scheduler with `build_scheduler` (the scheduler package is
imported only then: `serve`'s start-up does not pay for it).

Test hooks are arguments (``clock``, ``faults``), never read from the environment: production
code has no switch a stray variable could turn on. Crash and race tests pass them through the
public API (tests/fault_harness.py runs `mongogate` with them in a real process).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from mongogate.audit import AuditLog
from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.config import Settings
from mongogate.db import Database
from mongogate.errors import NotFound
from mongogate.memory import MemoryStore, MessageVectors, Turns, ensure_search_index
from mongogate.principal import Principal
from mongogate.recall import LongTermMemory, make_embedder, path_report
from mongogate.runs import Runs
from mongogate.tools.state import AppState

if TYPE_CHECKING:
    from mongogate.scheduler import Agent, AgentRegistry, LoopObserver, Scheduler, WorkerReport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Faults:
    """Test hooks, all off by default.

    ``at(point)`` is called at named points between a write and its reply: begin_turn.after_lease,
    append.after_seq, answer.after_commit, answer.after_write, end_turn.after_reply_write,
    remember.after_write, forget.after_memory. Crash tests end the process there (tests/fault_harness.py)."""

    at: Callable[[str], None] | None = None


NO_FAULTS = Faults()


def no_caller(ctx: Any) -> Principal:
    """The principal outside a served request (`try`, `check`): there is none."""
    raise NotFound("no caller outside a served request")


def no_scope_check(principal: Principal, scopes: list[str], tool: str) -> None:
    return None


def unwritten_audit(settings: Settings) -> AuditLog:
    """An audit log that is never written (`try` seeding, `check`): the server's settings, no stream."""
    a = settings.audit
    return AuditLog(
        settings.audit_path, redact_values=a.redact_values, max_value_chars=a.max_value_chars, stream=None
    )


def build_services(
    settings: Settings,
    db: Database,
    *,
    audit: AuditLog | None = None,
    principal: Callable[[Any], Principal] = no_caller,
    require_scopes: Callable[[Principal, list[str], str], None] = no_scope_check,
    clock: Clock = SYSTEM_CLOCK,
    faults: Faults = NO_FAULTS,
) -> AppState:
    """The stores over ``db`` (no I/O: nothing is created, the embedder loads when first used)."""
    memory = MemoryStore(db.memory, settings.memory, clock)
    memory.fault = faults.at
    recall = LongTermMemory(
        db.memory,
        settings.memory.long_term,
        make_embedder(settings.memory.embedding),
        clock,
        limits=settings.limits,
    )
    recall.fault = faults.at
    found = settings.memory.search
    vectors = MessageVectors(recall.embedder, found.cache_messages) if found.embed_messages else None
    return AppState(
        settings=settings,
        db=db,
        memory=memory,
        turns=Turns(memory),
        principal=principal,
        require_scopes=require_scopes,
        audit=audit if audit is not None else unwritten_audit(settings),
        runs=Runs(db.memory, settings.memory),
        recall=recall,
        message_vectors=vectors,
    )


async def ensure_memory_indexes(state: AppState) -> list[str]:
    """Messages' and long-term memory's indexes and the message search index (idempotent, every
    start); returns which vector path long-term memory runs (recall/search.py `path_report`)."""
    await state.memory.ensure_indexes()
    await state.recall.ensure_indexes()
    await ensure_search_index(state.memory)
    return await path_report(state.recall)


async def open_services(
    settings: Settings,
    db: Database,
    *,
    audit: AuditLog,
    principal: Callable[[Any], Principal],
    require_scopes: Callable[[Principal, list[str], str], None],
    run_tools: bool,
    clock: Clock = SYSTEM_CLOCK,
    faults: Faults = NO_FAULTS,
) -> AppState:
    """A server's services over an open ``db``, with their indexes (checkpoints' only when run
    tools are served: ``run_tools``); the vector path in the server log."""
    state = build_services(
        settings,
        db,
        audit=audit,
        principal=principal,
        require_scopes=require_scopes,
        clock=clock,
        faults=faults,
    )
    report = await ensure_memory_indexes(state)
    log.info("%s", report[1])
    for line in (report[0], *report[2:]):
        log.debug("%s", line)
    if run_tools:  # checkpoints need their unique index before any call
        await state.runs.ensure_indexes()
    return state


def build_scheduler(
    settings: Settings,
    db: Database,
    agents: Iterable[Agent] | AgentRegistry,
    *,
    worker_id: str | None = None,
    concurrency: int | None = None,
    observer: LoopObserver | None = None,
    clock: Clock = SYSTEM_CLOCK,
    rng: random.Random | None = None,
) -> Scheduler:
    """A worker's scheduler over ``db`` (no I/O): its agents, `scheduler.*`, checkpoints with the
    memory settings, one clock; ``observer`` is what the loop reports to (worker metrics)."""
    from mongogate.scheduler import Scheduler

    scheduler = Scheduler(
        db.memory,
        agents,
        settings.scheduler,
        worker_id,
        concurrency=concurrency,
        rng=rng,
        memory=settings.memory,
        clock=clock,
    )
    scheduler.observer = observer
    return scheduler


async def run_worker(
    settings: Settings,
    agents: Iterable[Agent] | AgentRegistry,
    *,
    duration_s: float | None = None,
    status_only: bool = False,
    worker_id: str | None = None,
    stop: anyio.Event | None = None,
    concurrency: int | None = None,
    metrics: LoopObserver | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> WorkerReport:
    """`mongogate worker`: open the database, build the scheduler, run the agents until `stop`,
    `duration_s`, or SIGINT/SIGTERM (`scheduler/worker.py` `run_scheduler`); or only read their status."""
    from mongogate.scheduler import AgentRegistry, require_agents, run_scheduler

    registry = agents if isinstance(agents, AgentRegistry) else AgentRegistry(agents)
    if not status_only:
        require_agents(registry)
    db = Database(settings.database, settings.server.data_dir)
    await db.open()
    try:
        await db.ping()
        scheduler = build_scheduler(
            settings,
            db,
            registry,
            worker_id=worker_id,
            concurrency=concurrency,
            observer=None if status_only else metrics,
            clock=clock,
        )
        return await run_scheduler(scheduler, duration_s=duration_s, status_only=status_only, stop=stop)
    finally:
        await db.close()
