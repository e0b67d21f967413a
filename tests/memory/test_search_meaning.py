"""search_messages by meaning too (`[memory.search] embed_messages`): the real wordllama model and
the real engine. A question in other words finds the message that BM25 alone misses; results stay
best first and inside the caller's scope; off, or with a failing embedder, it is the term ranking;
a message longer than `embed_chars` is embedded by its beginning and still found by its terms."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest
from mcp import Client

from mongogate.config import EmbeddingSettings
from mongogate.memory.search import Hits, ensure_search_index
from mongogate.memory.store import MemoryStore
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.openai_embedder import OpenAIEmbedder
from mongogate.server.app import build_server
from mongogate.textrank import bm25, query_tokens, tokens
from tests.conftest import jwt_auth, make_settings
from tests.helpers import ok
from tests.memory.searching import search_messages, searcher
from tests.tools.test_conversations_scope import talk, two_subjects

pytestmark = pytest.mark.anyio

FLIGHT = "My flight to Lisbon leaves on Friday morning."
CHATTER = [
    "The fern needs water twice a week.",
    "Invoice INV-2231 is overdue.",
    "The quarterly revenue report is due Monday.",
    "Please restart the database server tonight.",
]
QUESTION = "when does my plane depart for Portugal?"


@pytest.fixture(autouse=True)
async def _text_index(store: MemoryStore) -> None:
    await ensure_search_index(store)


async def _talk(store: MemoryStore, tenant: str, texts: list[str]) -> str:
    sid = await store.create_session(tenant)
    for i, text in enumerate(texts):
        await store.append(tenant, sid, f"k{i}", "user", text)
    return sid


def _shape(hits: Hits) -> list[tuple[str, int, str, float]]:
    return [(h.session_id, h.seq, h.content, h.score) for h in hits.messages]


async def test_a_question_in_other_words_finds_the_message_bm25_misses(store: MemoryStore) -> None:
    await _talk(store, "acme", [*CHATTER[:2], FLIGHT, *CHATTER[2:]])
    assert not set(tokens(QUESTION)) & set(tokens(FLIGHT))  # not one word in common
    assert (await search_messages(store, "acme", QUESTION)).messages == []  # BM25 alone: nothing
    found = searcher(store, LocalEmbedder())
    got = await found.search("acme", QUESTION, owner="acme")
    assert got.messages[0].content == FLIGHT
    scores = [h.score for h in got.messages]
    assert scores == sorted(scores, reverse=True) and all(0.0 < s <= 1.0 for s in scores)
    assert found.fill.stats.embedded == 5  # every message embedded once, and stored
    again = await found.search("acme", QUESTION, owner="acme")
    assert _shape(again) == _shape(got) and found.fill.stats.embedded == 5
    other = searcher(store, LocalEmbedder())  # another process: reads the stored vectors
    assert _shape(await other.search("acme", QUESTION, owner="acme")) == _shape(got)
    assert other.fill.stats.embedded == 0


async def test_a_term_match_still_comes_first_and_is_never_dropped(store: MemoryStore) -> None:
    await _talk(store, "acme", [FLIGHT, *CHATTER])
    terms = await search_messages(store, "acme", "INV-2231 overdue")
    fused = await searcher(store, LocalEmbedder()).search("acme", "INV-2231 overdue", owner="acme")
    assert fused.messages[0].content == "Invoice INV-2231 is overdue."
    assert {h.content for h in terms.messages} <= {h.content for h in fused.messages}


async def test_another_tenants_messages_never_appear(store: MemoryStore) -> None:
    mine = await _talk(store, "acme", CHATTER)
    await _talk(store, "globex", [FLIGHT])  # the best answer, but another tenant's
    got = await searcher(store, LocalEmbedder(), min_score=0.0).search("acme", QUESTION, owner="acme")
    assert got.messages and {h.session_id for h in got.messages} == {mine}
    assert FLIGHT not in {h.content for h in got.messages}


async def test_a_failing_embedder_gives_the_term_ranking(store: MemoryStore) -> None:
    await _talk(store, "acme", [FLIGHT, *CHATTER, "the database restart went fine"])
    unreachable = OpenAIEmbedder(
        EmbeddingSettings(
            provider="openai", url="http://127.0.0.1:9/v1", model="m", dimensions=256, timeout_s=2
        )
    )
    terms = await search_messages(store, "acme", "database restart")
    failing = searcher(store, unreachable)
    failed = await failing.search("acme", "database restart", owner="acme")
    assert terms.messages and _shape(failed) == _shape(terms)
    assert (await failing.search("acme", QUESTION, owner="acme")).messages == []
    assert failing.fill.stats.embedder_failures == 1  # then left alone while it rests


async def test_a_long_message_is_embedded_by_its_beginning_and_found_by_any_of_its_terms(
    store: MemoryStore,
) -> None:
    """`embed_chars` bounds what the model reads of a message; every term of it still finds it."""
    long = FLIGHT + " " + " ".join(f"filler{i % 97} words" for i in range(150)) + " the code is ZX-4471."
    assert len(long) > 2048
    await _talk(store, "acme", [*CHATTER, long])

    class Counting(LocalEmbedder):
        seen: ClassVar[list[int]] = []

        async def embed(self, texts: Sequence[str]) -> list[list[float]]:
            self.seen.extend(len(t) for t in texts)
            return await super().embed(texts)

    model = Counting()
    found = searcher(store, model, embed_chars=64)
    by_term = await found.search("acme", "ZX-4471", owner="acme")
    assert by_term.messages[0].content == long  # by its last words
    assert max(model.seen) == 64  # no message text past its first 64 characters
    by_meaning = await found.search("acme", QUESTION, owner="acme")
    assert by_meaning.messages[0].content == long  # its first words, by meaning


async def test_the_setting_off_is_the_term_ranking_and_on_is_the_default(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    on = make_settings(engine_uri, db_name, tmp_path)
    off = make_settings(engine_uri, db_name, tmp_path, memory={"search": {"embed_messages": False}})
    assert on.memory.search.embed_messages is True
    async with Client(build_server(on)) as c:
        await talk(c, FLIGHT)
        by_meaning = (await ok(c, "search_messages", query=QUESTION))["messages"]
        assert [m["content"] for m in by_meaning][:1] == [FLIGHT]
    async with Client(build_server(off)) as c:
        assert (await ok(c, "search_messages", query=QUESTION))["messages"] == []
        exact = (await ok(c, "search_messages", query="flight Lisbon"))["messages"]
        alone = bm25(query_tokens("flight Lisbon"), [tokens(FLIGHT), tokens("noted")])[0]
        assert [(m["content"], m["score"]) for m in exact] == [(FLIGHT, round(alone, 6))]  # BM25 alone


async def test_under_scope_subject_another_subjects_conversations_never_appear(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(
        engine_uri, db_name, tmp_path, auth=jwt_auth(), memory={"long_term": {"scope": "subject"}}
    )
    async with two_subjects(settings) as (alice, bob, other_alice):
        await talk(alice, FLIGHT)
        mine = await talk(bob, "I water the fern twice a week")
        found = await ok(bob, "search_messages", query=QUESTION)
        assert {m["session_id"] for m in found["messages"]} <= {mine}
        assert (await ok(other_alice, "search_messages", query=QUESTION))["messages"] == []
        hits = (await ok(alice, "search_messages", query=QUESTION))["messages"]
        assert hits[0]["content"] == FLIGHT and 0.0 < hits[0]["score"] <= 0.5  # by meaning alone
