"""The MCP surface says only what is true (issue 20, section 5): an unknown tool in the one error
format, unknown prompt and resource names -32602 with one log line, and a 401 whose body agrees
with its challenge. (The prompts and resources offered: tests/server/test_prompts_resources.py.)"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from mongogate.server.app import build_server
from mongogate.server.http import BackgroundHttpServer
from mongogate.tools.registry import ToolRegistry
from tests.conftest import jwt_auth, make_settings
from tests.policy.test_aggregate_mcp import server_for

from . import rpc

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_unknown_tool_is_invalid_params_in_the_one_format(
    engine_uri: str, db_name: str, tmp_path: Path, mode: str
) -> None:
    """The specification lists an unknown tool as a protocol error, -32602 (issue 36). Was: an
    `isError` result (and before that `Unknown tool: nosuch`)."""
    _, server = server_for(engine_uri, db_name, tmp_path)
    async with Client(server, mode=mode) as c:
        with pytest.raises(MCPError) as r:
            await c.call_tool("nosuch", {})
        with pytest.raises(MCPError) as hostile:
            await c.call_tool("x" * 10_000 + "\x1b[2J", {})
    text = r.value.error.message
    assert r.value.error.code == -32602
    assert text.startswith("[not_found] no tool named 'nosuch'; tools: "), text
    assert "find_orders" in text and "order_stats" in text and "begin_turn" in text
    shown = hostile.value.error.message
    assert hostile.value.error.code == -32602 and len(shown) < 1000 and "\x1b" not in shown


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_unknown_prompt_or_resource_is_invalid_params_with_one_log_line(
    engine_uri: str, db_name: str, tmp_path: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: an internal error (code 0 or -32603) and a 35-line traceback per call."""
    _, server = server_for(engine_uri, db_name, tmp_path)
    async with Client(server, mode=mode) as c:
        caplog.clear()
        with caplog.at_level(logging.DEBUG):
            with pytest.raises(MCPError) as prompt:
                await c.get_prompt("nosuch")
            records = [r for r in caplog.records if r.name.startswith(("mcp", "mongogate"))]
            with pytest.raises(MCPError) as resource:
                await c.read_resource("mongogate://sessions/x")
    assert prompt.value.error.code == -32602 and "no prompt named 'nosuch'" in prompt.value.error.message
    assert resource.value.error.code == -32602
    assert resource.value.error.data == {"uri": "mongogate://sessions/x"}  # SEP-2164 (issue 36)
    assert not any(r.exc_info for r in caplog.records), [r.getMessage() for r in caplog.records]
    mine = [r for r in records if "nosuch" in r.getMessage()]
    assert len(mine) == 1, [r.getMessage() for r in records]


def test_a_401_without_a_token_has_a_body_that_agrees_with_its_challenge(
    engine_uri: str, tmp_path: Path
) -> None:
    """Was: plain `Bearer` challenge (RFC 6750 3.1) but `"error": "invalid_token"` in the body."""
    settings = make_settings(engine_uri, "t_surface", tmp_path, auth=jwt_auth())
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    server = build_server(settings, ToolRegistry(), transport="http")
    with BackgroundHttpServer(server) as http, httpx2.Client(timeout=10) as hc:
        r = hc.post(http.url, content=json.dumps(body), headers=rpc.headers(None))
        bad = hc.post(http.url, content=json.dumps(body), headers=rpc.headers("not-a-jwt"))
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer resource_metadata=")
    assert "error" not in r.json() and "authentication required" in r.json()["error_description"]
    assert bad.status_code == 401 and bad.json()["error"] == "invalid_token"


def test_a_websocket_upgrade_is_answered_as_plain_http_and_logs_no_warning(
    engine_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """mongogate serves no websocket. Old code (uvicorn's `ws="auto"`) imported `websockets` at
    every start and handed an upgrade request to its protocol, off the guarded h11 path (a
    websocket handshake: 403); now it is answered like any request (401 without a token), and
    uvicorn's two warnings per request ("Unsupported upgrade request", "install websockets"),
    which any client could repeat into the log, are one debug line."""
    settings = make_settings(engine_uri, "t_surface", tmp_path, auth=jwt_auth())
    server = build_server(settings, ToolRegistry(), transport="http")
    upgrade = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    with (
        caplog.at_level(logging.WARNING),
        BackgroundHttpServer(server) as http,
        httpx2.Client(timeout=10) as hc,
    ):
        r = hc.get(http.url, headers=upgrade)
        after = hc.get(http.url.replace("/mcp", "/healthz"))
    assert r.status_code == 401 and after.status_code == 200
    assert [rec.getMessage() for rec in caplog.records if "pgrade" in rec.getMessage()] == []
