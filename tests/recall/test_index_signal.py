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

import anyio
import pytest
from pymongo import AsyncMongoClient, monitoring

from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.engine import write_signal
from mongogate.engine.write_signal import WriteSignal
from mongogate.indexing import Coherence
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


#: where a write stops while a recall of the same scope runs (this process, its own client): before
#: its flight lock, between it and the addition, between the addition and `begin`, between `begin`
#: and the memory write, between the write and its `bump`, and after the bump, before its close
STEPS = ["before-flight", "flighted", "added", "begun", "written", "bumped"]
NEW = "The cat's vet is Dr. Okafor on Elm Street."


def stop_at(monkeypatch: pytest.MonkeyPatch, step: str, reached: anyio.Event, go: anyio.Event) -> None:
    """Failpoints in the write signal and the revision protocol: the write stops at `step` once."""

    async def stop(here: str) -> None:
        if here == step and not reached.is_set():
            reached.set()
            await go.wait()

    wait_for, begin, bump = vars(WriteSignal)["_wait_for"], Coherence.begin, Coherence.bump

    async def stepped_wait_for(self: WriteSignal, fd: int, kind: int, start: int, *args: Any) -> None:
        await stop("before-flight" if start >= write_signal.FLIGHT else "flighted")
        await wait_for(self, fd, kind, start, *args)

    async def stepped_begin(self: Coherence, *args: Any, **kwargs: Any) -> str:
        await stop("added")
        token = await begin(self, *args, **kwargs)
        await stop("begun")
        return token

    async def stepped_bump(self: Coherence, *args: Any, **kwargs: Any) -> None:
        await stop("written")
        await bump(self, *args, **kwargs)
        if kwargs.get("token") is not None:  # the write's last update: over but for its close
            await stop("bumped")

    monkeypatch.setattr(WriteSignal, "_wait_for", stepped_wait_for)
    monkeypatch.setattr(Coherence, "begin", stepped_begin)
    monkeypatch.setattr(Coherence, "bump", stepped_bump)


@pytest.mark.parametrize("write", ["forget", "remember"])
@pytest.mark.parametrize("step", STEPS)
async def test_a_recall_at_any_step_of_a_write_never_hides_it_from_the_recalls_after_it_answered(
    listened: tuple[Mongo, RevisionReads],
    mongo: Mongo,
    db_name: str,
    monkeypatch: pytest.MonkeyPatch,
    step: str,
    write: str,
) -> None:
    """A recall whose index is verified (it skips its revision read) runs twice while a write of
    its scope, on another client of this process, stops at `step`: whatever stamp it took there
    and whatever index it verified, once the write answered every recall sees it (a forgotten
    memory never comes back, a remembered one is found). The event loop runs the recalls while
    the write waits, so a stopped write blocks nothing."""
    client, reads = listened
    writer, reader = service(mongo, db_name), service(client, db_name)
    ids = [(await writer.remember(ACME, t)).id for t in FACTS]
    question = "what is the cat called, and who is its vet?"
    for _ in range(2):
        assert FACTS[1] in await texts(reader, question)
    assert reader.index.stats.unread == 1
    reached, go = anyio.Event(), anyio.Event()
    stop_at(monkeypatch, step, reached, go)

    async def the_write() -> None:
        if write == "forget":
            await writer.forget(ACME, id=ids[1])
        else:
            await writer.remember(ACME, NEW)

    async with anyio.create_task_group() as tg:
        tg.start_soon(the_write)
        with anyio.fail_after(60):
            await reached.wait()
        for _ in range(2):  # during the write: either answer is right, the loop must run them
            await texts(reader, question)
        go.set()
    read_before = reads.reads
    for _ in range(2):
        got = await texts(reader, question)
        assert (FACTS[1] not in got) if write == "forget" else (NEW in got), got
    assert reads.reads > read_before  # the first recall after the write read its revision


async def test_a_write_answered_between_a_recalls_revision_read_and_its_answer_is_seen_by_the_next(
    listened: tuple[Mongo, RevisionReads], mongo: Mongo, db_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failpoint inside the recall: right after its revision read returns, a whole write of the
    scope (another client) answers. The index that recall verifies lacks that write, so it must
    be verified at the stamp taken BEFORE the read (which the write's addition moved past), never
    at one taken after it: the next recall reads again and finds the memory."""
    client, reads = listened
    writer, reader = await pair(mongo, client, db_name)
    question = "who is the cat's vet?"
    for _ in range(2):
        await texts(reader, question)
    assert reader.index.stats.unread == 1
    await writer.remember(ACME, "Order ORD-77120 was returned on Friday.")  # the stamp moves
    read = reader.coherence.read
    wrote: list[str] = []

    async def then_a_write_answers(key: str, **kwargs: Any) -> Any:
        head = await read(key, **kwargs)
        if not wrote:
            wrote.append((await writer.remember(ACME, NEW)).id)
        return head

    monkeypatch.setattr(reader.coherence, "read", then_a_write_answers)
    assert NEW not in await texts(reader, question)  # concurrent with the write: as before it
    monkeypatch.undo()
    assert wrote
    read_before = reads.reads
    for _ in range(2):
        assert NEW in await texts(reader, question)
    assert reads.reads == read_before + 1  # read once, then verified again
    assert reader.index.stats.unread == 2
