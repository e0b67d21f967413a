"""Shared fixtures: the embedded engine starts once per test session on a random port.

Tests talk to it with real pymongo over the wire, exactly as production talks to MongoDB.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongogate.config import Settings, load_settings
from mongogate.db import EmbeddedEngine


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session", autouse=True)
def _stop_engine_processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Engine processes that tests' servers started on demand (they outlive their starters by
    design, until `engine.idle_stop_s`) are stopped when the session ends, not left behind."""
    yield
    from mongogate.engine import client as engine_client
    from mongogate.engine.files import STATE_FILE

    for state in tmp_path_factory.getbasetemp().rglob(STATE_FILE):
        with contextlib.suppress(Exception):  # teardown: one that will not stop is not a test failure
            engine_client.stop(state.parent, timeout_s=30)


@pytest.fixture(scope="session")
def engine_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `mongodb://` URI: $MONGODB_URI if set, else the embedded engine on its own thread."""
    if os.environ.get("MONGODB_URI"):
        yield os.environ["MONGODB_URI"]
        return
    engine = EmbeddedEngine(tmp_path_factory.mktemp("engine"))
    uri = engine.start()
    try:
        yield uri
    finally:
        engine.stop()


@pytest.fixture
def db_name() -> str:
    """A fresh database per test, so tests never see each other's data."""
    return f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def mongo(engine_uri: str) -> AsyncIterator[AsyncMongoClient[dict[str, object]]]:
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(engine_uri, tz_aware=True)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Path]:
    """A data directory whose engine process (started on demand) is stopped at the end."""
    from mongogate.engine import client as engine_client

    d = tmp_path / "data"
    try:
        yield d
    finally:
        engine_client.stop(d)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


DEV_SECRET = "test-secret-0123456789abcdef-0123456789abcdef"


def make_settings(engine_uri: str, db_name: str, tmp: Path, **overrides: Any) -> Settings:
    """Settings for a server on the shared engine, with its own database and audit file."""
    base: dict[str, Any] = {
        "database": {"uri": engine_uri, "name": db_name},
        "server": {"data_dir": str(tmp)},
        "auth": {"mode": "none", "tenant": "acme"},
    }
    for section, values in overrides.items():
        if isinstance(values, dict) and isinstance(base.get(section), dict):
            base[section] = {**base[section], **values}
        else:
            base[section] = values
    return load_settings(None, **base)


def jwt_auth() -> dict[str, Any]:
    return {"mode": "jwt", "jwt_secret": DEV_SECRET, "issuer": "mongogate-test", "audience": "mongogate"}
