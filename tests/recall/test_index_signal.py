"""A settled recall on the embedded engine skips its revision read while the write signal says
nothing was written (engine/write_signal.py), and that costs no guarantee: a write by another
client or another process is seen by the next recall, a process killed between a forget's
delete and its bump never lets the memory come back, and a write held in flight makes every
recall read. The session's engine is on a Unix socket with its signal, as `mongogate serve`
reaches it; a TCP engine has none."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.engine.write_signal import WriteSignal
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.model import MemoryScope
from mongogate.recall.store import LongTermMemory

pytestmark = pytest.mark.anyio

ACME = MemoryScope("acme")
ROOT = Path(__file__).resolve().parents[2]
Mongo = AsyncMongoClient[dict[str, object]]
FACTS = [
    "Order ORD-58213 was shipped by DHL on Monday.",
    "The cat is called Miso and eats salmon twice a day.",
    "Invoices go to billing@acme.example by the fifth of each month.",
]


class RevisionReads(monitoring.CommandListener):
    """Counts the finds on `memory_revisions` a client sends."""

    def __init__(self) -> None:
        self.reads = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "find" and event.command.get("find") == "memory_revisions":
            self.reads += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
async def listened(engine_uri: str) -> AsyncIterator[tuple[Mongo, RevisionReads]]:
    listener = RevisionReads()
    client: Mongo = AsyncMongoClient(engine_uri, tz_aware=True, event_listeners=[listener])
    try:
        yield client, listener
    finally:
        await client.close()


def service(client: Mongo, db_name: str) -> LongTermMemory:
    return LongTermMemory(
        client[db_name],
        LongTermSettings(max_per_scope=100, min_score=0.0),
        LocalEmbedder(),
        limits=LimitsSettings(),
    )


async def pair(mongo: Mongo, client: Mongo, db_name: str) -> tuple[LongTermMemory, LongTermMemory]:
    """A writer, and a reader on the listened client, with FACTS remembered."""
    writer, reader = service(mongo, db_name), service(client, db_name)
    for text in FACTS:
        await writer.remember(ACME, text)
    return writer, reader


async def texts(ltm: LongTermMemory, query: str) -> list[str]:
    return [m.text for m in (await ltm.recall(ACME, query, limit=10, min_score=0)).memories]


@pytest.fixture(autouse=True)
def _needs_the_signal(engine_uri: str) -> None:
    if WriteSignal.of(AsyncMongoClient(engine_uri, connect=False)) is None:
        pytest.skip("the engine is not reached through a Unix socket (MONGODB_URI): no write signal")


async def test_a_settled_recall_reads_no_revision_until_another_client_writes(
    listened: tuple[Mongo, RevisionReads], mongo: Mongo, db_name: str
) -> None:
    client, reads = listened
    writer, reader = await pair(mongo, client, db_name)
    assert (await texts(reader, "ORD-58213"))[0] == FACTS[0]
    assert reads.reads == 1  # first use: the revision read, found settled
    for _ in range(3):
        assert (await texts(reader, "what is the cat called?"))[0] == FACTS[1]
    assert reads.reads == 1 and reader.index.stats.unread == 3
    await writer.remember(ACME, "The wifi password is taped under the router, RT-4410.")
    assert (await texts(reader, "RT-4410"))[0].endswith("RT-4410.")
    assert reads.reads == 2  # the signal moved: read, patched, settled again
    await writer.forget(ACME, id=(await writer.remember(ACME, FACTS[2])).id)
    assert FACTS[2] not in await texts(reader, "where do invoices go?")
    assert reads.reads == 3


KILLED_FORGET = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from pymongo import AsyncMongoClient
    from mongogate.config import LimitsSettings, LongTermSettings
    from mongogate.recall.embedding import LocalEmbedder
    from mongogate.recall.model import MemoryScope
    from mongogate.recall.store import LongTermMemory

    uri, db, mid = sys.argv[1:4]

    def die(point):
        if point == "forget.before_bump":  # the memory is deleted; no bump, no reply
            os.kill(os.getpid(), signal.SIGKILL)

    async def main():
        client = AsyncMongoClient(uri, tz_aware=True)
        ltm = LongTermMemory(client[db], LongTermSettings(), LocalEmbedder(), limits=LimitsSettings())
        ltm.fault = die
        await ltm.forget(MemoryScope("acme"), id=mid)

    asyncio.run(main())
    """
)


async def test_a_process_killed_between_a_forgets_delete_and_its_bump_never_brings_it_back(
    listened: tuple[Mongo, RevisionReads], mongo: Mongo, db_name: str, engine_uri: str
) -> None:
    """The reader's index is verified (it skips its revision read) when another process is killed
    between the delete and the bump: the signal moved at the write's start and the kernel let its
    lock go, so the reader reads the revision, finds the write in flight and reads back."""
    client, reads = listened
    writer, reader = service(mongo, db_name), service(client, db_name)
    ids = [(await writer.remember(ACME, t)).id for t in FACTS]
    assert (await texts(reader, "what is the cat called?"))[0] == FACTS[1]
    assert (await texts(reader, "what is the cat called?"))[0] == FACTS[1]
    assert reader.index.stats.unread == 1
    done = subprocess.run(
        [sys.executable, "-c", KILLED_FORGET, engine_uri, db_name, ids[1]],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -9, done.stderr[-2000:]
    assert await mongo[db_name]["memories"].find_one({"_id": ids[1]}) is None  # deleted, not bumped
    before = reads.reads
    for _ in range(2):
        assert FACTS[1] not in await texts(reader, "what is the cat called? Miso salmon")
    assert reads.reads == before + 2  # the write is still in flight: read every time
    assert reader.index.stats.readbacks == 2 and reader.index.stats.unread == 1


async def test_a_write_in_flight_in_this_process_makes_another_recall_read(
    listened: tuple[Mongo, RevisionReads], mongo: Mongo, db_name: str
) -> None:
    """OFD locks are per open file: a write in flight in the same process is seen as well."""
    client, reads = listened
    writer, reader = await pair(mongo, client, db_name)
    await texts(reader, "ORD-58213")
    await texts(reader, "ORD-58213")
    assert reader.index.stats.unread == 1
    held: list[Any] = []
    async with writer.writing(ACME):
        held.append(await texts(reader, "ORD-58213"))
        assert reader.index.stats.readbacks == 1 and reader.index.stats.unread == 1
    assert held[0][0] == FACTS[0]
    await texts(reader, "ORD-58213")  # the write ended: one read, settled again
    await texts(reader, "ORD-58213")
    assert reader.index.stats.unread == 2 and reads.reads == 3


async def test_a_write_in_another_database_of_the_engine_leaves_this_scopes_recall_unread(
    listened: tuple[Mongo, RevisionReads], mongo: Mongo, db_name: str
) -> None:
    """The same scope in two databases of one engine (two deployments, or tests) has two
    counters: a write in one does not make the other's recalls read their revision."""
    client, reads = listened
    _, reader = await pair(mongo, client, db_name)
    await texts(reader, "ORD-58213")
    elsewhere = service(mongo, f"{db_name}_b")
    try:
        await elsewhere.remember(ACME, "The cat is called Miso and eats salmon twice a day.")
        await texts(reader, "ORD-58213")
    finally:
        await mongo.drop_database(f"{db_name}_b")
    assert reads.reads == 1 and reader.index.stats.unread == 1
