"""What every tool call can reach: the server's long-lived parts (the lifespan value).

Every part is built by the lifespan before the first call, so none is optional: a tool never
checks whether something was filled in later."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mongogate.audit.log import AuditLog
from mongogate.config import Settings
from mongogate.db import Database
from mongogate.memory.store import MemoryStore
from mongogate.memory.turns import Turns
from mongogate.principal import Principal
from mongogate.recall.store import LongTermMemory
from mongogate.runs import Runs


@dataclass
class AppState:
    settings: Settings
    db: Database
    memory: MemoryStore
    turns: Turns
    #: resolves the caller from the request (token) or the launch configuration (stdio)
    principal: Callable[[Any], Principal]
    require_scopes: Callable[[Principal, list[str], str], None]
    audit: AuditLog
    #: checkpoints (its indexes are built at start when run tools are registered)
    runs: Runs
    #: long-term memory (remember / recall), with its indexes
    recall: LongTermMemory
