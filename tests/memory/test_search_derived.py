"""What search derives from a message (`message_index`, `memory/message_fill.py`) labels only the
message it was derived from: a derivation that lands after its message was erased, when a new
message of the same `_id` follows (the OpenAI Agents session's items restart at the same ids after
a clear), never makes the new message findable by the erased one's words."""

from __future__ import annotations

import pytest

from mongogate.clock import ManualClock
from mongogate.memory.store import MemoryStore
from tests.memory.searching import searcher

pytestmark = pytest.mark.anyio

SID = "agents-session"
TURN = "items"


async def test_a_derivation_landing_after_a_clear_never_labels_the_next_message_of_that_id(
    store: MemoryStore, clock: ManualClock
) -> None:
    found = searcher(store)
    await store.add_items(
        "acme", SID, [("user", "the vault password is swordfish")], turn=TURN, new={}, name=SID
    )
    raced = False

    async def clear_and_write_again(ids: list[str]) -> None:
        nonlocal raced
        if raced:
            return
        raced = True  # between the derivation of the old text and its write
        await store.clear_items("acme", SID, name=SID)
        clock.advance(1)
        await store.add_items("acme", SID, [("user", "water the garden fern")], turn=TURN, new={}, name=SID)

    found.fill.before_write = clear_and_write_again
    await found.search("acme", "anything", owner="acme")  # derives the message, the clear racing its write
    assert raced
    found.fill.before_write = None
    for _ in range(2):  # a search derives what it finds missing, then searches again
        fern = await found.search("acme", "garden fern", owner="acme")
        assert [h.content for h in fern.messages] == ["water the garden fern"]
        assert (await found.search("acme", "swordfish vault password", owner="acme")).messages == []


async def test_a_derivation_landing_after_a_pop_leaves_nothing_of_the_popped_words(
    store: MemoryStore, clock: ManualClock
) -> None:
    """The popped (or cleared, or erased) message's words must not stay in `message_index`: the
    derivation checks its message after writing and takes back what has none."""
    found = searcher(store)
    secret = "the vault password is swordfish"
    await store.add_items("acme", SID, [("user", secret)], turn=TURN, new={}, name=SID)

    async def pop(ids: list[str]) -> None:
        assert await store.pop_item("acme", SID, name=SID) == secret

    found.fill.before_write = pop
    await found.search("acme", "anything", owner="acme")  # derives the message, the pop racing its write
    assert await store.db["message_index"].count_documents({}) == 0
