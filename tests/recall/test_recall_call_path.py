"""The trimmed recall call path costs no guarantee: a question's tokens and words are kept by
text and never answer another question, and the revision read (one read by `_id`) patches an
index many revisions behind, and still sees a write in flight."""

from __future__ import annotations

import pytest
from pymongo import AsyncMongoClient

from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.recall import IndexPolicy
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.inprocess.cache import QueryTerms
from mongogate.recall.model import MemoryScope, scope_key
from mongogate.recall.store import LongTermMemory

pytestmark = pytest.mark.anyio

ACME = MemoryScope("acme")
#: revisions behind (the revision read once asked for the last 16 changes only, and read again
#: with every change for an index further behind than those)
BEHIND = 20
FACTS = [
    "Order ORD-58213 was shipped by DHL on Monday.",
    "The cat is called Miso and eats salmon twice a day.",
    "Invoices go to billing@acme.example by the fifth of each month.",
    "The garden invoice from Greenfingers is due on the 12th.",
]
Mongo = AsyncMongoClient[dict[str, object]]


def service(client: Mongo, db_name: str) -> LongTermMemory:
    settings = LongTermSettings(max_per_scope=200, min_score=0.0)
    return LongTermMemory(client[db_name], settings, LocalEmbedder(), limits=LimitsSettings())


async def shown(ltm: LongTermMemory, query: str) -> list[tuple[str, float, list[str] | None]]:
    got = await ltm.recall(ACME, query, limit=10, min_score=0)
    return [(m.text, m.score or 0.0, m.matched_terms) for m in got.memories]


async def test_a_question_asked_again_gets_its_own_terms_never_anothers(mongo: Mongo, db_name: str) -> None:
    ltm = service(mongo, db_name)
    await ltm.ensure_indexes()
    for text in FACTS:
        await ltm.remember(ACME, text)
    questions = [
        "When is the garden invoice due?",
        "Where did order ORD-58213 ship?",
        "what does the cat eat",
    ]
    first = {q: await shown(ltm, q) for q in questions}
    for q in [*questions, *reversed(questions), questions[1]]:  # each asked again, in between others
        assert await shown(ltm, q) == first[q]
    fresh = service(mongo, db_name)  # no question cached: the same answers
    assert {q: await shown(fresh, q) for q in questions} == first
    terms = {q: {w for _, _, m in first[q] for w in m or []} for q in questions}
    assert "garden" in terms[questions[0]] and "garden" not in terms[questions[1]]
    assert "ord-58213" in terms[questions[1]] and "cat" not in terms[questions[1]]


def test_query_terms_are_the_questions_words_as_typed_folded() -> None:
    terms = QueryTerms.of("Where is ORD-58213? The invoices, the INVOICES!")
    assert [w for w, _ in terms.words] == ["ord-58213", "invoices"]  # stop words and repeats out
    assert terms.matched(frozenset({"invoic"})) == ["invoices"]
    assert terms.matched(frozenset({"cat"})) == []
    assert QueryTerms.of("invoices") != QueryTerms.of("invoice garden")


async def test_an_index_further_behind_than_the_head_read_patches_every_change(
    mongo: Mongo, other_client: Mongo, db_name: str
) -> None:
    """`b`'s index is BEHIND revisions behind: the revision read names every change, they are
    all patched in (no rebuild), and each new memory is found at once."""
    a, b = service(mongo, db_name), service(other_client, db_name)
    await a.ensure_indexes()
    await a.remember(ACME, FACTS[0])
    assert (await shown(b, "ORD-58213"))[0][0] == FACTS[0]  # b's index is warm
    new = [f"Ticket TK-{i:04d} belongs to the {('red', 'blue')[i % 2]} team." for i in range(BEHIND)]
    for text in new:
        await a.remember(ACME, text)
    rebuilds, patches = b.index.stats.rebuilds, b.index.stats.patches
    for i in (0, BEHIND // 2, len(new) - 1):
        assert (await shown(b, f"TK-{i:04d}"))[0][0] == new[i]
    assert b.index.stats.rebuilds == rebuilds and b.index.stats.patches == patches + 1
    assert b.index.stats.readbacks == 0


async def test_a_write_in_flight_is_seen_when_the_head_is_read_again(
    mongo: Mongo, other_client: Mongo, db_name: str
) -> None:
    """Many revisions behind and a write in flight: the recall reads its results back
    (the database decides), and a memory deleted before its bump never comes back."""
    a, b = service(mongo, db_name), service(other_client, db_name)
    await a.ensure_indexes()
    gone = (await a.remember(ACME, FACTS[0])).id
    assert (await shown(b, "ORD-58213"))[0][0] == FACTS[0]
    for i in range(BEHIND):
        await a.remember(ACME, f"Parcel PC-{i:03d} is in locker {i}.")
    key = scope_key(ACME)
    async with a.coherence.announcing(key):  # a forget, stopped before its bump (every writer's signal)
        token = await a.coherence.begin(key, a.clock.now())
        await a.memories.delete_one({"_id": gone})
        assert not [t for t, _, _ in await shown(b, "ORD-58213 shipped by DHL") if "ORD-58213" in t]
        assert b.index.stats.readbacks == 1
        await a.coherence.bump(key, gone, token=token)
    assert not [t for t, _, _ in await shown(b, "ORD-58213 shipped by DHL") if "ORD-58213" in t]
    assert b.index.stats.readbacks == 1  # settled again: answered from the patched index


async def test_the_benchmarks_policies_answer_what_the_default_answers(mongo: Mongo, db_name: str) -> None:
    """`IndexPolicy` turns the trims off for the benchmarks (every result read back, every question
    embedded and tokenized, the write signal untrusted): the same memories and scores, at the
    cost the benchmarks measure."""
    ltm = service(mongo, db_name)
    await ltm.ensure_indexes()
    for text in FACTS:
        await ltm.remember(ACME, text)
    questions = ["When is the garden invoice due?", "Where did order ORD-58213 ship?"]
    default = {q: await shown(ltm, q) for q in questions}
    before = service(mongo, db_name)
    before.index.use(IndexPolicy(answer_settled=False, lean=False, trust_signal=False))
    assert {q: await shown(before, q) for q in questions} == default
    assert before.index.stats.readbacks == len(questions) and before.index.stats.unread == 0
    assert ltm.index.stats.readbacks == 0
