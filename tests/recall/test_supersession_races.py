"""Supersessions racing: real threads, each with its own loop, client and index (two server
processes), held at a barrier after each wrote its first half of a link (`remember.after_link`),
so both write their second halves on the same state; a third server's warm index sees the result
at once."""

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
from tests.recall import test_races as races

pytestmark = pytest.mark.anyio

ACME = MemoryScope("acme")
SETTINGS = LongTermSettings(min_score=0.0)


def held_after_link(barrier: threading.Barrier) -> Callable[[str], None]:
    """A failpoint: each racer waits for the others after its first half of a link."""

    def fault(point: str) -> None:
        if point == "remember.after_link":
            barrier.wait(timeout=60)

    return fault


def race(engine_uri: str, db_name: str, calls: list[dict[str, Any]]) -> list[Remembered]:
    """Each call in its own thread and server, all held after their first half of a link."""
    return races.race(engine_uri, db_name, calls, False, held=held_after_link, settings=SETTINGS)


@pytest.fixture
async def watcher(mongo: AsyncMongoClient[dict[str, object]], db_name: str) -> LongTermMemory:
    """A third server: its index is warm before the race, and must see the race's result."""
    store = LongTermMemory(mongo[db_name], SETTINGS, LocalEmbedder())
    await store.ensure_indexes()
    return store


async def ids(ltm: LongTermMemory, query: str, **args: Any) -> set[str]:
    return {m.id for m in (await ltm.recall(ACME, query, limit=10, **args)).memories}


async def test_two_servers_superseding_one_memory_at_once_keep_both_links(
    watcher: LongTermMemory, engine_uri: str, db_name: str
) -> None:
    old = await watcher.remember(ACME, "The office wifi password is sunflower42.")
    assert await ids(watcher, "office wifi password") == {old.id}
    calls = [
        {"text": "The office wifi password was changed to maple-77.", "supersedes": old.id},
        {"text": "The guest wifi now uses the password maple-77 too.", "supersedes": old.id},
    ]
    got = await anyio.to_thread.run_sync(race, engine_uri, db_name, calls)
    assert old.id not in await ids(watcher, "office wifi password")
    marked = (await watcher.recall(ACME, "office wifi password", include_superseded=True)).memories
    replaced = next(m for m in marked if m.id == old.id)
    assert {k.id for k in replaced.superseded_by} == {r.id for r in got}
    assert {k.id for k in (await watcher.history(ACME, old.id)).superseded_by} == {r.id for r in got}
    # forgetting one of them leaves the other's link holding
    assert await watcher.forget(ACME, id=got[0].id)
    assert old.id not in await ids(watcher, "office wifi password")


async def test_one_memory_superseding_two_at_once_keeps_both(
    watcher: LongTermMemory, engine_uri: str, db_name: str
) -> None:
    a = await watcher.remember(ACME, "Deploys go through Jenkins.")
    b = await watcher.remember(ACME, "Deploy approvals happen in the Jenkins UI.")
    assert await ids(watcher, "how do deploys work?") == {a.id, b.id}
    text = "Deploys and their approvals moved to GitHub Actions."
    got = await anyio.to_thread.run_sync(
        race, engine_uri, db_name, [{"text": text, "supersedes": a.id}, {"text": text, "supersedes": b.id}]
    )
    assert sorted(r.status for r in got) == ["created", "unchanged"] and got[0].id == got[1].id
    assert await ids(watcher, "how do deploys work?") == {got[0].id}
    listed = {m.id: m for m in (await watcher.list(ACME)).memories}
    assert {k.id for k in listed[got[0].id].supersedes} == {a.id, b.id}


async def test_a_retry_racing_its_first_attempt_makes_one_link(
    watcher: LongTermMemory, engine_uri: str, db_name: str
) -> None:
    old = await watcher.remember(ACME, "Backups run nightly at 2 am.")
    call = {"text": "Backups were rescheduled to run at 4 am.", "supersedes": [old.id]}
    got = await anyio.to_thread.run_sync(race, engine_uri, db_name, [call, dict(call)])
    assert got[0].id == got[1].id and got[0].supersedes == got[1].supersedes
    assert await watcher.memories.count_documents({}) == 2
    doc = await watcher.memories.find_one({"_id": old.id})
    assert doc is not None and list(doc["superseded_by"]) == [got[0].id]
    assert await ids(watcher, "when do backups run?") == {got[0].id}
