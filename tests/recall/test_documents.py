"""Long-term memory's stored documents have their field names in one place
(`recall/documents.py`): every projection recall reads with names fields of `MemoryDoc`, and what
remember writes (a memory, a replaced version, the scope's revision) holds those fields only."""

from __future__ import annotations

from typing import Any

import pytest

from mongogate.recall.documents import MemoryDoc, RevisionDoc, VersionDoc
from mongogate.recall.ids import IDENTITY_FIELDS
from mongogate.recall.inprocess.scope_index import INDEX_FIELDS
from mongogate.recall.model import MemoryItem, MemoryScope, Version, scope_key
from mongogate.recall.pages import ITEM_FIELDS
from mongogate.recall.store import LongTermMemory

pytestmark = pytest.mark.anyio


def fields(doc: Any) -> set[str]:
    return set(doc.__required_keys__ | doc.__optional_keys__)


@pytest.mark.parametrize(
    "projection", [ITEM_FIELDS, INDEX_FIELDS, IDENTITY_FIELDS], ids=["item", "index", "identity"]
)
def test_every_projection_names_fields_of_a_memory(projection: dict[str, int]) -> None:
    assert set(projection) - fields(MemoryDoc) == set()


async def test_what_remember_wrote_holds_the_typed_fields_and_reads_back(ltm: LongTermMemory) -> None:
    scope = MemoryScope("acme", "ana")
    first = await ltm.remember(scope, "The ferry leaves at 9.", key="ferry", author="ana")
    await ltm.remember(scope, "The ferry leaves at 10.", key="ferry", author="ana")
    memory = await ltm.memories.find_one({"_id": first.id})
    version = await ltm.versions.find_one({"memory_id": first.id})
    revision = await ltm.revisions.find_one({"_id": scope_key(scope)})
    assert memory is not None and version is not None and revision is not None
    assert MemoryDoc.__required_keys__ <= set(memory) <= fields(MemoryDoc)
    assert VersionDoc.__required_keys__ <= set(version) <= fields(VersionDoc)
    assert set(revision) <= fields(RevisionDoc)
    item = MemoryItem.from_doc(memory)
    assert (item.id, item.key, item.text, item.version, item.author) == (
        first.id,
        "ferry",
        "The ferry leaves at 10.",
        2,
        "ana",
    )
    assert Version.from_doc(version).text == "The ferry leaves at 9."
    listed = await ltm.list(scope)
    assert listed.memories == [item]
