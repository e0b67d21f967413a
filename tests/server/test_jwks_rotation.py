"""``auth.jwks_url`` against a real local HTTP server whose key set rotates mid-test.

The JWKS endpoint is a stdlib ``ThreadingHTTPServer`` on a random loopback port (a real
provider cannot run here); it counts requests, so "at most one fetch per interval" is checked
on the wire. Time is a ``ManualClock`` started at the real now (PyJWT checks ``exp`` against
the real clock); the refresh interval and cache age are crossed by ``advance``, never by sleeping.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mongogate.clock import ManualClock
from mongogate.config import AuthSettings, Settings
from mongogate.server.app import build_server
from mongogate.server.auth.challenge import Challenge
from mongogate.server.auth.jwks import Reason, Rejected, RemoteJwks
from mongogate.server.auth.verify import JwtVerifier
from mongogate.server.http import BackgroundHttpServer

from ..conftest import make_settings
from .test_auth_tokens import forge, now

pytestmark = pytest.mark.anyio

ISS = "https://idp.example"
AUD = "mongogate"
INTERVAL = 60
CACHE = 600


class Provider:
    """A JWKS endpoint: ``publish`` replaces the key set; ``requests`` counts GETs."""

    def __init__(self) -> None:
        self.keys: dict[str, ec.EllipticCurvePrivateKey] = {}
        self.status = 200
        self.extra: list[dict[str, Any]] = []
        self.requests = 0
        self._lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with provider._lock:
                    provider.requests += 1
                    status, body = provider.status, json.dumps(provider.document()).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # stderr stays quiet

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/.well-known/jwks.json"
        self._thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self._thread.start()

    def document(self) -> dict[str, Any]:
        keys = [
            {**json.loads(ECAlgorithm.to_jwk(k.public_key())), "kid": kid, "alg": "ES256", "use": "sig"}
            for kid, k in self.keys.items()
        ]
        return {"keys": keys + self.extra}

    def publish(self, *kids: str) -> None:
        with self._lock:
            self.keys = {kid: self.keys.get(kid) or ec.generate_private_key(ec.SECP256R1()) for kid in kids}

    def token(self, kid: str, tenant: str = "acme", **changes: Any) -> str:
        payload = {"sub": "alice", "tenant_id": tenant, "iss": ISS, "aud": AUD, "exp": now() + 300, **changes}
        return jwt.encode(payload, self.keys[kid], algorithm="ES256", headers={"kid": kid})

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def provider() -> Iterator[Provider]:
    p = Provider()
    p.publish("k1")
    try:
        yield p
    finally:
        p.close()


def auth_for(provider: Provider) -> dict[str, Any]:
    return {
        "mode": "jwt",
        "jwks_url": provider.url,
        "issuer": ISS,
        "audience": AUD,
        "jwks_refresh_interval_s": INTERVAL,
        "jwks_cache_s": CACHE,
    }


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC))


@pytest.fixture
def verifier(provider: Provider, clock: ManualClock) -> JwtVerifier:
    return JwtVerifier(AuthSettings.model_validate(auth_for(provider)), clock=clock)


def refused(verifier: JwtVerifier, token: str) -> str:
    with pytest.raises(Rejected) as info:
        verifier.check(token)
    return info.value.kind


async def test_rotation_old_tokens_until_removed_new_after(
    provider: Provider, verifier: JwtVerifier, clock: ManualClock
) -> None:
    old = provider.token("k1")
    assert (await verifier.verify_token(old)) is not None
    assert provider.requests == 1
    assert (await verifier.verify_token(old)) is not None
    assert provider.requests == 1  # cached

    provider.publish("k1", "k2")  # the provider rotates: the new key beside the old one
    new = provider.token("k2")
    clock.advance(INTERVAL)
    assert (await verifier.verify_token(new)) is not None  # unknown kid: one refresh finds it
    assert provider.requests == 2
    assert (await verifier.verify_token(old)) is not None  # the old key still works

    provider.publish("k2")  # the old key is removed
    assert (await verifier.verify_token(old)) is not None  # ...still cached
    assert provider.requests == 2
    clock.advance(CACHE)
    assert refused(verifier, old) == Reason.UNKNOWN_KEY  # the cache aged out, the set was fetched again
    assert provider.requests == 3
    assert (await verifier.verify_token(new)) is not None
    assert provider.requests == 3


async def test_new_key_waits_for_the_interval(
    provider: Provider, verifier: JwtVerifier, clock: ManualClock
) -> None:
    assert verifier.verify(provider.token("k1")) is not None
    provider.publish("k1", "k2")
    assert refused(verifier, provider.token("k2")) == Reason.UNKNOWN_KEY  # fetched just now: not again
    assert provider.requests == 1
    clock.advance(INTERVAL - 1)
    assert refused(verifier, provider.token("k2")) == Reason.UNKNOWN_KEY
    assert provider.requests == 1
    clock.advance(1)
    assert verifier.verify(provider.token("k2")) is not None
    assert provider.requests == 2


async def test_unknown_kid_flood_costs_one_fetch_per_interval(
    provider: Provider, verifier: JwtVerifier, clock: ManualClock
) -> None:
    forged = ec.generate_private_key(ec.SECP256R1())

    def random_kid() -> str:
        payload = {"tenant_id": "acme", "iss": ISS, "aud": AUD, "exp": now() + 300}
        return jwt.encode(payload, forged, algorithm="ES256", headers={"kid": uuid.uuid4().hex})

    for _ in range(200):
        assert verifier.verify(random_kid()) is None
    assert provider.requests == 1

    clock.advance(INTERVAL)
    async with anyio.create_task_group() as tg:  # concurrent misses share one fetch
        for _ in range(50):
            tg.start_soon(verifier.verify_token, random_kid())
    assert provider.requests == 2
    for _ in range(200):
        assert (await verifier.verify_token(random_kid())) is None
    assert provider.requests == 2
    assert verifier.verify(provider.token("k1")) is not None  # real tokens are unaffected


async def test_algorithm_is_pinned_by_the_key(provider: Provider, verifier: JwtVerifier) -> None:
    assert verifier.verify(provider.token("k1")) is not None
    jwk_text = json.dumps(provider.document()["keys"][0]).encode()
    confused = forge(
        {"alg": "HS256", "typ": "JWT", "kid": "k1"},
        {"tenant_id": "acme", "iss": ISS, "aud": AUD, "exp": now() + 300},
        jwk_text,
    )
    assert refused(verifier, confused) == Reason.ALGORITHM
    unsigned = forge({"alg": "none", "kid": "k1"}, {"tenant_id": "acme", "exp": now() + 300}, None)
    assert refused(verifier, unsigned) == Reason.ALGORITHM


async def test_provider_down(provider: Provider, verifier: JwtVerifier, clock: ManualClock) -> None:
    provider.status = 503
    assert refused(verifier, provider.token("k1")) == Reason.KEYS_UNAVAILABLE
    assert refused(verifier, provider.token("k1")) == Reason.KEYS_UNAVAILABLE
    assert provider.requests == 1  # a failed fetch is rate-limited too
    provider.status = 200
    clock.advance(INTERVAL)
    assert verifier.verify(provider.token("k1")) is not None
    provider.status = 503
    clock.advance(CACHE)
    # the last good set stays in use while the provider is down
    assert verifier.verify(provider.token("k1")) is not None
    assert provider.requests == 3


async def test_unusable_keys_in_the_set_are_skipped(provider: Provider, verifier: JwtVerifier) -> None:
    provider.extra = [{"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]
    assert verifier.verify(provider.token("k1")) is not None


def test_jwks_url_must_be_https_off_loopback(provider: Provider) -> None:
    for url in ("http://idp.example/jwks", "ftp://127.0.0.1/jwks", "idp.example/jwks"):
        with pytest.raises(ValueError, match="jwks_url"):
            AuthSettings.model_validate({**auth_for(provider), "jwks_url": url})
    AuthSettings.model_validate({**auth_for(provider), "jwks_url": "https://idp.example/jwks"})
    with pytest.raises(ValueError, match="exactly one"):
        AuthSettings.model_validate({**auth_for(provider), "jwks_file": "/x.json"})


def test_fetch_is_size_capped(provider: Provider, clock: ManualClock) -> None:
    provider.extra = [{"kty": "EC", "junk": "x" * (1024 * 1024)}]
    jwks = RemoteJwks(provider.url, cache_s=CACHE, refresh_interval_s=INTERVAL, clock=clock)
    with pytest.raises(Rejected) as info:
        jwks.fetch_for({"kid": "k1"})
    assert info.value.kind == Reason.KEYS_UNAVAILABLE


async def test_served_over_http_with_reasons(
    provider: Provider, engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """The whole path: a served mongogate verifies provider tokens and says why it refuses others."""
    settings: Settings = make_settings(engine_uri, db_name, tmp_path, auth=auth_for(provider))
    with BackgroundHttpServer(build_server(settings, transport="http"), settings=settings.server) as http:
        headers = {"Authorization": "Bearer " + provider.token("k1")}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as hc,
            Client(streamable_http_client(http.url, http_client=hc)) as client,
        ):
            r = await client.call_tool("create_session", {"title": "via jwks"})
            assert not r.is_error, r.content
        stranger = ec.generate_private_key(ec.SECP256R1())
        bad = jwt.encode({"tenant_id": "acme"}, stranger, algorithm="ES256", headers={"kid": "nope"})
        async with httpx2.AsyncClient(timeout=30) as hc:
            answer = await hc.post(
                http.url,
                json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                headers={"Authorization": f"Bearer {bad}", "Accept": "application/json, text/event-stream"},
            )
        assert answer.status_code == 401
        challenge = answer.headers["www-authenticate"]
        assert 'error="invalid_token", error_description="unknown signing key"' in challenge
        assert bad not in challenge and bad not in answer.text


def test_metadata_url_keeps_a_public_path_prefix() -> None:
    assert (
        Challenge("https://gw.example/tools/mcp").metadata_url
        == "https://gw.example/.well-known/oauth-protected-resource/tools/mcp"
    )
    assert (
        Challenge("http://127.0.0.1:8000/mcp").metadata_url
        == "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"
    )


def test_a_redirect_is_not_followed(provider: Provider, clock: ManualClock) -> None:
    """Only the configured URL is trusted: a redirect (to http, or to an internal address) is
    refused, not followed, so the https-unless-loopback check cannot be stepped around."""
    provider.publish("k1")

    class Redirect(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", provider.url)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    bouncer = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=bouncer.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{bouncer.server_address[1]}/jwks.json"
        jwks = RemoteJwks(url, cache_s=CACHE, refresh_interval_s=INTERVAL, clock=clock)
        with pytest.raises(Rejected) as info:
            jwks.fetch_for({"kid": "k1"})
        assert info.value.kind == Reason.KEYS_UNAVAILABLE
        assert provider.requests == 0  # the redirect target was never asked
    finally:
        bouncer.shutdown()
        bouncer.server_close()
