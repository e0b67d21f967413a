"""The run tools through the MCP SDK's real client, in-process, on the shared engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from pymongo import MongoClient

from mongogate.config import RUN_TOOL_NAMES, Settings
from mongogate.server.app import build_server
from mongogate.tools.registry import ToolRegistry
from mongogate.tools.run_tools import run_tools
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio


def server(settings: Settings, *, hook: bool = True) -> MCPServer[Any]:
    """The default registry carries the run tools; `hook=False` adds them by hand (`add_tools`)."""
    if hook:
        return build_server(settings)
    registry = ToolRegistry.from_settings(settings)
    registry = ToolRegistry(registry.query_specs, run_tools=False)
    registry.add_tools(run_tools)
    return build_server(settings, registry)


async def call(c: Client, tool: str, **args: Any) -> dict[str, Any]:
    r = await c.call_tool(tool, args)
    assert not r.is_error, r.content
    assert r.structured_content is not None
    out: dict[str, Any] = r.structured_content
    return out


async def error(c: Client, tool: str, **args: Any) -> str:
    r = await c.call_tool(tool, args)
    assert r.is_error, r.structured_content
    text = r.content[0].text  # type: ignore[union-attr]
    assert isinstance(text, str)
    return text


async def test_run_tools_have_schemas_and_annotations(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    async with Client(server(make_settings(engine_uri, db_name, tmp_path))) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) >= RUN_TOOL_NAMES
    for name in RUN_TOOL_NAMES:
        t = tools[name]
        assert t.input_schema.get("additionalProperties") is False, name
        assert "tenant" not in json.dumps(t.input_schema), name
        assert t.output_schema is not None and t.annotations is not None, name
        assert t.annotations.read_only_hint is (name in {"load_checkpoint", "run_events"}), name
    assert tools["save_checkpoint"].input_schema["properties"]["status"]["enum"] == [
        "running",
        "paused",
        "completed",
        "failed",
    ]


async def test_a_long_run_through_mcp(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    async with Client(server(make_settings(engine_uri, db_name, tmp_path))) as c:
        run = await call(c, "acquire_run", run_id="import-2024", lease_ms=60_000)
        assert run["created"] is True and run["version"] == 0 and run["status"] == "running"
        lease = run["lease_id"]
        first = await call(
            c, "save_checkpoint", run_id="import-2024", lease_id=lease, version=1, state={"page": 1}
        )
        assert first == {"applied": True, "stale": False, "version": 1, "seq": 1}
        # a retry of the same save (lost acknowledgement) is recognised, not applied twice
        again = await call(
            c, "save_checkpoint", run_id="import-2024", lease_id=lease, version=1, state={"page": 1}
        )
        assert again == {"applied": False, "stale": False, "version": 1, "seq": 1}
        await call(c, "save_checkpoint", run_id="import-2024", lease_id=lease, version=3, state={"page": 3})
        stale = await call(
            c, "save_checkpoint", run_id="import-2024", lease_id=lease, version=2, state={"page": 2}
        )
        assert stale == {"applied": False, "stale": True, "version": 3, "seq": None}

        busy = await error(c, "acquire_run", run_id="import-2024")
        assert "[lease_busy] (retryable)" in busy and "ms from now" in busy
        renewed = await call(c, "acquire_run", run_id="import-2024", lease_id=lease, lease_ms=120_000)
        assert renewed["lease_id"] == lease and renewed["version"] == 3
        assert renewed["lease_expires_at"] > run["lease_expires_at"]

        done = await call(
            c,
            "save_checkpoint",
            run_id="import-2024",
            lease_id=lease,
            version=4,
            state={"page": 4},
            status="completed",
        )
        assert done["applied"] and done["seq"] == 3
        cp = await call(c, "load_checkpoint", run_id="import-2024")
        assert cp["version"] == 4 and cp["status"] == "completed" and cp["state"] == {"page": 4}
        assert cp["lease_expires_at"] is not None and cp["updated_at"]
        events = await call(c, "run_events", run_id="import-2024", limit=2)
        assert [e["seq"] for e in events["events"]] == [1, 2] and events["more"] is True
        assert "state" not in events["events"][0] or events["events"][0]["state"] is None
        rest = await call(c, "run_events", run_id="import-2024", after_seq=2, include_state=True)
        assert rest["events"] == [
            {
                "seq": 3,
                "version": 4,
                "status": "completed",
                "at": rest["events"][0]["at"],
                "state": {"page": 4},
            }
        ]
        assert rest["more"] is False

        assert (await call(c, "release_run", run_id="import-2024", lease_id=lease))["released"] is True
        assert (await call(c, "release_run", run_id="import-2024", lease_id=lease))["released"] is False
        lost = await error(c, "save_checkpoint", run_id="import-2024", lease_id=lease, version=5, state={})
        assert "[lease_lost]" in lost and "no longer owns run" in lost
        assert "[lease_lost]" in await error(c, "acquire_run", run_id="import-2024", lease_id=lease)


async def test_bad_input_is_a_clear_tool_error(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, memory={"max_state_bytes": 1000})
    async with Client(server(settings)) as c:
        lease = (await call(c, "acquire_run", run_id="r"))["lease_id"]
        assert "tenant" in await error(
            c, "save_checkpoint", run_id="r", lease_id=lease, version=1, state={}, tenant="globex"
        )
        assert "max_state_bytes" in await error(
            c, "save_checkpoint", run_id="r", lease_id=lease, version=1, state={"x": "y" * 2000}
        )
        assert "status" in await error(
            c, "save_checkpoint", run_id="r", lease_id=lease, version=1, state={}, status="done"
        )
        assert "version must be an integer from 1" in await error(
            c, "save_checkpoint", run_id="r", lease_id=lease, version=0, state={}
        )
        assert "limit must be an integer from 1 to 500" in await error(c, "run_events", run_id="r", limit=0)
        # beyond int64: a clear refusal, not a crash in the driver
        assert "[invalid_input]" in await error(c, "run_events", run_id="r", after_seq=2**63)
        assert "[not_found]" in await error(c, "load_checkpoint", run_id="missing")
        cp = await call(c, "load_checkpoint", run_id="r")
        assert cp["version"] == 0 and cp["state"] is None  # nothing was written by any refused call


async def test_run_tools_added_by_hand_get_their_service_and_indexes_at_start(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Was: run tools added with `add_tools` alone answered `[config_invalid]` on every call until
    the embedder also registered a startup hook. The lifespan builds the service, and the indexes
    of whichever run tools are registered, before the first call."""
    async with Client(server(make_settings(engine_uri, db_name, tmp_path), hook=False)) as c:
        assert (await call(c, "acquire_run", run_id="r"))["run_id"] == "r"
    client: MongoClient[dict[str, Any]] = MongoClient(engine_uri)
    try:
        names = {ix["name"] for ix in client[db_name]["run_events"].list_indexes()}
    finally:
        client.close()
    assert "run_seq" in names


async def test_other_tenants_runs_look_missing(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    a = server(make_settings(engine_uri, db_name, tmp_path / "a", auth={"tenant": "acme"}))
    b = server(make_settings(engine_uri, db_name, tmp_path / "b", auth={"tenant": "globex"}))
    async with Client(a) as ca, Client(b) as cb:
        lease = (await call(ca, "acquire_run", run_id="secret-run"))["lease_id"]
        await call(ca, "save_checkpoint", run_id="secret-run", lease_id=lease, version=1, state={"k": "acme"})
        missing = (await error(cb, "load_checkpoint", run_id="no-such-run")).replace("no-such-run", "X")
        assert (await error(cb, "load_checkpoint", run_id="secret-run")).replace("secret-run", "X") == missing
        assert "not found" in await error(cb, "run_events", run_id="secret-run")
        assert "not found" in await error(
            cb, "save_checkpoint", run_id="secret-run", lease_id=lease, version=2, state={"k": "globex"}
        )
        assert "not found" in await error(cb, "release_run", run_id="secret-run", lease_id=lease)
        # globex's own run of that name is a different run, not a busy one
        theirs = await call(cb, "acquire_run", run_id="secret-run")
        assert theirs["created"] is True and theirs["version"] == 0
        cp = await call(ca, "load_checkpoint", run_id="secret-run")
        assert cp["state"] == {"k": "acme"} and cp["version"] == 1
