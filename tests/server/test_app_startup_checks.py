"""`build_server` runs `serve`'s start-up checks (issue 21.4): a tool registered in code whose
declared index is missing stops the server at start, with the tool, the index and the fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mcp import Client
from pymongo import AsyncMongoClient

from mongogate import StartupChecks, ToolRegistry, build_server, load_settings
from mongogate.demo import FIND_ORDERS, ORDERS_INDEX
from mongogate.errors import ConfigError
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio


def _leaf(exc: BaseException) -> BaseException:
    """The error inside the task groups the SDK's client and server wrap it in."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def test_a_missing_declared_index_stops_the_server_at_start(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Old code: the server started and every call answered `[storage_error] (retryable)`."""
    settings = make_settings(engine_uri, db_name, tmp_path)
    with pytest.raises(BaseException) as caught:  # an exception group around it
        async with Client(build_server(settings, ToolRegistry([FIND_ORDERS]))) as c:
            await c.call_tool("find_orders", {"filter": {}})
    err = _leaf(caught.value)
    assert isinstance(err, ConfigError), repr(caught.value)
    text = str(err)
    assert "query tool 'find_orders'" in text and "is missing" in text
    assert 'db.getCollection("orders").createIndex({"userId": 1, "createdAt": -1})' in text
    assert "StartupChecks(allow_missing_indexes=True)" in text  # the embedder's way round it
    assert "--allow-missing-indexes" not in text  # a flag of `serve`, not of this process


async def test_the_server_starts_once_the_index_exists(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: AsyncMongoClient[dict[str, object]]
) -> None:
    await mongo[db_name]["orders"].create_index(list(ORDERS_INDEX))
    settings = make_settings(engine_uri, db_name, tmp_path)
    async with Client(build_server(settings, ToolRegistry([FIND_ORDERS]))) as c:
        r = await c.call_tool("find_orders", {"filter": {}})
        assert not r.is_error, r.content


async def test_a_startup_hook_may_create_the_index(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    """Indexes are checked after the registry's start-up hooks: an application that creates its
    own indexes there (as the demo's seeding does) starts."""
    from mongogate.demo import seed_demo

    registry = ToolRegistry([FIND_ORDERS])
    registry.on_startup(seed_demo)
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path), registry)) as c:
        r = await c.call_tool("find_orders", {"filter": {"status": "paid"}, "limit": 2})
        assert not r.is_error, r.content
        assert r.structured_content and r.structured_content["documents"]


async def test_allow_missing_indexes_serves_and_warns(
    engine_uri: str, db_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)
    server = build_server(
        settings, ToolRegistry([FIND_ORDERS]), checks=StartupChecks(allow_missing_indexes=True)
    )
    with caplog.at_level("WARNING", logger="mongogate"):
        async with Client(server) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert "find_orders" in names
    assert any("find_orders" in r.getMessage() and "serving anyway" in r.getMessage() for r in caplog.records)


@pytest.mark.timeout(120)
def test_serve_http_raises_the_refusal_itself(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    """An embedder serving HTTP in the foreground gets the ConfigError, not uvicorn's exit(3)."""
    from mongogate import serve_http
    from tests.helpers import free_port

    settings = make_settings(engine_uri, db_name, tmp_path)
    server = build_server(settings, ToolRegistry([FIND_ORDERS]), transport="http", insecure_no_auth=True)
    with pytest.raises(ConfigError, match=r"query tool 'find_orders': index .* is missing"):
        serve_http(server, "127.0.0.1", free_port(), settings.server)


@pytest.mark.real_mongodb
@pytest.mark.skipif(not os.environ.get("MONGODB_URI"), reason="needs a real MongoDB with role enforcement")
async def test_a_writable_query_user_stops_the_server_at_start(db_name: str, tmp_path: Path) -> None:
    """The query connection as the (writable) admin user: refused, as `serve` refuses it."""
    uri = os.environ["MONGODB_URI"]
    settings = load_settings(
        None,
        database={"uri": uri, "name": db_name},
        server={"data_dir": str(tmp_path)},
        auth={"mode": "none", "tenant": "acme"},
    )
    with pytest.raises(BaseException) as caught:  # an exception group around it
        async with Client(build_server(settings)):
            pass
    err = _leaf(caught.value)
    assert isinstance(err, ConfigError) and "can write" in str(err), repr(caught.value)
    assert "StartupChecks(allow_writable_query_user=True)" in str(err)
    allowed = build_server(settings, checks=StartupChecks(allow_writable_query_user=True))
    async with Client(allowed) as c:
        assert (await c.call_tool("create_session", {})).is_error is False
