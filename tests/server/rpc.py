"""Raw JSON-RPC over HTTP for protocol 2025-06-18 clients: sessions, streams, cancellation, DELETE.

The SDK's own Client speaks the newest protocol, which keeps no server-side session; clients on
2025-06-18 (most deployed ones) get an ``Mcp-Session-Id`` and send it with every message.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2

PROTOCOL = "2025-06-18"
ACCEPT = "application/json, text/event-stream"


def headers(
    token: str | None, session: str | None = None, *, version: str = PROTOCOL, **extra: str
) -> dict[str, str]:
    h = {"Accept": ACCEPT, "Content-Type": "application/json", "MCP-Protocol-Version": version}
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    if session is not None:
        h["Mcp-Session-Id"] = session
    return h | extra


def messages(r: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response, whether JSON or an SSE stream."""
    if r.headers.get("content-type", "").startswith("application/json"):
        body = r.json()
        return body if isinstance(body, list) else [body]
    return [
        json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()
    ]


def initialize(version: str = PROTOCOL) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }


async def open_session(
    hc: httpx2.AsyncClient, url: str, token: str | None, *, version: str = PROTOCOL
) -> str:
    """initialize + notifications/initialized; returns the session id."""
    r = await hc.post(url, json=initialize(version), headers=headers(token, version=version))
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    r = await hc.post(url, json=done, headers=headers(token, sid, version=version))
    assert r.status_code == 202, r.text
    return sid


async def call_tool(
    hc: httpx2.AsyncClient,
    url: str,
    token: str | None,
    session: str | None,
    name: str,
    arguments: Any,
    rid: int = 2,
) -> httpx2.Response:
    body = {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    return await hc.post(url, json=body, headers=headers(token, session))


def result(r: httpx2.Response) -> dict[str, Any]:
    """The `result` of the one response message in ``r``."""
    assert r.status_code == 200, r.text
    found = [m for m in messages(r) if "result" in m or "error" in m]
    assert len(found) == 1, r.text
    assert "result" in found[0], found[0]
    out: dict[str, Any] = found[0]["result"]
    return out


# Protocol 2026-07-28: no handshake, no session; every request carries its envelope in
# `params._meta` and mirrors its method (and name) in headers (SEP-2243).
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}
_NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def modern_request(method: str, params: dict[str, Any] | None = None, rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": {**(params or {}), "_meta": META}}


def modern_headers(token: str | None, body: dict[str, Any]) -> dict[str, str]:
    h = {
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": body["method"],
    }
    named = _NAMED.get(body["method"])
    if named is not None:
        h["Mcp-Name"] = str(body["params"][named])
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    return h


async def modern(
    hc: httpx2.AsyncClient,
    url: str,
    token: str | None,
    method: str,
    params: dict[str, Any] | None = None,
    rid: int = 1,
) -> httpx2.Response:
    """One 2026-07-28 request, raw."""
    body = modern_request(method, params, rid)
    return await hc.post(url, json=body, headers=modern_headers(token, body))
