"""A start creates only the indexes a collection lacks (mongogate/indexes.py, issue 38.6).

The services' indexes are checked at every start before a server reports ready or serves a call.
Old code sent one `createIndexes` per declared index (thirteen) at every start, even when all
were there; now one `listIndexes` per collection, and a `createIndexes` only for what is missing,
created before the open returns."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import ASCENDING, AsyncMongoClient, IndexModel, MongoClient, monitoring
from pymongo.errors import DuplicateKeyError, OperationFailure

from mongogate.assembly import no_caller, no_scope_check, open_services
from mongogate.audit import audit_from_settings
from mongogate.config import Settings
from mongogate.db import Database
from mongogate.indexes import ensure_indexes
from mongogate.tools.state import AppState
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio


class Heard(monitoring.CommandListener):
    """Every command a client sent: (command name, collection)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        target = event.command.get(event.command_name)
        self.sent.append((event.command_name, target if isinstance(target, str) else ""))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def of(self, name: str) -> list[str]:
        return [coll for command, coll in self.sent if command == name]


@contextlib.asynccontextmanager
async def served(
    settings: Settings, heard: monitoring.CommandListener | None = None
) -> AsyncIterator[AppState]:
    """The services of a started server (open, services, indexes), `heard` hearing its commands."""
    db = Database(settings.database, settings.server.data_dir, listeners=[heard] if heard else [])
    await db.open()
    audit = audit_from_settings(settings, db.uri, "test")
    try:
        state = await open_services(
            settings, db, audit=audit, principal=no_caller, require_scopes=no_scope_check, run_tools=True
        )
        try:
            yield state
        finally:
            await state.message_search.aclose()
    finally:
        audit.close()
        await db.close()


async def _start(settings: Settings, heard: Heard | None = None) -> None:
    """What a server's lifespan does before it reports ready: open, then the services and their indexes."""
    async with served(settings, heard):
        pass


@pytest.fixture
def settings(engine_uri: str, db_name: str, tmp_path: Path) -> Settings:
    # completed runs expire: the run collections' TTL indexes are declared too
    return make_settings(engine_uri, db_name, tmp_path, memory={"completed_run_ttl_s": 3600})


@pytest.fixture
def sync_db(engine_uri: str, db_name: str) -> Iterator[Any]:
    with MongoClient[dict[str, Any]](engine_uri) as client:
        yield client[db_name]


async def test_a_start_on_a_database_whose_indexes_exist_sends_no_create_indexes(
    settings: Settings, sync_db: Any
) -> None:
    """Old code: 13 createIndexes at every start, with every index already there."""
    first = Heard()
    await _start(settings, first)
    assert first.of("createIndexes"), "the first start creates the indexes"
    made = {
        c: sorted(ix["name"] for ix in sync_db[c].list_indexes()) for c in sync_db.list_collection_names()
    }
    again = Heard()
    await _start(settings, again)
    assert again.of("createIndexes") == []
    assert {
        c: sorted(ix["name"] for ix in sync_db[c].list_indexes()) for c in sync_db.list_collection_names()
    } == made
    # each collection's list read once (messages twice: the message search index is its own step)
    listed = again.of("listIndexes")
    assert all(listed.count(c) <= (2 if c == "messages" else 1) for c in listed), listed


async def test_a_missing_index_is_created_before_the_start_returns(settings: Settings, sync_db: Any) -> None:
    """An index dropped by hand (or never made) is there when the open returns, which is before
    `/readyz` says ready and before any call is served (server/app.py `_Opener.open`)."""
    await _start(settings)
    sync_db["runs"].drop_index("tenant_status")
    sync_db["runs"].drop_index("expire_at_ttl")
    sync_db["messages"].drop_index("session_seq_desc")
    heard = Heard()
    await _start(settings, heard)
    assert sorted(heard.of("createIndexes")) == ["messages", "runs"]  # one command per collection
    runs = {ix["name"]: ix for ix in sync_db["runs"].list_indexes()}
    assert dict(runs["tenant_status"]["key"]) == {"tenant": 1, "status": 1}
    assert runs["expire_at_ttl"]["expireAfterSeconds"] == 0
    assert "session_seq_desc" in {ix["name"] for ix in sync_db["messages"].list_indexes()}


async def test_a_missing_unique_index_is_created_before_a_write_is_taken(
    engine_uri: str, db_name: str, sync_db: Any
) -> None:
    """The helper waits for what it creates: a write right after it meets the unique index."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(engine_uri)
    try:
        coll = client[db_name]["uniq"]
        await coll.insert_one({"k": 1})
        unique = IndexModel([("k", ASCENDING)], name="k_unique", unique=True)
        assert await ensure_indexes(coll, [unique]) == ["k_unique"]
        with pytest.raises(DuplicateKeyError):
            await coll.insert_one({"k": 1})
        assert await ensure_indexes(coll, [unique]) == []  # held: nothing sent
    finally:
        await client.close()


async def test_an_index_held_under_its_name_with_other_options_is_sent_again(
    engine_uri: str, db_name: str, sync_db: Any
) -> None:
    """Held under the declared name but not unique (or on another key): the declared index is sent,
    and the server's refusal comes back as it did before, never read as 'already there'."""
    sync_db["uniq"].create_index([("k", ASCENDING)], name="k_unique")
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(engine_uri)
    try:
        coll = client[db_name]["uniq"]
        for declared in (
            IndexModel([("k", ASCENDING)], name="k_unique", unique=True),
            IndexModel([("j", ASCENDING)], name="k_unique"),
        ):
            with pytest.raises(OperationFailure):
                await ensure_indexes(coll, [declared])
    finally:
        await client.close()


async def test_an_index_held_under_its_name_with_options_not_declared_is_sent_again(
    engine_uri: str, db_name: str, sync_db: Any
) -> None:
    """Held under the declared name with an option the declaration lacks (unique: a second write
    refused; a TTL: documents deleted; a partial filter: uniqueness only for some): the declared
    index is sent and refused as before (old code: one `create_index`, refused), never taken
    for the declared one."""
    coll_name = "held_more"
    sync_db[coll_name].create_index([("u", ASCENDING)], name="u_ix", unique=True)
    sync_db[coll_name].create_index([("e", ASCENDING)], name="e_ix", expireAfterSeconds=60)
    sync_db[coll_name].create_index(
        [("p", ASCENDING)], name="p_ix", partialFilterExpression={"p": {"$gt": 0}}
    )
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(engine_uri)
    try:
        coll = client[db_name][coll_name]
        for field in ("u", "e", "p"):
            with pytest.raises(OperationFailure):
                await ensure_indexes(coll, [IndexModel([(field, ASCENDING)], name=f"{field}_ix")])
        # what the server adds of its own (`v`, `ns`, `unique: false`) is never a difference
        plain = IndexModel([("k", ASCENDING)], name="k_plain")
        assert await ensure_indexes(coll, [plain]) == ["k_plain"]
        assert await ensure_indexes(coll, [plain]) == []
    finally:
        await client.close()
