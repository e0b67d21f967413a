"""Two `remember`s of the same memory racing: real threads, each with its own loop and client (two
servers), held at a barrier right after both have read, so both write on the same stale read."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from pymongo import AsyncMongoClient

from mongogate.config import LongTermSettings
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.model import MemoryScope, Remembered
from mongogate.recall.store import LongTermMemory

ACME = MemoryScope("acme")


def held_after_read(barrier: threading.Barrier) -> Callable[[str], None]:
    """A failpoint: the first read (or, by derived `_id`, the first create attempt, which is the
    read) of each racer waits for the other's (later rounds run free)."""
    waited = threading.local()

    def fault(point: str) -> None:
        first = point in ("remember.after_read", "remember.before_create")
        if first and not getattr(waited, "done", False):
            waited.done = True
            barrier.wait(timeout=60)

    return fault


def race(
    engine_uri: str,
    db_name: str,
    calls: list[dict[str, Any]],
    legacy: bool,
    *,
    held: Callable[[threading.Barrier], Callable[[str], None]] = held_after_read,
    settings: LongTermSettings | None = None,
) -> list[Remembered]:
    """Each call in its own thread with its own client and store (a server process each), held
    at a barrier by the failpoint `held` makes."""
    barrier = threading.Barrier(len(calls))
    fault = held(barrier)
    results: list[Remembered | BaseException] = [RuntimeError("not run")] * len(calls)

    async def one(i: int) -> None:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(engine_uri, tz_aware=True)
        try:
            ltm = LongTermMemory(client[db_name], settings or LongTermSettings(), LocalEmbedder())
            ltm.fault = fault
            ltm.legacy = legacy  # True: read first (a database with uuid ids left); False: create first
            results[i] = await ltm.remember(ACME, **calls[i])
        except BaseException as e:
            results[i] = e
        finally:
            await client.close()

    threads = [threading.Thread(target=anyio.run, args=(one, i)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return [r for r in results if isinstance(r, Remembered)]


@pytest.fixture(params=[False, True], ids=["derived-ids", "legacy-ids"])
def legacy(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
async def ltm(mongo: AsyncMongoClient[dict[str, object]], db_name: str) -> LongTermMemory:
    store = LongTermMemory(mongo[db_name], LongTermSettings(), LocalEmbedder())
    await store.ensure_indexes()
    return store


@pytest.mark.anyio
async def test_two_new_remembers_of_one_key_leave_one_memory_at_version_2(
    ltm: LongTermMemory, engine_uri: str, db_name: str, legacy: bool
) -> None:
    calls = [{"text": "likes tea", "key": "drink"}, {"text": "likes coffee", "key": "drink"}]
    got = await anyio.to_thread.run_sync(race, engine_uri, db_name, calls, legacy)
    assert sorted(r.status for r in got) == ["created", "updated"]
    assert len({r.id for r in got}) == 1
    assert await ltm.memories.count_documents({}) == 1
    h = await ltm.history(ACME, got[0].id)
    assert [v.version for v in h.versions] == [1, 2]
    winner = next(r for r in got if r.status == "created")
    first = calls[got.index(winner)]["text"]
    assert h.versions[0].text == first and h.versions[1].text != first


@pytest.mark.anyio
async def test_two_updates_of_one_key_on_the_same_read_make_versions_2_and_3(
    ltm: LongTermMemory, engine_uri: str, db_name: str, legacy: bool
) -> None:
    v1 = await ltm.remember(ACME, "version one", key="k")
    calls = [{"text": "text A", "key": "k"}, {"text": "text B", "key": "k"}]
    got = await anyio.to_thread.run_sync(race, engine_uri, db_name, calls, legacy)
    assert [r.status for r in got] == ["updated", "updated"] and sorted(r.version for r in got) == [2, 3]
    assert await ltm.memories.count_documents({}) == 1
    h = await ltm.history(ACME, v1.id)
    assert [v.version for v in h.versions] == [1, 2, 3]
    assert h.versions[0].text == "version one" and sorted(v.text for v in h.versions[1:]) == [
        "text A",
        "text B",
    ]
    last = next(r for r in got if r.version == 3)
    assert h.versions[2].text == calls[got.index(last)]["text"]  # the current text is the last version


@pytest.mark.anyio
@pytest.mark.parametrize("key", [None, "same"])
async def test_two_identical_remembers_make_one_memory(
    ltm: LongTermMemory, engine_uri: str, db_name: str, key: str | None, legacy: bool
) -> None:
    calls = [{"text": "The office wifi is 'guest-5G'.", "key": key}] * 2
    got = await anyio.to_thread.run_sync(race, engine_uri, db_name, calls, legacy)
    assert sorted(r.status for r in got) == ["created", "unchanged"]
    assert got[0].id == got[1].id and {r.version for r in got} == {1}
    assert await ltm.memories.count_documents({}) == 1
