"""Issue 19.5: errors that tell the truth (non-finite numbers, invisible control characters in ids)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client

from mongogate.errors import InvalidInput
from mongogate.memory.keys import check_id
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from tests.conftest import jwt_auth, make_settings
from tests.helpers import failure, ok
from tests.server import rpc

pytestmark = pytest.mark.anyio

NON_FINITE = ["NaN", "Infinity", "-Infinity"]


def _call(name: str, arguments: str, rid: int) -> bytes:
    """A tools/call body with a JSON literal the SDK's client would never send (it turns NaN into null)."""
    head = f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call","params":{{"name":"{name}","arguments":'
    return (head + arguments + "}}").encode()


@pytest.mark.parametrize("literal", NON_FINITE)
async def test_non_finite_numbers_in_metadata_and_state_are_invalid_input_naming_the_path(
    literal: str, engine_uri: str, db_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Over real HTTP, as a raw client sends them: `[invalid_input]` with the path, nothing written,
    no WARNING, no database-error count."""
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth(), server={"metrics": True})
    token = mint_dev_token(settings.auth, tenant="acme", ttl_s=600)
    with BackgroundHttpServer(build_server(settings, transport="http")) as http:
        async with httpx2.AsyncClient(timeout=60) as hc:
            mcp = await rpc.open_session(hc, http.url, token)

            async def call(name: str, arguments: str, rid: int) -> dict[str, Any]:
                body = _call(name, arguments, rid)
                r = await hc.post(http.url, content=body, headers=rpc.headers(token, mcp))
                return rpc.result(r)

            caplog.clear()  # the calls' records only: start-up says the engine enforces no roles
            with caplog.at_level(logging.WARNING, logger="mongogate"):
                meta = await call("create_session", f'{{"metadata":{{"a":{{"b":[1,{literal}]}}}}}}', 2)
                lease = (await call("acquire_run", '{"run_id":"r1"}', 3))["structuredContent"]["lease_id"]
                args = f'{{"run_id":"r1","lease_id":"{lease}","version":1,"state":{{"x":{literal}}}}}'
                state = await call("save_checkpoint", args, 4)
            warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "embedded" not in r.msg]
            cp = (await call("load_checkpoint", '{"run_id":"r1"}', 5))["structuredContent"]
            sessions = (await call("list_sessions", "{}", 6))["structuredContent"]
            metrics = (await hc.get(http.url.removesuffix("/mcp") + "/metrics")).text
    for res, path in ((meta, "metadata.a.b[1]"), (state, "state.x")):
        text = res["content"][0]["text"]
        assert res["isError"] is True and text.startswith("[invalid_input] "), text
        assert path in text and "finite" in text, text
    assert not warnings, [r.getMessage() for r in warnings]
    assert cp["version"] == 0 and cp["state"] is None  # nothing written
    assert sessions["sessions"] == []
    assert 'mongogate_database_errors_total{tool="create_session"}' not in metrics
    assert 'mongogate_database_errors_total{tool="save_checkpoint"}' not in metrics


INVISIBLE = ["\x85", "\x9b", "\x7f", "\u2028", "\u2029"]


@pytest.mark.parametrize("char", INVISIBLE, ids=["NEL", "CSI", "DEL", "LS", "PS"])
async def test_ids_with_c1_controls_or_line_separators_are_refused(
    char: str, engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput, match="control characters"):
        check_id(f"turn{char}1", "turn_id", 200)
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        sid = (await ok(c, "create_session"))["session_id"]
        text = await failure(c, "begin_turn", session_id=sid, turn_id=f"t{char}1", text="hi")
        run = await failure(c, "acquire_run", run_id=f"r{char}")
        ctx = await ok(c, "load_context", session_id=sid)
    assert text.startswith("[invalid_input] ") and "turn_id" in text, text
    assert run.startswith("[invalid_input] ") and "run_id" in run, run
    assert ctx["messages"] == []


def test_ordinary_unicode_ids_still_pass() -> None:
    for ok_id in ("café", "注文-42", "a b", "emoji-🙂"):
        assert check_id(ok_id, "turn_id", 200) == ok_id
