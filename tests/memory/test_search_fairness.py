"""The background derivation's queue (`memory/message_fill.py`) is shared by every tenant: one
tenant writing through many subjects (each its own conversation scope) must not fill it so that
every other tenant's writes are dropped."""

from __future__ import annotations

import pytest

from mongogate.config import MessageSearchSettings
from mongogate.memory.message_fill import QUEUE_MAX, QUEUE_PER_SCOPE, MessageFill
from mongogate.memory.store import MemoryStore
from mongogate.memory_scope import SUBJECT_SEPARATOR

pytestmark = pytest.mark.anyio


async def test_one_tenant_of_many_subjects_never_crowds_the_others_out_of_the_queue(
    store: MemoryStore,
) -> None:
    fill = MessageFill(store, None, MessageSearchSettings())
    subjects = QUEUE_MAX // QUEUE_PER_SCOPE + 1
    for s in range(subjects):  # a full queue's worth of its subjects' messages, and more
        key = f"evil{SUBJECT_SEPARATOR}user-{s}"
        fill.want(key, [f"sess-{s}:t{i}:user" for i in range(QUEUE_PER_SCOPE)])
    assert fill.stats.dropped > 0  # the hostile tenant's surplus is what is dropped
    dropped, queued = fill.stats.dropped, fill.queued()
    fill.want("acme", ["acme-session:t1:user", "acme-session:t2:user"])
    assert (fill.stats.dropped, fill.queued()) == (dropped, queued + 2)  # acme's are queued
    assert fill.queued() <= QUEUE_MAX
