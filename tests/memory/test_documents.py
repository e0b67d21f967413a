"""Memory's stored documents have their field names in one place (`memory/documents.py`): every
projection memory reads with names fields of its document, and the readers (`from_doc`) turn
what the stores wrote back into the values the tools return."""

from __future__ import annotations

from typing import Any

import pytest

from mongogate.memory.compaction import SUMMARY_FIELDS
from mongogate.memory.documents import MessageDoc, SessionDoc, SummaryDoc
from mongogate.memory.gate import SESSION_STATE
from mongogate.memory.repository import COMMIT_FIELDS, NUMBER_FIELDS, TAKE_FIELDS
from mongogate.memory.sessions import LIST_FIELDS, list_sessions
from mongogate.memory.store import MemoryStore
from tests.memory.searching import search_messages

pytestmark = pytest.mark.anyio


def fields(doc: Any) -> set[str]:
    return set(doc.__required_keys__ | doc.__optional_keys__)


@pytest.mark.parametrize(
    ("projection", "doc"),
    [
        (LIST_FIELDS, SessionDoc),
        (SESSION_STATE, SessionDoc),
        (TAKE_FIELDS, SessionDoc),
        (COMMIT_FIELDS, SessionDoc),
        (NUMBER_FIELDS, SessionDoc),
        (SUMMARY_FIELDS, SummaryDoc),
    ],
    ids=["list", "state", "take", "commit", "number", "summary"],
)
def test_every_projection_names_fields_of_its_document(projection: dict[str, int], doc: Any) -> None:
    assert set(projection) - fields(doc) == set()


async def test_what_the_store_wrote_reads_back_through_from_doc(store: MemoryStore) -> None:
    """A session and its message, written by the store, hold exactly the typed documents' fields
    (none missing, none unnamed), and read back as the tools return them."""
    sid = await store.create_session("acme", title="trip")
    await store.append("acme", sid, "t1", "user", "book the ferry to Hydra")
    session = await store.sessions.find_one({"_id": sid})
    message = await store.messages.find_one({"session_id": sid})
    assert session is not None and message is not None
    required = SessionDoc.__required_keys__
    assert required <= set(session) <= fields(SessionDoc)
    assert MessageDoc.__required_keys__ <= set(message) <= fields(MessageDoc)
    page = await list_sessions(store, "acme")
    assert [(s.session_id, s.title, s.last_seq) for s in page.sessions] == [(sid, "trip", 1)]
    hits = await search_messages(store, "acme", "ferry")
    assert [(h.session_id, h.seq, h.role, h.content) for h in hits.messages] == [
        (sid, 1, "user", "book the ferry to Hydra")
    ]
