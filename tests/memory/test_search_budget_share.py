"""One index budget for every tenant (`indexing/budget.py`): a tenant flooding it with large
indexes (messages of random words, as benchmarks/hostile_tenant.py does) evicts its own scopes,
never another tenant's recently used one; that tenant's next recall and search answer from the
index they hold (no rebuild)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import LimitsSettings, LongTermSettings, MemorySettings, MessageSearchSettings
from mongogate.memory.search import MessageSearch
from mongogate.memory.store import MemoryStore
from mongogate.memory_scope import SUBJECT_SEPARATOR
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.model import MemoryScope
from mongogate.recall.store import LongTermMemory

pytestmark = pytest.mark.anyio

QUIET = MemoryScope("quiet")
#: a message of random words: every word a new term, the most index a byte of text can cost
HOSTILE_BYTES = 16 * 1024


def random_words(rng: random.Random, size: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < size - 32:
        words.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(5, 9))))
    return " ".join(words)


@pytest.fixture
async def memory(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, clock: ManualClock
) -> AsyncIterator[MemoryStore]:
    s = MemoryStore(mongo[db_name], MemorySettings(max_message_bytes=HOSTILE_BYTES), clock)
    await s.ensure_indexes()
    yield s


@pytest.fixture
async def ltm(mongo: AsyncMongoClient[dict[str, object]], db_name: str, clock: ManualClock) -> LongTermMemory:
    out = LongTermMemory(
        mongo[db_name], LongTermSettings(max_per_scope=100), LocalEmbedder(), clock, limits=LimitsSettings()
    )
    await out.ensure_indexes()
    return out


def searcher(memory: MemoryStore, ltm: LongTermMemory) -> MessageSearch:
    """search_messages on recall's index budget, as a server assembles it (`assembly.py`)."""
    return MessageSearch(memory, ltm.index.budget, None, MessageSearchSettings(), min_score=0.125)


async def test_one_tenants_flood_of_large_indexes_never_evicts_another_tenants_scopes(
    memory: MemoryStore, ltm: LongTermMemory, clock: ManualClock
) -> None:
    found = searcher(memory, ltm)
    rng = random.Random(7)
    await ltm.remember(QUIET, "The spare key is under the blue pot.")
    quiet_sid = await memory.create_session("quiet")
    # the quiet tenant's notes: a large index of its own (450 KB), within a fifth of the budget
    await memory.append(
        "quiet", quiet_sid, "t1", "user", "invoice INV-2231 " + random_words(rng, HOSTILE_BYTES)
    )
    assert (await ltm.recall(QUIET, "where is the spare key?")).memories
    assert (await found.search("quiet", "invoice", owner="quiet")).messages
    budget = ltm.index.budget
    budget.budget_bytes = 5 * budget.nbytes()
    loud_sid = await memory.create_session("loud")
    for i in range(12):  # the hostile tenant's scope grows to what the budget holds
        await memory.append(
            "loud", loud_sid, f"t{i}", "user", f"needle{i} " + random_words(rng, HOSTILE_BYTES)
        )
        clock.advance(1)
        assert (await found.search("loud", f"needle{i}", owner="loud")).messages, i  # its newest is held
        # the quiet tenant's scopes stay held, whatever the hostile one holds
        assert found.index.held("quiet") is not None, f"evicted at the hostile message {i}"
        assert ltm.index.held(QUIET, ltm.embedder.model, ltm.embedder.dimensions) is not None
    assert budget.evicted["messages"] + budget.evicted["memories"] == 0
    assert budget.unkept["messages"] > 0  # its scope, past its share, was used and not kept
    rebuilds = (ltm.index.stats.rebuilds, found.index.stats.rebuilds)
    assert (await ltm.recall(QUIET, "where is the spare key?")).memories
    assert (await found.search("quiet", "invoice", owner="quiet")).messages
    # answered from the indexes held: nothing of the quiet tenant read whole again
    assert (ltm.index.stats.rebuilds, found.index.stats.rebuilds) == rebuilds


async def test_a_tenant_over_its_share_evicts_its_own_scopes_first(
    memory: MemoryStore, ltm: LongTermMemory, clock: ManualClock
) -> None:
    """Each of the hostile tenant's subjects a conversation scope of its own: while the budget is
    full, its least recently used subjects go, never the quiet tenant's scope."""
    found = searcher(memory, ltm)
    rng = random.Random(11)
    quiet_sid = await memory.create_session("quiet")
    await memory.append(
        "quiet", quiet_sid, "t1", "user", "invoice INV-2231 " + random_words(rng, HOSTILE_BYTES)
    )
    assert (await found.search("quiet", "invoice", owner="quiet")).messages
    budget = ltm.index.budget
    budget.budget_bytes = 5 * budget.nbytes()
    keys = [f"loud{SUBJECT_SEPARATOR}user-{i}" for i in range(8)]
    for i, key in enumerate(keys):  # each subject's scope alone within the tenant's share
        sid = await memory.create_session(key)
        await memory.append(key, sid, "t1", "user", f"needle{i} " + random_words(rng, HOSTILE_BYTES))
        clock.advance(1)
        assert (await found.search(key, f"needle{i}", owner="loud")).messages
        assert found.index.held("quiet") is not None, f"evicted at the hostile subject {i}"
    held = [found.index.held(key) is not None for key in keys]
    assert held[-1] and not held[0]  # its own least recently used went, its newest stays
    assert budget.evicted["messages"] == held.count(False) and budget.unkept["messages"] == 0
    rebuilds = found.index.stats.rebuilds
    assert (await found.search("quiet", "invoice", owner="quiet")).messages
    assert found.index.stats.rebuilds == rebuilds
