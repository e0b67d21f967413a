from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import MemorySettings
from mongogate.memory.store import MemoryStore
from mongogate.memory.turns import Turns


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def store(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, clock: ManualClock
) -> AsyncIterator[MemoryStore]:
    s = MemoryStore(mongo[db_name], MemorySettings(max_message_bytes=4096, max_context_limit=50), clock)
    await s.ensure_indexes()
    yield s


@pytest.fixture
def turns(store: MemoryStore) -> Turns:
    return Turns(store)
