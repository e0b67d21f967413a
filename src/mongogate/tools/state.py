"""What every tool call can reach: the server's long-lived parts (the lifespan value)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mongogate.config import Settings
from mongogate.db import Database
from mongogate.memory.store import MemoryStore
from mongogate.memory.turns import Turns
from mongogate.principal import Principal
from mongogate.runs import Runs

if TYPE_CHECKING:
    from mongogate.audit.log import AuditLog
    from mongogate.recall.store import LongTermMemory


@dataclass
class AppState:
    settings: Settings
    db: Database
    memory: MemoryStore
    turns: Turns
    #: resolves the caller from the request (token) or the launch configuration (stdio)
    principal: Callable[[Any], Principal]
    require_scopes: Callable[[Principal, list[str], str], None]
    audit: AuditLog | None = None
    #: checkpoints; set by the run tools' startup hook (`ensure_run_indexes`), before any call
    runs: Runs | None = None
    #: long-term memory (remember / recall); built by the server's lifespan with its indexes
    recall: LongTermMemory | None = None
