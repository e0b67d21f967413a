"""The start-up migrations run once, not at every start (mongogate/migrations.py, issue 38.6).

A start used to send, whatever the data: an `update_many` back-filling `sessions.last_activity`,
and one probe per collection for documents under an older version's ids (messages, summaries,
run events; long-term memory's uuid ids behind its own marker). Once a step finds nothing left to
do it is recorded in one marker document, read by `_id` once per start. An older version started
on the database afterwards re-creates the unique indexes this version retires, which a start
already reads: those steps run again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId
from pymongo import MongoClient, monitoring

from mongogate.config import Settings
from mongogate.recall.searchindex.vectors import forget_probes
from tests.conftest import make_settings
from tests.test_indexes import Heard, served

pytestmark = pytest.mark.anyio

#: what a warm start on a migrated database sends for the services, nothing else (and the
#: search index probe, `aggregate` on memories, which a new process sends once: `warm_start`)
WARM = sorted(
    [("aggregate", "memories")]
    + [
        ("listIndexes", c)
        for c in (
            "sessions",
            "messages",
            "summaries",
            "message_index",
            "memories",
            "memory_versions",
            "messages",  # the message search index is its own step
            "run_events",
            "runs",
        )
    ]
    + [("find", "memory_meta"), ("endSessions", "")]
)


async def _start(settings: Settings, heard: monitoring.CommandListener | None = None) -> dict[str, bool]:
    """A server's start up to ready; what it decided about older ids."""
    async with served(settings, heard) as state:
        return {
            "messages": state.memory.legacy_messages,
            "summaries": state.memory.legacy_summaries,
            "run_events": state.runs.legacy_events,
            "memories": state.recall.legacy,
        }


async def warm_start(settings: Settings) -> list[tuple[str, str]]:
    """What a start sends as a new process's would: the search index probe's answer is cached per
    client while it lives, so a previous start's cached answer lasted only until that client was
    collected (this test failed or passed by when the garbage collector ran)."""
    forget_probes()
    heard = Heard()
    assert await _start(settings, heard) == NONE_LEFT
    return sorted(heard.sent)


@pytest.fixture
def settings(engine_uri: str, db_name: str, tmp_path: Path) -> Settings:
    return make_settings(engine_uri, db_name, tmp_path, memory={"completed_run_ttl_s": 3600})


@pytest.fixture
def sync_db(engine_uri: str, db_name: str) -> Iterator[Any]:
    with MongoClient[dict[str, Any]](engine_uri, tz_aware=True) as client:
        yield client[db_name]


NONE_LEFT = {"messages": False, "summaries": False, "run_events": False, "memories": False}


async def test_a_warm_start_on_migrated_data_sends_no_migration_commands(settings: Settings) -> None:
    """Old code: an `update` of sessions and a `find` on messages, summaries and run_events at
    every start (15 commands); now the marker's one `find` (11)."""
    assert await _start(settings) == NONE_LEFT
    assert await warm_start(settings) == WARM


def _as_an_older_version_left_it(db: Any) -> datetime:
    """What a version before derived ids and `last_activity` does at its start and first writes:
    its unique indexes, a session without `last_activity`, a message, a summary and a run event
    under ObjectIds, a memory under a uuid."""
    created = datetime(2026, 11, 1, tzinfo=UTC)
    db["messages"].create_index([("session_id", 1), ("key", 1)], unique=True, name="session_key_unique")
    db["summaries"].create_index([("session_id", 1), ("key", 1)], unique=True, name="session_key_unique")
    if "run_seq" in db["run_events"].index_information():  # the older version's start refuses it
        db["run_events"].drop_index("run_seq")  # (same keys, another definition): dropped by hand
    db["run_events"].create_index(
        [("tenant", 1), ("run_id", 1), ("seq", 1)], unique=True, name="run_seq_unique"
    )
    keys = [("tenant", 1), ("owner", 1), ("namespace", 1), ("key", 1)]
    db["memories"].create_index(
        keys, unique=True, name="scope_namespace_key_unique", partialFilterExpression={"keyed": True}
    )
    db["sessions"].insert_one(
        {"_id": "old", "tenant": "acme", "title": None, "next_seq": 1, "created_at": created}
    )
    db["messages"].insert_one({"_id": ObjectId(), "session_id": "old", "key": "t1:user", "seq": 1})
    db["summaries"].insert_one({"_id": ObjectId(), "session_id": "old", "key": "s1", "through_seq": 1})
    db["run_events"].insert_one({"_id": ObjectId(), "tenant": "acme", "run_id": "r", "seq": 1})
    db["memories"].insert_one(
        {
            "_id": uuid.uuid4().hex,
            "tenant": "acme",
            "owner": "*",
            "namespace": "default",
            "keyed": True,
            "key": "k",
            "text_hash": "h",
            "text": "old",
        }
    )
    return created


async def test_an_older_version_started_after_the_marker_is_migrated_again(
    settings: Settings, sync_db: Any
) -> None:
    """The marker says every step was done; an older version then starts and writes. Its unique
    indexes tell the next start to look again: the session is back-filled and every older id is
    found (old code missed the uuid memory: long-term memory's own marker was never read again)."""
    assert await _start(settings) == NONE_LEFT
    created = _as_an_older_version_left_it(sync_db)
    assert await _start(settings) == {
        "messages": True,
        "summaries": True,
        "run_events": True,
        "memories": True,
    }
    assert sync_db["sessions"].find_one({"_id": "old"})["last_activity"] == created
    # while older ids are left, every start looks again; once they are gone, it stops
    for coll in ("messages", "summaries", "run_events", "memories"):
        sync_db[coll].delete_many({})
    assert await _start(settings) == NONE_LEFT
    assert await warm_start(settings) == WARM


async def test_a_database_of_an_older_version_is_migrated_at_its_first_start(
    settings: Settings, sync_db: Any
) -> None:
    """No marker yet: every step runs, and only what found nothing left is recorded."""
    created = _as_an_older_version_left_it(sync_db)
    sync_db["run_events"].delete_many({})
    first = await _start(settings)
    assert first == {"messages": True, "summaries": True, "run_events": False, "memories": True}
    assert sync_db["sessions"].find_one({"_id": "old"})["last_activity"] == created
    marker = sync_db["memory_meta"].find_one({"_id": "migrations"})
    assert marker is not None and set(marker) - {"_id"} == {"session_activity", "run_event_ids"}
