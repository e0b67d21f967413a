"""The embedded engine: survives restarts, one owner per data directory (others connect to it), clean stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import pytest

from mongogate.config import DatabaseSettings, MemorySettings
from mongogate.db import ENGINE_FILE, Database, EmbeddedEngine
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


async def test_a_second_process_on_the_same_data_dir_uses_the_owners_engine(tmp_path: Path) -> None:
    """The owner publishes engine.json; another opener (the lock conflicts even in one process,
    being per open file description) connects to that engine instead of failing."""
    first = Database(DatabaseSettings(name="shared"), tmp_path)
    await first.open()
    try:
        assert first.engine is not None
        info = json.loads((tmp_path / ENGINE_FILE).read_text())
        assert info == {"uri": first.engine.uri, "pid": os.getpid()}
        assert (tmp_path / ENGINE_FILE).stat().st_mode & 0o777 == 0o600
        second = Database(DatabaseSettings(name="shared"), tmp_path)
        await second.open()
        try:
            assert second.engine is None and second.embedded and second.shared_engine_uri == first.engine.uri
            await second.memory["notes"].insert_one({"_id": 1, "by": "second"})
            assert await first.memory["notes"].find_one({"_id": 1}) == {"_id": 1, "by": "second"}
        finally:
            await second.close()

        # the lock is held but nobody published a live URI (a stale file): the old, clear error
        (tmp_path / ENGINE_FILE).write_text(json.dumps({"uri": first.engine.uri, "pid": _dead_pid()}))
        third = Database(DatabaseSettings(), tmp_path)
        with pytest.raises(ConfigError, match=r"in use by mongogate pid \d+"):
            await third.open()
        assert third.engine is None
    finally:
        await first.close()
    # once the first has stopped, the directory is free again; a stale engine.json is replaced
    (tmp_path / ENGINE_FILE).write_text(json.dumps({"uri": "mongodb://127.0.0.1:1", "pid": _dead_pid()}))
    fourth = Database(DatabaseSettings(), tmp_path)
    await fourth.open()
    assert fourth.engine is not None
    assert json.loads((tmp_path / ENGINE_FILE).read_text())["pid"] == os.getpid()
    await fourth.close()
    assert not (tmp_path / ENGINE_FILE).exists()


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


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
