"""The embedded engine: survives restarts, one owner per data directory, clean stop."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import pytest

from mongogate.config import DatabaseSettings, MemorySettings
from mongogate.db import Database, EmbeddedEngine
from mongogate.errors import ConfigError
from mongogate.memory.store import MemoryStore

pytestmark = pytest.mark.anyio


async def test_data_survives_a_restart(tmp_path: Path) -> None:
    settings = DatabaseSettings(name="restart")
    db = Database(settings, tmp_path)
    await db.open()
    store = MemoryStore(db.memory, MemorySettings())
    await store.ensure_indexes()
    sid = await store.create_session("acme")
    await store.append("acme", sid, "t1", "user", "remember me")
    await db.close()

    db = Database(settings, tmp_path)
    await db.open()
    try:
        store = MemoryStore(db.memory, MemorySettings())
        await store.ensure_indexes()
        ctx = await store.load_context("acme", sid)
        assert [m.content for m in ctx.messages] == ["remember me"]
        again = await store.append("acme", sid, "t1", "user", "remember me")
        assert again.status == "duplicate"  # the unique index survived too
    finally:
        await db.close()


async def test_second_server_on_same_data_dir_gets_a_clear_error(tmp_path: Path) -> None:
    first = Database(DatabaseSettings(), tmp_path)
    await first.open()
    try:
        second = Database(DatabaseSettings(), tmp_path)
        with pytest.raises(ConfigError, match=r"in use by mongogate pid \d+"):
            await second.open()
        assert second.engine is None
    finally:
        await first.close()
    # once the first has stopped, the directory is free again
    third = Database(DatabaseSettings(), tmp_path)
    await third.open()
    await third.close()


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
