"""One MongoDB client factory: every client names mongogate and follows the same timeout rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mongogate import __version__
from mongogate.audit.mongo import MongoSink
from mongogate.cli.audit import _collection
from mongogate.config import DatabaseSettings, load_settings
from mongogate.connect import async_mongo_client, connect, mongo_client

URI = "mongodb://127.0.0.1:1/"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _driver(client: Any) -> dict[str, str]:
    """What the client sends in its handshake (``hello``'s ``client.driver``)."""
    driver: dict[str, str] = client.options.pool_options.metadata["driver"]
    return driver


def _timeouts(client: Any) -> tuple[float, float | None]:
    return client.options.server_selection_timeout, client.options.pool_options.connect_timeout


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        pytest.param(URI, (0.8, 0.8), id="database.timeout_ms-for-both"),
        pytest.param(URI + "?serverSelectionTimeoutMS=1234", (1.234, 0.8), id="uri-selection-wins"),
        pytest.param(URI + "?connectTimeoutMS=300", (0.8, 0.3), id="uri-connect-wins"),
    ],
)
@pytest.mark.anyio
async def test_every_factory_client_names_mongogate_and_follows_the_timeout_rules(
    uri: str, expected: tuple[float, float]
) -> None:
    sync = mongo_client(uri, 800, connect=False)
    asy = async_mongo_client(uri, 800, connect=False)
    memory, query = connect(uri, DatabaseSettings(uri=uri, timeout_ms=800))
    try:
        for client in (sync, asy, memory, query):
            driver = _driver(client)
            assert driver["name"].endswith("|mongogate") and driver["version"].endswith(f"|{__version__}")
            assert _timeouts(client) == expected
            assert client.codec_options.tz_aware
    finally:
        sync.close()
        for c in (asy, memory, query):
            await c.close()


def test_the_audit_sink_client_is_a_factory_client(engine_uri: str, db_name: str) -> None:
    sink = MongoSink(engine_uri, db_name, lambda lines: None, timeout_ms=800)
    try:
        sink._collection()  # what its writer thread does first
        assert sink._client is not None
        assert _driver(sink._client)["name"].endswith("|mongogate")
        assert _timeouts(sink._client) == (0.8, 0.8)
    finally:
        sink._close_client()


def test_mongogate_audit_honours_the_uris_selection_timeout(tmp_path: Path) -> None:
    """Was: `mongogate audit` passed database.timeout_ms as a keyword, overriding the URI's own
    serverSelectionTimeoutMS (the server's clients honoured it: two rules for one setting)."""
    settings = load_settings(
        None,
        database={"uri": URI + "?serverSelectionTimeoutMS=1234", "timeout_ms": 5000},
        server={"data_dir": str(tmp_path)},
    )
    with _collection(settings) as coll:
        client = coll.database.client
        assert _timeouts(client) == (1.234, 5.0)
        assert _driver(client)["name"].endswith("|mongogate")
