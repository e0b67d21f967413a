"""One assembly of a server's services: settings + an open database -> the AppState tools reach.

`build_server`'s lifespan (`serve`), `mongogate try --execute --demo` and `mongogate check`
build their stores here, so each service is constructed once and the same way (long-term memory
with the server's limits, the fault hook wired to both stores, one clock). `build_server` keeps
only auth, middleware and the lifespan (server/app.py).

Test hooks are arguments (``clock``, ``faults``), never read from the environment: production
code has no switch a stray variable could turn on. Crash and race tests pass them through the
public API (tests/fault_harness.py runs `mongogate` with them in a real process).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mongogate.audit.log import AuditLog
from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.config import Settings
from mongogate.db import Database
from mongogate.errors import NotFound
from mongogate.memory.message_vectors import MessageVectors
from mongogate.memory.search import ensure_search_index
from mongogate.memory.store import MemoryStore
from mongogate.memory.turns import Turns
from mongogate.principal import Principal
from mongogate.recall.embedding import make_embedder
from mongogate.recall.search import path_report
from mongogate.recall.store import LongTermMemory
from mongogate.runs import Runs
from mongogate.tools.state import AppState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Faults:
    """Test hooks, all off by default.

    ``at(point)`` is called at named points between a write and its reply: begin_turn.after_lease,
    answer.after_commit, answer.after_write, end_turn.after_reply_write, remember.after_write,
    forget.after_memory. Crash tests end the process there (tests/fault_harness.py)."""

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
