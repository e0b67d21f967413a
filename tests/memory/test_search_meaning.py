"""search_messages by meaning too (`[memory.search] embed_messages`): the real wordllama model and
the real engine. A question in other words finds the message that BM25 alone misses; results stay
best first and inside the caller's scope; off, or with a failing embedder, it is the term ranking."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from mongogate.config import EmbeddingSettings
from mongogate.memory.message_vectors import MessageVectors
from mongogate.memory.search import Hits, ensure_search_index, search_messages
from mongogate.memory.store import MemoryStore
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.openai_embedder import OpenAIEmbedder
from mongogate.server.app import build_server
from mongogate.textrank import bm25, query_tokens, tokens
from tests.conftest import jwt_auth, make_settings
from tests.helpers import ok
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
    vectors = MessageVectors(LocalEmbedder())
    got = await search_messages(store, "acme", QUESTION, vectors=vectors)
    assert got.messages[0].content == FLIGHT
    scores = [h.score for h in got.messages]
    assert scores == sorted(scores, reverse=True) and all(0.0 < s <= 1.0 for s in scores)
    assert len(vectors) == 5  # every message read was embedded once, and kept
    again = await search_messages(store, "acme", QUESTION, vectors=vectors)
    assert _shape(again) == _shape(got) and len(vectors) == 5


async def test_a_term_match_still_comes_first_and_is_never_dropped(store: MemoryStore) -> None:
    await _talk(store, "acme", [FLIGHT, *CHATTER])
    terms = await search_messages(store, "acme", "INV-2231 overdue")
    fused = await search_messages(store, "acme", "INV-2231 overdue", vectors=MessageVectors(LocalEmbedder()))
    assert fused.messages[0].content == "Invoice INV-2231 is overdue."
    assert {h.content for h in terms.messages} <= {h.content for h in fused.messages}


async def test_another_tenants_messages_never_appear(store: MemoryStore) -> None:
    mine = await _talk(store, "acme", CHATTER)
    await _talk(store, "globex", [FLIGHT])  # the best answer, but another tenant's
    vectors = MessageVectors(LocalEmbedder())
    got = await search_messages(store, "acme", QUESTION, vectors=vectors, min_score=0.0)
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
    failed = await search_messages(store, "acme", "database restart", vectors=MessageVectors(unreachable))
    assert terms.messages and _shape(failed) == _shape(terms)
    assert (
        await search_messages(store, "acme", QUESTION, vectors=MessageVectors(unreachable))
    ).messages == []


async def test_a_changed_message_is_embedded_again_and_the_cache_is_bounded(store: MemoryStore) -> None:
    await _talk(store, "acme", CHATTER)
    vectors = MessageVectors(LocalEmbedder(), max_entries=2)
    await search_messages(store, "acme", "fern", vectors=vectors)
    assert len(vectors) == 2  # the least recently searched dropped
    sims = await vectors.similarities("plane to Portugal", [("x", CHATTER[0])])
    changed = await vectors.similarities("plane to Portugal", [("x", FLIGHT)])  # same _id, new content
    assert float(changed[0]) > float(sims[0]) + 0.2


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
