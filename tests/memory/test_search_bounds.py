"""search_messages' bounds (issue 36 item 1): a call never embeds a whole scope, a message is
embedded by its beginning only, a scope larger than the engine's wire limit still answers, another
process's writes are seen through the revision protocol, and a question about nothing said gets
no message. The real engine and the real wordllama model."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import MemorySettings
from mongogate.memory.store import MemoryStore
from mongogate.recall.embedding import LocalEmbedder
from tests.memory.searching import searcher

pytestmark = pytest.mark.anyio

CHATTER = [
    "The fern needs water twice a week.",
    "Invoice INV-2231 is overdue.",
    "The quarterly revenue report is due Monday.",
    "Please restart the database server tonight.",
    "My flight to Lisbon leaves on Friday morning.",
]


class Counting(LocalEmbedder):
    """The real model, counting the batches and texts it is sent."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[int]] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.batches.append([len(t) for t in texts])
        return await super().embed(texts)


async def _talk(store: MemoryStore, tenant: str, texts: list[str]) -> str:
    sid = await store.create_session(tenant)
    for i, text in enumerate(texts):
        await store.append(tenant, sid, f"k{i}", "user", text)
    return sid


async def test_one_search_embeds_at_most_embed_per_call_messages_and_the_background_the_rest(
    store: MemoryStore,
) -> None:
    """Before issue 36 the first search sent every message of the scope to the model in one batch."""
    await _talk(store, "acme", [f"{CHATTER[i % 5]} (note {i})" for i in range(40)])
    model = Counting()
    found = searcher(store, model, embed_per_call=8, background=True)
    first = await found.search("acme", "fern water", owner="acme")
    assert max(len(b) for b in model.batches) <= 8  # the query alone, or at most 8 messages
    assert found.fill.stats.embedded <= 8
    assert first.partial  # not every message searched by its words yet, and it says so
    assert first.messages and "fern" in first.messages[0].content
    await found.fill.settle()  # the background's batches, run to the end
    assert max(len(b) for b in model.batches) <= 8 and found.fill.stats.embedded == 40
    settled = await found.search("acme", "fern water", owner="acme")
    assert not settled.partial
    assert ["fern" in h.content for h in settled.messages[:8]] == [True] * 8  # every fern note of the 40


async def test_twelve_huge_messages_are_embedded_by_their_first_embed_chars_only(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, clock: ManualClock
) -> None:
    """Twelve 256 KiB messages (the issue's attack): the model reads at most `embed_chars` of each
    and the search answers, finding a message by a word far past what was embedded."""
    big = MemoryStore(mongo[db_name], MemorySettings(max_message_bytes=256 * 1024), clock)
    await big.ensure_indexes()
    body = " ".join(f"w{i % 5000}x" for i in range(40_000))
    texts = [f"huge {n} {body}"[: 256 * 1024 - 40] + f" needle{n}" for n in range(12)]
    assert all(len(t.encode()) <= 256 * 1024 for t in texts)
    await _talk(big, "acme", texts)
    model = Counting()
    found = searcher(big, model)
    got = await found.search("acme", "needle7", owner="acme")
    assert [h.content[-8:] for h in got.messages] == [" needle7"]
    assert max(n for b in model.batches for n in b) <= 2048  # the default embed_chars
    assert found.fill.stats.embedded_chars <= 12 * 2048


async def test_a_scope_larger_than_the_wire_limit_is_read_in_pages(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, clock: ManualClock
) -> None:
    """1,000 messages of 66 KB (66 MB, past the engine's 48 MB replies): before issue 36 every
    search failed with `[storage_error] ... larger than the wire limit`."""
    wide = MemoryStore(mongo[db_name], MemorySettings(max_message_bytes=70_000), clock)
    await wide.ensure_indexes()
    sid = await wide.create_session("acme")
    filler = ("lorem ipsum dolor sit amet " * 2600)[:66_000]
    now = clock.now()
    docs = [
        {
            "_id": f"m{i:05d}",
            "tenant": "acme",
            "session_id": sid,
            "seq": i + 1,
            "key": f"k{i}",
            "role": "user",
        }
        | {
            "created_at": now + timedelta(seconds=i),
            "content": f"entry {i} " + filler + (" zebra" if i == 999 else ""),
        }
        for i in range(1000)
    ]
    for at in range(0, 1000, 50):  # the seeding bypasses the writers: a new index reads it whole
        await wide.messages.insert_many(docs[at : at + 50])
    found = searcher(wide, embed_per_call=4)
    got = await found.search("acme", "zebra", owner="acme")
    assert got.messages[0].seq == 1000  # the newest derived first
    assert got.partial  # the rest is still to derive, and it says so


async def test_another_process_writes_and_erasures_are_seen(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, store: MemoryStore, clock: ManualClock
) -> None:
    """Two server processes: each holds its own index of the scope; what one writes or erases the
    other's next search sees, through the scope's revision (no index answers stale)."""
    other = MemoryStore(mongo[db_name], MemorySettings(max_message_bytes=4096, max_context_limit=50), clock)
    here, there = searcher(store), searcher(other)
    sid = await _talk(store, "acme", CHATTER[:2])
    assert [h.content for h in (await here.search("acme", "invoice", owner="acme")).messages] == [CHATTER[1]]
    assert (await there.search("acme", "invoice", owner="acme")).messages
    await other.append("acme", sid, "k9", "user", "A second invoice, INV-9, arrived.")
    assert len((await here.search("acme", "invoice", owner="acme")).messages) == 2  # written by the other
    assert here.index.stats.rebuilds == 1  # patched, not read whole again
    await other.delete_session("acme", sid)
    assert (await here.search("acme", "invoice", owner="acme")).messages == []


async def test_a_question_about_nothing_said_returns_no_message(store: MemoryStore) -> None:
    """Off-topic: no term shared, and no message close in meaning; recall's floor says so."""
    await _talk(store, "acme", CHATTER)
    found = searcher(store, LocalEmbedder())
    assert (await found.search("acme", "quantum chromodynamics of gluon plasma", owner="acme")).messages == []
    assert (await found.search("acme", "when does my plane depart for Portugal?", owner="acme")).messages[
        0
    ].content == CHATTER[4]
