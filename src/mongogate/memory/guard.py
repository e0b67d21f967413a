"""Every write of messages bracketed by its conversation scope's revision (`indexing/coherence.py`),
so no server process's message index (`memory/message_index.py`) answers `search_messages` from
a stale copy.

The scope is the stored `tenant` of the messages (the tenant, or the tenant and the subject:
`documents.TENANT`), its revision document the one of that `_id` in `message_revisions`, and the
write signal's keys of kind "msg:" (never long-term memory's). Each writer of messages (an
append, begin_turn's user message, an answer settled after its commit, the OpenAI Agents
session's items, a pop, a session erased, the terms and vectors search derives) writes inside
`MessageGuard.writing`: the write is in flight (`Coherence.begin`, and on the embedded engine the
write signal) from before it to after its `bump`, which names what changed:

- `m:<message id>`: a message written or deleted (a reader re-reads it by `_id`);
- `s:<session id>`: a session erased, with all its messages (a reader drops them, and looks the
  session up);
- `x:<message id>`: what search derives from a message written (its `message_index` document).

A write that fails names what it tried (a reader re-reads it and finds what landed, if
anything); a process stopped between its write and its bump leaves the write in flight: readers
read their results back until `coherence.LEASE`, then read the scope whole. Messages erased by
the retention TTL are not written by anyone: the index leaves out a message once its
`created_at` is older than the retention by the clock, as the TTL monitor will (`message_index.py`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager

from pymongo.asynchronous.database import AsyncDatabase

from mongogate.clock import Clock
from mongogate.engine.write_signal import WriteSignal
from mongogate.indexing import Coherence
from mongogate.memory import documents as md
from mongogate.values import Doc

__all__ = ["KIND", "MessageGuard", "derived", "message", "session"]

#: the write signal's kind of message search's scopes
KIND = "msg:"


def message(mid: str) -> str:
    """The change of a message written or deleted."""
    return "m:" + mid


def session(sid: str) -> str:
    """The change of a session erased (its messages with it)."""
    return "s:" + sid


def derived(mid: str) -> str:
    """The change of what search derives from a message (its `message_index` document)."""
    return "x:" + mid


class MessageGuard:
    """The revision protocol of conversation scopes, as every writer of messages uses it."""

    def __init__(self, db: AsyncDatabase[Doc], clock: Clock, at: Callable[[str], None]) -> None:
        self.coherence = Coherence(db[md.MESSAGE_REVISIONS], db.name, WriteSignal.of(db.client), kind=KIND)
        self.clock = clock
        #: the writer's fault hook (crash tests stop the process at "messages.before_bump")
        self.at = at
        #: told of the messages each write stored (scope key, message ids): the server's
        #: background search work (`message_fill.MessageFill.want`); None: nobody listens
        self.on_written: Callable[[str, list[str]], None] | None = None

    @asynccontextmanager
    async def writing(self, key: str, changes: Iterable[str] = ()) -> AsyncIterator[list[str]]:
        """Around one write of the scope `key`'s messages: yields the list of changes (`message`,
        `session`, `derived`), which the block may extend once it knows what it wrote; bumped after
        it, also when it fails with an exception (what it tried is re-read by every reader)."""
        named = list(changes)
        # two updates by `_id` around the write, no more
        async with self.coherence.announcing(key, clock=self.clock):
            token = await self.coherence.begin(key, self.clock.now())
            try:
                yield named
            except Exception:
                await self.coherence.bump(key, *named, token=token)
                raise
            self.at("messages.before_bump")
            await self.coherence.bump(key, *named, token=token)

    def wrote(self, key: str, ids: list[str]) -> None:
        """Messages of `key` were stored: tell the listener (after the write's bump)."""
        if self.on_written is not None and ids:
            self.on_written(key, ids)
