"""The index answers a settled scope without reading results back, and that costs no guarantee:
two server processes see each other's writes at once, a write stopped (or held) between its
memory write and its bump never lets a forgotten text come back, an expired memory is left out
by the injectable clock, and a settled answer is the read-back answer field for field."""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.engine.write_signal import WriteSignal
from mongogate.indexing import LEASE
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.model import MemoryItem, MemoryScope
from mongogate.recall.store import LongTermMemory
from tests.helpers import http_servers, ok

pytestmark = pytest.mark.anyio

ACME = MemoryScope("acme")
FACTS = [
    "Order ORD-58213 was shipped by DHL on Monday.",
    "The cat is called Miso and eats salmon twice a day.",
    "The VPN config lives at /etc/wireguard/wg0.conf on the bastion host.",
    "Invoices go to billing@acme.example by the fifth of each month.",
]
Mongo = AsyncMongoClient[dict[str, object]]


@pytest.fixture(params=["write signal", "no write signal"])
def signal(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each in-process case with the engine's write signal (engine/write_signal.py: a settled
    recall may skip its revision read) and without it (every recall reads it, as on MongoDB)."""
    if request.param == "no write signal":
        monkeypatch.setattr(WriteSignal, "of", classmethod(lambda cls, client: None))
    return str(request.param)


def service(client: Mongo, db_name: str, clock: ManualClock | None = None) -> LongTermMemory:
    settings = LongTermSettings(max_per_scope=100, min_score=0.0)
    if clock is None:
        return LongTermMemory(client[db_name], settings, LocalEmbedder(), limits=LimitsSettings())
    return LongTermMemory(client[db_name], settings, LocalEmbedder(), clock, limits=LimitsSettings())


async def ids_for(ltm: LongTermMemory, query: str) -> list[str]:
    return [m.id for m in (await ltm.recall(ACME, query, limit=10, min_score=0)).memories]


async def test_two_server_processes_see_each_others_writes_at_once(
    tmp_path: Path, engine_uri: str, db_name: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")} | {
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
        "MONGOGATE_AUTH__TENANT": "acme",
    }
    a_env = env | {"MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "a")}
    b_env = env | {"MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "b")}
    with http_servers((a_env, []), (b_env, [])) as [url_a, url_b]:
        async with Client(url_a) as a, Client(url_b) as b:
            for text in FACTS:
                await ok(a, "remember", text=text)

            async def texts(c: Client, query: str) -> list[str]:
                got = await ok(c, "recall", query=query, min_score=0)
                return [m["text"] for m in got["memories"]]

            assert (await texts(b, "ORD-58213"))[0] == FACTS[0]  # b's index is warm
            new = await ok(a, "remember", text="The wifi password is taped under the router, RT-4410.")
            assert (await texts(b, "RT-4410"))[0].endswith("RT-4410.")
            await ok(a, "remember", text="My editor is Helix.", key="editor")
            assert (await texts(b, "which editor do I use?"))[0] == "My editor is Helix."
            await ok(a, "remember", text="My editor is Zed now.", key="editor")
            got = await texts(b, "which editor do I use?")
            assert got[0] == "My editor is Zed now." and "My editor is Helix." not in got
            assert (await ok(a, "forget", id=new["id"]))["deleted"] is True
            assert not [t for t in await texts(b, "RT-4410 wifi password router") if "RT-4410" in t]
            spare = await ok(b, "remember", text="The spare key is under the blue pot.")
            top = (await ok(a, "recall", query="where is the spare key?", limit=1))["memories"][0]
            assert top["id"] == spare["id"] and top["author"] is not None


async def test_a_forget_stopped_before_its_bump_never_comes_back_and_the_lease_ends_it(
    mongo: Mongo, other_client: Mongo, db_name: str, signal: str
) -> None:
    """The process of `a` stops between the delete and the revision bump: `b`'s warm index still
    holds the memory and the revision says nothing changed; the write in flight makes `b` read
    its results back, until the lease ends and every index is read whole."""
    clock = ManualClock()
    a, b = service(mongo, db_name, clock), service(other_client, db_name, clock)
    await a.ensure_indexes()
    ids = [(await a.remember(ACME, t)).id for t in FACTS]
    assert (await ids_for(b, "ORD-58213"))[0] == ids[0]
    assert b.index.stats.readbacks == 0  # settled: answered from the index

    def crash(point: str) -> None:
        if point == "forget.before_bump":
            raise KeyboardInterrupt  # the process stops here: the memory is gone, no bump yet

    a.fault = crash
    with pytest.raises(KeyboardInterrupt):
        await a.forget(ACME, id=ids[0])
    a.fault = None
    assert ids[0] not in await ids_for(b, "ORD-58213 shipped by DHL")
    assert b.index.stats.readbacks == 1
    clock.advance(LEASE.total_seconds())
    rebuilds = b.index.stats.rebuilds
    assert ids[0] not in await ids_for(b, "ORD-58213 shipped by DHL")
    assert b.index.stats.abandoned == 1 and b.index.stats.rebuilds == rebuilds + 1
    assert b.index.stats.readbacks == 1  # settled again: the index read whole holds the truth
    assert ids[0] not in await ids_for(a, "ORD-58213 shipped by DHL")  # a's index too


async def test_a_recall_between_a_forgets_delete_and_its_bump_never_returns_it(
    mongo: Mongo, db_name: str, engine_uri: str, signal: str
) -> None:
    """A forget held (in its own thread, loop and client: another process) after its delete and
    before its bump; a recall then, on a warm index whose revision has not moved."""
    ltm = service(mongo, db_name)
    await ltm.ensure_indexes()
    ids = [(await ltm.remember(ACME, t)).id for t in FACTS]
    assert (await ids_for(ltm, "what is the cat called?"))[0] == ids[1]
    deleted, go = threading.Event(), threading.Event()

    def held(point: str) -> None:
        if point == "forget.before_bump":
            deleted.set()
            assert go.wait(timeout=60)

    async def forget() -> bool:
        client: Mongo = AsyncMongoClient(engine_uri, tz_aware=True)
        try:
            other = service(client, db_name)
            other.fault = held
            return await other.forget(ACME, id=ids[1])
        finally:
            await client.close()

    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(anyio.run(forget)))
    thread.start()
    try:
        assert await anyio.to_thread.run_sync(deleted.wait, 60)
        fresh = ltm.index.stats.fresh
        assert ids[1] not in await ids_for(ltm, "what is the cat called? Miso salmon")
        assert ltm.index.stats.fresh == fresh + 1  # the revision had not moved: the index answered
    finally:
        go.set()
        await anyio.to_thread.run_sync(thread.join)
    assert result == [True]
    assert ids[1] not in await ids_for(ltm, "what is the cat called? Miso salmon")


async def test_an_expired_memory_is_left_out_by_the_clock_without_a_read_back(
    mongo: Mongo, db_name: str, signal: str
) -> None:
    clock = ManualClock()
    ltm = service(mongo, db_name, clock)
    await ltm.ensure_indexes()
    short = await ltm.remember(ACME, "The parking pass code is 7781 this week.", ttl_days=1)
    await ltm.remember(ACME, FACTS[0])
    assert (await ids_for(ltm, "parking pass code"))[0] == short.id
    clock.advance(timedelta(days=1).total_seconds())
    assert short.id not in await ids_for(ltm, "parking pass code")
    assert ltm.index.stats.readbacks == 0


def _shown(m: MemoryItem) -> tuple[Any, ...]:
    return (m.id, m.namespace, m.key, m.text, m.metadata, m.version, m.author)


async def test_a_settled_answer_is_the_read_back_answer(mongo: Mongo, db_name: str, signal: str) -> None:
    """Every field of every result, provenance and scores included, from the index (settled) and
    from the database (a write in flight), for the same questions."""
    ltm = service(mongo, db_name)
    await ltm.ensure_indexes()
    for i, text in enumerate(FACTS):
        await ltm.remember(ACME, text, key=f"k{i}", metadata={"n": i}, author="sofia")
    await ltm.remember(ACME, "The cat now eats tuna.", key="k1", author="ana")  # version 2, other author
    questions = ["what does the cat eat?", "ORD-58213", "where do invoices go?", "vpn config"]
    settled = [(await ltm.recall(ACME, q, limit=10, min_score=0)).memories for q in questions]
    assert ltm.index.stats.readbacks == 0
    async with ltm.writing(ACME):  # a write in flight: every writer's bracket
        read_back = [(await ltm.recall(ACME, q, limit=10, min_score=0)).memories for q in questions]
    assert ltm.index.stats.readbacks == len(questions)
    assert settled == read_back
    cat = next(m for m in settled[0] if m.key == "k1")
    assert cat.text == "The cat now eats tuna." and cat.version == 2 and cat.author == "ana"
    assert [_shown(m) for m in settled[0]] == [_shown(m) for m in read_back[0]]
    assert (await ltm.recall(ACME, "ORD-58213")).memories[0].text == FACTS[0]
    assert ltm.index.stats.readbacks == len(questions)  # the token ended: settled again
