"""An MCP session belongs to the tenant and subject that opened it (protocol 2025-06-18 over HTTP).

Another caller sending the session id gets exactly the answer of an unknown session (404) for
every kind of message: a tool call, the GET stream, a cancellation and DELETE; the owner's
session keeps working.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import jwt
import pytest

from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.auth.verify import hash_api_key
from mongogate.server.http import BackgroundHttpServer
from tests.conftest import DEV_SECRET, jwt_auth, make_settings

from . import rpc

pytestmark = pytest.mark.anyio
KEY_ACME = "mg_acme_svc_0123456789abcdefghijklmnop"
KEY_GLOBEX = "mg_globex_svc_0123456789abcdefghijklmn"


@pytest.fixture(scope="module")
def jwt_url(engine_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = make_settings(engine_uri, "t_sessions_jwt", tmp_path_factory.mktemp("s"), auth=jwt_auth())
    with BackgroundHttpServer(build_server(settings, transport="http")) as http:
        yield http.url


@pytest.fixture(scope="module")
def key_url(engine_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    keys = [
        {"sha256": hash_api_key(KEY_ACME), "tenant": "acme", "subject": "svc"},
        {"sha256": hash_api_key(KEY_GLOBEX), "tenant": "globex", "subject": "svc"},
    ]
    auth: dict[str, Any] = {"mode": "api_keys", "api_keys": keys}
    settings = make_settings(engine_uri, "t_sessions_key", tmp_path_factory.mktemp("s"), auth=auth)
    with BackgroundHttpServer(build_server(settings, transport="http")) as http:
        yield http.url


def _token(tenant: str, sub: str | None) -> str:
    auth = make_settings("mongodb://unused", "x", Path("."), auth=jwt_auth()).auth
    if sub is not None:
        return mint_dev_token(auth, tenant=tenant, ttl_s=600, subject=sub)
    now = int(time.time())
    claims = {"tenant_id": tenant, "iss": "mongogate-test", "aud": "mongogate", "iat": now, "exp": now + 600}
    claims["jti"] = uuid.uuid4().hex  # two such tokens always differ
    return jwt.encode(claims, DEV_SECRET, algorithm="HS256")


def _is_ok(r: httpx2.Response) -> bool:
    return rpc.result(r).get("isError") is not True


async def _intruder_is_refused(url: str, owner: str, intruder: str) -> None:
    async with httpx2.AsyncClient(timeout=30) as hc:
        sid = await rpc.open_session(hc, url, owner)
        assert _is_ok(await rpc.call_tool(hc, url, owner, sid, "create_session", {}))

        # a tool call inside the owner's session
        r = await rpc.call_tool(hc, url, intruder, sid, "create_session", {}, rid=7)
        assert r.status_code == 404 and "Session not found" in r.text
        # the GET stream
        async with hc.stream("GET", url, headers=rpc.headers(intruder, sid, Accept="text/event-stream")) as g:
            assert g.status_code == 404
        # a cancellation of the owner's requests
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}
        r = await hc.post(url, json=cancel, headers=rpc.headers(intruder, sid))
        assert r.status_code == 404
        # DELETE
        r = await hc.delete(url, headers=rpc.headers(intruder, sid))
        assert r.status_code == 404

        # the owner's session is intact: its stream is free, its calls work, it can end it
        async with hc.stream("GET", url, headers=rpc.headers(owner, sid, Accept="text/event-stream")) as g:
            assert g.status_code == 200
        assert _is_ok(await rpc.call_tool(hc, url, owner, sid, "create_session", {}, rid=3))
        assert (await hc.delete(url, headers=rpc.headers(owner, sid))).status_code == 200


async def test_same_sub_of_another_tenant_is_refused(jwt_url: str) -> None:
    await _intruder_is_refused(jwt_url, _token("acme", "dev"), _token("globex", "dev"))


async def test_tokens_without_sub_are_refused(jwt_url: str) -> None:
    await _intruder_is_refused(jwt_url, _token("acme", None), _token("globex", None))


async def test_token_without_sub_is_its_own_caller(jwt_url: str) -> None:
    """Without `sub` nothing says two tokens are the same caller, even in one tenant."""
    await _intruder_is_refused(jwt_url, _token("acme", None), _token("acme", None))


async def test_api_keys_sharing_a_subject_are_refused(key_url: str) -> None:
    await _intruder_is_refused(key_url, KEY_ACME, KEY_GLOBEX)


async def test_same_tenant_and_subject_share_the_session(jwt_url: str) -> None:
    """A refreshed token of the same caller keeps the session (what the owner check allows)."""
    async with httpx2.AsyncClient(timeout=30) as hc:
        sid = await rpc.open_session(hc, jwt_url, _token("acme", "alice"))
        fresh = _token("acme", "alice")
        assert _is_ok(await rpc.call_tool(hc, jwt_url, fresh, sid, "create_session", {}))
