"""A hostile 3.8 MB argument over real HTTP is refused cheaply while another tenant keeps querying.

No wall-clock margins: the refusal's cost is measured in CPU time of the client's and the
server's threads (not the process's: the embedded engine runs in it too), against a bound far
below the 7-15 s the unbounded validation took; the other tenant's concurrent queries must all
succeed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from mongogate.demo import FIND_ORDERS, seed_demo
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from mongogate.tools.registry import ToolRegistry
from tests.conftest import jwt_auth, make_settings
from tests.helpers import cpu_s

from . import rpc

pytestmark = pytest.mark.anyio


def _bomb(name: str, arguments: dict[str, Any], rid: int) -> bytes:
    body = {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    return json.dumps(body, separators=(",", ":")).encode()


# Dense bodies: refused before anyone parses them (server.max_json_tokens), 413.
DENSE: list[tuple[str, dict[str, Any]]] = [
    ("find_orders", {"filter": {}, "sort": {f"k{i}": 1 for i in range(330_000)}}),  # the 3.8 MB sort
    ("create_session", {"metadata": {f"m{i}": i for i in range(200_000)}}),
    (
        "save_checkpoint",
        {"run_id": "r", "lease_id": "l", "version": 1, "state": {f"s{i}": i for i in range(200_000)}},
    ),
    ("find_orders", {"filter": {"$or": [{"status": "paid"}] * 190_000}}),
]
# Bodies under that cap: parsed, then refused by the argument bounds before schema or policy work.
HOSTILE: list[tuple[str, dict[str, Any]]] = [
    ("find_orders", {"filter": {}, "sort": {f"k{i}": 1 for i in range(20_000)}}),
    ("create_session", {"metadata": {f"m{i}": i for i in range(30_000)}}),
    ("save_checkpoint", {"run_id": "r", "lease_id": "l", "version": 1, "state": {"x": [[1]] * 30_000}}),
    ("append", {"session_id": "s", "turn_id": "t", "role": "user", "content": "x" * 3_000_000}),
]


async def test_hostile_arguments_do_not_stall_another_tenant(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth())
    registry = ToolRegistry([FIND_ORDERS])
    registry.on_startup(seed_demo)
    evil = mint_dev_token(settings.auth, tenant="acme", ttl_s=600, subject="evil")
    other = mint_dev_token(settings.auth, tenant="globex", ttl_s=600, subject="busy")
    dense = [_bomb(name, args, 10 + i) for i, (name, args) in enumerate(DENSE)]
    assert all(3_000_000 < len(b) < 4 * 1024 * 1024 for b in dense)  # under the body cap

    with BackgroundHttpServer(build_server(settings, registry, transport="http")) as http:
        async with httpx2.AsyncClient(timeout=60) as hc:
            sid_evil = await rpc.open_session(hc, http.url, evil)
            sid_other = await rpc.open_session(hc, http.url, other)

            async def hostile(body: bytes) -> float:
                started = cpu_s(http._thread)
                r = await hc.post(http.url, content=body, headers=rpc.headers(evil, sid_evil))
                spent = cpu_s(http._thread) - started
                if r.status_code == 413:
                    assert "server.max_json_tokens" in r.text
                else:
                    res = rpc.result(r)
                    assert res["isError"] is True and "[invalid_input]" in res["content"][0]["text"], res
                return spent

            # alone: each refusal costs little CPU (server and client together, body framing included)
            for body in dense:
                spent = await hostile(body)
                assert spent < 0.5, spent
            for i, (name, args) in enumerate(HOSTILE):
                spent = await hostile(_bomb(name, args, 20 + i))
                assert spent < 0.5, spent

            # together: every query of the other tenant completes, with its own data
            answers: list[int] = []

            async def busy() -> None:
                for i in range(20):
                    args = {"filter": {"status": "paid"}}
                    r = await rpc.call_tool(hc, http.url, other, sid_other, "find_orders", args, rid=100 + i)
                    res = rpc.result(r)
                    assert res.get("isError") is not True, res
                    docs = res["structuredContent"]["documents"]
                    assert all(d["number"].startswith("GL-") for d in docs)
                    answers.append(len(docs))

            async with anyio.create_task_group() as tg:
                tg.start_soon(busy)
                for round in range(1, 3):  # request ids must differ within a session
                    for i, (name, args) in enumerate(DENSE + HOSTILE):
                        tg.start_soon(hostile, _bomb(name, args, 1000 * round + i))
            assert len(answers) == 20 and all(n > 0 for n in answers)
