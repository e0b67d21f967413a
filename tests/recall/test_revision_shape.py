"""A scope's revision document stays as small after any number of writes as after one (issue 38
item 4). On the embedded engine every update of a document costs in proportion to the values it
holds (each one encoded, validated and copied), whatever the update touches: with the last
CHANGES ids as a list of CHANGES values, each of a keyed remember's four updates of the revision
document (begin, the quota's reservation, the bump, the end) cost 2x after CHANGES writes.
The ids are kept as text instead; a copy up to CHANGES revisions behind is still patched with
exactly its changes, one further behind is rebuilt, and a document of the previous shape (a
list) is still read."""

from __future__ import annotations

import pytest
from pymongo import AsyncMongoClient

from mongogate.indexing import CHANGES, Coherence
from mongogate.recall.model import scope_key
from mongogate.recall.store import LongTermMemory
from tests.recall.test_index import ACME

pytestmark = pytest.mark.anyio

Mongo = AsyncMongoClient[dict[str, object]]


def values(x: object) -> int:
    """The values a stored document holds (every scalar, every element of a list or object)."""
    if isinstance(x, dict):
        return sum(values(v) for v in x.values())
    if isinstance(x, list):
        return sum(values(v) for v in x)
    return 1


async def test_a_keyed_remember_after_many_writes_leaves_the_revision_document_as_small_as_after_one(
    ltm: LongTermMemory,
) -> None:
    key = scope_key(ACME)
    await ltm.remember(ACME, "The first fact under its key.", key="k")
    one = values(await ltm.revisions.find_one({"_id": key}))
    for i in range(2 * CHANGES):
        await ltm.coherence.bump(key, f"m-{i:04d}")  # what 2 x CHANGES writes of memories leave
    await ltm.coherence.bump(key, *(f"bulk-{i}" for i in range(3 * CHANGES)))  # a bulk import's batch
    await ltm.remember(ACME, "A fact under another key.", key="k2")
    await ltm.remember(ACME, "The first fact, changed.", key="k")
    doc = await ltm.revisions.find_one({"_id": key})
    assert values(doc) <= one + 3, doc


async def test_a_copy_up_to_changes_behind_gets_exactly_its_changes_and_one_further_none(
    mongo: Mongo, db_name: str
) -> None:
    guard = Coherence(mongo[db_name]["revisions"], db_name)
    ids = [f'id {i}, "quoted"\n' for i in range(3 * CHANGES)]  # any text is an id
    for i in range(0, len(ids), 3):  # bumps of 1 and 2 ids
        await guard.bump("s", ids[i])
        await guard.bump("s", ids[i + 1], ids[i + 2])
    await guard.bump("s", ids[5])  # named again
    changed = [*ids, ids[5]]
    head = await guard.read("s")
    assert head.rev == len(changed)
    for behind in (0, 1, 2, 3, CHANGES // 2, CHANGES):
        assert head.since(head.rev - behind) == list(dict.fromkeys(changed[len(changed) - behind :]))
    assert head.since(head.rev - CHANGES - 1) is None
    assert head.since(head.rev + 1) is None


async def test_a_bump_of_more_than_changes_ids_leaves_every_copy_behind_it_to_rebuild(
    mongo: Mongo, db_name: str
) -> None:
    guard = Coherence(mongo[db_name]["revisions"], db_name)
    await guard.bump("s", "a")
    await guard.bump("s", *(f"b{i}" for i in range(CHANGES + 1)))
    head = await guard.read("s")
    assert head.since(1) is None and head.since(head.rev) == []
    await guard.bump("s", "c")
    head = await guard.read("s")
    assert head.since(head.rev - 1) == ["c"]


async def test_a_revision_document_of_the_previous_shape_is_read_and_taken_over(
    mongo: Mongo, db_name: str
) -> None:
    """A document with the list (left by the previous version, or bumped since by one of its
    processes) names its changes by that list; this version's bump carries none of it over."""
    coll = mongo[db_name]["revisions"]
    guard = Coherence(coll, db_name)
    await coll.insert_one({"_id": "s", "rev": 3, "born": "b1", "changes": ["a", "b", "c"]})
    head = await guard.read("s")
    assert (head.rev, head.born, head.since(1), head.since(3)) == (3, "b1", ["b", "c"], [])
    await guard.bump("s", "d")
    head = await guard.read("s")
    assert (head.rev, head.born, head.since(3)) == (4, "b1", ["d"])
    assert "changes" not in (await coll.find_one({"_id": "s"}) or {})
    # a process of the previous version bumps it again: its list alone names what came after
    await coll.update_one(
        {"_id": "s"}, {"$inc": {"rev": 1}, "$push": {"changes": {"$each": ["e"], "$slice": -256}}}
    )
    head = await guard.read("s")
    assert (head.rev, head.since(4)) == (5, ["e"])
