"""Issue 9.3: two `serve --http --stateless` processes on one engine, a client alternating per call.

The client is a raw protocol 2025-06-18 client (the one that gets an `Mcp-Session-Id` from a
stateful server and a 404 from the other process): whole turns, appends with retries and a
query tool, each call to the other server than the last; then `kill -9` of one server in the
middle of a load, the client failing over to the other. Every acknowledged write is in the
database exactly once.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import pytest
from pymongo import AsyncMongoClient

from tests.helpers import EXE, ROOT, free_port, wait_for_port
from tests.server.rpc import call_tool, headers, messages, result

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]  # two interpreters start on one busy core

LANES = 4
PER_LANE = 12


@contextlib.contextmanager
def stateless_server(env: dict[str, str]) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    proc = subprocess.Popen(
        [*EXE, "serve", "--http", "--stateless", "--insecure-no-auth", "--demo", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.kill()
        proc.wait()


class Alternating:
    """A client with no sticky routing: every call goes to the next server; a dead one is skipped."""

    def __init__(self, hc: httpx2.AsyncClient, urls: list[str]) -> None:
        self.hc, self.urls, self.i = hc, urls, 0
        self.dead: set[str] = set()
        self.failovers = 0

    async def call(self, name: str, **arguments: Any) -> dict[str, Any]:
        while True:
            self.i += 1
            url = self.urls[self.i % len(self.urls)]
            if url in self.dead:
                continue
            try:
                r = await call_tool(self.hc, url, None, None, name, arguments, rid=self.i)
            except httpx2.TransportError:  # the server died: retry the same call elsewhere
                self.dead.add(url)
                self.failovers += 1
                continue
            out = result(r)
            assert not out.get("isError"), out
            structured: dict[str, Any] = out["structuredContent"]
            return structured


@pytest.fixture
def env(engine_uri: str, db_name: str, tmp_path: Any) -> dict[str, str]:
    return {
        **os.environ,
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
        "MONGOGATE_SERVER__DATA_DIR": str(tmp_path),
        "MONGOGATE_AUTH__TENANT": "acme",
    }


async def test_two_stateless_servers_alternating_per_call_then_kill_9_of_one(
    env: dict[str, str], engine_uri: str, db_name: str
) -> None:
    with stateless_server(env) as (url_a, proc_a), stateless_server(env) as (url_b, _):
        async with httpx2.AsyncClient(timeout=60) as hc, AsyncMongoClient[dict[str, Any]](engine_uri) as mc:
            init = {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
            r = await hc.post(url_a, json=init, headers=headers(None))
            assert r.status_code == 200 and "mcp-session-id" not in r.headers  # no server-side session
            assert messages(r)[0]["result"]["protocolVersion"] == "2025-06-18"

            c = Alternating(hc, [url_a, url_b])
            sid = (await c.call("create_session"))["session_id"]
            expected: list[str] = []
            for t in range(4):  # whole turns: begin on one server, end on the other
                begun = await c.call("begin_turn", session_id=sid, turn_id=f"t{t}", text=f"q{t}")
                assert begun["answered"] is False
                again = await c.call("begin_turn", session_id=sid, turn_id=f"t{t}", text=f"q{t}")
                lease = again["lease_id"]  # a retried begin_turn on the other server takes the lease over
                ended = await c.call(
                    "end_turn", session_id=sid, turn_id=f"t{t}", lease_id=lease, reply=f"a{t}"
                )
                assert ended["status"] == "inserted"
                retried = await c.call(
                    "end_turn", session_id=sid, turn_id=f"t{t}", lease_id=lease, reply=f"a{t}"
                )
                assert retried["status"] == "duplicate"
                expected += [f"q{t}", f"a{t}"]
            for n in range(4):  # appends, each retried on the other server: duplicate, never twice
                args = {"session_id": sid, "turn_id": f"n{n}", "role": "user", "content": f"note {n}"}
                assert (await c.call("append", **args))["status"] == "inserted"
                assert (await c.call("append", **args))["status"] == "duplicate"
                expected.append(f"note {n}")
            for _ in range(2):
                rows = await c.call("find_orders", filter={"status": "paid"}, limit=5)
                assert rows["documents"] and all(d["status"] == "paid" for d in rows["documents"])
            ctx = await c.call("load_context", session_id=sid, limit=200)
            assert [m["content"] for m in ctx["messages"]] == expected

            # load from LANES concurrent callers; server A is killed after a third of the writes
            acked: list[str] = []
            third = anyio.Event()

            async def lane(k: int) -> None:
                lane_sid = (await c.call("create_session"))["session_id"]
                for n in range(PER_LANE):
                    content = f"lane {k} write {n}"
                    args = {"session_id": lane_sid, "turn_id": f"w{n}", "role": "user", "content": content}
                    got = await c.call("append", **args)
                    assert got["status"] in ("inserted", "duplicate")  # duplicate: a lost ack, retried
                    acked.append(f"{lane_sid}|{content}")
                    if len(acked) >= LANES * PER_LANE // 3:
                        third.set()

            async def killer() -> None:
                await third.wait()
                proc_a.kill()  # kill -9 in the middle of the load

            async with anyio.create_task_group() as tg:
                tg.start_soon(killer)
                for k in range(LANES):
                    tg.start_soon(lane, k)
            assert proc_a.wait() == -9 and url_a in c.dead and c.failovers >= 1

            assert len(acked) == LANES * PER_LANE
            stored = [
                f"{m['session_id']}|{m['content']}"
                async for m in mc[db_name]["messages"].find({"content": {"$regex": "^lane "}})
            ]
            assert sorted(stored) == sorted(acked)  # 0 lost, 0 duplicated


async def test_stateless_mode_still_requires_a_token_and_issues_no_session(
    engine_uri: str, db_name: str, tmp_path: Any
) -> None:
    from mongogate.server.app import build_server
    from mongogate.server.auth.tokens import mint_dev_token
    from mongogate.server.http import BackgroundHttpServer
    from tests.conftest import jwt_auth, make_settings

    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth(), server={"stateless": True})
    token = mint_dev_token(settings.auth, tenant="acme", ttl_s=600, subject="dev")
    srv = BackgroundHttpServer(build_server(settings, transport="http"), settings=settings.server)
    await anyio.to_thread.run_sync(srv.start)
    try:
        async with httpx2.AsyncClient(timeout=60) as hc:
            r = await call_tool(hc, srv.url, None, None, "create_session", {})
            assert r.status_code == 401  # no token: refused before any tool runs
            r = await call_tool(hc, srv.url, token, None, "create_session", {}, rid=3)
            assert "mcp-session-id" not in r.headers
            sid = result(r)["structuredContent"]["session_id"]
            r = await call_tool(hc, srv.url, token, None, "load_context", {"session_id": sid}, rid=4)
            assert result(r)["structuredContent"]["messages"] == []
    finally:
        await anyio.to_thread.run_sync(srv.stop)
