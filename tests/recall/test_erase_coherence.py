"""An erasure of long-term memory honours recall's coherence protocol: an index warm before the
erasure never recalls an erased memory afterwards, whether it trusts the engine's write signal
or reads the revision every time, and also after the scope was written to again as often as
before the erasure (the revision document was deleted and counts again from 0: an index that
compared revisions only would take the old memories as current). Writer and reader are two
clients, as two server processes are; the erasure is a third."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from pymongo import AsyncMongoClient

from mongogate.erasure import Sweep, Target
from mongogate.recall import ERASURE, LongTermMemory, MemoryScope
from tests.recall.test_index_signal import service

pytestmark = pytest.mark.anyio

Mongo = AsyncMongoClient[dict[str, object]]
ACME, ALICE, BOB = MemoryScope("acme"), MemoryScope("acme", "alice"), MemoryScope("acme", "bob")
OLD = [
    "Order ORD-58213 was shipped by DHL on Monday.",
    "The cat is called Miso and eats salmon twice a day.",
    "Invoices go to billing@acme.example by the fifth of each month.",
]
NEW = [
    "The office plant needs water every Thursday.",
    "Parking spot 14 belongs to the visiting auditor.",
    "The printer on floor two jams with glossy paper.",
]


async def texts(ltm: LongTermMemory, scope: MemoryScope, query: str) -> list[str]:
    return [m.text for m in (await ltm.recall(scope, query, limit=10, min_score=0)).memories]


@pytest.fixture
async def reader_client(engine_uri: str) -> AsyncIterator[Mongo]:
    client: Mongo = AsyncMongoClient(engine_uri, tz_aware=True)
    yield client
    await client.close()


@pytest.mark.parametrize("signal", [True, False], ids=["signal", "revision-reads"])
async def test_a_warm_index_never_recalls_an_erased_memory_even_after_as_many_new_writes(
    mongo: Mongo, reader_client: Mongo, db_name: str, signal: bool
) -> None:
    writer, reader = service(mongo, db_name), service(reader_client, db_name)
    if not signal:
        reader.coherence.signal = None
    for text in OLD:
        await writer.remember(ACME, text)
    assert OLD[1] in await texts(reader, ACME, "what is the cat called?")  # warm, at revision 3
    receipt = await Sweep(mongo[db_name], Target.of("acme")).run([ERASURE])
    assert receipt.count("memories") == 3 and receipt.count("memory_revisions") == 1
    for text in NEW:  # the scope written again, as often as before, before the reader looks
        await writer.remember(ACME, text)
    for query in ("what is the cat called? Miso salmon", "ORD-58213 DHL", "where do invoices go?"):
        got = await texts(reader, ACME, query)
        assert not set(got) & set(OLD), got
    assert set(await texts(reader, ACME, "parking spot auditor")) <= set(NEW)
    assert NEW[1] in await texts(reader, ACME, "parking spot auditor")


async def test_a_subject_erasure_leaves_the_other_subject_and_unattributes_its_tenant_wide_memories(
    mongo: Mongo, reader_client: Mongo, db_name: str
) -> None:
    writer, reader = service(mongo, db_name), service(reader_client, db_name)
    await writer.remember(ALICE, OLD[0], author="alice")
    await writer.remember(BOB, OLD[1], author="bob")
    said = {"session_id": "alice-s1", "seq": 3}  # alice's message: it leads back to her
    shared = await writer.remember(ACME, OLD[2], key="billing", author="alice", source=said)
    await writer.remember(
        ACME, "Invoices go to ap@acme.example now.", key="billing", author="alice", source=said | {"seq": 5}
    )
    assert OLD[0] in await texts(reader, ALICE, "ORD-58213")
    assert [m.author for m in (await reader.recall(ACME, "invoices", limit=5, min_score=0)).memories] == [
        "alice"
    ]
    receipt = await Sweep(mongo[db_name], Target.of("acme", "alice")).run([ERASURE])
    assert receipt.count("memories") == 1
    assert receipt.count("memories", "redacted") == 1 and receipt.count("memory_versions", "redacted") == 1
    assert await texts(reader, ALICE, "ORD-58213") == []
    assert OLD[1] in await texts(reader, BOB, "what is the cat called?")  # another subject's: untouched
    kept = (await reader.recall(ACME, "invoices", limit=5, min_score=0)).memories
    # the tenant's memory stays, unattributed, its source gone with the subject's conversations
    assert [(m.id, m.author, m.source) for m in kept] == [(shared.id, None, None)]
    history = await reader.history(ACME, shared.id)
    assert [(v.author, v.source) for v in history.versions] == [(None, None), (None, None)]
    again = await Sweep(mongo[db_name], Target.of("acme", "alice")).run([ERASURE])
    assert again.total("removed") == 0 and again.total("redacted") == 0


async def test_an_index_of_a_scope_that_never_had_a_revision_document_is_read_again_after_an_erasure(
    mongo: Mongo, reader_client: Mongo, db_name: str
) -> None:
    """Memories of a database older than revision documents: the reader's index was built with no
    document to read (revision 0, no incarnation), and an erasure leaves none either. Without the
    rule that an index holding memories where no document exists reads its scope whole, the two
    states look alike and the index answers with the erased memories."""
    writer, reader = service(mongo, db_name), service(reader_client, db_name)
    for text in OLD:
        await writer.remember(ACME, text)
    await mongo[db_name]["memory_revisions"].delete_many({})  # as an older version left them
    assert OLD[1] in await texts(reader, ACME, "what is the cat called?")
    assert OLD[1] in await texts(reader, ACME, "what is the cat called?")  # settled
    receipt = await Sweep(mongo[db_name], Target.of("acme")).run([ERASURE])
    assert receipt.count("memories") == 3 and receipt.count("memory_revisions") == 0
    assert await texts(reader, ACME, "what is the cat called? Miso salmon") == []
