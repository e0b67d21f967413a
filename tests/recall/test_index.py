"""The in-process scope index: coherent across processes through the database, never returning a
forgotten memory, surviving an engine restart, bounded by its budget; scores with a meaning."""

from __future__ import annotations

from pathlib import Path

import pytest
from pymongo import AsyncMongoClient

from mongogate.config import DatabaseSettings, LimitsSettings, LongTermSettings
from mongogate.db import Database
from mongogate.engine import client as engine_client
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.inprocess.cache import IndexCache
from mongogate.recall.model import MemoryScope
from mongogate.recall.store import LongTermMemory

pytestmark = pytest.mark.anyio

ACME = MemoryScope("acme")
FACTS = [
    "Order ORD-58213 was shipped by DHL on Monday.",
    "The cat is called Miso and eats salmon twice a day.",
    "Sofia Kowalczyk is the engineering manager of the payments team.",
    "The VPN config lives at /etc/wireguard/wg0.conf on the bastion host.",
    "Invoices go to billing@acme.example by the fifth of each month.",
    "The dentist appointment is on Thursday at 3pm with Dr. Varga.",
]


def service(client: AsyncMongoClient[dict[str, object]], db_name: str, **kw: object) -> LongTermMemory:
    settings = LongTermSettings(max_per_scope=100, **kw)  # type: ignore[arg-type]
    return LongTermMemory(client[db_name], settings, LocalEmbedder(), limits=LimitsSettings())


async def test_two_services_on_separate_clients_see_each_others_writes_at_once(
    mongo: AsyncMongoClient[dict[str, object]],
    other_client: AsyncMongoClient[dict[str, object]],
    db_name: str,
) -> None:
    a, b = service(mongo, db_name), service(other_client, db_name)
    await a.ensure_indexes()
    for text in FACTS:
        await a.remember(ACME, text)
    # b's first recall builds its index; every later write of a is seen by b's next recall
    assert (await b.recall(ACME, "ORD-58213")).memories[0].text == FACTS[0]
    new = await a.remember(ACME, "The wifi password is taped under the router, RT-4410.")
    assert (await b.recall(ACME, "RT-4410")).memories[0].id == new.id
    assert b.index.stats.patches >= 1  # patched from the change log, not read whole
    keyed = await a.remember(ACME, "My editor is Helix.", key="editor")
    assert (await b.recall(ACME, "which editor do I use?", limit=1)).memories[0].id == keyed.id
    await a.remember(ACME, "My editor is Zed now.", key="editor")
    got = await b.recall(ACME, "which editor do I use?", limit=1)
    assert got.memories[0].text == "My editor is Zed now."
    assert await a.forget(ACME, id=new.id)
    assert new.id not in [m.id for m in (await b.recall(ACME, "RT-4410", min_score=0)).memories]
    # and the other way round
    c = await b.remember(ACME, "The spare key is under the blue pot.")
    assert (await a.recall(ACME, "where is the spare key?", limit=1)).memories[0].id == c.id


async def test_a_forgotten_memory_never_comes_back_from_the_index(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str
) -> None:
    ltm = service(mongo, db_name)
    await ltm.ensure_indexes()
    ids = [(await ltm.remember(ACME, t)).id for t in FACTS]
    assert (await ltm.recall(ACME, "ORD-58213")).memories[0].id == ids[0]  # the index is warm
    assert await ltm.forget(ACME, id=ids[0])
    got = await ltm.recall(ACME, "ORD-58213 shipped by DHL", limit=10, min_score=0)
    assert ids[0] not in [m.id for m in got.memories]
    # a lost bump (a process stopped between its write and its bump) and an expired memory:
    # tests/recall/test_index_coherence.py


async def test_the_index_stays_fresh_across_an_engine_restart(data: Path) -> None:
    settings = DatabaseSettings(name="recall_restart")
    cache = IndexCache(64 * 1024 * 1024)  # the server process's index, outliving the engine

    async def open_service() -> tuple[Database, LongTermMemory]:
        db = Database(settings, data)
        await db.open()
        ltm = LongTermMemory(db.memory, LongTermSettings(), LocalEmbedder())
        ltm.index = cache
        await ltm.ensure_indexes()
        return db, ltm

    db, ltm = await open_service()
    ids = [(await ltm.remember(ACME, t)).id for t in FACTS]
    assert (await ltm.recall(ACME, "ORD-58213")).memories[0].id == ids[0]
    first = db.engine_state
    await db.close()
    assert first is not None and engine_client.stop(data)

    db, ltm = await open_service()
    try:
        assert db.engine_state is not None and db.engine_state.pid != first.pid
        rebuilds = cache.stats.rebuilds
        assert (await ltm.recall(ACME, "ORD-58213")).memories[0].id == ids[0]
        assert cache.stats.rebuilds == rebuilds  # the revision survived: the index is still fresh
        assert await ltm.forget(ACME, id=ids[0])
        got = await ltm.recall(ACME, "ORD-58213", min_score=0)
        assert ids[0] not in [m.id for m in got.memories]
    finally:
        await db.close()


async def test_scores_are_in_0_1_and_an_unrelated_question_returns_nothing(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str
) -> None:
    ltm = service(mongo, db_name)  # the default min_score
    await ltm.ensure_indexes()
    for text in FACTS:
        await ltm.remember(ACME, text)
    for question in ("quantum chromodynamics lecture notes", "What is the capital of Peru?"):
        assert (await ltm.recall(ACME, question)).memories == []
    hit = await ltm.recall(ACME, "where does the VPN config live?", limit=3)
    assert hit.memories[0].text == FACTS[3]
    every = await ltm.recall(ACME, "the cat", limit=10, min_score=0)
    assert len(every.memories) == len(FACTS)  # 0: every memory with a vector, best first
    for m in every.memories:
        assert m.score is not None and 0.0 <= m.score <= 1.0
        assert m.similarity is not None and -1.0 <= m.similarity <= 1.0
    assert [m.score for m in every.memories] == sorted((m.score or 0 for m in every.memories), reverse=True)
    top = hit.memories[0]
    assert top.matched_terms == ["vpn", "config", "live"] and top.score is not None and top.score > 0.5


async def test_identifiers_are_kept_whole_and_words_are_stemmed_and_folded(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str
) -> None:
    ltm = service(mongo, db_name, min_score=0.0)
    await ltm.ensure_indexes()
    for text in FACTS:
        await ltm.remember(ACME, text)
    await ltm.remember(ACME, "The router's admin page is at 192.168.1.1.")
    printer = await ltm.remember(ACME, "The network printer's address is 192.168.1.11.")
    got = await ltm.recall(ACME, "192.168.1.11", method="text")
    assert got.memories[0].id == printer.id
    mail = await ltm.recall(ACME, "billing@acme.example", method="text", limit=1)
    assert mail.memories[0].text == FACTS[4]
    stem = await ltm.recall(ACME, "INVOICE", method="text", limit=1)  # case and plural folded
    assert stem.memories[0].text == FACTS[4]
    accent = await ltm.remember(ACME, "Crème brûlée is Ana's favourite dessert.")
    assert (await ltm.recall(ACME, "creme brulee", method="text")).memories[0].id == accent.id


async def test_the_budget_evicts_the_least_recently_used_scope(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str
) -> None:
    ltm = service(mongo, db_name, index_budget_mb=1)
    await ltm.ensure_indexes()
    for tenant in ("t1", "t2"):
        for text in FACTS:
            await ltm.remember(MemoryScope(tenant), text)
    ltm.index.budget.budget_bytes = 1  # smaller than one scope: only the one in use stays
    assert (await ltm.recall(MemoryScope("t1"), "ORD-58213")).memories
    assert (await ltm.recall(MemoryScope("t2"), "ORD-58213")).memories
    assert len(ltm.index) == 1 and ltm.index.stats.evictions >= 1
    assert ltm.index.nbytes() > 0
