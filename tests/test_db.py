"""The database layer: data survives an engine restart, processes share one engine, concerns are set."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import IO

import anyio
import pytest
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from mongogate.config import DatabaseSettings, MemorySettings
from mongogate.db import Database, EmbeddedEngine
from mongogate.engine import client as engine_client
from mongogate.memory.store import MemoryStore

pytestmark = pytest.mark.anyio


async def test_data_survives_an_engine_restart(data: Path) -> None:
    settings = DatabaseSettings(name="restart")
    db = Database(settings, data)
    await db.open()
    store = MemoryStore(db.memory, MemorySettings())
    await store.ensure_indexes()
    sid = await store.create_session("acme")
    await store.append("acme", sid, "t1", "user", "remember me")
    first = db.engine_state
    await db.close()
    assert first is not None and engine_client.stop(data)  # the engine process goes away too

    db = Database(settings, data)
    await db.open()
    try:
        assert db.engine_state is not None and db.engine_state.pid != first.pid
        store = MemoryStore(db.memory, MemorySettings())
        await store.ensure_indexes()
        ctx = await store.load_context("acme", sid)
        assert [m.content for m in ctx.messages] == ["remember me"]
        again = await store.append("acme", sid, "t1", "user", "remember me")
        assert again.status == "duplicate"  # the unique index survived too
    finally:
        await db.close()


async def test_two_openers_share_one_engine_process_that_outlives_them(data: Path) -> None:
    first = Database(DatabaseSettings(name="shared"), data)
    await first.open()
    second = Database(DatabaseSettings(name="shared"), data)
    await second.open()
    try:
        assert first.engine_state is not None and second.engine_state is not None
        assert first.engine_state.pid == second.engine_state.pid
        await second.memory["notes"].insert_one({"_id": 1, "by": "second"})
        assert await first.memory["notes"].find_one({"_id": 1}) == {"_id": 1, "by": "second"}
    finally:
        await first.close()
    # the first opener's exit does not take the engine with it
    assert await second.memory["notes"].count_documents({}) == 1
    await second.close()
    assert engine_client.status(data) is not None  # still up until idle or stopped


async def test_without_a_query_uri_one_client_serves_both_connections(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Old code: a second client with the same URI and options, connecting and authenticating
    again at every open (a third of a warm open, benchmarks/startup.py)."""
    db = Database(DatabaseSettings(uri=engine_uri, name=db_name), tmp_path)
    await db.open()
    try:
        assert db.query_client is db.client
        await db.ping()
        assert await db.query["c"].count_documents({}) == 0
    finally:
        await db.close()
    await db.open()  # closed once, cleanly: it opens again
    await db.close()


async def test_memory_writes_carry_majority_journaled_concern_and_majority_reads(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    db = Database(DatabaseSettings(uri=engine_uri, name=db_name), tmp_path)
    await db.open()
    try:
        assert db.memory.write_concern == WriteConcern(w="majority", j=True, wtimeout=10_000)
        assert db.memory.read_concern == ReadConcern("majority")
        assert db.memory["sessions"].write_concern == db.memory.write_concern  # collections inherit
        # the engine accepts both (a real replica set needs them; mongoeco must not refuse them)
        await db.memory["c"].insert_one({"_id": 1})
        assert await db.memory["c"].find_one_and_update({"_id": 1}, {"$set": {"x": 1}}) == {"_id": 1}
        assert await db.memory["c"].count_documents({"x": 1}) == 1
    finally:
        await db.close()
    custom = DatabaseSettings.model_validate(
        {"uri": engine_uri, "write_concern": {"w": 1, "j": False}, "read_concern": "local"}
    )
    db = Database(custom, tmp_path)
    await db.open()
    try:
        assert db.memory.write_concern.document == {"w": 1, "j": False, "wtimeout": 10_000}
        assert db.memory.read_concern == ReadConcern("local")
    finally:
        await db.close()


@pytest.mark.embedded_engine
def test_stop_leaves_no_engine_thread(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    engine = EmbeddedEngine(tmp_path)
    engine.start()
    mine = [t for t in set(threading.enumerate()) - before if t.name == "mongogate-embedded"]
    assert len(mine) == 1
    engine.stop()
    assert not mine[0].is_alive()
    assert not (set(threading.enumerate()) - before)  # no executor or loop thread outlives stop()


async def test_unreachable_uri_is_a_storage_error() -> None:
    from mongogate.errors import StorageError

    db = Database(
        DatabaseSettings(uri="mongodb://127.0.0.1:1/?directConnection=true", timeout_ms=300), Path(".")
    )
    await db.open()
    try:
        with pytest.raises(StorageError, match="cannot reach MongoDB"):
            await db.ping()
    finally:
        await db.close()
    await anyio.sleep(0)


async def test_query_tools_read_with_the_query_uris_read_preference(engine_uri: str, tmp_path: Path) -> None:
    from pymongo.read_preferences import Primary, SecondaryPreferred

    sep = "&" if "?" in engine_uri else "?"
    query_uri = f"{engine_uri}{sep}readPreference=secondaryPreferred"
    settings = DatabaseSettings(uri=engine_uri, query_uri=query_uri)
    db = Database(settings, tmp_path)
    await db.open()
    try:
        assert isinstance(db.query.read_preference, SecondaryPreferred)  # mongogate never overrides it
        assert isinstance(db.memory.read_preference, Primary)  # memory writes and reads: the primary
        await db.query["c"].find_one({})  # a one-member engine serves secondaryPreferred reads
    finally:
        await db.close()


async def test_a_close_while_the_watchdog_takes_the_engine_lease_lets_go_of_the_start_lock(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that closes while its watchdog is restarting a crashed engine (a vanished client)
    must not keep the engine's start lock. The old code: close() cancels the watch task, the
    lease the thread returns afterwards was dropped unreleased, and its open file (flock held)
    stayed until garbage collection, blocking every other process's start of that engine and
    ending as a ResourceWarning in whichever test ran then (seen under `taskset -c 0`)."""
    import os
    import signal

    from mongogate.engine.files import START_LOCK, open_lock

    taken, go = threading.Event(), threading.Event()
    real = engine_client.lease
    calls: list[int] = []

    def lease_then_wait(data_dir: Path, idle_stop_s: float) -> engine_client.EngineLease:
        got = real(data_dir, idle_stop_s)
        calls.append(1)
        if len(calls) > 1:  # the watchdog's, not the open's
            taken.set()
            go.wait(30)  # failpoint: the watch task is cancelled while the lease is on its way back
        return got

    monkeypatch.setattr(engine_client, "lease", lease_then_wait)
    db = Database(DatabaseSettings(name="lease"), data)
    await db.open()
    assert db.engine_state is not None
    os.kill(db.engine_state.pid, signal.SIGKILL)  # the watchdog restarts it (taking a lease)
    await anyio.to_thread.run_sync(taken.wait, 30)
    await db.close()
    go.set()
    with open_lock(data / START_LOCK) as lock:  # the worker thread lets go once it returns
        free = await anyio.to_thread.run_sync(_until_locked, lock)
    assert free, "the closed database still holds the engine's start lock"


def _until_locked(lock: IO[str], within_s: float = 30.0) -> bool:
    """Take ``lock`` as soon as its holder lets go (True), or give up after ``within_s`` (False)."""
    import time

    from mongogate.engine.files import try_lock

    deadline = time.monotonic() + within_s
    while not try_lock(lock):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
