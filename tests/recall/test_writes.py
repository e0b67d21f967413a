"""Writes of long-term memory in the shapes the embedded engine serves flat (recall/ids.py,
recall/quota.py, docs/decisions/recall-writes.md): every memory by its derived `_id`, the quota by
a counter, a database of the previous version (uuid ids, compound unique indexes) still served."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring
from pymongo.errors import DuplicateKeyError

from mongogate.clock import ManualClock
from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.errors import NotFound, QuotaExceeded
from mongogate.migrations import META
from mongogate.recall import quota
from mongogate.recall.documents import REVISIONS
from mongogate.recall.history import read_memory
from mongogate.recall.ids import memory_id
from mongogate.recall.model import MemoryScope, scope_key
from mongogate.recall.setup import OLD_UNIQUE
from mongogate.recall.store import LongTermMemory, identity, text_hash
from tests.recall.conftest import BrokenEmbedder

ACME = MemoryScope("acme")
ALICE = MemoryScope("acme", "alice")
OTHER = MemoryScope("other")
pytestmark = pytest.mark.anyio
COLLECTIONS = {"memories", "memory_versions", REVISIONS}


class Commands(monitoring.CommandListener):
    """Every command a client sent, as sent (the wire shape the engine serves)."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.replies: dict[int, dict[str, Any]] = {}
        self.on = False

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.on:
            self.seen.append(dict(event.command) | {"_name": event.command_name, "_rid": event.request_id})

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if self.on:
            self.replies[event.request_id] = dict(event.reply)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def filters(cmd: dict[str, Any]) -> list[Any]:
    """The filters of one command on a memory collection."""
    name = cmd["_name"]
    if name == "find":
        return [cmd.get("filter", {})]
    if name == "findAndModify":
        return [cmd["query"]]
    if name == "update":
        return [u["q"] for u in cmd["updates"]]
    if name == "delete":
        return [d["q"] for d in cmd["deletes"]]
    return []


def hit(cmd: dict[str, Any], reply: dict[str, Any]) -> bool:
    name = cmd["_name"]
    if name == "find":
        return bool(reply["cursor"]["firstBatch"])
    if name == "findAndModify":
        return reply.get("value") is not None or bool(reply.get("lastErrorObject", {}).get("upserted"))
    if name in ("update", "delete"):
        return int(reply.get("n", 0)) >= 1
    return True


@pytest.fixture
async def watched(
    engine_uri: str, db_name: str, clock: ManualClock, embedder: BrokenEmbedder, settings: LongTermSettings
) -> AsyncIterator[tuple[LongTermMemory, Commands]]:
    listener = Commands()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        engine_uri, tz_aware=True, event_listeners=[listener]
    )
    store = LongTermMemory(client[db_name], settings, embedder, clock, limits=LimitsSettings())
    await store.ensure_indexes()
    try:
        yield store, listener
    finally:
        await client.close()


def test_a_memory_id_is_its_identity_hashed_unambiguously() -> None:
    def mid(scope: MemoryScope, ns: str, key: str | None, text: str = "t") -> str:
        return memory_id(identity(scope, ns, key, text_hash(text)))

    a = mid(ACME, "default", "k")
    assert a == mid(ACME, "default", "k", "another text") and len(a) == 32 and int(a, 16) >= 0
    others = {
        mid(ALICE, "default", "k"),
        mid(OTHER, "default", "k"),
        mid(ACME, "notes", "k"),
        mid(ACME, "default", "k2"),
        mid(ACME, "default", None),
        mid(ACME, "default", None, "another text"),
        # the parts never run into each other: no separator a tenant or key could hold decides
        mid(MemoryScope("acme:x", "y"), "default", "k"),
        mid(MemoryScope("acme", "x:y"), "default", "k"),
        mid(MemoryScope('acme","x'), "default", "k"),
    }
    assert a not in others and len(others) == 9
    # a key equal to a text's hash is still another identity than that text
    assert mid(ACME, "default", text_hash("t")) != mid(ACME, "default", None, "t")


async def test_remember_update_expiry_and_forget_address_memories_by_id_alone(
    watched: tuple[LongTermMemory, Commands],
) -> None:
    """Broke before: remember read by (tenant, owner, namespace, key), counted the scope for the
    quota and upserted the history on (memory_id, version); forget deleted by key. Each of those
    scans the collection on the embedded engine (0.6-1.3 s at 10,000 memories)."""
    ltm, seen = watched
    await ltm.remember(ACME, "first fact", key="warm")  # the scope's first create counts it once
    seen.on = True
    await ltm.remember(ACME, "door code 4471", key="door")  # created
    await ltm.remember(ACME, "door code 5582", key="door")  # updated: a history entry
    await ltm.remember(ACME, "door code 5582", key="door", ttl_days=3)  # unchanged, new expiry
    await ltm.remember(ACME, "door code 6693", key="door", ttl_days=3)  # updated again
    await ltm.remember(ACME, "an unkeyed fact")
    await ltm.remember(ACME, "an unkeyed fact")  # unchanged
    assert await ltm.forget(ACME, namespace="default", key="door") is True
    assert await ltm.forget(ACME, id=memory_id(identity(ACME, "default", None, text_hash("an unkeyed fact"))))
    seen.on = False
    mine = [c for c in seen.seen if c.get(c["_name"]) in COLLECTIONS]
    assert {c["_name"] for c in mine} <= {"find", "findAndModify", "insert", "update", "delete"}
    assert mine and all(set(f) == {"_id"} for c in mine for f in filters(c)), [
        (c["_name"], filters(c)) for c in mine if any(set(f) != {"_id"} for f in filters(c))
    ]
    assert all(not isinstance(f["_id"], dict) for c in mine for f in filters(c))  # no $in
    # and each of them finds its document: on the embedded engine a read, update or delete by
    # `_id` that finds nothing scans the collection (0.2-1.4 s at 10,000); a duplicate insert does not
    missed = [(c["_name"], c[c["_name"]], filters(c)) for c in mine if not hit(c, seen.replies[c["_rid"]])]
    assert missed == []
    assert not any(
        c["_name"] == "update" and any(u.get("upsert") for u in c["updates"])
        for c in mine
        if c[c["_name"]] != REVISIONS
    )
    assert await ltm.memories.count_documents({"tenant": "acme"}) == 1
    assert await ltm.versions.count_documents({}) == 0


async def test_at_a_full_scope_every_write_is_by_id_after_one_count(
    watched: tuple[LongTermMemory, Commands], clock: ManualClock
) -> None:
    """Broke before (issue 38): at `max_per_scope` every remember counted the scope (a find on
    tenant and owner: 0.5-1.2 s at 10,000 memories, 4.4-7.3 s on a busy machine), a keyed update
    included (create-first reserves a place first), and a refused new fact counted it twice. Now
    the count is kept and kept in step: after the first refusal, updates, unchanged remembers,
    expiry sets, refusals, a forget and the create it makes room for all go by `_id` alone."""
    ltm, seen = watched
    ltm.settings = ltm.settings.model_copy(update={"max_per_scope": 3})
    for i in range(3):
        await ltm.remember(ACME, f"fact {i}", key=f"k{i}")
    with pytest.raises(QuotaExceeded):
        await ltm.remember(ACME, "one too many")  # counted here, once
    seen.on = True
    with pytest.raises(QuotaExceeded):
        await ltm.remember(ACME, "another new fact")
    with pytest.raises(QuotaExceeded):
        await ltm.remember(ACME, "a new key", key="k9")
    assert (await ltm.remember(ACME, "fact 0, second text", key="k0")).status == "updated"
    assert (await ltm.remember(ACME, "fact 0, second text", key="k0")).status == "unchanged"
    assert (await ltm.remember(ACME, "fact 0, second text", key="k0", ttl_days=3)).status == "unchanged"
    assert (await ltm.remember(ACME, "fact 2, expiring", key="k2", ttl_days=2)).status == "updated"
    assert await ltm.forget(ACME, namespace="default", key="k1") is True
    assert (await ltm.remember(ACME, "fits in the freed place", key="k3")).status == "created"
    with pytest.raises(QuotaExceeded):
        await ltm.remember(ACME, "full again")
    clock.advance(quota.RECOUNT.total_seconds() / 2)  # nothing expired: the kept count holds
    with pytest.raises(QuotaExceeded):
        await ltm.remember(ACME, "still full")
    seen.on = False
    mine = [c for c in seen.seen if c.get(c["_name"]) in COLLECTIONS]
    assert mine and all(
        set(f) == {"_id"} and not isinstance(f["_id"], dict) for c in mine for f in filters(c)
    ), [(c["_name"], filters(c)) for c in mine if any(set(f) != {"_id"} for f in filters(c))]
    writes = [c for c in mine if c["_name"] != "find"]  # a find by `_id` finding nothing stays flat
    assert all(hit(c, seen.replies[c["_rid"]]) for c in writes)
    # past the first expiry the scope is counted again, and the expired memory's place is free
    clock.advance(2 * 86_400)
    assert (await ltm.remember(ACME, "after fact 2 expired", key="k4")).status == "created"


async def test_an_id_of_another_scope_looks_absent_even_when_derived(ltm: LongTermMemory) -> None:
    """A caller who computes another scope's derived id (the hash is public) reaches nothing."""
    a = await ltm.remember(ACME, "the safe code is 31-7-22", key="safe")
    await ltm.remember(ACME, "the safe code is 44-1-9", key="safe")
    assert a.id == memory_id(identity(ACME, "default", "safe", ""))
    for intruder in (OTHER, ALICE):
        assert await ltm.forget(intruder, id=a.id) is False
        with pytest.raises(NotFound):
            await ltm.history(intruder, a.id)
        with pytest.raises(NotFound):
            await read_memory(ltm, intruder, a.id)
        # the same key in the intruder's scope is another memory
        b = await ltm.remember(intruder, "mine", key="safe")
        assert b.id != a.id and b.status == "created"
    assert [v.text for v in (await ltm.history(ACME, a.id)).versions] == [
        "the safe code is 31-7-22",
        "the safe code is 44-1-9",
    ]


async def test_a_forged_document_at_a_derived_id_of_another_scope_is_never_changed(
    ltm: LongTermMemory,
) -> None:
    """Even if a document of another scope sat at the id a caller's identity derives (a hash
    collision, or a document written by hand), remember never updates it: the scope is checked on
    the document read and inside the update's pipeline."""
    mid = memory_id(identity(ACME, "default", "k", ""))
    foreign = ltm.new_document(
        identity(OTHER, "default", "k", ""), "not yours", {}, [0.0] * 256, ltm.clock.now(), None, None
    ) | {"_id": mid}
    await ltm.memories.insert_one(foreign)
    assert await ltm.forget(ACME, namespace="default", key="k") is False
    with pytest.raises(DuplicateKeyError):  # its create collides: never a second document, never a write
        await ltm.memories.insert_one(foreign)
    doc = await ltm.memories.find_one({"_id": mid})
    assert doc is not None and doc["tenant"] == "other" and doc["text"] == "not yours"


async def held(ltm: LongTermMemory, scope: MemoryScope) -> int:
    doc = await ltm.revisions.find_one({"_id": scope_key(scope)})
    return int((doc or {}).get("held", 0))


async def test_the_quota_counter_refuses_with_nothing_written_and_is_recounted_after_a_ttl_delete(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, embedder: BrokenEmbedder, clock: ManualClock
) -> None:
    ltm = LongTermMemory(mongo[db_name], LongTermSettings(max_per_scope=3), embedder, clock)
    await ltm.ensure_indexes()
    ids = [(await ltm.remember(ACME, f"fact {i}", key=f"k{i}")).id for i in range(3)]
    assert await held(ltm, ACME) == 3
    with pytest.raises(QuotaExceeded):
        await ltm.remember(ACME, "one too many", key="k3")
    assert await ltm.memories.count_documents({}) == 3 and await held(ltm, ACME) == 3
    assert (await ltm.remember(ACME, "fact 0 again", key="k0")).status == "updated"  # no new place
    assert (await ltm.remember(OTHER, "another scope's", key="k3")).status == "created"
    assert await ltm.forget(ACME, id=ids[0]) is True
    assert await held(ltm, ACME) == 2
    assert (await ltm.remember(ACME, "now it fits", key="k3")).status == "created"
    # the TTL monitor deletes an expired memory without telling mongogate: the counter stays
    # high; the count kept at the limit holds until the first expiry it knows of (an expiry set
    # since lowers it), then the exact recount lets the next memory in
    await ltm.remember(ACME, "fact 1, short-lived", key="k1", ttl_days=1)
    clock.advance(2 * 86_400)
    await ltm.memories.delete_one({"_id": ids[1]})
    assert await held(ltm, ACME) == 3
    assert (await ltm.remember(ACME, "fits after the recount", key="k4")).status == "created"
    assert await held(ltm, ACME) == 3 and await ltm.memories.count_documents({"tenant": "acme"}) == 3
    # an expired memory still stored counts as held, not as live: a place for the new one
    await ltm.remember(ACME, "short-lived", key="k2", ttl_days=1)
    clock.advance(2 * 86_400)
    assert (await ltm.remember(ACME, "after the expiry", key="k5")).status == "created"
    # a delete nobody was told of (by hand, not by TTL) is seen at the latest RECOUNT later
    with pytest.raises(QuotaExceeded):
        await ltm.remember(ACME, "one too many again", key="k6")
    await ltm.memories.delete_one({"tenant": "acme", "key": "k4"})
    with pytest.raises(QuotaExceeded):
        await ltm.remember(ACME, "still refused: the kept count holds", key="k6")
    clock.advance(quota.RECOUNT.total_seconds())
    assert (await ltm.remember(ACME, "counted again", key="k6")).status == "created"


async def test_a_counted_duplicate_create_gives_its_place_back(ltm: LongTermMemory) -> None:
    """A create that loses to a concurrent one (a duplicate `_id`) releases its reservation."""
    await ltm.remember(ACME, "x", key="a")
    doc = ltm.new_document(
        identity(ACME, "default", "a", ""), "x", {}, [0.0] * 256, ltm.clock.now(), None, None
    )
    assert await ltm.create(ACME, doc, ltm.clock.now()) is False
    assert await held(ltm, ACME) == 1


async def old_database(ltm: LongTermMemory, n: int = 2) -> list[str]:
    """What the previous version left: its unique indexes, memories under uuid ids, history
    entries under ObjectIds, revision documents without a quota counter."""
    for coll, names in OLD_UNIQUE.items():
        for name in names:
            keys = (
                [("memory_id", 1), ("version", 1)]
                if coll == "memory_versions"
                else [
                    ("tenant", 1),
                    ("owner", 1),
                    ("namespace", 1),
                    ("key" if "key" in name else "text_hash", 1),
                ]
            )
            extra: dict[str, Any] = (
                {} if coll == "memory_versions" else {"partialFilterExpression": {"keyed": "key" in name}}
            )
            await ltm.db[coll].create_index(keys, name=name, unique=True, **extra)
    ids = []
    for i in range(n):
        vec = (await ltm.embedder.embed([f"old fact {i}"]))[0]
        doc = ltm.new_document(
            identity(ACME, "default", f"old{i}", ""), f"old fact {i}", {}, vec, ltm.clock.now(), None, "alice"
        )
        doc = doc | {"_id": uuid.uuid4().hex}
        await ltm.memories.insert_one(doc)
        ids.append(doc["_id"])
    first = await ltm.memories.find_one({"_id": ids[0]})
    assert first is not None
    await ltm.memories.update_one({"_id": ids[0]}, {"$set": {"version": 2, "text": "old fact 0 v2"}})
    await ltm.versions.insert_one(
        {
            "memory_id": ids[0],
            "tenant": "acme",
            "owner": "*",
            "version": 1,
            "text": "old fact 0",
            "metadata": {},
            "author": "alice",
            "updated_at": first["updated_at"],
            "expires_at": None,
        }
    )
    await ltm.revisions.insert_one({"_id": scope_key(ACME), "rev": 3, "changes": ids})
    return ids


async def test_a_database_of_the_previous_version_keeps_its_ids_and_is_served(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, embedder: BrokenEmbedder, clock: ManualClock
) -> None:
    ltm = LongTermMemory(mongo[db_name], LongTermSettings(max_per_scope=3), embedder, clock)
    ids = await old_database(ltm)
    await ltm.ensure_indexes()
    assert ltm.legacy is True
    for coll in OLD_UNIQUE:
        assert [
            n for n, i in (await ltm.db[coll].index_information()).items() if i.get("unique") and n != "_id_"
        ] == []
    # the same key is the same memory, under the id it was given
    same = await ltm.remember(ACME, "old fact 1", key="old1")
    assert (same.id, same.status) == (ids[1], "unchanged")
    upd = await ltm.remember(ACME, "old fact 0 v3", key="old0")
    assert (upd.id, upd.version, upd.status) == (ids[0], 3, "updated")
    assert [v.text for v in (await ltm.history(ACME, ids[0])).versions] == [
        "old fact 0",
        "old fact 0 v2",
        "old fact 0 v3",
    ]
    # the quota counts the old memories on first use (the revision document had no counter)
    await ltm.remember(ACME, "a new one", key="new")
    with pytest.raises(QuotaExceeded):
        await ltm.remember(ACME, "one too many", key="new2")
    assert await ltm.forget(ACME, namespace="default", key="old0") is True
    assert await ltm.versions.count_documents({"memory_id": ids[0]}) == 0
    assert await ltm.forget(ACME, id=ids[1]) is True
    # none left: the next start records it and stops looking
    again = LongTermMemory(mongo[db_name], LongTermSettings(max_per_scope=3), embedder, clock)
    await again.ensure_indexes()
    assert again.legacy is False
    assert (await ltm.db[META].find_one({"_id": "legacy_ids"}) or {}).get("left") is False


async def test_a_new_database_is_not_legacy(ltm: LongTermMemory) -> None:
    assert ltm.legacy is False
    await ltm.remember(ACME, "x", key="a")
    await ltm.ensure_indexes()
    assert ltm.legacy is False
