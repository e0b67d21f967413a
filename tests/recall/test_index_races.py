"""Red team of the in-process scope index: two recalls of one process patch the same index at
once while another process forgets a memory between their reads. The later patch removes it; the
earlier one, resumed last, puts its stale copy back but labels the index with its older revision,
so the next recall patches it out again: a forgotten memory never comes back after the forget
and a recall that saw it have both ended."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pymongo import AsyncMongoClient

from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.model import MemoryScope
from mongogate.recall.store import LongTermMemory

pytestmark = pytest.mark.anyio

ACME = MemoryScope("acme")
Mongo = AsyncMongoClient[dict[str, object]]


def service(client: Mongo, db_name: str) -> LongTermMemory:
    settings = LongTermSettings(max_per_scope=200, min_score=0.0)
    return LongTermMemory(client[db_name], settings, LocalEmbedder(), limits=LimitsSettings())


class Paused:
    """The memories collection, held after the first read by `_id` of `mid` until `go` is set:
    a failpoint between a patch's read and its use (every call goes to the real collection)."""

    def __init__(self, coll: Any, mid: str) -> None:
        self.coll, self.mid = coll, mid
        self.reached, self.go = anyio.Event(), anyio.Event()
        self.armed = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.coll, name)

    async def find_one(self, filt: Any, *args: Any, **kwargs: Any) -> Any:
        doc = await self.coll.find_one(filt, *args, **kwargs)
        if self.armed and filt == {"_id": self.mid}:
            self.armed = False
            self.reached.set()
            await self.go.wait()
        return doc


async def test_a_stale_patch_resumed_last_never_brings_a_forgotten_memory_back(
    mongo: Mongo, engine_uri: str, db_name: str
) -> None:
    a = service(mongo, db_name)
    await a.ensure_indexes()
    await a.remember(ACME, "The cat is called Miso and eats salmon twice a day.")
    assert (await a.recall(ACME, "Miso", limit=5)).memories  # a's index is warm
    async with AsyncMongoClient[dict[str, object]](engine_uri, tz_aware=True) as other:
        w = service(other, db_name)  # another server process
        mid = (await w.remember(ACME, "Order ORD-58213 was shipped by DHL on Monday.")).id
        paused = Paused(a.memories, mid)
        a.memories = paused  # type: ignore[assignment]
        seen: list[list[str]] = []

        async def first() -> None:
            got = await a.recall(ACME, "ORD-58213", limit=5)
            seen.append([m.text for m in got.memories])

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            await paused.reached.wait()  # the first patch holds the memory as it was
            assert await w.forget(ACME, id=mid)
            later = await a.recall(ACME, "ORD-58213", limit=5)  # patches the same index: removed
            assert not [m for m in later.memories if "ORD-58213" in m.text]
            paused.go.set()  # the first patch resumes last: its stale copy goes back in
        after = await a.recall(ACME, "ORD-58213 shipped by DHL", limit=5)
        assert not [m for m in after.memories if "ORD-58213" in m.text]
        assert len(seen) == 1
