"""Authentication over real Streamable HTTP: uvicorn on a random port, real clients, real database.

Each refused credential gets 401 with ``WWW-Authenticate: Bearer`` and leaves the database
untouched; valid credentials reach the tools with the tenant taken from the credential.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import jwt
import pytest
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pymongo import MongoClient
from pymongo.database import Database

from mongogate.config import Settings
from mongogate.server.app import build_server
from mongogate.server.auth.jwks import Reason
from mongogate.server.auth.verify import hash_api_key
from tests.helpers import INITIALIZE as OPENING

from .test_auth_tokens import forge, now

ISS = "https://issuer.example"
AUD = "mongogate"
SECRET = "http-test-secret-0123456789-abcdefghijklmnopqrstuvwxyz"
API_KEY_A = "mg_http_acme_0123456789abcdefghijklmnop"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = OPENING[0]  # the client's initialize request
CREATE_SESSION = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "create_session", "arguments": {"title": "should never be stored"}},
}


@dataclass(frozen=True)
class Running:
    """A served mongogate: its MCP endpoint and the database it writes to."""

    url: str
    db_name: str
    engine_uri: str

    def document_count(self) -> int:
        client: MongoClient[dict[str, Any]]
        with MongoClient(self.engine_uri) as client:
            db: Database[dict[str, Any]] = client[self.db_name]
            return sum(db[name].count_documents({}) for name in db.list_collection_names())


@pytest.fixture(scope="module")
def serve(
    engine_uri: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[dict[str, Any]], Running]]:
    """Start servers with the given [auth] section on their own threads; stop them all at module end."""
    started: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(auth: dict[str, Any]) -> Running:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))  # bound before the server is built: public_url knows the port
        port = sock.getsockname()[1]
        db_name = f"t_auth_{uuid.uuid4().hex[:10]}"
        settings = Settings.model_validate(
            {
                "database": {"uri": engine_uri, "name": db_name},
                "server": {
                    "host": "127.0.0.1",
                    "port": port,
                    "data_dir": str(tmp_path_factory.mktemp("data")),
                },
                "auth": auth,
            }
        )
        app = build_server(settings, transport="http").streamable_http_app()
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        started.append((server, thread))
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                pytest.fail("the HTTP server did not start")
            time.sleep(0.02)
        return Running(url=f"http://127.0.0.1:{port}/mcp", db_name=db_name, engine_uri=engine_uri)

    yield start
    for server, _ in started:
        server.should_exit = True
    for _, thread in started:
        thread.join(timeout=15)


@pytest.fixture(scope="module")
def rsa_key() -> RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def rsa_pem(rsa_key: RSAPrivateKey, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "pub.pem"
    path.write_bytes(
        rsa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return path


@pytest.fixture(scope="module")
def hs_server(serve: Callable[[dict[str, Any]], Running]) -> Running:
    return serve({"mode": "jwt", "jwt_secret": SECRET, "issuer": ISS, "audience": AUD, "leeway_s": 30})


@pytest.fixture(scope="module")
def rs_server(serve: Callable[[dict[str, Any]], Running], rsa_pem: Path) -> Running:
    return serve({"mode": "jwt", "jwt_public_key_file": str(rsa_pem), "issuer": ISS, "audience": AUD})


@pytest.fixture(scope="module")
def api_server(serve: Callable[[dict[str, Any]], Running]) -> Running:
    return serve(
        {
            "mode": "api_keys",
            "api_keys": [{"sha256": hash_api_key(API_KEY_A), "tenant": "acme", "scopes": ["orders:read"]}],
        }
    )


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {
        "sub": "alice",
        "tenant_id": "acme",
        "iss": ISS,
        "aud": AUD,
        "iat": now,
        "exp": now + 300,
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def hs(payload: dict[str, Any]) -> str:
    return jwt.encode(payload, SECRET, algorithm="HS256")


def _post(url: str, body: dict[str, Any], authorization: str | None) -> httpx2.Response:
    headers = dict(ACCEPT)
    if authorization is not None:
        headers["Authorization"] = authorization
    with httpx2.Client(timeout=10) as client:
        return client.post(url, content=json.dumps(body), headers=headers)


def _assert_refused(server: Running, authorization: str | None, reason: str | None) -> None:
    """401 with the RFC 6750 challenge: plain without a bearer token, else invalid_token + reason class."""
    before = server.document_count()
    for body in (INITIALIZE, CREATE_SESSION):
        r = _post(server.url, body, authorization)
        assert r.status_code == 401, r.text
        challenge = r.headers["www-authenticate"]
        origin = server.url.removesuffix("/mcp")
        link = f'resource_metadata="{origin}/.well-known/oauth-protected-resource/mcp"'
        if reason is None:
            assert challenge == f"Bearer {link}"
        else:
            assert challenge == f'Bearer error="invalid_token", error_description="{reason}", {link}'
            assert r.json() == {"error": "invalid_token", "error_description": reason}
        if reason is not None and authorization:
            token = authorization.removeprefix("Bearer ")
            assert token not in r.text and token not in challenge
    assert server.document_count() == before


HS_REFUSED: list[Any] = [
    pytest.param(lambda: None, None, id="no-token"),
    pytest.param(lambda: "Basic dXNlcjpwYXNz", None, id="basic-auth"),
    pytest.param(lambda: "Bearer", None, id="bearer-without-token"),
    pytest.param(lambda: "Bearer not-a-jwt", Reason.MALFORMED, id="malformed"),
    pytest.param(
        lambda: "Bearer " + jwt.encode(claims(), "x" * 40 + "wrong", algorithm="HS256"),
        Reason.BAD_SIGNATURE,
        id="bad-signature",
    ),
    pytest.param(lambda: "Bearer " + hs(claims(exp=now() - 600)), Reason.EXPIRED, id="expired"),
    pytest.param(lambda: "Bearer " + hs(claims(nbf=now() + 600)), Reason.NOT_YET_VALID, id="not-yet-valid"),
    pytest.param(
        lambda: "Bearer " + hs(claims(iss="https://evil.example")), Reason.WRONG_ISSUER, id="wrong-issuer"
    ),
    pytest.param(
        lambda: "Bearer " + hs(claims(aud="another-service")), Reason.WRONG_AUDIENCE, id="wrong-audience"
    ),
    pytest.param(
        lambda: "Bearer " + forge({"alg": "none", "typ": "JWT"}, claims(), None),
        Reason.ALGORITHM,
        id="alg-none",
    ),
    pytest.param(lambda: "Bearer " + hs(claims(tenant_id=None)), Reason.CLAIMS, id="no-tenant-claim"),
    pytest.param(lambda: "Bearer " + hs(claims(tenant_id="")), Reason.CLAIMS, id="empty-tenant-claim"),
    pytest.param(lambda: "Bearer " + hs(claims(exp=str(now() + 300))), Reason.CLAIMS, id="exp-as-string"),
    pytest.param(lambda: "Bearer " + hs(claims(iat=str(now()))), Reason.CLAIMS, id="iat-as-string"),
    pytest.param(
        lambda: "Bearer " + hs(claims(exp=now() + 25 * 3600)), Reason.LIFETIME, id="lifetime-over-24h"
    ),
    pytest.param(
        lambda: "Bearer " + hs(claims(tenant_id="acme\nglobex")), Reason.CLAIMS, id="tenant-with-newline"
    ),
]


@pytest.mark.parametrize(("authorization", "reason"), HS_REFUSED)
def test_hs_server_refuses(
    hs_server: Running, authorization: Callable[[], str | None], reason: str | None
) -> None:
    _assert_refused(hs_server, authorization(), reason)


def test_rs256_token_refused_by_hs_server(hs_server: Running, rsa_key: RSAPrivateKey) -> None:
    _assert_refused(hs_server, "Bearer " + jwt.encode(claims(), rsa_key, algorithm="RS256"), Reason.ALGORITHM)


def test_hs256_signed_with_public_pem_refused_by_rs_server(rs_server: Running, rsa_pem: Path) -> None:
    forged = forge({"alg": "HS256", "typ": "JWT"}, claims(), rsa_pem.read_bytes())
    _assert_refused(rs_server, "Bearer " + forged, Reason.ALGORITHM)


def test_unknown_api_key_refused(api_server: Running) -> None:
    _assert_refused(api_server, "Bearer mg_http_unknown_0123456789abcdefghijklmnop", Reason.UNKNOWN_API_KEY)
    # the digest is not the key
    _assert_refused(api_server, "Bearer " + hash_api_key(API_KEY_A), Reason.UNKNOWN_API_KEY)


def _metadata(server: Running) -> dict[str, Any]:
    r = _post(server.url, INITIALIZE, None)
    link = r.headers["www-authenticate"].split('resource_metadata="', 1)[1].split('"', 1)[0]
    with httpx2.Client(timeout=10) as client:
        meta = client.get(link)
    assert meta.status_code == 200
    doc = meta.json()
    assert isinstance(doc, dict)
    assert doc["resource"] == server.url
    return doc


def test_metadata_names_no_authorization_server_by_default(hs_server: Running) -> None:
    """An `iss` is not an OAuth server: advertising it (or ourselves) sent clients into a dead login."""
    assert "authorization_servers" not in _metadata(hs_server)


def test_metadata_names_the_issuer_exactly_when_advertised(
    serve: Callable[[dict[str, Any]], Running],
) -> None:
    """RFC 8414 §3.3 / RFC 9207: issuers compare as exact strings, so no slash may be added."""
    server = serve(
        {"mode": "jwt", "jwt_secret": SECRET, "issuer": ISS, "audience": AUD, "advertise_issuer": True}
    )
    assert _metadata(server)["authorization_servers"] == [ISS]


def test_advertise_issuer_needs_an_issuer_url() -> None:
    for auth in (
        {"mode": "jwt", "jwt_secret": SECRET, "advertise_issuer": True},
        {"mode": "jwt", "jwt_secret": SECRET, "issuer": "my-service", "advertise_issuer": True},
        {"mode": "jwt", "jwt_secret": SECRET, "issuer": "http://idp.example", "advertise_issuer": True},
    ):
        with pytest.raises(ValueError, match="advertise_issuer"):
            Settings.model_validate({"auth": auth})


def test_valid_tokens_initialize(hs_server: Running, rs_server: Running, rsa_key: RSAPrivateKey) -> None:
    assert _post(hs_server.url, INITIALIZE, "Bearer " + hs(claims())).status_code == 200
    # expired 10 s ago, inside the 30 s leeway: the SDK's own expiry check must agree with ours
    late = hs(claims(exp=int(time.time()) - 10))
    assert _post(hs_server.url, INITIALIZE, "Bearer " + late).status_code == 200
    rs_token = jwt.encode(claims(), rsa_key, algorithm="RS256")
    assert _post(rs_server.url, INITIALIZE, "Bearer " + rs_token).status_code == 200
    assert (
        _post(hs_server.url, INITIALIZE, "bearer " + hs(claims())).status_code == 200
    )  # scheme is case-free


async def _call(url: str, bearer: str, tool: str, arguments: dict[str, Any]) -> Any:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=30) as hc,
        Client(streamable_http_client(url, http_client=hc)) as client,
    ):
        return await client.call_tool(tool, arguments)


@pytest.mark.anyio
async def test_tenant_comes_from_the_token(hs_server: Running) -> None:
    token_a = hs(claims(tenant_id="acme", sub="alice"))
    token_b = hs(claims(tenant_id="globex", sub="bob"))
    created = await _call(hs_server.url, token_a, "create_session", {"title": "a's"})
    assert not created.is_error, created.content
    sid = created.structured_content["session_id"]
    appended = await _call(
        hs_server.url,
        token_a,
        "append",
        {"session_id": sid, "turn_id": "t1", "role": "user", "content": "hi"},
    )
    assert not appended.is_error, appended.content
    mine = await _call(hs_server.url, token_a, "load_context", {"session_id": sid})
    assert not mine.is_error and [m["content"] for m in mine.structured_content["messages"]] == ["hi"]
    theirs = await _call(hs_server.url, token_b, "load_context", {"session_id": sid})
    assert theirs.is_error
    assert "not found" in theirs.content[0].text.lower()
    # a tenant argument is not a way in: unknown arguments are refused or ignored, never obeyed
    sneaky = await _call(hs_server.url, token_b, "load_context", {"session_id": sid, "tenant": "acme"})
    assert sneaky.is_error


@pytest.mark.anyio
async def test_api_key_reaches_tools(api_server: Running) -> None:
    created = await _call(api_server.url, API_KEY_A, "create_session", {})
    assert not created.is_error, created.content
    assert created.structured_content["session_id"]


def test_build_server_http_emits_no_warnings(engine_uri: str, tmp_path: Path) -> None:
    settings = Settings.model_validate(
        {
            "database": {"uri": engine_uri, "name": "t_unused"},
            "server": {"data_dir": str(tmp_path)},
            "auth": {"mode": "jwt", "jwt_secret": SECRET},
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_server(settings, transport="http")


def test_tokens_never_logged(hs_server: Running, caplog: pytest.LogCaptureFixture) -> None:
    valid = hs(claims())
    expired = hs(claims(exp=now() - 600))
    with caplog.at_level(logging.DEBUG):
        assert _post(hs_server.url, INITIALIZE, "Bearer " + valid).status_code == 200
        assert _post(hs_server.url, INITIALIZE, "Bearer " + expired).status_code == 401
    assert "bearer token rejected: token has expired" in caplog.text  # the reason is logged...
    for token in (valid, expired):
        assert token not in caplog.text  # ...the token never is
        assert token.rsplit(".", 1)[1] not in caplog.text


def _unauthenticated_settings(tmp_path: Path, host: str = "127.0.0.1") -> Settings:
    return Settings.model_validate(
        {
            "database": {"uri": "mongodb://127.0.0.1:1", "name": "t_never_opened"},
            "server": {"host": host, "data_dir": str(tmp_path)},
            "auth": {"mode": "none", "tenant": "acme"},
        }
    )


def test_a_server_built_for_stdio_is_never_served_over_http(tmp_path: Path) -> None:
    """build_server's default transport is stdio: every call acts as the launch principal (here
    tenant acme with every scope), unauthenticated. Old code: `serve_http(build_server(settings))`
    or `BackgroundHttpServer(...)` served that to any HTTP client (and `build_server(...,
    transport="http")` would have refused this configuration)."""
    from mongogate import ConfigError, serve_http
    from mongogate.server.http import BackgroundHttpServer

    server = build_server(_unauthenticated_settings(tmp_path))
    with pytest.raises(ConfigError, match=r'built for stdio.*transport="http"'):
        serve_http(server, "127.0.0.1", 0)
    with pytest.raises(ConfigError, match="built for stdio"), BackgroundHttpServer(server):
        pass
    with pytest.raises(ConfigError, match="built for stdio"):
        server.streamable_http_app()
    for built in (
        server,
        build_server(_unauthenticated_settings(tmp_path), transport="http", insecure_no_auth=True),
    ):
        with pytest.raises(ConfigError, match="Streamable HTTP only"):
            built.sse_app()  # the SDK's run("sse"): none of the guards


def test_an_unauthenticated_http_server_is_served_on_loopback_only(tmp_path: Path) -> None:
    """`--insecure-no-auth` is loopback-only in `serve`; serve_http has every guard of `serve
    --http`, so an embedder's server gets the same rule. Old code: served on any address."""
    from mongogate import ConfigError, serve_http

    settings = _unauthenticated_settings(tmp_path, host="0.0.0.0")
    server = build_server(settings, transport="http", insecure_no_auth=True)
    with pytest.raises(ConfigError, match="loopback"):
        serve_http(server, "0.0.0.0", 0, settings.server)
