"""A recall from the tool's call to the database crosses at most five modules of `recall/`
(docs/ARCHITECTURE.md, "A recall, end to end"; issue 41: it crossed ten). Each command the driver
sends during a recall is traced back through the stack to the modules of `recall/` it came from."""

from __future__ import annotations

import traceback
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pymongo import AsyncMongoClient, monitoring

from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.recall.model import MemoryScope
from mongogate.recall.store import LongTermMemory
from tests.recall.conftest import BrokenEmbedder

pytestmark = pytest.mark.anyio

RECALL = Path(__file__).resolve().parents[2] / "src" / "mongogate" / "recall"
ACME = MemoryScope("acme")
IN_PROCESS = {"store.py", "search.py", "inprocess/ranker.py", "inprocess/cache.py", "coherence.py"}
#: the probe of `ranker_for` (once per process: is there a search index?)
PROBE = {"store.py", "search.py", "searchindex/vectors.py"}
SEARCH_INDEX = {"store.py", "search.py", "searchindex/ranker.py"}


class Stacks(monitoring.CommandListener):
    """The modules of `recall/` on the stack of every command started while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.seen: list[tuple[str, frozenset[str]]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.on:
            held = {Path(f.filename).resolve() for f in traceback.extract_stack()}
            mods = frozenset(p.relative_to(RECALL).as_posix() for p in held if p.is_relative_to(RECALL))
            self.seen.append((event.command_name, mods))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
async def traced(engine_uri: str) -> AsyncIterator[tuple[AsyncMongoClient[dict[str, object]], Stacks]]:
    stacks = Stacks()
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        engine_uri, tz_aware=True, event_listeners=[stacks]
    )
    try:
        yield client, stacks
    finally:
        await client.close()


async def recall_modules(ltm: LongTermMemory, stacks: Stacks, **kwargs: object) -> list[frozenset[str]]:
    await ltm.ensure_indexes()
    for text in ("The invoice for the garden is due on Friday.", "The dentist moved to Tuesday."):
        await ltm.remember(ACME, text)
    stacks.on = True
    got = await ltm.recall(ACME, "when is the invoice for the garden due?", **kwargs)  # type: ignore[arg-type]
    stacks.on = False
    assert got.memories and got.memories[0].text.startswith("The invoice")
    assert stacks.seen, "the recall sent no command"
    return [mods for _, mods in stacks.seen]


async def test_the_default_recall_reaches_the_database_through_five_modules_of_recall(
    traced: tuple[AsyncMongoClient[dict[str, object]], Stacks], db_name: str
) -> None:
    client, stacks = traced
    settings = LongTermSettings(max_per_scope=50, min_score=0.0)
    ltm = LongTermMemory(client[db_name], settings, BrokenEmbedder(), limits=LimitsSettings())
    for mods in await recall_modules(ltm, stacks):
        assert len(mods) <= 5 and (mods <= IN_PROCESS or mods <= PROBE), sorted(mods)


async def test_the_search_index_recall_reaches_it_through_three(
    traced: tuple[AsyncMongoClient[dict[str, object]], Stacks], db_name: str
) -> None:
    client, stacks = traced
    settings = LongTermSettings(max_per_scope=50, min_score=0.0, vector_search="atlas")
    ltm = LongTermMemory(client[db_name], settings, BrokenEmbedder(), limits=LimitsSettings())
    for mods in await recall_modules(ltm, stacks, method="text"):
        assert mods <= SEARCH_INDEX or mods <= PROBE, sorted(mods)
