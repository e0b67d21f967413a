"""search_messages: best first on every engine (never cut before ranking), through the term
ranking recall uses (stemmed, folded, stop words dropped, syntax as plain words), tenant-bounded."""

from __future__ import annotations

import pytest

from mongogate.clock import ManualClock
from mongogate.memory.search import ensure_search_index
from mongogate.memory.store import MemoryStore
from tests.memory.searching import search_messages, searcher

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
async def _text_index(store: MemoryStore) -> None:
    await ensure_search_index(store)  # as `serve` creates it


async def test_more_matches_than_limit_returns_the_best(store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    # 30 messages that mention the invoice once in passing, then the one about it
    for i in range(30):
        text = f"note {i}: the weekly standup ran long, invoice aside"
        await store.append("acme", sid, f"k{i}", "user", text)
    best = "Invoice INV-2231 is overdue; the invoice was sent twice and the invoice total is wrong."
    await store.append("acme", sid, "best", "user", best)
    got = await search_messages(store, "acme", "invoice INV-2231", limit=3)
    assert got.messages[0].content == best
    assert len(got.messages) == 3
    scores = [h.score for h in got.messages]
    assert scores == sorted(scores, reverse=True) and all(0.0 < s <= 1.0 for s in scores)


async def test_words_are_stemmed_and_syntax_is_plain_text(store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    await store.append("acme", sid, "a", "user", "The invoices for March were refunded.")
    await store.append("acme", sid, "b", "user", "The fern needs water twice a week.")
    for query in ("invoice", "INVOICES -refunded", '"invoice march"', "what is the invoice?"):
        got = await search_messages(store, "acme", query)
        assert [h.content for h in got.messages] == ["The invoices for March were refunded."], query
    assert (await search_messages(store, "acme", "what is it")).messages == []  # stop words only


async def test_another_tenants_messages_are_never_found(store: MemoryStore) -> None:
    mine = await store.create_session("acme")
    theirs = await store.create_session("globex")
    await store.append("acme", mine, "a", "user", "Order ORD-1 shipped.")
    await store.append("globex", theirs, "a", "user", "Order ORD-1 shipped, and ORD-1 again.")
    got = await search_messages(store, "acme", "ORD-1", limit=10)
    assert [h.session_id for h in got.messages] == [mine]


async def test_a_scope_larger_than_the_index_budget_keeps_its_newest_and_says_partial(
    store: MemoryStore, clock: ManualClock
) -> None:
    """Past what the index budget holds, the oldest messages are left out and the answer says so
    (`partial`) rather than silently ranking a subset; within it, nothing is said."""
    sid = await store.create_session("acme")
    for i in range(6):
        await store.append("acme", sid, f"k{i}", "user", f"invoice note {i}")
        clock.advance(1)
    whole = searcher(store)
    at = await whole.search("acme", "invoice", owner="acme")
    assert not at.partial and len(at.messages) == 6
    held = whole.index.held("acme")
    assert held is not None
    small = searcher(store, budget_bytes=held.nbytes() // 2)
    over = await small.search("acme", "invoice", owner="acme")
    assert over.partial and 0 < len(over.messages) < 6
    assert "invoice note 5" in {h.content for h in over.messages}  # the newest stay
