"""Every guard of the handshake path holds on protocol 2026-07-28 too (issue 36).

The SDK's own `Client` negotiates 2026-07-28 by default: no handshake, no `Mcp-Session-Id`, one
request per exchange. Each guard is tried on both revisions (2025-11-25 with a session,
2026-07-28 without), through the SDK's client and through raw HTTP:

- what one principal holds: sessions on 2025-11-25, requests in flight on 2026-07-28 and on a
  `server.stateless` server (`server.max_sessions_per_principal`);
- the tenant's slots (`limits.tenant_concurrency` and `tenant_queue`);
- the connection budget (`server.max_connections`, idle connections given up first);
- the stream rules (a GET stream is one of the session's, none without a session; no listen);
- the body limits (`server.max_request_bytes`, `server.max_json_tokens`, `server.body_timeout_s`).

A test-only tool, `hold`, is a failpoint: it counts itself in and waits for the test to let it
go, so "in flight" is a fact, never a timing. Servers are shared by the cases of one guard.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver.tools import Tool
from mcp.shared.exceptions import MCPError

from mongogate.config import Settings
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from mongogate.server.session_cap import SessionCap, cap_of
from mongogate.server.tenant_limit import TenantConcurrency, TenantSlots
from mongogate.tools.base import Call, ToolInput, make_tool
from mongogate.tools.registry import ToolRegistry
from tests.conftest import jwt_auth, make_settings
from tests.server.test_slow_clients_http import connect, head, read_to_eof, wait_until

from . import rpc

pytestmark = pytest.mark.anyio
OLD = "2025-11-25"
REVISIONS = [OLD, rpc.MODERN]
KINDS = ["sdk", "raw"]


class Gate:
    """The failpoint behind `hold`."""

    def __init__(self) -> None:
        self.entered = 0
        self.go = threading.Event()

    def reset(self) -> None:
        self.go.set()
        self.entered = 0
        self.go = threading.Event()

    def tools(self, _settings: Settings) -> list[Tool]:
        async def hold(call: Call, _args: ToolInput) -> dict[str, Any]:
            self.entered += 1
            go = self.go
            await anyio.to_thread.run_sync(go.wait, abandon_on_cancel=True)
            return {"tenant": call.principal.tenant}

        return [make_tool(name="hold", description="test failpoint", input_model=ToolInput, handler=hold)]

    async def wait_entered(self, n: int) -> None:
        while self.entered < n:  # polled, bounded by the test timeout
            await anyio.sleep(0.005)


@dataclass
class Served:
    http: BackgroundHttpServer
    settings: Settings
    gate: Gate
    slots: TenantSlots
    cap: SessionCap

    def token(self, tenant: str, subject: str) -> str:
        return mint_dev_token(self.settings.auth, tenant=tenant, ttl_s=600, subject=subject)


@contextlib.contextmanager
def serving(engine_uri: str, db: str, tmp: Path, limits: dict[str, Any], **server: Any) -> Iterator[Served]:
    settings = make_settings(engine_uri, db, tmp, auth=jwt_auth(), limits=limits, server=server)
    gate = Gate()
    registry = ToolRegistry(run_tools=False)
    registry.add_tools(gate.tools)
    mcp = build_server(settings, registry, transport="http")
    http = BackgroundHttpServer(mcp, settings=settings.server).start()
    (limiter,) = [m for m in mcp.middleware if isinstance(m, TenantConcurrency)]
    cap = cap_of(mcp.session_manager)
    assert cap is not None
    try:
        yield Served(http, settings, gate, limiter.slots, cap)
    finally:
        gate.go.set()
        http.stop()


@dataclass
class Outcome:
    """What a caller saw: a result, a tool error, or a refusal (HTTP status for raw calls)."""

    ok: bool
    text: str = ""
    status: int | None = None
    code: int | None = None


class Caller:
    """One principal on one revision through one kind of client (the SDK's, or raw HTTP)."""

    def __init__(self, kind: str, revision: str, url: str, token: str) -> None:
        self.kind, self.revision, self.url = kind, revision, url
        limits = httpx2.Limits(max_connections=64, max_keepalive_connections=64)
        self.hc = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60, limits=limits)
        self.client: Client | None = None
        self.sid: str | None = None
        self.rid = 10

    async def open(self) -> Outcome:
        """The SDK's handshake (or discover), or a raw initialize on 2025-11-25."""
        if self.kind == "sdk":
            mode = "legacy" if self.revision == OLD else "auto"
            client = Client(streamable_http_client(self.url, http_client=self.hc), mode=mode)
            try:
                await client.__aenter__()
            except Exception as raised:
                e = _mcp_error(raised)
                return Outcome(False, e.error.message, code=e.error.code)
            self.client = client
            assert client.protocol_version == self.revision
            return Outcome(True)
        if self.revision == OLD:
            init = rpc.initialize(OLD)
            r = await self.hc.post(self.url, json=init, headers=rpc.headers(None, version=OLD))
            if r.status_code != 200:
                return _refusal(r)
            self.sid = r.headers.get("mcp-session-id")  # none from a stateless server
            done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            r = await self.hc.post(self.url, json=done, headers=rpc.headers(None, self.sid, version=OLD))
            assert r.status_code == 202, r.text
        return Outcome(True)

    async def close(self) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.__aexit__(None, None, None)
        await self.hc.aclose()

    async def tool(self, name: str, arguments: dict[str, Any] | None = None) -> Outcome:
        return await self.request("tools/call", {"name": name, "arguments": arguments or {}})

    async def request(self, method: str, params: dict[str, Any]) -> Outcome:
        if self.client is not None:
            return await self._sdk(method, params)
        self.rid += 1
        if self.revision == OLD:
            body = {"jsonrpc": "2.0", "id": self.rid, "method": method, "params": params}
            r = await self.hc.post(self.url, json=body, headers=rpc.headers(None, self.sid, version=OLD))
        else:
            r = await rpc.modern(self.hc, self.url, None, method, params, self.rid)
        if r.status_code != 200:
            return _refusal(r)
        (answer,) = [m for m in rpc.messages(r) if "result" in m or "error" in m]
        if "error" in answer:
            return Outcome(False, answer["error"]["message"], 200, answer["error"]["code"])
        if answer["result"].get("isError"):
            return Outcome(False, answer["result"]["content"][0]["text"], 200)
        return Outcome(True, json.dumps(answer["result"]), 200)

    async def _sdk(self, method: str, params: dict[str, Any]) -> Outcome:
        assert self.client is not None
        try:
            if method == "tools/call":
                r = await self.client.call_tool(params["name"], params["arguments"])
                if r.is_error:
                    return Outcome(False, r.content[0].text)  # type: ignore[union-attr]
                return Outcome(True)
            if method == "prompts/get":
                await self.client.get_prompt(params["name"], params["arguments"])
            elif method == "resources/read":
                await self.client.read_resource(params["uri"])
            else:
                raise AssertionError(method)
        except MCPError as e:
            return Outcome(False, e.error.message, code=e.error.code)
        return Outcome(True)


def _mcp_error(e: BaseException) -> MCPError:
    while isinstance(e, BaseExceptionGroup):
        e = e.exceptions[0]
    if not isinstance(e, MCPError):
        raise e
    return e


def _refusal(r: httpx2.Response) -> Outcome:
    if r.headers.get("content-type", "").startswith("application/json"):
        error = r.json().get("error") or {}
        return Outcome(False, str(error.get("message", r.text)), r.status_code, error.get("code"))
    return Outcome(False, r.text, r.status_code)


@contextlib.asynccontextmanager
async def caller(
    kind: str, revision: str, served: Served, tenant: str, subject: str
) -> AsyncIterator[Caller]:
    c = Caller(kind, revision, served.http.url, served.token(tenant, subject))
    try:
        opened = await c.open()
        assert opened.ok, opened
        yield c
    finally:
        await c.close()


async def other_tenant_is_served(kind: str, revision: str, served: Served) -> None:
    async with caller(kind, revision, served, "globex", "gus") as other:
        got = await other.tool("list_sessions")
        assert got.ok, got


def refused_busy(got: Outcome, kind: str, setting: str) -> None:
    assert not got.ok and got.text.startswith("[busy] (retryable) "), got
    assert setting in got.text, got


# -- what one principal holds ------------------------------------------------------------------


@contextlib.contextmanager
def both_modes(engine_uri: str, db: str, tmp: Path, limits: dict[str, Any]) -> Iterator[dict[bool, Served]]:
    """A stateful and a stateless server (keyed by `stateless`), two sessions per principal."""
    with contextlib.ExitStack() as stack:
        yield {
            stateless: stack.enter_context(
                serving(
                    engine_uri,
                    db,
                    tmp / str(stateless),
                    limits,
                    max_sessions_per_principal=2,
                    stateless=stateless,
                )
            )
            for stateless in (False, True)
        }


@pytest.fixture(scope="module")
def principal_servers(
    engine_uri: str, module_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[bool, Served]]:
    limits = {"tenant_concurrency": 8, "tenant_queue": 8, "tenant_queue_timeout_ms": 600_000}
    with both_modes(engine_uri, module_db, tmp_path_factory.mktemp("principal"), limits) as servers:
        yield servers


@pytest.mark.parametrize("stateless", [False, True], ids=["stateful", "stateless"])
@pytest.mark.parametrize("revision", REVISIONS)
@pytest.mark.parametrize("kind", KINDS)
async def test_one_principal_holds_at_most_its_cap(
    principal_servers: dict[bool, Served], kind: str, revision: str, stateless: bool
) -> None:
    """Sessions where there are sessions (2025-11-25, stateful), else requests in flight: two
    calls held by the failpoint, and the principal's next one is refused `[busy]`, nothing run;
    another tenant is served meanwhile. Before: on 2026-07-28 (and on a stateless server) a
    principal could hold as many requests, and with them connections, as it liked."""
    served = principal_servers[stateless]
    served.gate.reset()
    sessions = revision == OLD and not stateless
    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(caller(kind, revision, served, "acme", "alice"))
        held = [first] + (
            [await stack.enter_async_context(caller(kind, revision, served, "acme", "alice"))]
            if sessions  # one call in flight in each of two sessions
            else [first]  # two calls in flight on one client
        )
        results: list[Outcome] = []
        async with anyio.create_task_group() as tg:
            for c in held:
                tg.start_soon(_hold, results, c)
            await served.gate.wait_entered(2)
            if sessions:
                extra = Caller(kind, revision, served.http.url, served.token("acme", "alice"))
                got = await extra.open()
                await extra.close()
            else:
                got = await first.tool("list_sessions")
            refused_busy(got, kind, "server.max_sessions_per_principal = 2")
            if kind == "raw":
                assert got.status == 429
            assert served.gate.entered == 2  # nothing more ran
            await other_tenant_is_served(kind, revision, served)
            served.gate.go.set()
        assert [r.ok for r in results] == [True, True], results
        assert (await first.tool("list_sessions")).ok  # room again once they were answered


async def _hold(results: list[Outcome], c: Caller) -> None:
    results.append(await c.tool("hold"))


# -- the tenant's slots --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tenant_server(
    engine_uri: str, module_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    limits = {"tenant_concurrency": 2, "tenant_queue": 1, "tenant_queue_timeout_ms": 600_000}
    with serving(engine_uri, module_db, tmp_path_factory.mktemp("tenant"), limits) as served:
        yield served


@pytest.mark.parametrize("revision", REVISIONS)
@pytest.mark.parametrize("kind", KINDS)
async def test_one_tenant_runs_at_most_its_slots(tenant_server: Served, kind: str, revision: str) -> None:
    """Two calls running and one waiting fill the tenant's slots: its next tool call, prompt and
    resource read are refused at once, and another tenant is served."""
    served = tenant_server
    served.gate.reset()
    async with (
        caller(kind, revision, served, "acme", "alice") as alice,
        caller(kind, revision, served, "acme", "bob") as bob,
    ):
        results: list[Outcome] = []
        async with anyio.create_task_group() as tg:
            for c in (alice, alice, bob):
                tg.start_soon(_hold, results, c)
            await served.gate.wait_entered(2)
            while served.slots.waiting("acme") < 1:
                await anyio.sleep(0.005)
            for got in [
                await bob.tool("list_sessions"),
                await bob.request(
                    "prompts/get", {"name": "summarize_session", "arguments": {"session_id": "s"}}
                ),
                await bob.request("resources/read", {"uri": "mongogate://sessions"}),
            ]:
                refused_busy(got, kind, "limits.tenant_concurrency = 2")
            assert served.gate.entered == 2
            await other_tenant_is_served(kind, revision, served)
            served.gate.go.set()
        assert [r.ok for r in results] == [True, True, True]


# -- the connection budget ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def budget_server(
    engine_uri: str, module_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("budget")
    server = {"max_connections": 4, "header_timeout_s": 300, "max_pending_heads_per_address": 1000}
    with serving(engine_uri, module_db, tmp, {}, **server) as served:
        yield served


def _raw_request(http: BackgroundHttpServer, revision: str, token: str) -> tuple[bytes, bytes]:
    """The head and the body of a cheap request of `revision` (initialize, or tools/list)."""
    if revision == OLD:
        body = json.dumps(rpc.initialize(OLD)).encode()
        extra = f"MCP-Protocol-Version: {OLD}\r\n"
    else:
        req = rpc.modern_request("tools/list")
        body = json.dumps(req).encode()
        extra = "".join(
            f"{k}: {v}\r\n" for k, v in rpc.modern_headers(None, req).items() if k.startswith("M")
        )
    first = head(http, length=len(body), complete=False)
    return first + f"{extra}Authorization: Bearer {token}\r\n\r\n".encode(), body


def _answered_and_kept(served: Served, revision: str, token: str) -> socket.socket:
    """A connection whose one request was answered, then left open (kept alive) by its client."""
    request_head, body = _raw_request(served.http, revision, token)
    s = connect(served.http, request_head + body)
    answer = b""
    while b"\r\n\r\n" not in answer or not _complete(answer):
        chunk = s.recv(65536)
        assert chunk, answer
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    return s


def _complete(answer: bytes) -> bool:
    head_, _, body = answer.partition(b"\r\n\r\n")
    for line in head_.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return body.endswith(b"0\r\n\r\n")  # chunked


@pytest.mark.parametrize("revision", REVISIONS)
@pytest.mark.parametrize("kind", KINDS)
async def test_the_connection_budget_holds_and_idle_connections_make_room(
    budget_server: Served, kind: str, revision: str
) -> None:
    """Connections still sending their head fill the budget (4): a call is refused 503 while
    the probes answer. Connections whose requests were answered and that their client keeps
    open hold no request: a new client is served, the longest idle of them closed to make room.
    Before, answered connections left open held the budget as firmly as requests in flight."""
    served, http = budget_server, budget_server.http
    stalled = [connect(http, head(http, complete=False)) for _ in range(6)]
    try:
        wait_until(lambda: http.open_connections >= 6)
        c = Caller(kind, revision, http.url, served.token("acme", "alice"))
        got = await c.open()
        if got.ok:
            got = await c.tool("list_sessions")
        await c.close()
        assert not got.ok and (kind == "sdk" or got.status == 503), got
        async with httpx2.AsyncClient(timeout=60) as probe:
            assert (await probe.get(f"http://{http.host}:{http.port}/healthz")).status_code == 200
    finally:
        for s in stalled:
            s.close()
    await anyio.to_thread.run_sync(wait_until, lambda: http.open_connections == 0)
    token = served.token("evil", "mallory")
    kept = [_answered_and_kept(served, revision, token) for _ in range(4)]
    try:
        reclaimed = http.budget.reclaimed
        async with caller(kind, revision, served, "acme", "alice") as alice:
            got = await alice.tool("list_sessions")
            assert got.ok, got
        assert http.budget.reclaimed > reclaimed
        assert read_to_eof(kept[0]) == b""  # the longest idle one was closed, as a keep-alive timeout would
    finally:
        for s in kept:
            s.close()
    await anyio.to_thread.run_sync(wait_until, lambda: http.open_connections == 0)


# -- the stream rules ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stream_servers(
    engine_uri: str, module_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[bool, Served]]:
    with both_modes(engine_uri, module_db, tmp_path_factory.mktemp("streams"), {}) as servers:
        yield servers


@pytest.mark.parametrize("kind", KINDS)
async def test_on_2025_11_25_a_get_stream_is_one_of_the_principals_sessions(
    stream_servers: dict[bool, Served], kind: str
) -> None:
    """Each session's GET stream (the SDK's client opens one) keeps it busy: two of them and the
    principal's next session is refused; the streams hold at most the principal's cap."""
    served = stream_servers[False]
    who = json.dumps(["acme", "carol"])
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(2):
            c = await stack.enter_async_context(caller(kind, OLD, served, "acme", "carol"))
            if kind == "raw":
                h = rpc.headers(None, c.sid, version=OLD)
                r = await stack.enter_async_context(c.hc.stream("GET", served.http.url, headers=h))
                assert r.status_code == 200
        while served.cap.busy_sessions(who) < 2:  # the GET streams reached the server
            await anyio.sleep(0.005)
        extra = Caller(kind, OLD, served.http.url, served.token("acme", "carol"))
        got = await extra.open()
        await extra.close()
        refused_busy(got, kind, "server.max_sessions_per_principal = 2")
        await other_tenant_is_served(kind, OLD, served)


@pytest.mark.parametrize("revision", REVISIONS)
@pytest.mark.parametrize("stateless", [False, True], ids=["stateful", "stateless"])
async def test_no_stream_without_a_session(
    stream_servers: dict[bool, Served], revision: str, stateless: bool
) -> None:
    """A GET where no session can carry anything (2026-07-28; a stateless server) is 405, and a
    listen is -32601 at once, on every server and revision that reaches it."""
    served = stream_servers[stateless]
    if revision == OLD and not stateless:
        pytest.skip("a GET stream of a 2025-11-25 session: the test above")
    token = served.token("acme", "dave")
    async with httpx2.AsyncClient(timeout=60) as hc:
        h = rpc.headers(token, version=revision)
        if revision == rpc.MODERN:
            h = rpc.modern_headers(token, rpc.modern_request("subscriptions/listen"))
        r = await hc.get(served.http.url, headers=h)
        assert r.status_code == 405 and r.headers["allow"] == "POST"
        listen = await rpc.modern(hc, served.http.url, token, "subscriptions/listen", {"notifications": {}})
        assert listen.status_code == 404 and listen.json()["error"]["code"] == -32601
    async with caller("sdk", rpc.MODERN, served, "acme", "dave") as sdk:
        assert sdk.client is not None
        with pytest.raises(MCPError) as e:
            async with sdk.client.listen(tools_list_changed=True):
                pass
        assert e.value.error.code == -32601


# -- the body limits -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def body_server(
    engine_uri: str, module_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("bodies")
    server = {"max_request_bytes": 64 * 1024, "max_json_tokens": 1000, "body_timeout_s": 0.5}
    with serving(engine_uri, module_db, tmp, {}, **server) as served:
        yield served


@pytest.mark.parametrize("revision", REVISIONS)
@pytest.mark.parametrize("kind", KINDS)
async def test_the_body_limits_hold(body_server: Served, kind: str, revision: str) -> None:
    """Too large (`server.max_request_bytes`) and too dense (`server.max_json_tokens`): 413
    before anything parses it, on both revisions, whoever sends it; the server serves on."""
    served = body_server
    async with caller(kind, revision, served, "acme", "erin") as erin:
        large = await erin.tool(
            "append", {"session_id": "s", "turn_id": "t", "role": "user", "content": "x" * 70_000}
        )
        dense = await erin.tool("create_session", {"metadata": {"k": [[1]] * 1200}})
        for got in (large, dense):
            assert not got.ok and (kind == "sdk" or got.status == 413), got
        if kind == "raw":
            assert "server.max_json_tokens" in dense.text
        assert (await erin.tool("list_sessions")).ok


@pytest.mark.parametrize("revision", REVISIONS)
async def test_a_body_withheld_is_cut_off_at_its_deadline(body_server: Served, revision: str) -> None:
    """Raw only (the SDK's client always sends whole bodies): 408 once `server.body_timeout_s`
    has passed (the deadline under test, 0.5 s), on both revisions."""
    http = body_server.http
    request_head, body = _raw_request(http, revision, body_server.token("acme", "erin"))
    s = connect(http, request_head + body[:-1])
    try:
        answer = await anyio.to_thread.run_sync(read_to_eof, s)
    finally:
        s.close()
    assert answer.startswith(b"HTTP/1.1 408") and b"server.body_timeout_s" in answer
