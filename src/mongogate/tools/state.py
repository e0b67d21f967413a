"""What every tool call can reach: the server's long-lived parts (the lifespan value).

Every part is built by the lifespan before the first call, so none is optional: a tool never
checks whether something was filled in later."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from mongogate.audit import AuditLog
from mongogate.config import Settings
from mongogate.db import Database
from mongogate.errors import StorageError
from mongogate.memory import MemoryStore, MessageSearch, Turns
from mongogate.principal import Principal
from mongogate.recall import LongTermMemory
from mongogate.runs import Runs
from mongogate.tools.faults import WriteHealth
from mongogate.tools.session_ids import SessionIds


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
    #: search_messages: the conversation scopes' indexes (on recall's index budget) and the
    #: bounded work deriving messages' terms and vectors
    message_search: MessageSearch
    #: the callers' session ids by prefix (completions), told of every session `memory` makes or ends
    session_ids: SessionIds
    #: whether the database refuses this server's writes for good (disk full); read by /readyz
    writes: WriteHealth = field(default_factory=WriteHealth)


class PendingState:
    """The lifespan's value while the database is still being opened (a stdio server answers
    `initialize` and `tools/list` at once; a tool call waits here for the open to finish)."""

    def __init__(
        self, settings: Settings, principal: Callable[[Any], Principal], start: Callable[[], None]
    ) -> None:
        self.settings = settings
        self.principal = principal
        self.state: AppState | None = None
        #: why the open failed (set once, like `state`): every waiting and later call is refused
        self.error: BaseException | None = None
        self._done = anyio.Event()
        self._start: Callable[[], None] | None = start

    def kick(self) -> None:
        """Start opening the database (once): after `initialize` is answered, or at the first
        other request, so the open never competes with the answer a client is timing."""
        start, self._start = self._start, None
        if start is not None:
            start()

    @property
    def started(self) -> bool:
        return self._start is None

    def ready(self, state: AppState) -> None:
        self.state = state
        self._done.set()

    def failed(self, error: BaseException) -> None:
        self.error = error
        self._done.set()

    async def wait(self) -> AppState:
        self.kick()
        await self._done.wait()
        if self.state is None:  # stdio `serve` ends the process; an embedder's server answers this
            refused = StorageError(
                "the server could not open its database at start-up",
                advice="the server log says why; an operator must fix it and restart the server",
            )
            refused.retryable = False  # not in this process: the open is never tried again
            raise refused from self.error
        return self.state


async def app_state(value: object) -> AppState:
    """The AppState a lifespan yielded, once the database is open."""
    if isinstance(value, PendingState):
        return await value.wait()
    assert isinstance(value, AppState), f"unexpected lifespan value {type(value).__name__}"
    return value
