"""A start killed between a migration step's work and its record (mongogate/migrations.py).

An older version started after the marker re-creates the unique indexes this version retires;
that index is the only sign telling a later start to run a recorded step again. A start that
drops the index (the sign) and is killed before the step records what it found must leave
the step un-recorded, or every later start skips it: memories under uuid ids never looked for
(a second `remember` of a key makes a second memory), sessions never given `last_activity`
(never listed past the first page, never erased by retention)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from pymongo import MongoClient, monitoring

from mongogate.config import Settings
from mongogate.memory_scope import MemoryScope
from tests.conftest import make_settings
from tests.test_indexes import served
from tests.test_migrations import NONE_LEFT, WARM, _start, warm_start

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
ACME = MemoryScope("acme")

#: a server's start in another process, ended like kill -9 (status 137, no clean-up) the moment
#: the engine has answered its first `COMMAND` on `COLLECTION`: after a step's work, before its record
KILLED_START = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    import anyio
    from pymongo import monitoring
    from tests.conftest import make_settings
    from tests.test_migrations import _start

    uri, name, tmp, command, collection = sys.argv[1:]

    class Kill(monitoring.CommandListener):
        def __init__(self):
            self.ids = set()
        def started(self, event):
            if event.command_name == command and event.command.get(command) == collection:
                self.ids.add(event.request_id)
        def succeeded(self, event):
            if event.request_id in self.ids:
                os._exit(137)
        def failed(self, event):
            pass

    anyio.run(_start, make_settings(uri, name, Path(tmp)), Kill())
    """
)


def killed_start(settings: Settings, command: str, collection: str) -> int:
    """A start in another process, killed after `command` on `collection`; its exit status."""
    args = [settings.database.uri, settings.database.name, settings.server.data_dir]
    done = subprocess.run(
        [sys.executable, "-c", KILLED_START, *map(str, args), command, collection],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 137, done.stderr
    return done.returncode


async def a_memory_under_a_uuid(settings: Settings, sync_db: Any) -> None:
    """A migrated database (the marker records every step), then an older version starts (its
    unique index back) and holds a memory under a uuid id."""
    async with served(settings) as state:
        first = await state.recall.remember(ACME, "the deploy window is friday", key="deploy")
    doc = sync_db["memories"].find_one_and_delete({"_id": first.id})
    sync_db["memories"].insert_one({**doc, "_id": "0f" * 16})
    keys = [("tenant", 1), ("owner", 1), ("namespace", 1), ("key", 1)]
    sync_db["memories"].create_index(
        keys, unique=True, name="scope_namespace_key_unique", partialFilterExpression={"keyed": True}
    )


@pytest.fixture
def settings(engine_uri: str, db_name: str, tmp_path: Path) -> Settings:
    return make_settings(engine_uri, db_name, tmp_path)


@pytest.fixture
def sync_db(engine_uri: str, db_name: str) -> Iterator[Any]:
    with MongoClient[dict[str, Any]](engine_uri, tz_aware=True) as client:
        yield client[db_name]


async def test_a_start_killed_after_dropping_recalls_older_index_leaves_the_uuid_memories_found(
    settings: Settings, sync_db: Any
) -> None:
    """Old code: the killed start dropped the older version's unique index (the only sign) before
    un-recording `memory_ids`; every later start skipped the uuid memory, and a second remember
    of its key stored a second memory beside it."""
    await a_memory_under_a_uuid(settings, sync_db)
    killed_start(settings, "dropIndexes", "memories")
    assert "scope_namespace_key_unique" not in sync_db["memories"].index_information()  # the sign is gone
    assert (await _start(settings))["memories"] is True
    async with served(settings) as state:
        await state.recall.remember(ACME, "the deploy window is thursday", key="deploy")
        page = await state.recall.list(ACME)
    assert [(m.key, m.text) for m in page.memories] == [("deploy", "the deploy window is thursday")]


async def test_a_start_killed_after_dropping_the_messages_older_index_leaves_sessions_back_filled(
    settings: Settings, sync_db: Any
) -> None:
    """Old code: the killed start dropped `messages`' older unique index (the sign for the
    back-fill too) before back-filling; every later start skipped it, and the older version's
    session was never listed past the first page (nor erased by retention: no `last_activity`)."""
    assert await _start(settings) == NONE_LEFT
    created = datetime(2026, 11, 1, tzinfo=UTC)
    now = datetime.now(UTC)
    sync_db["sessions"].insert_one(
        {"_id": "new", "tenant": "acme", "title": None, "next_seq": 1, "created_at": now}
        | {"last_activity": now}
    )
    # an older version starts (its unique index back) and creates a session, no `last_activity`
    sync_db["messages"].create_index([("session_id", 1), ("key", 1)], unique=True, name="session_key_unique")
    sync_db["sessions"].insert_one(
        {"_id": "old", "tenant": "acme", "title": None, "next_seq": 1, "created_at": created}
    )
    killed_start(settings, "dropIndexes", "messages")
    assert "session_key_unique" not in sync_db["messages"].index_information()  # the sign is gone
    assert await _start(settings) == NONE_LEFT
    async with served(settings) as state:
        first = await state.memory.list_sessions("acme", limit=1)
        second = await state.memory.list_sessions("acme", limit=1, cursor=first.next_cursor)
    assert [s.session_id for s in first.sessions + second.sessions] == ["new", "old"]
    assert sync_db["sessions"].find_one({"_id": "old"})["last_activity"] == created


class HoldAfterMarker(monitoring.CommandListener):
    """Holds a start's loop once the engine has answered its first read of the marker, until
    `go` is set: another start runs whole in between."""

    def __init__(self) -> None:
        self.ids: set[int] = set()
        self.held = threading.Event()
        self.go = threading.Event()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "find" and event.command.get("find") == "memory_meta":
            self.ids.add(event.request_id)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.request_id in self.ids and not self.held.is_set():
            self.held.set()
            assert self.go.wait(60)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def a_whole_while_b_holds_after_the_marker(settings: Settings) -> dict[str, dict[str, bool]]:
    """Start B (its own thread and loop) up to its first read of the marker, start A whole, then
    let B finish; what each decided."""
    hold = HoldAfterMarker()
    found: dict[str, dict[str, bool]] = {}

    def start_b() -> None:
        found["b"] = anyio.run(_start, settings, hold)

    b = threading.Thread(target=start_b)
    b.start()
    try:
        assert await anyio.to_thread.run_sync(hold.held.wait, 60)
        found["a"] = await _start(settings)
    finally:
        hold.go.set()
        await anyio.to_thread.run_sync(b.join, 60)
    return found


async def test_a_start_that_read_the_marker_before_another_dropped_the_older_index_still_finds_uuid_ids(
    settings: Settings, sync_db: Any
) -> None:
    """Two starts at once after an older version ran: B reads the marker (every step done), then
    A runs whole (drops the older unique indexes, finds the uuid memory, un-records the step),
    then B reads long-term memory's indexes. Old code: B read the marker before those indexes,
    saw neither the index nor the un-record, and served without the uuid fallback for its life."""
    await a_memory_under_a_uuid(settings, sync_db)
    found = await a_whole_while_b_holds_after_the_marker(settings)
    assert found["a"]["memories"] is True
    assert found["b"]["memories"] is True


async def test_two_starts_at_once_on_a_fresh_database_record_every_step(
    settings: Settings, sync_db: Any
) -> None:
    """B read no marker, A records every step, B finds nothing left and records over it: one
    marker, every step in it, and the next start is warm."""
    found = await a_whole_while_b_holds_after_the_marker(settings)
    assert found == {"a": NONE_LEFT, "b": NONE_LEFT}
    marker = sync_db["memory_meta"].find_one({"_id": "migrations"})
    assert set(marker) - {"_id"} == {
        "session_activity",
        "message_ids",
        "summary_ids",
        "run_event_ids",
        "memory_ids",
    }
    assert sync_db["memory_meta"].count_documents({}) == 2  # the marker and recall's `legacy_ids`
    assert await warm_start(settings) == WARM
