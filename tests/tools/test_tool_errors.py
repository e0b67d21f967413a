"""Every failure of every tool is `[code] (retryable)? message`, from every layer.

Storage faults come from the engine's failCommand failpoint (scoped to this test's database),
not from mocks. The driver's detail goes to the log under the request id, never to the model.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from pymongo import AsyncMongoClient
from pymongo.errors import OperationFailure

from mongogate.server.app import build_server
from tests.conftest import make_settings
from tests.helpers import failure, ok

pytestmark = pytest.mark.anyio

SHAPE = re.compile(r"^\[[a-z_]+\]( \(retryable\))? [^\n]+$")


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def client(engine_uri: str, db_name: str, tmp_path: Path) -> AsyncIterator[Client]:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        yield c


@pytest.fixture(scope="module")
async def refusing(
    engine_uri: str, module_db: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Client]:
    """One server for the tests whose calls are all refused (nothing is written): once per module."""
    settings = make_settings(engine_uri, module_db, tmp_path_factory.mktemp("errors"))
    async with Client(build_server(settings)) as c:
        yield c


async def failpoint(
    mongo: AsyncMongoClient[Any], mode: Any, commands: list[str], namespaces: list[str]
) -> None:
    try:
        await mongo.admin.command(
            {
                "configureFailPoint": "failCommand",
                "mode": mode,
                "data": {"failCommands": commands, "errorCode": 8, "namespaces": namespaces},
            }
        )
    except OperationFailure as e:  # pragma: no cover - only on an external MONGODB_URI
        pytest.skip(f"server has no failCommand failpoint: {e}")


async def test_storage_error_is_one_sentence_and_the_lease_is_released(
    client: Client, mongo: AsyncMongoClient[Any], db_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    sid = (await ok(client, "create_session"))["session_id"]
    await failpoint(mongo, "alwaysOn", ["insert"], [f"{db_name}.messages"])
    try:
        with caplog.at_level(logging.WARNING, logger="mongogate"):
            text = await failure(client, "begin_turn", session_id=sid, turn_id="t1", text="hi")
    finally:
        await failpoint(mongo, "off", ["insert"], ["x.y"])
    assert SHAPE.match(text), text
    assert text.startswith("[storage_error] (retryable) ") and "retry in about" in text
    assert "failpoint" not in text and "Topology" not in text and "errmsg" not in text and len(text) < 200
    request_id = re.search(r"\(request ([0-9a-f]+)\)", text)
    assert request_id is not None
    logged = [r.getMessage() for r in caplog.records if request_id[1] in r.getMessage()]
    assert logged and "failCommand" in logged[0]  # the detail is in the log, under the same id
    session = await mongo[db_name]["sessions"].find_one({"_id": sid})
    assert session is not None and session["locked_by"] is None  # the failed turn's lease was released
    start = await ok(client, "begin_turn", session_id=sid, turn_id="t1", text="hi")
    assert start["answered"] is False


async def test_failed_cleanup_keeps_the_original_error_and_the_retry_takes_over(
    client: Client, mongo: AsyncMongoClient[Any], db_name: str
) -> None:
    """Issue 8.3: the append fails, then the release fails too; on the old code the model saw
    "Error executing tool begin_turn" and the lease stayed held for the whole lease."""
    sid = (await ok(client, "create_session"))["session_id"]
    await failpoint(mongo, "alwaysOn", ["insert", "update"], [f"{db_name}.messages", f"{db_name}.sessions"])
    try:
        text = await failure(client, "begin_turn", session_id=sid, turn_id="t1", text="hi")
    finally:
        await failpoint(mongo, "off", ["insert"], ["x.y"])
    assert text.startswith("[storage_error] (retryable) could not append"), text
    session = await mongo[db_name]["sessions"].find_one({"_id": sid})
    assert session is not None and session["locked_by"] is not None  # the release failed...
    start = await ok(client, "begin_turn", session_id=sid, turn_id="t1", text="hi")  # ...and is taken over
    assert start["answered"] is False and start["lease_id"] != session["locked_by"]
    with pytest.raises(AssertionError):  # another turn still waits
        await ok(client, "begin_turn", session_id=sid, turn_id="t2", text="other")


WRONG_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("create_session", {"title": 5}),
    ("create_session", {"bogus": 1}),
    ("append", {}),
    ("append", {"session_id": "s", "turn_id": "t", "role": "robot", "content": "x"}),
    ("append", {"session_id": "s", "turn_id": "t", "role": "user", "content": ["x"]}),
    ("append", {"session_id": "s", "turn_id": "t", "role": "user", "content": "x", "tenant": "b"}),
    ("load_context", {"session_id": 3}),
    ("load_context", {"session_id": "s", "limit": "ten"}),
    ("begin_turn", {"session_id": "s"}),
    ("begin_turn", {"session_id": "s", "turn_id": "a:b", "text": "x"}),
    ("renew_turn", {"session_id": "s", "turn_id": "t", "lease_id": "l", "lease_ms": 5}),
    ("end_turn", {"session_id": "s", "turn_id": "t", "lease_id": None, "reply": "x"}),
    ("acquire_run", {"run_id": {}}),
    ("save_checkpoint", {"run_id": "r"}),
    ("load_checkpoint", {"run_id": "r", "extra": True}),
    ("run_events", {"run_id": "r", "after_seq": "x"}),
    ("release_run", {}),
]


@pytest.mark.parametrize(
    ("tool", "args"), WRONG_CALLS, ids=[f"{t}-{i}" for i, (t, _) in enumerate(WRONG_CALLS)]
)
async def test_wrong_arguments_get_one_coded_sentence(
    refusing: Client, tool: str, args: dict[str, Any]
) -> None:
    text = await failure(refusing, tool, **args)
    assert SHAPE.match(text), text
    assert text.startswith("[invalid_input] "), text
    assert "Error executing tool" not in text and "pydantic" not in text and "https://" not in text
    assert "validation error for" not in text


async def test_unknown_session_is_coded(refusing: Client) -> None:
    text = await failure(refusing, "load_context", session_id="nope")
    assert text.startswith("[not_found] session 'nope' not found")
